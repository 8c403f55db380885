"""`sloth-tray status`: the queue at a glance, the command people and scripts run most.

A module of its own, so that a glance loads none of the other looks' code (about 2%
of its instructions, counted by valgrind). On a home that does not exist it makes
nothing and says there is no queue there yet."""

import time

from sloth_tray.cli.common import command, emit_json, no_queue_here, table

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    import argparse
    from typing import Any

    from sloth_tray.paths import Home


@command
def cmd_status(args: "argparse.Namespace", home: "Home") -> int:
    from sloth_tray import instance
    from sloth_tray.store import reads

    # "overdue": recurring jobs with no success for a period + grace
    counts = reads.read(home, per_lane=not args.json)
    if counts is None:  # no home or jobs folder, and no queue: nothing was made
        counts = reads.empty()
        no_queue_here(home)
    # Whether an app holds the home: without one nothing starts, whatever is due, and a
    # job marked running was cut short (the lock looked at, not taken: instance.py).
    app_running = instance.held(home.lock)
    if args.json:
        emit_json(counts | {"app_running": app_running})
        return 0
    _say(counts, home, app_running)
    return 0


def _say(counts: "dict[str, Any]", home: "Home", app_running: bool) -> None:
    """The glance as a person reads it: a table, then the lanes when there are some.
    What only it needs is imported here: `status --json` never loads it."""
    from sloth_tray import instance
    from sloth_tray.text import printable
    from sloth_tray.timefmt import relative

    now = time.time()
    waiting_on = counts.pop("waiting_on", {})  # jobs due that wait for a condition
    running, next_job = counts.pop("running_job"), counts.pop("next")
    waiting = counts.pop("waiting", {})
    per_lane, running_by_lane = counts.pop("lanes", {}), counts.pop("running_by_lane", {})
    app_pid = instance.pid_in(home.lock) if app_running else None
    rows = ([(key, str(value) + (f" ({instance.ONCE_STARTED})" if key == "due_now" and value
                                  and not app_running else ""))
             for key, value in counts.items() if key != "paused"]
            + [("paused", "yes" if counts["paused"] else "no")]
            + [(f"waiting for {name}", str(n)) for name, n in waiting_on.items()]
            + [("app", f"running (pid {app_pid})" if app_pid else "running") if app_running
               else ("app", "not running on this home, so nothing starts (`sloth-tray` "
                            "starts it)")])
    if running is not None:
        since = f"{running['name']} ({running['id']}), started {relative(running['since'], now)}"
        if app_running:
            rows.append(("running now", since))
        else:
            tries = next((job for job in running_by_lane.values() if job["id"] == running["id"]),
                         {"attempts": 1, "max_attempts": 1})
            rows.append(("cut short", f"{since}: the app stopped while it ran; the next start "
                         + instance.after_a_crash(tries["attempts"], tries["max_attempts"])))
    rows.extend(_waiting_rows(waiting))
    if next_job is not None:
        due = "due now" if next_job["due"] <= now else f"due {relative(next_job['due'], now)}"
        rows.append(("next", f"{next_job['name']} ({next_job['id']}), {due}"
                             + (" (paused)" if counts["paused"] else "")
                             + ("" if app_running or counts["paused"]
                                else f", {instance.ONCE_STARTED}")))
    print(table(rows))
    if _lanes_worth_showing(per_lane, counts["paused"]):
        print("\nlanes")
        for name, lane in per_lane.items():
            print(f"  {printable(name)}: "
                  f"{_lane_doing(lane, running_by_lane.get(name), now, cut=not app_running)}")


def _waiting_rows(waiting: "dict[str, dict[str, Any]]") -> list[tuple[str, str]]:
    """`digest — sleeping until 14:00`: a row for each job that waits in a step."""
    from sloth_tray.text import printable

    return [("waiting", f"{printable(wait['name'])} ({job_id}) — {printable(wait['words'])}")
            for job_id, wait in waiting.items()]


def _lanes_worth_showing(per_lane: "dict[str, dict[str, Any]]", whole_queue_paused: bool) -> bool:
    """Lanes are shown once there is more than main, or main alone is paused on its
    own: a queue that never used lanes keeps its short status."""
    from sloth_tray.store.lanes import MAIN

    return any(name != MAIN or lane["paused"] != whole_queue_paused
               for name, lane in per_lane.items())


def _lane_doing(lane: "dict[str, Any]", running: "dict[str, Any] | None", now: float, *,
                cut: bool = False) -> str:
    """What a lane is doing, in a few words: `running fetch_mail (42s) · 2 waiting ·
    paused`, or `idle`; `cut`: no app runs, so its running job was `cut short`."""
    from sloth_tray.text import printable
    from sloth_tray.timefmt import format_duration

    parts = []
    if running is not None:
        parts.append(f"{'cut short' if cut else 'running'} {printable(running['name'])} "
                     f"({format_duration(now - running['since'])})")
    if lane["pending"]:
        parts.append(f"{lane['pending']} waiting")
    if lane["failed"]:
        parts.append(f"{lane['failed']} failed")
    if lane["paused"]:
        parts.append("paused")
    return " · ".join(parts) or "idle"
