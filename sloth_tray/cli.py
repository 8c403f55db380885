"""The command line: parse, call the queue (or the daemon), print. Nothing else lives here.

Each command imports what only it uses, inside it: `status` must answer as fast as
an interpreter that opens SQLite, not load the daemon, the tray or the desktop
(tests/test_imports.py keeps it so).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from sloth_tray import __version__, config, limits
from sloth_tray.errors import SlothError
from sloth_tray.paths import Home, locate
from sloth_tray.store.states import Reason, State
from sloth_tray.text import printable
from sloth_tray.timefmt import clock_time, format_duration, relative

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    from typing import Any, NoReturn

    from sloth_tray.daemon.app import Daemon
    from sloth_tray.daemon.outcome import Recorded
    from sloth_tray.store.queue import Job, Queue

Command = Callable[[argparse.Namespace, Home], int]
BROKEN_PIPE_STATUS = 128 + 13  # 128 + SIGPIPE, as a shell reports a tool the signal stopped
INTERRUPTED = 128 + 2  # 128 + SIGINT: Ctrl-C, after a clean stop
COMMANDS: dict[str, Command] = {}


def command(function: Command) -> Command:
    """cmd_run_now is `sloth-tray run-now`."""
    COMMANDS[function.__name__.removeprefix("cmd_").replace("_", "-")] = function
    return function


def sound_home(home: Home) -> Home:
    """The home, vetted (Home.ensure), once its queue file has read back whole and sound
    (schema.verify: about 30 ms per 100,000 jobs): a command must never write on top of
    a damaged page, nor do half its work and then meet one."""
    from sloth_tray.store.schema import verify

    home.ensure()
    verify(home.db)
    return home


def open_queue(home: Home) -> Queue:
    from sloth_tray.store.queue import Queue  # here: `status` reads without it (reads.py)

    return Queue(sound_home(home).db)


def read_queue(home: Home) -> Queue | None:
    """The queue, for a command that only reads; None when there is none to read: a
    home or jobs folder that does not exist is not made (Home.readable)."""
    from sloth_tray.store.queue import Queue
    from sloth_tray.store.schema import verify

    if not home.readable():
        return None
    verify(home.db)
    return Queue(home.db)


def no_queue_here(home: Home) -> None:
    """Say, on stderr, that there is no queue to read (the command's output stays empty)."""
    print(f"sloth-tray: {printable(home.no_queue)}", file=sys.stderr)


def find_job(queue: Queue, given: str) -> str:
    """The id of the job `given` names: an id, enough of its start, or a name (its
    newest job); see reads.find_job."""
    from sloth_tray.store import reads

    if len(given) == 12 and queue.exists(given):  # a whole id: nothing else to look at
        return given
    db = reads.reader(queue.path)
    try:
        return reads.find_job(db, given)
    finally:
        db.close()


def emit_json(data: Any) -> None:
    text = json.dumps(data, indent=2, ensure_ascii=False)
    try:
        text.encode(sys.stdout.encoding or "utf-8", sys.stdout.errors or "strict")
    except UnicodeEncodeError:  # a file name's undecodable bytes: \u escapes are exact too
        text = json.dumps(data, indent=2)
    print(text)


def table(rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell; the last column is left ragged.

    Every cell is made printable first: a name or result carrying a newline or
    an escape sequence must not forge a row or drive the terminal."""
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join([cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
                  + [row[-1]]).rstrip()
        for row in rows
    )


def when(job: Job, now: float, paused: bool = False) -> str:
    """A pending job due while the queue is paused says so: nothing starts it now."""
    if job.state == State.PENDING:
        if job.not_before <= now:
            return "due (paused)" if paused else "due now"
        return f"due {relative(job.not_before, now)}"
    if job.state == State.RUNNING:
        return f"started {relative(job.updated_at, now)}"
    return relative(job.updated_at, now)


# -- commands -------------------------------------------------------------


@command
def cmd_paths(args: argparse.Namespace, home: Home) -> int:
    places = {"home": home.root, "db": home.db, "jobs": home.jobs, "logs": home.logs}
    if args.json:
        emit_json({key: str(path) for key, path in places.items()})
    else:
        print(table([(key, str(path)) for key, path in places.items()]))
    if not home.db.exists():  # where they will be: nothing is made by looking
        no_queue_here(home)
    return 0


@command
def cmd_status(args: argparse.Namespace, home: Home) -> int:
    from sloth_tray.store import reads

    # "overdue": recurring jobs with no success for a period + grace
    counts = reads.read(home, per_lane=not args.json)
    if counts is None:  # no home or jobs folder, and no queue: nothing was made
        counts = reads.empty()
        no_queue_here(home)
    if args.json:
        emit_json(counts)
        return 0
    now = time.time()
    waiting_on = counts.pop("waiting_on", {})  # jobs due that wait for a condition
    running, next_job = counts.pop("running_job"), counts.pop("next")
    per_lane, running_by_lane = counts.pop("lanes", {}), counts.pop("running_by_lane", {})
    rows = ([(key, str(value)) for key, value in counts.items() if key != "paused"]
            + [("paused", "yes" if counts["paused"] else "no")]
            + [(f"waiting for {name}", str(n)) for name, n in waiting_on.items()])
    if running is not None:
        rows.append(("running now", f"{running['name']} ({running['id']}), started "
                                    f"{relative(running['since'], now)}"))
    if next_job is not None:
        due = "due now" if next_job["due"] <= now else f"due {relative(next_job['due'], now)}"
        rows.append(("next", f"{next_job['name']} ({next_job['id']}), {due}"
                             + (" (paused)" if counts["paused"] else "")))
    print(table(rows))
    if _lanes_worth_showing(per_lane, counts["paused"]):
        print("\nlanes")
        for name, lane in per_lane.items():
            print(f"  {printable(name)}: {_lane_doing(lane, running_by_lane.get(name), now)}")
    return 0


def _lanes_worth_showing(per_lane: dict[str, dict[str, Any]], whole_queue_paused: bool) -> bool:
    """Lanes are shown once there is more than main, or main alone is paused on its
    own: a queue that never used lanes keeps its short status."""
    from sloth_tray.store.lanes import MAIN

    return any(name != MAIN or lane["paused"] != whole_queue_paused
               for name, lane in per_lane.items())


def _lane_doing(lane: dict[str, Any], running: dict[str, Any] | None, now: float) -> str:
    """What a lane is doing, in a few words: `running fetch_mail (42s) · 2 waiting ·
    paused`, or `idle`."""
    parts = []
    if running is not None:
        parts.append(f"running {printable(running['name'])} "
                     f"({format_duration(now - running['since'])})")
    if lane["pending"]:
        parts.append(f"{lane['pending']} waiting")
    if lane["failed"]:
        parts.append(f"{lane['failed']} failed")
    if lane["paused"]:
        parts.append("paused")
    return " · ".join(parts) or "idle"


@command
def cmd_list(args: argparse.Namespace, home: Home) -> int:
    queue = read_queue(home)
    if queue is None:
        no_queue_here(home)
        if args.json:
            emit_json([])
        return 0
    with queue:
        limit = args.limit or None
        want = limit + 1 if limit else None  # one more: is there more than shown?
        jobs = queue.jobs(args.state, limit=want, reason=args.reason, lane=args.lane)
        more = limit is not None and len(jobs) > limit
        jobs = jobs[:limit]
        if args.json:
            emit_json([job.as_dict() for job in jobs])
            return 0
        if not jobs:
            which = " ".join(filter(None, [args.state, args.reason and f"{args.reason}"]))
            nothing = f"no {which} jobs" if which else "no jobs yet"
            print(nothing if args.lane is None else
                  f"no {which + ' ' if which else ''}jobs in lane {printable(args.lane)}")
            return 0
        now = queue.clock()
        unmet = queue.unmet()
        paused_lanes = queue.paused_lanes()
        running = _running_by_lane(queue)
        # The lane column, once there is more than one lane to tell apart.
        with_lane = args.lane is None and len({job.lane for job in jobs} | set(queue.lanes())) > 1
        rows = [("ID", *(("LANE",) if with_lane else ()), "NAME", "STATE", "TRIES", "WHEN",
                 "NOTE")]
        for job in jobs:
            note = job.last_error if job.state in (State.FAILED, State.PENDING) else job.result
            if job.state == State.PENDING and job.not_before <= now:
                note = _waiting_note(job, unmet) or _behind_note(job, running) or note
            rows.append((queue.shortest_unique_prefix(job.id),
                         *((job.lane,) if with_lane else ()), job.name, job.state.value,
                         f"{job.attempts}/{job.max_attempts}",
                         when(job, now, job.lane in paused_lanes),
                         (note or "").replace("\n", " ")[:80]))
    print(table(rows))
    if more:
        print(f"(the newest {limit}; --limit 0 shows all)")
    return 0


def _running_by_lane(queue: Queue) -> dict[str, Job]:
    return {job.lane: job for job in queue.jobs(State.RUNNING)}


def _behind_note(job: Job, running: dict[str, Job]) -> str | None:
    """`after fetch_mail (running in lane net)`, for a due job its lane's running job
    holds back: a lane runs one job at a time."""
    ahead = running.get(job.lane)
    if ahead is None or ahead.id == job.id:
        return None
    return f"after {printable(ahead.name)} (running in lane {printable(job.lane)})"


def _waiting_note(job: Job, unmet: frozenset[str]) -> str | None:
    """`waiting for AC power`, for a due job whose require= does not hold now."""
    from sloth_tray.jobs.conditions import waiting_for

    waits = waiting_for(job.options, unmet)
    return f"waiting for {waits}" if waits else None


@command
def cmd_show(args: argparse.Namespace, home: Home) -> int:
    queue = read_queue(home)
    if queue is None:
        raise SlothError(home.no_queue)
    with queue:
        job = queue.get(find_job(queue, args.id))
        if args.step is not None:
            return _print_step_output(queue.step(job.id, args.step, args.occurrence))
        history = queue.history(job.id)
        steps = queue.steps(job.id)
        now = queue.clock()
        unmet = queue.unmet()
        paused = queue.paused(job.lane)
        running = _running_by_lane(queue)
    logs = home.job_logs(job.id, job.name)
    if args.json:
        emit_json(job.as_dict() | {"history": [event.as_dict() for event in history],
                                   "steps": steps, "logs": str(logs)})
        return 0
    state = job.state.value
    if job.state in (State.PENDING, State.RUNNING):
        state += f" ({when(job, now, paused)})"
    waits = _waiting_note(job, unmet) or _behind_note(job, running) \
        if job.state == State.PENDING else None
    if waits and job.not_before <= now:
        state += f", {waits}"
    fields = [
        ("id", job.id), ("name", job.name), ("lane", job.lane), ("state", state),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
        ("script", job.script or "-"),
        ("options", " ".join(option_text(k, v) for k, v in sorted(job.options.items())) or "-"),
        ("last error", job.last_error or "-"), ("result", job.result or "-"),
        ("created", f"{clock_time(job.created_at)} ({relative(job.created_at, now)})"),
        ("logs", str(logs) if logs.exists() else f"{logs} (none yet)"),
    ]
    print(table(fields))
    print("\nhistory")
    print(table([("  " + clock_time(e.at), e.kind, e.detail) for e in history]))
    if steps:
        print("\nsteps")
        print(table([_step_row(step, now) for step in steps]))
    return 0


def _step_row(step: dict[str, Any], now: float) -> tuple[str, ...]:
    """name, state, run, when, how long, output: one row of `show`'s steps."""
    name = step["name"] + (f" #{step['occurrence']}" if step["occurrence"] > 1 else "")
    state = step["state"]
    if step["marked_at"]:
        state += " (marked by hand)"
    elif step["state"] == "cut" and step["ask"]:
        state += " (asks: did it happen?)"
    elif step["state"] == "failed" and step["exit_code"] is not None:
        state += f" (exit {step['exit_code']})"
    ended = step["ended_at"] if step["ended_at"] is not None else now
    took = format_duration(max(ended - step["started_at"], 0.0))
    output = "-" if step["output_size"] is None else \
        f"{step['output_size']} byte{'' if step['output_size'] == 1 else 's'}"
    return ("  " + name, state, f"run {step['run']}", clock_time(step["started_at"]),
            took if step["state"] != "running" else f"{took} so far", output)


def _print_step_output(step: dict[str, Any]) -> int:
    """A step's recorded output, exactly as kept (`show ID --step NAME`)."""
    if step["state"] != "done":
        print(f"sloth-tray: step \"{printable(step['name'])}\" is {step['state']}: only a "
              "done step's output is kept", file=sys.stderr)
        return 1
    output = bytes(step["output"] or b"")
    sys.stdout.flush()
    sys.stdout.buffer.write(output)
    if step["output_size"] and step["output_size"] > len(output):
        print(f"sloth-tray: the step wrote {step['output_size']} bytes; the first "
              f"{len(output)} were kept", file=sys.stderr)
    return 0


# A job's options that hold seconds: shown as a header says them (every=1h, not 3600.0).
DURATION_OPTIONS = {limit.key for limit in (limits.TIMEOUT, limits.DELAY, limits.LEASE,
                                            limits.EVERY, limits.GRACE, limits.WINDOW)}


def option_text(key: str, value: object) -> str:
    """key=value as a header would say it; `scheduled`, the series' clock, as a time."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if key in DURATION_OPTIONS:
            return f"{key}={limits.compact_duration(value)}"
        if key == "scheduled":
            return f"{key}={clock_time(value)}"
    return f"{key}={value}"


Hint = Callable[["Job"], "str | None"]


def _each_job(queue: Queue, ids: Sequence[str], act: Callable[[Queue, str], bool],
              verb: str, done: str, hint: Hint | None = None) -> int:
    """Apply `act` to each id; one line per job; non-zero if any could not be done.

    `hint` may say what to do instead with a job `act` cannot change (the
    command that would), in place of "nothing to <verb>"."""
    status = 0
    for given in ids:
        try:
            job = queue.get(find_job(queue, given))
            if act(queue, job.id):
                print(f"{done:<9} {printable(job.name)} ({job.id})")
            else:
                why = (hint and hint(job)) or f"is {job.state.value}; nothing to {verb}"
                print(f"sloth-tray: {printable(job.name)} ({job.id}) {why}",
                      file=sys.stderr)
                status = 1
        except SlothError as exc:
            print(f"sloth-tray: {printable(exc)}", file=sys.stderr)
            status = 1
    return status


def _run_now_instead(job: Job) -> str | None:
    if job.state == State.PENDING:
        return f"is waiting; `sloth-tray run-now {job.id}` starts it now"
    return None


def _retry_instead(job: Job) -> str | None:
    if job.state in (State.FAILED, State.CANCELLED):
        return f"is {job.state.value}; `sloth-tray retry {job.id}` puts it back in line"
    return None


def _bulk_usage_mistake(args: argparse.Namespace, verb: str) -> bool:
    """Say, in one line, what is wrong with `retry` or `cancel` given neither ids nor
    --all-failed, both, or --lane with ids (a usage mistake: the caller exits 2)."""
    if args.all_failed == bool(args.ids):
        print(f"sloth-tray: give job ids to {verb}, or --all-failed (not both)",
              file=sys.stderr)
    elif args.lane is not None and not args.all_failed:
        print(f"sloth-tray: --lane goes with --all-failed (`sloth-tray {verb} --all-failed "
              "--lane NAME`); ids name their jobs already", file=sys.stderr)
    else:
        return False
    return True


def _failed_jobs(queue: Queue, lane: str | None) -> list[Job]:
    """Every failed job, newest first; with `lane`, that lane's only."""
    return queue.jobs(State.FAILED, lane=lane)


def _in_lane(lane: str | None) -> str:
    """` in lane net`, to end a sentence about a whole lane (nothing for every lane)."""
    return "" if lane is None else f" in lane {printable(lane)}"


@command
def cmd_retry(args: argparse.Namespace, home: Home) -> int:
    if _bulk_usage_mistake(args, "retry"):
        return 2  # argparse's exit code for a usage mistake
    from sloth_tray.store import spool

    ids = args.ids
    with open_queue(home) as queue:
        if args.all_failed:
            failed = _failed_jobs(queue, args.lane)
            # A refused drop never runs; a step that asks is answered job by job, never
            # by a sweep: it may have happened.
            ids = [job.id for job in failed
                   if job.reason not in (Reason.REFUSED, Reason.STEP_UNSURE)]
            refused = sum(job.reason == Reason.REFUSED for job in failed)
            unsure = [job.id for job in failed if job.reason == Reason.STEP_UNSURE]
            if refused:
                print(f"skipped {refused} refused job{'' if refused == 1 else 's'}: a refused "
                      "drop never runs (`sloth-tray list --reason refused` shows them, "
                      "`sloth-tray cancel ID` removes one)")
            if unsure:
                which = unsure[0] if len(unsure) == 1 else "ID"
                jobs_ask = "job that asks" if len(unsure) == 1 else "jobs that ask"
                print(f"skipped {len(unsure)} {jobs_ask} about a step cut short: "
                      f"`sloth-tray retry {which}` runs the step again, "
                      f"`sloth-tray retry {which} --step-done NAME` says it happened"
                      + ("" if len(unsure) == 1 else
                         " (`sloth-tray list --reason step_unsure` shows them)"))
            if not ids:
                print(f"no failed jobs{_in_lane(args.lane)}" if not (refused or unsure)
                      else "nothing else to retry")
                return 0
        steps = {"step_done": args.step_done, "forget_from": args.forget_from,
                 "fresh": args.fresh}
        status = _each_job(queue, ids, lambda queue, job_id: spool.retry(queue, job_id, **steps),
                           "retry", "retried", _run_now_instead)
    home.ring_doorbell()
    return status


@command
def cmd_run_now(args: argparse.Namespace, home: Home) -> int:
    with open_queue(home) as queue:
        status = _each_job(queue, args.ids, lambda queue, job_id: queue.run_now(job_id),
                           "run now", "due now", _retry_instead)
        paused = queue.paused()
        held = sorted(_lanes_of(queue, args.ids) & queue.paused_lanes())
    home.ring_doorbell()
    if paused and held and status == 0:
        print("the queue is paused: it starts after `sloth-tray resume`")
    for lane in held if status == 0 and not paused else ():
        print(f"lane {printable(lane)} is paused: its jobs start after "
              f"`sloth-tray resume {_quoted(lane)}`")
    return status


def _lanes_of(queue: Queue, given: Sequence[str]) -> set[str]:
    """The lanes of the jobs named (one that names none was said already)."""
    found = set()
    for name in given:
        with contextlib.suppress(SlothError):
            found.add(queue.get(find_job(queue, name)).lane)
    return found


@command
def cmd_pause(args: argparse.Namespace, home: Home) -> int:
    lane = args.lane
    with open_queue(home) as queue:
        was_paused, known = queue.paused(lane), lane is None or lane in queue.lanes()
        queue.set_paused(True, lane=lane)
    home.ring_doorbell()
    if lane is None:
        print("paused: no new job starts until `sloth-tray resume` (a running job finishes)")
    elif was_paused:
        print(f"lane {printable(lane)} was paused already: nothing new starts in it until "
              f"`sloth-tray resume {_quoted(lane)}`")
    else:
        print(f"lane {printable(lane)} paused: its running job finishes, nothing new starts "
              f"in it until `sloth-tray resume {_quoted(lane)}`"
              + ("" if known else " (no job or folder has that lane yet: it starts paused)"))
    return 0


@command
def cmd_resume(args: argparse.Namespace, home: Home) -> int:
    lane = args.lane
    with open_queue(home) as queue:
        whole_queue_paused = queue.paused()
        lanes_paused = queue.paused_lanes(on_their_own=True)
        was_paused = queue.paused(lane)
        queue.set_paused(False, lane=lane)
        due = queue.summary()["due_now"] if lane is None else \
            queue.lane_counts().get(lane, {}).get("due_now", 0)
    home.ring_doorbell()
    jobs_due = f"{due} job{'' if due == 1 else 's'} due now" if due else "nothing is due now"
    if lane is None:
        print(f"resumed{' every lane' if lanes_paused else ''}: {jobs_due}")
    elif not was_paused:
        print(f"lane {printable(lane)} was not paused: its due jobs start as they come")
    elif whole_queue_paused:
        print(f"lane {printable(lane)} resumed: {jobs_due}; every other lane stays paused "
              "(`sloth-tray resume` resumes them all)")
    else:
        print(f"lane {printable(lane)} resumed: {jobs_due}")
    return 0


def _quoted(lane: str) -> str:
    """A lane's name as a shell takes it back, to show in a command to type."""
    import shlex  # here: only a sentence about one lane needs it

    return printable(shlex.quote(lane))


@command
def cmd_cancel(args: argparse.Namespace, home: Home) -> int:
    if _bulk_usage_mistake(args, "cancel"):
        return 2  # argparse's exit code for a usage mistake
    with open_queue(home) as queue:
        ids = args.ids
        if args.all_failed:  # refused drops too: cancel is how they go
            ids = [job.id for job in _failed_jobs(queue, args.lane)]
            if not ids:
                print(f"no failed jobs{_in_lane(args.lane)}")
                return 0
        status = _each_job(queue, ids, lambda queue, job_id: queue.cancel(job_id),
                           "cancel", "cancelled")
    home.ring_doorbell()
    return status


@command
def cmd_config(args: argparse.Namespace, home: Home) -> int:
    settings = args.settings
    shown = {key: settings[key] for key in config.KEYS} | {"jobs_dir": str(home.jobs)}
    # As config.toml says them: 60s, 10MiB (the values: seconds and bytes, for scripts).
    texts = {key: settings.text(key) for key in config.KEYS} | {"jobs_dir": str(home.jobs)}
    sources = {key: "default (home)" if key == "jobs_dir" and source == "default" else source
               for key, source in settings.sources.items()}
    if args.json:
        emit_json({"file": str(settings.path), "home": str(home.root),
                   "settings": {key: {"value": value, "text": texts[key], "from": sources[key]}
                                for key, value in shown.items()}})
    else:
        print(f"config file: {printable(settings.path)}"
              + ("" if settings.path.exists() else " (none yet)"))
        print(f"home:        {printable(home.root)}\n")
        print(table([("SETTING", "VALUE", "FROM")] + [
            (key, "-" if texts[key] is None else texts[key], sources[key]) for key in shown]))
    if not home.db.exists():
        no_queue_here(home)
    return 0


@command
def cmd_autostart(args: argparse.Namespace, home: Home) -> int:
    from sloth_tray import autostart

    change = {"enable": autostart.enable, "disable": autostart.disable,
              "status": autostart.status}[args.action]
    # The entry starts the app on this home (and jobs folder, and config file):
    # enabled from a SLOTH_TRAY_HOME, login must not bring it back on another queue.
    state = change(**autostart.app_location(home, args.settings))
    places = {"home": state.home, "jobs_dir": state.jobs_dir, "config": state.config}
    if args.json:
        emit_json({"enabled": state.enabled, "where": state.where, "detail": state.detail}
                  | places | {"command": list(state.command) if state.command else None})
        return 0
    print(f"start at login: {'on' if state.enabled else 'off'} — "
          f"{printable(state.detail)}\n  ({printable(state.where)})")
    labels = {"home": "home:       ", "jobs_dir": "jobs folder:", "config": "config:     "}
    for key, place in places.items():
        if place is not None:
            print(f"  {labels[key]} {printable(place)}")
    return 0


@command
def cmd_prune(args: argparse.Namespace, home: Home) -> int:
    from sloth_tray.store import spool

    with open_queue(home) as queue:
        removed = spool.prune(home, queue, before=queue.clock() - args.older_than)
    print(f"removed {removed} finished job{'' if removed == 1 else 's'}")
    return 0


@command
def cmd_add(args: argparse.Namespace, home: Home) -> int:
    from sloth_tray.store import spool

    inline = getattr(args, "inline", None)  # after `--` (_main takes it off the line)
    if (args.path is None) == (inline is None):
        print("sloth-tray add: give a script or a command after --, not both" if args.path
              else "sloth-tray add: give a script (add PATH) or a command after -- (add -- "
              "COMMAND [ARG...])", file=sys.stderr)
        return 2
    if inline == []:
        print("sloth-tray add: give the command after --, as in `sloth-tray add -- make "
              "test`", file=sys.stderr)
        return 2
    # A command runs where `add` was called from; a script in the home folder, as a
    # dropped one does, unless --cwd says otherwise.
    cwd = spool.working_folder(args.cwd, default_here=inline is not None)
    options = {"name": args.name, "delay": args.delay, "max_attempts": args.max_attempts,
               "cwd": cwd}
    if args.lane is not None:  # without it, main (spool's default)
        options["lane"] = args.lane
    if inline is not None:
        job_id = spool.add_command(sound_home(home), inline, **options)
    else:
        job_id = spool.add(sound_home(home), Path(args.path), **options)
    home.ring_doorbell()
    print(job_id)
    return 0


ENDED = (State.DONE, State.FAILED, State.CANCELLED)  # what `wait` and `log -f` wait for


@command
def cmd_wait(args: argparse.Namespace, home: Home) -> int:
    if not args.ids and args.lane is None:  # a usage mistake: argparse's exit code, 2
        print("sloth-tray: give job ids to wait for, or --lane NAME", file=sys.stderr)
        return 2
    from sloth_tray.daemon.follow import Changes
    from sloth_tray.errors import UnknownJob

    queue = read_queue(home)
    if queue is None:
        raise SlothError(home.no_queue)
    with queue, Changes(home) as changes:  # watched before the first look: nothing missed
        ids = list(dict.fromkeys(find_job(queue, given) for given in args.ids))
        waited = set(ids)  # a job the lane still shows once it ended is not waited for again
        names: dict[str, str] = {}
        endings: dict[str, str] = {}  # id -> how it ended, for each not done
        while True:
            if args.lane is not None:  # the lane's jobs, those that joined it meanwhile too
                joined = [job_id for job_id in _live_in_lane(queue, args.lane)
                          if job_id not in waited]
                ids += joined
                waited.update(joined)
            if not ids:
                break
            for job_id in list(ids):
                try:
                    job = queue.get(job_id)
                except UnknownJob:  # pruned meanwhile: it ended, but how is not known
                    endings[job_id] = "was pruned"
                    print(f"{'pruned':<9} {printable(names.get(job_id, '?'))} ({job_id})")
                    ids.remove(job_id)
                    continue
                names[job_id] = job.name
                if job.state not in ENDED:
                    continue
                ids.remove(job_id)
                said = f": {job.last_error}" if job.state == State.FAILED and job.last_error \
                    else ""
                print(f"{job.state.value:<9} {printable(job.name)} ({job.id})"
                      f"{printable(said)}", flush=True)
                if job.state != State.DONE:
                    endings[job_id] = "failed" if job.state == State.FAILED else "was cancelled"
            if ids:
                changes.wait()
    if not waited:
        print(f"nothing pending or running{_in_lane(args.lane)}")
    if not endings:
        return 0
    total = len(names) + sum(1 for job_id in endings if job_id not in names)
    told = ", ".join(f"{printable(names.get(job_id, '?'))} ({job_id}) {how}"
                     for job_id, how in endings.items())
    print(f"sloth-tray: {len(endings)} of {total} job{'' if total == 1 else 's'} did not end "
          f"done: {told}", file=sys.stderr)
    return 1


def _live_in_lane(queue: Queue, lane: str) -> list[str]:
    """The ids of the jobs pending or running in `lane`, but the runs of a repeating job:
    a series always has a run waiting, and would keep its lane from ever being empty.
    (Pending is read first: a job claimed between the two reads is in the second.)"""
    from sloth_tray.jobs.series import repeats

    return [job.id for state in (State.PENDING, State.RUNNING)
            for job in queue.jobs(state, lane=lane) if not repeats(job.options)]


@command
def cmd_log(args: argparse.Namespace, home: Home) -> int:
    from sloth_tray.daemon.follow import read_new

    queue = read_queue(home)
    if queue is None:
        raise SlothError(home.no_queue)
    with queue:
        job = queue.get(find_job(queue, args.id))
        who = f"{printable(job.name)} ({job.id})"
        if args.run is not None and args.run > max(job.runs, 1 if args.follow else 0):
            raise SlothError(f"{who} has run {job.runs} time{'' if job.runs == 1 else 's'}: "
                             + (f"--run takes 1 to {job.runs}" if job.runs else
                                "it has no log yet"))
        if args.follow:
            return _follow_log(queue, home, job, args.run or max(job.runs, 1))
        if not job.runs:
            raise SlothError(f"{who} has not run yet: it has no log (`sloth-tray log -f "
                             f"{job.id}` waits for it)")
    run = args.run or job.runs
    path = home.job_logs(job.id, job.name) / f"{run}.log"
    if not path.is_file():
        why = f": {job.last_error}" if run == job.runs and job.last_error else ""
        raise SlothError(f"run {run} of {who} left no log{printable(why)}")
    sys.stdout.flush()
    read_new(path, 0, sys.stdout.buffer)
    return 0


def _follow_log(queue: Queue, home: Home, job: Job, run: int) -> int:
    """`log -f`: the run's log as it grows, then each later run's, until the job ends:
    0 when it ended done, else 1."""
    from sloth_tray.daemon.follow import Changes, read_new

    folder = home.job_logs(job.id, job.name)
    offset = 0
    sys.stdout.flush()
    out = sys.stdout.buffer
    with Changes(home) as changes:
        while True:
            changes.also(folder)  # made when the first run starts
            log_file = folder / f"{run}.log"
            was = offset
            offset = read_new(log_file, offset, out)
            job = queue.get(job.id)
            if job.runs > run:  # a later run began: this one's log is whole
                read_new(log_file, offset, out)
                run, offset = run + 1, 0
                print(f"sloth-tray: run {run} of {printable(job.name)} ({job.id}) began",
                      file=sys.stderr, flush=True)
                changes.saw_change()
                continue
            if job.state in ENDED:  # its run's log was closed before it ended
                read_new(log_file, offset, out)
                return 0 if job.state == State.DONE else 1
            if offset != was:
                changes.saw_change()
            changes.wait()


@command
def cmd_run(args: argparse.Namespace, home: Home) -> int:
    from sloth_tray.daemon.app import Daemon, log

    with Daemon(home, args.settings, log_to_stderr=True) as daemon:
        tray = None if args.headless else open_tray(daemon, args)
        if tray is None:
            log.info("sloth-tray %s running headless; home %s", __version__, home.root)
            log.info("drop scripts into %s", home.jobs)
            daemon.run_until_stopped()
        else:
            log.info("sloth-tray %s in the tray (%s); home %s", __version__, tray.backend,
                     home.root)
            tray.run()
        log.info("stopped")
    if daemon.fatal:  # it stopped itself, cleanly: say why, and fail
        raise SlothError(daemon.fatal)
    return INTERRUPTED if daemon.interrupted else 0


def open_tray(daemon: Daemon, args: argparse.Namespace):
    """The tray icon, or None (said in one line) when there is no display for one."""
    from sloth_tray.daemon.app import log
    from sloth_tray.desktop import display_available

    if not display_available():
        log.info("no display: running headless (sloth-tray run --headless says so quietly)")
        return None
    try:
        from sloth_tray.tray.tray import Tray

        return Tray(daemon, notifications=args.settings["notifications"])
    except Exception as exc:  # pystray could not reach a display or a tray backend
        log.warning("cannot show a tray icon (%s): running headless", exc)
        return None


@command
def cmd_work(args: argparse.Namespace, home: Home) -> int:
    from sloth_tray.daemon.app import Daemon

    with Daemon(home, args.settings, watch=not args.once, log_to_stderr=False) as daemon:
        if daemon.engine.paused:
            print("sloth-tray: the queue is paused; no job starts until `sloth-tray resume`",
                  file=sys.stderr)
        daemon.engine.on_result(print_result)
        daemon.run_until_stopped(drain=args.once)
    if daemon.fatal:
        raise SlothError(daemon.fatal)
    return INTERRUPTED if daemon.interrupted else 0


def print_result(job: Job, result: Recorded) -> None:
    from sloth_tray.daemon.outcome import Effect

    label = {Effect.DONE: "ok", Effect.RELEASED: "stop", Effect.LOST: "lost",
             Effect.LATER: "later"}.get(result.effect, "fail")
    where = f"-> {result.effect.value.replace('retrying', 'pending')}: " if label == "fail" else ""
    print(f"{label:<5} {printable(job.name)} ({job.id}) {where}{printable(result.detail)}"
          .rstrip(), flush=True)


# -- parsing --------------------------------------------------------------


class Parser(argparse.ArgumentParser):
    """argparse, but a mistake on the command line is one line on stderr, like any
    other error (exit 2, argparse's code for a usage mistake)."""

    # What argparse takes for a negative number, not an option, after an option that
    # wants a value: with units too (`--older-than -1d`), so that the option's own
    # check says what it accepts instead of "expected one argument".
    NEGATIVE_VALUE = re.compile(r"^-[0-9]*\.?[0-9]+[a-zA-Z]*$")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = self.NEGATIVE_VALUE  # argparse's own hook (3.11)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {printable(message)}\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """A choice mistyped (a command, a --state) gets the nearest one: `did you mean
        status?`."""
        if action.choices is not None and value not in action.choices:
            import difflib  # here: only a mistake needs it

            choices = [str(choice) for choice in action.choices]
            near = difflib.get_close_matches(str(value), choices, n=1)
            if near:
                raise argparse.ArgumentError(
                    action, f"invalid choice: {value!r}; did you mean {near[0]}?")
        super()._check_value(action, value)

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        for action in self._actions:
            # `--lease=--`: argparse (3.11) drops the "--" and stores [], past `type`.
            if (action.option_strings and action.type is not None and action.nargs is None
                    and isinstance(getattr(namespace, action.dest, None), list)):
                self.error(f"argument {action.option_strings[0]}: expected one value")
        return namespace, extras


ID_HELP = ("a job id, enough of its start to be unique (`sloth-tray list` shows them), or "
           "a job's name (its newest job)")


class _NotBuilt:
    """A command's parser not needed this time: what is added to it goes nowhere."""

    def add_argument(self, *args: object, **kwargs: object) -> None:
        return None

    def add_mutually_exclusive_group(self) -> _NotBuilt:
        return self


def add_common(parser: argparse.ArgumentParser) -> None:
    """The options every command takes: where the home, the settings and the jobs are."""
    parser.add_argument("--home", default=argparse.SUPPRESS, metavar="DIR",
                        help="the app's folder (default: $SLOTH_TRAY_HOME or the "
                             "platform's data dir)")
    parser.add_argument("--config", default=argparse.SUPPRESS, metavar="FILE",
                        help="the settings file (default: $SLOTH_TRAY_CONFIG or the "
                             "platform's config dir/config.toml)")
    parser.add_argument("--jobs-dir", default=argparse.SUPPRESS, metavar="DIR",
                        help="the watched jobs folder (default: $SLOTH_TRAY_JOBS or HOME/jobs)")


def lane_name(text: str) -> str:
    """argparse's `type` for a lane: a name no lane's folder could have is a usage
    mistake, said in one sentence (exit 2) before anything is done."""
    from sloth_tray.store.lanes import problem  # here: only a command given a lane needs it

    why = problem(text)
    if why is not None:
        raise argparse.ArgumentTypeError(why)
    return text


def json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def daemon_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lease", type=limits.LEASE.argument, metavar="SECONDS",
                        help="how long a job's lease lasts between heartbeats (default 60s)")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with `only`, just that command's parser among the
    commands. (Each parser argparse builds looks up translations: options shared by
    commands are added to each, not kept in parent parsers built every time.)"""
    parser = Parser(
        prog="sloth-tray",
        description="Run the scripts you drop in a folder, one at a time, under leases.")
    add_common(parser)
    parser.add_argument("--version", action="version", version=f"sloth-tray {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, help: str, *extras: Callable[[argparse.ArgumentParser], None]) -> Any:
        if only is not None and name != only:
            return _NotBuilt()
        command_parser = sub.add_parser(name, help=help, description=help)
        add_common(command_parser)
        for extra in extras:
            extra(command_parser)
        return command_parser

    add("paths", "where the app keeps its files", json_flag)
    add("status", "how many jobs are in each state, and what each lane is doing", json_flag)
    p = add("list", "the jobs, newest first", json_flag)
    p.add_argument("--state", choices=[s.value for s in State], help="only jobs in this state")
    p.add_argument("--reason", choices=[r.value for r in Reason],
                   help="only jobs whose last attempt failed for this reason")
    p.add_argument("--limit", type=limits.LIST_LIMIT.argument, default=50,
                   help="at most N jobs (0: all; default 50)")
    p.add_argument("--lane", type=lane_name, metavar="NAME",
                   help="only that lane's jobs (main: those dropped straight in the jobs "
                        "folder)")
    p = add("show", "one job: its fields, history, steps and logs", json_flag)
    p.add_argument("id", metavar="ID", help=ID_HELP)
    p.add_argument("--step", metavar="NAME", help="print that step's recorded output")
    p.add_argument("--occurrence", type=limits.OCCURRENCE.argument, metavar="N",
                   help="with --step: its Nth call in the run (default: the last)")
    p = add("retry", "put done, failed or cancelled jobs back in line, due now; their "
                     "done steps are skipped")
    p.add_argument("ids", nargs="*", metavar="ID", help=ID_HELP)
    p.add_argument("--all-failed", action="store_true", help="every failed job")
    p.add_argument("--lane", type=lane_name, metavar="NAME",
                   help="with --all-failed: every failed job of that lane only")
    steps = p.add_mutually_exclusive_group()
    steps.add_argument("--from", dest="forget_from", metavar="STEP",
                       help="forget this step and every step after it: they run again")
    steps.add_argument("--fresh", action="store_true",
                       help="forget every step: the job runs from its first line")
    steps.add_argument("--step-done", metavar="STEP",
                       help="a step cut short did happen: mark it done, then go on")
    p = add("cancel", "cancel pending, running or failed jobs")
    p.add_argument("ids", nargs="*", metavar="ID", help=ID_HELP)
    p.add_argument("--all-failed", action="store_true",
                   help="every failed job (then `prune` can remove them)")
    p.add_argument("--lane", type=lane_name, metavar="NAME",
                   help="with --all-failed: every failed job of that lane only")
    p = add("run-now", "make waiting jobs due now (failed ones: use retry)")
    p.add_argument("ids", nargs="+", metavar="ID", help=ID_HELP)
    p = add("pause", "start no new job until resume, in every lane or in LANE only, in "
                     "this and every later start (a running job finishes)")
    p.add_argument("lane", nargs="?", type=lane_name, metavar="LANE",
                   help="only this lane (default: every lane, and lanes made later)")
    p = add("resume", "start due jobs again after a pause, in every lane or in LANE only")
    p.add_argument("lane", nargs="?", type=lane_name, metavar="LANE",
                   help="only this lane; the others stay as they are (default: every "
                        "lane, those paused on their own too)")
    p = add("add", "queue a script (a copy of it: later edits change nothing), or a "
                   "command: add -- COMMAND [ARG...]")
    p.add_argument("path", nargs="?", help="the script")
    p.add_argument("--cwd", metavar="DIR",
                   help="the folder it runs in (default: a script, the home folder; a "
                        "command, the folder add is called from)")
    p.add_argument("--delay", type=limits.DELAY.argument, metavar="SECONDS",
                   help="wait this long before the first run (90, 90s, 10m, 2h, 1d)")
    p.add_argument("--max-attempts", type=limits.ATTEMPTS.argument, metavar="N",
                   help="tries before giving up (1 to 1000)")
    p.add_argument("--name", help="the job's name (default: the file's name without "
                                  "extension, or the command line)")
    p.add_argument("--lane", type=lane_name, metavar="NAME",
                   help="the lane it runs in, one job at a time beside the other lanes "
                        "(default: main; the lane's folder need not exist)")
    p = add("wait", "wait until the jobs end, or until a lane has nothing pending or "
                    "running; exit 0 when all ended done")
    p.add_argument("ids", nargs="*", metavar="ID", help=ID_HELP)
    p.add_argument("--lane", type=lane_name, metavar="NAME",
                   help="every job pending or running in that lane, and those that join "
                        "it meanwhile (a repeating job's runs aside: they never end)")
    p = add("log", "the output of a job's last run (or of --run N)")
    p.add_argument("id", metavar="ID", help=ID_HELP)
    p.add_argument("--run", type=limits.OCCURRENCE.argument, metavar="N",
                   help="that run's output (1 is the first; default: the last)")
    p.add_argument("-f", "--follow", action="store_true",
                   help="follow the output as it is written until the job ends "
                        "(exit 0 when it ended done)")
    p = add("step", "inside a job: run COMMAND once; a later run of the job skips it "
                    "and writes its recorded output again")
    p.add_argument("name", metavar="NAME", help="the step's name, unique within the job")
    p.add_argument("--ask", action="store_true",
                   help="if the run ends while it runs, ask before running it again")
    p.add_argument("step_command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARG...]",
                   help="the command (after --)")
    p = add("run", "the daemon: run due jobs as they come", daemon_options)
    p.add_argument("--headless", action="store_true", help="no tray icon")
    p.add_argument("--no-notifications", action="store_true",
                   help="no desktop notification when a job fails for good")
    p = add("work", "run due jobs in the foreground, one line per job", daemon_options)
    p.add_argument("--once", action="store_true", help="run every job due now, then exit")
    add("config", "the effective settings and where each comes from", json_flag)
    p = add("autostart", "start the app at login: enable, disable, or show the status",
            json_flag)
    p.add_argument("action", choices=["enable", "disable", "status"], nargs="?",
                   default="status")
    p = add("prune", "delete finished (done or cancelled) jobs and their history")
    p.add_argument("--older-than", type=limits.OLDER_THAN.argument, default=7 * 86400,
                   metavar="AGE",
                   help="age such as 7d, 12h, 30m (default 7d)")
    return parser


def load_settings(args: argparse.Namespace) -> config.Settings:
    """config.toml, the environment, and the flags this command has."""
    flag = vars(args).get
    return config.load(Path(flag("config")) if flag("config") else None, flags={
        "jobs_dir": flag("jobs_dir"), "lease": flag("lease"),
        "notifications": False if flag("no_notifications") else None})


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _main(argv)
        if sys.stdout is not None:  # None in a windowed bundle, which has no console
            sys.stdout.flush()  # here, not at exit: a reader that went away is seen below
        return code
    except BrokenPipeError:
        # `sloth-tray list | head -1`: the reader has what it wanted. Stop quietly with
        # the status of a tool stopped by SIGPIPE; stdout goes to devnull so that
        # Python's own flush at exit does not complain either.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE_STATUS


def _main(argv: Sequence[str] | None) -> int:
    line = list(sys.argv[1:] if argv is None else argv)
    # `sloth-tray add -- COMMAND ...`: the command's words are its own, whatever they
    # look like (--cwd, -h, another --): they are taken off before the parse.
    inline = None
    if _command_of(line) == "add" and "--" in line:
        cut = line.index("--")
        line, inline = line[:cut], line[cut + 1:]
    # `sloth-tray status --json`: the command comes first, so only its parser is
    # needed; anything else (help, options first, no command) gets them all.
    parser = build_parser(only=line[0] if line and line[0] in COMMANDS else None)
    args = parser.parse_args(line)
    if inline is not None:
        args.inline = inline
    if args.command is None:  # plain `sloth-tray` starts the app
        args = parser.parse_args([*line, "run"])
    if args.command == "step":  # inside a job: no settings, no home: the run names its queue
        from sloth_tray import shellstep

        ask, command = args.ask, list(args.step_command)
        while command[:1] == ["--ask"]:  # NAME --ask -- ...: argparse left it in the rest
            ask, command = True, command[1:]
        return shellstep.main(args.name, command[1:] if command[:1] == ["--"] else command,
                              ask=ask)
    try:
        args.settings = load_settings(args)
        home = locate(getattr(args, "home", None), args.settings["jobs_dir"],
                      jobs_source=args.settings.sources.get("jobs_dir"))
        with interrupted_at_once(args.command not in (*DAEMONS, *WAITING)):
            return COMMANDS[args.command](args, home)
    except SlothError as exc:
        print(f"sloth-tray: {printable(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return INTERRUPTED


DAEMONS = ("run", "work")  # they stop cleanly on Ctrl-C themselves (stopsignals.py)
# They only read, and may wait for long: Ctrl-C ends them with 130 (KeyboardInterrupt).
WAITING = ("wait", "log")
# The options every command takes that are followed by a value (before the command too).
COMMON_VALUED = ("--home", "--config", "--jobs-dir")


def _command_of(line: Sequence[str]) -> str | None:
    """The command a command line names: its first word that is not an option (nor
    the value of one) before any `--`."""
    words = iter(line)
    for word in words:
        if word == "--":
            return None
        if word in COMMON_VALUED:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


@contextlib.contextmanager
def interrupted_at_once(one_shot: bool):
    """Ctrl-C ends a one-shot command at once, as it ends any C tool.

    Python turns it into KeyboardInterrupt wherever the interpreter happens to
    be, even inside a context manager's own code between taking a lock and
    the code that gives it back: an `add` waiting on a locked queue then hung
    for good. A one-shot command has nothing to clean up: each write is one
    SQLite transaction, and `add` copies where no start would queue it.
    """
    previous = None
    if one_shot:
        try:
            previous = signal.signal(signal.SIGINT, signal.SIG_DFL)
        except ValueError:  # not the main thread (main() called from a thread): leave it be
            pass
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
