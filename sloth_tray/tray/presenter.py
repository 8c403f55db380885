"""What the tray shows for a Snapshot: the icon's look, the title, the menu.

Pure functions over immutable values, so every label, every enabled flag and
the default action are tested without a display; the surfaces only translate the
result into their toolkit's objects (pystray_surface.py, dbusmenu.py).

Lanes (folders in the jobs folder, each running one job at a time) show only once a
user made one: with main alone, every text and row is as it was before lanes. With
more, the menu has a line per busy lane, each running job its own row, and a
`Lanes` submenu; the title names each running job with its lane.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from functools import reduce
from operator import or_
from typing import Protocol

from sloth_tray.daemon.snapshot import (
    AskingJob,
    FailedJob,
    FailedSeries,
    Lane,
    RunningJob,
    Schedule,
    Snapshot,
    StepProgress,
    WaitingJob,
)
from sloth_tray.jobs.overdue import OverdueJob
from sloth_tray.store.lanes import MAIN, order
from sloth_tray.store.reasons import Reason, in_retry_all
from sloth_tray.text import printable
from sloth_tray.timefmt import format_duration, nearest_whole
from sloth_tray.tray.icons import Look, leading

# A failed job's label: its name whole, then as much of the error as fits in the
# rest of FAILED_LABEL_CHARS, but never less than ERROR_CHARS_AT_LEAST of it.
FAILED_LABEL_CHARS = 48
ERROR_CHARS_AT_LEAST = 16
ERROR_ROW_CHARS = 120  # the error's own row, first in the job's submenu
STEP_NAME_CHARS = 40  # a step's name in a row (a name may have 200)
QUESTION_CHARS = 80  # a question in its row (a job may ask at length)
CHOICE_CHARS = 40  # a choice as its item
REFRESH_SECONDS = 1.0  # how often an open menu's times move (a running job's)
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")  # English, as every label is
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


class Controls(Protocol):
    """What the menu's items do; the tray wires these to the engine and the desktop."""

    # step_done: a step cut short that asked happened (marked done first); without it,
    # such a step runs again
    def retry(self, job_id: str, step_done: str | None = None) -> None: ...
    def retry_all_failed(self, lane: str | None = None) -> None: ...  # None: every lane
    # A person's answer to one question (AskingJob.key says which: a click on a menu
    # read before the job asked its next question answers nothing)
    def answer(self, job_id: str, choice: str, question: str) -> None: ...
    def cancel(self, job_id: str) -> None: ...
    def cancel_failed_runs(self, series: str) -> None: ...  # every failed run of a series
    def stop(self, job_id: str) -> None: ...  # the running job
    def run_now(self, job_id: str) -> None: ...
    def show_log(self, job_id: str) -> None: ...
    def pause_series(self, key: str, paused: bool) -> None: ...  # one series, by its key
    def toggle_pause(self) -> None: ...
    def pause(self, lane: str | None = None) -> None: ...  # None: every lane
    def resume(self, lane: str | None = None) -> None: ...  # None: every lane
    def open_jobs(self) -> None: ...
    def open_lane(self, lane: str) -> None: ...  # the folder its drops go into
    def open_logs(self) -> None: ...
    def toggle_autostart(self) -> None: ...
    def quit(self) -> None: ...


@dataclass(frozen=True)
class Item:
    label: str
    action: Callable[[], None] | None = None
    enabled: bool = True
    checked: bool | None = None  # None: not a check item
    default: bool = False  # the icon's left-click action
    submenu: tuple[Item, ...] = ()
    # What the row is, unique among its siblings: a role ("retry-all") or a job's id.
    # A host keeps a row by its id, so the row keeps its id while its label changes.
    # A row that changes kind (plain <-> submenu, check <-> plain) changes key too
    # ("failed-none" -> "failed"): a host may keep a row's kind with its id. Left out
    # of ==, so `item == SEPARATOR` tells a separator whatever its key.
    key: str = field(default="", compare=False)
    icon: Look | None = None  # a badge drawn beside the label (the overdue clock)


SEPARATOR = Item("-")


def separator(key: str) -> Item:
    """A separator with a key of its own ("sep-1", "sep-2": by position)."""
    return Item("-", key=key)


# -- lanes ----------------------------------------------------------------------------


def running_jobs(snapshot: Snapshot) -> tuple[RunningJob, ...]:
    """Every job running now, main's first, then by lane: each lane's, and `running`
    (a snapshot made with no lanes has that one only)."""
    found: dict[str, RunningJob] = {}
    for job in (*((snapshot.running,) if snapshot.running else ()),
                *(lane.running for lane in snapshot.lanes if lane.running)):
        found.setdefault(job.id, job)
    return tuple(sorted(found.values(), key=lambda job: order(job.lane)))


def lanes_of(snapshot: Snapshot) -> tuple[Lane, ...]:
    """The snapshot's lanes, each with its running job, main first, then by name (a
    running job whose lane the snapshot does not list makes that lane's entry)."""
    by_name = {lane.name: lane for lane in snapshot.lanes}
    for job in running_jobs(snapshot):
        lane = by_name.get(job.lane) or Lane(job.lane)
        if lane.running is None:
            by_name[job.lane] = Lane(lane.name, job, lane.pending, lane.due_now, lane.failed,
                                     lane.paused)
    return tuple(sorted(by_name.values(), key=lambda lane: order(lane.name)))


def has_lanes(snapshot: Snapshot) -> bool:
    """Whether the user made a lane: only then does anything the tray shows name one."""
    return any(lane.name != MAIN for lane in lanes_of(snapshot))


def all_paused(snapshot: Snapshot) -> bool:
    """Nothing starts anywhere: the whole queue paused, or every lane on its own."""
    lanes = lanes_of(snapshot)
    return snapshot.paused or (bool(lanes) and all(lane.paused for lane in lanes))


def held_lanes(snapshot: Snapshot) -> tuple[Lane, ...]:
    """Lanes whose pause holds work back: a paused lane with nothing waiting holds
    nothing up, so it is no state of the tray's (its row in `Lanes` says Resume)."""
    return tuple(lane for lane in lanes_of(snapshot) if lane.paused and lane.pending)


def look(snapshot: Snapshot) -> Look:
    """Every state that holds in any lane, each a badge: a paused queue with a failure
    shows both. The one leading (icons.leading) is the state that most needs the user:
    asking, failed, overdue, running, paused. Paused: the whole queue, or a lane paused
    while it has work waiting (held_lanes)."""
    holds = {
        Look.ASKING: bool(snapshot.asking_count),
        Look.FAILED: bool(snapshot.failed_count or snapshot.problem),  # (every lane's)
        Look.RUNNING: bool(running_jobs(snapshot)),
        Look.OVERDUE: bool(snapshot.overdue),
        Look.PAUSED: snapshot.paused or bool(held_lanes(snapshot)),
    }
    return reduce(or_, (state for state, held in holds.items() if held), Look.IDLE)


def state(snapshot: Snapshot) -> Look:
    """The one state that most needs the user, across lanes (the icon's leading badge)."""
    return leading(look(snapshot))


def title(snapshot: Snapshot, now: float) -> str:
    """One line, e.g. `sloth: running tidy_downloads · 2 waiting · 1 failed`; with
    lanes, `sloth: Running: backup (main), fetch_mail (net) · 2 waiting`."""
    if snapshot.problem:
        return f"sloth: {snapshot.problem}"
    runs = running_jobs(snapshot)
    lanes = has_lanes(snapshot)
    if runs and lanes:
        parts = ["Running: " + ", ".join(f"{printable(job.name)} ({printable(job.lane)})"
                                         for job in runs)]
    elif runs:
        parts = [f"running {printable(runs[0].name)}"]
    elif all_paused(snapshot):
        parts = ["paused"]
    else:
        parts = ["idle"]
    if snapshot.pending:
        parts.append(f"{snapshot.pending} waiting")
    if snapshot.failed_count:
        parts.append(f"{snapshot.failed_count} failed")
    if snapshot.overdue:
        parts.append(f"{len(snapshot.overdue)} overdue")
    if snapshot.asking_count:
        parts.append(f"{snapshot.asking_count} asking you")
    held = held_lanes(snapshot)
    if lanes and held and (runs or not all_paused(snapshot)):
        parts.append(", ".join(printable(lane.name) for lane in held) + " paused")
    return "sloth: " + " · ".join(parts)


def status_line(snapshot: Snapshot, now: float, jobs_folder: str = "") -> str:
    """The menu's first row. Every time in it is counted from `now`, the moment the
    menu is built: a snapshot can be minutes old when the menu opens."""
    if snapshot.problem:
        return snapshot.problem
    if snapshot.running:
        job = snapshot.running
        return (f"Running {named(job)}{step_part(job)} "
                f"(attempt {job.attempt}, {clock(now - job.started_at)})")
    if snapshot.paused:
        return "Paused"
    never_used = not (snapshot.pending or snapshot.done or snapshot.failed_count)
    if never_used and jobs_folder:
        return f"Idle — drop scripts into {jobs_folder}"
    if snapshot.next_wakeup is None:
        return "Idle — nothing waiting"
    return f"Idle — next job {due_in(snapshot.next_wakeup, now)}"


def named(job: RunningJob | FailedJob | WaitingJob | AskingJob) -> str:
    """A job's name as its rows show it: `summarise — by Claude Desktop` when an agent
    added it."""
    return printable(job.name) + (f" — by {printable(job.by)}" if job.by else "")


def step_part(job: RunningJob) -> str:
    """` — step 2 upload` while the job is in a step, else nothing."""
    return f" — step {job.step[0]} {step_name(job.step[1])}" if job.step else ""


def lane_line(lane: Lane, now: float) -> str:
    """A busy lane's status line: `net: Running fetch_mail (0:42) · 2 waiting`. The
    attempt shows only from the second on (the lane's line has less room than main's
    did alone)."""
    parts = []
    if lane.running:
        job = lane.running
        attempt = f"attempt {job.attempt}, " if job.attempt > 1 else ""
        parts.append(f"Running {named(job)}{step_part(job)} "
                     f"({attempt}{clock(now - job.started_at)})")
    if lane.pending:
        parts.append(f"{lane.pending} waiting")
    if lane.paused:
        parts.append("paused")
    return f"{printable(lane.name)}: " + " · ".join(parts)


def due_in(due: float, now: float) -> str:
    """`due now` once the time has come (never `in 1 s` for a job already late)."""
    return "due now" if due <= now else "in " + in_words(due - now)


def clock(seconds: float) -> str:
    """0:42, 12:05, 1:02:03."""
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02}:{secs:02}" if hours else f"{minutes}:{secs:02}"


def in_words(seconds: float) -> str:
    """`15 s`, `4 min`, then format_duration's `1h5m`: each to the nearest of its unit
    (59.6 s is `1 min`), and never `0 s` for a job not yet due."""
    if math.isfinite(seconds) and nearest_whole(seconds) < 60:
        return f"{max(1, nearest_whole(seconds))} s"
    if math.isfinite(seconds) and nearest_whole(seconds / 60) < 60:
        return f"{nearest_whole(seconds / 60)} min"
    return format_duration(seconds)


def short(text: str, limit: int = ERROR_ROW_CHARS) -> str:
    """One line, at most `limit` characters; control characters shown, never obeyed
    (a name or an error comes from a file anyone can write)."""
    text = printable(" ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def step_name(name: str) -> str:
    return short(name, STEP_NAME_CHARS)


def progress_label(progress: StepProgress) -> str:
    """How far a failed job's steps got: `Got through 2 steps; stopped in "upload"
    (failed)`, or `All 3 steps done` when it failed after them."""
    if progress.stopped_in is None:
        return f"All {progress.steps} step{'s' if progress.steps != 1 else ''} done"
    done = progress.done
    got = f"Got through {done} step{'s' if done != 1 else ''}" if done else "No step done"
    how = {"cut": "cut short"}.get(progress.stopped or "", progress.stopped or "")
    return f'{got}; stopped in "{step_name(progress.stopped_in)}"' + (f" ({how})" if how else "")


def failed_label(job: FailedJob) -> str:
    """`nightly-backup-of-photos — rsync: connection re…`: the name is what tells
    the jobs apart, so it is never cut; the error gets what room is left."""
    name = named(job)
    room = max(ERROR_CHARS_AT_LEAST, FAILED_LABEL_CHARS - len(name) - len(" — "))
    return f"{name} — {short(job.error, room) or 'failed'}"


def overdue_label(job: OverdueJob, now: float) -> str:
    """`backup — last success 2d ago (failing: rsync: connection refused)`."""
    ago = in_words(now - job.since) + " ago"
    when = f"last success {ago}" if job.ever_succeeded else f"never succeeded, queued {ago}"
    label = f"{printable(job.name)} — {when}"
    if not job.reason:
        return label
    return f"{label} ({short(job.reason, max(ERROR_CHARS_AT_LEAST, ERROR_ROW_CHARS - len(label)))})"


def waiting_label(job: WaitingJob, now: float, tz: tzinfo | None = None) -> str:
    """When a waiting job starts: `due in 5m`, `sleeping until 14:00` (a step's sleep:
    it wakes then, it is not due before), or, once due, what it still waits for
    (`Waiting for AC power`)."""
    if job.sleeping_until is not None and job.sleeping_until > now:
        return f"sleeping until {when(job.sleeping_until, now, tz).removeprefix('today ')}"
    if job.waiting_for and job.due <= now:
        return f"Waiting for {job.waiting_for}"
    return due_in(job.due, now)


def failed_submenu(job: FailedJob, controls: Controls) -> tuple[Item, ...]:
    """The whole error first (as much as a menu row holds; Show log has the rest), and
    how far its steps got, then what can be done: a refused drop never runs, it can
    only be removed; a step cut short that asks is answered (it happened, or run it
    again), never retried unasked."""
    said = (*((Item(short(job.error, ERROR_ROW_CHARS), enabled=False, key="error"),)
              if job.error.strip() else ()),
            *((Item(progress_label(job.progress), enabled=False, key="steps"),)
              if job.progress else ()))
    error = (*said, separator("sep-1")) if said else ()
    if job.refused:
        return (*error, Item("Remove", lambda: controls.cancel(job.id), key="remove"))
    if job.unsure_step is not None:
        step, name = job.unsure_step, step_name(job.unsure_step)
        retry: tuple[Item, ...] = (
            Item(f'Mark "{name}" done', lambda: controls.retry(job.id, step),
                 key="mark-done"),
            Item(f'Run "{name}" again', lambda: controls.retry(job.id), key="run-again"))
    else:
        retry = (Item("Retry", lambda: controls.retry(job.id), key="retry"),)
    # A bad header failed the drop before it ran: no log, the script is what to fix.
    show = (Item("Show script", lambda: controls.show_log(job.id), key="show-script")
            if job.reason == Reason.BAD_HEADER else
            Item("Show log", lambda: controls.show_log(job.id), key="show-log"))
    return (*error, *retry, show,
            Item("Cancel", lambda: controls.cancel(job.id), key="cancel"))


def failed_row(job: FailedJob, controls: Controls) -> Item:
    return Item(failed_label(job), submenu=failed_submenu(job, controls), key=job.id)


def day_of(moment: float, now: float, tz: tzinfo | None) -> str:
    """`today`, a weekday in the six days before, else a date (with its year when
    not this one): what tells days apart in a menu read this week."""
    then, today = datetime.fromtimestamp(moment, tz), datetime.fromtimestamp(now, tz)
    days = (today.date() - then.date()).days
    if days == 0:
        return "today"
    if 0 < days < 7:
        return WEEKDAYS[then.weekday()]
    date = f"{then.day} {MONTHS[then.month - 1]}"
    return date if then.year == today.year else f"{date} {then.year}"


def since(moment: float, now: float, tz: tzinfo | None) -> str:
    """`since 02:00` today, `since Mon` this week, `since 20 Feb` before."""
    day = day_of(moment, now, tz)
    return f"since {datetime.fromtimestamp(moment, tz):%H:%M}" if day == "today" \
        else f"since {day}"


def when(moment: float, now: float, tz: tzinfo | None) -> str:
    """`today 09:00`, `Tue 09:00`, `20 Feb 09:00`."""
    return f"{day_of(moment, now, tz)} {datetime.fromtimestamp(moment, tz):%H:%M}"


def series_row(series: FailedSeries, runs: list[FailedJob], controls: Controls,
               now: float, tz: tzinfo | None) -> Item:
    """`tidy — failed 5 times since Mon`: a series goes on after each failed run, so
    its runs are one row, whose submenu acts on them all or lists them, newest first
    (a run's time tells it apart: they share a name)."""
    latest = runs[0]
    rows = tuple(run_row(job, controls, now, tz) for job in runs)
    older = series.failures - len(runs)
    not_shown = (Item(f"{older} older failed run{'s' if older > 1 else ''} not shown",
                      enabled=False, key="older"),) if older > 0 else ()
    return Item(
        f"{printable(series.name)} — failed {series.failures} times "
        f"{since(series.since, now, tz)}",
        key=f"series:{printable(series.key)}",
        # A latest run that asks is answered in its own row below, never retried unasked
        submenu=(Item("Retry latest", lambda: controls.retry(latest.id),
                      enabled=not latest.refused and latest.unsure_step is None,
                      key="retry-latest"),
                 Item(f"Cancel all {series.failures}",
                      lambda: controls.cancel_failed_runs(series.key), key="cancel-all"),
                 separator("sep-1"), *rows, *not_shown))


def run_row(job: FailedJob, controls: Controls, now: float, tz: tzinfo | None) -> Item:
    """`Tue 09:00 — exit status 1`: one failed run of a series, by its time."""
    moment = when(job.at, now, tz)
    room = max(ERROR_CHARS_AT_LEAST, FAILED_LABEL_CHARS - len(moment) - len(" — "))
    return Item(f"{moment} — {short(job.error, room) or 'failed'}", key=job.id,
                submenu=failed_submenu(job, controls))


def failed_rows(snapshot: Snapshot, controls: Controls, now: float,
                tz: tzinfo | None) -> tuple[Item, ...]:
    """A row per failed job, except that the failed runs of one series make one row
    (with one failed run, it is that run's row), in the order of their newest run."""
    summaries = {series.key: series for series in snapshot.failed_series}
    groups: dict[tuple[str, str], list[FailedJob]] = {}
    for job in snapshot.failed_jobs:
        groups.setdefault(("series", job.series) if job.series else ("job", job.id),
                          []).append(job)
    rows = []
    for (kind, key), runs in groups.items():
        if kind == "series":
            summary = summaries.get(key) or FailedSeries(key, runs[0].name, len(runs),
                                                         min(job.at for job in runs))
            if summary.failures > 1:
                rows.append(series_row(summary, runs, controls, now, tz))
                continue
        rows.append(failed_row(runs[0], controls))
    return tuple(rows)


def waiting_rows(snapshot: Snapshot, controls: Controls, now: float,
                 tz: tzinfo | None = None) -> tuple[Item, ...]:
    return tuple(
        Item(f"{named(job)} — {waiting_label(job, now, tz)}", key=job.id, submenu=(
            Item("Run now", lambda job_id=job.id: controls.run_now(job_id), key="run-now"),
            Item("Cancel", lambda job_id=job.id: controls.cancel(job_id), key="cancel")))
        for job in snapshot.waiting
    )


def status_row(snapshot: Snapshot, controls: Controls, now: float,
               jobs_folder: str) -> Item:
    """The status line; while a job runs, the job's row, which can stop it."""
    line = status_line(snapshot, now, jobs_folder)
    job = snapshot.running
    if job is None or snapshot.problem:
        return Item(line, enabled=False, key="status")
    return Item(line, key=job.id, submenu=(
        Item("Stop", lambda: controls.stop(job.id), key="stop"),
        Item("Show log", lambda: controls.show_log(job.id), key="show-log")))


def status_rows(snapshot: Snapshot, controls: Controls, now: float,
                jobs_folder: str) -> tuple[Item, ...]:
    """The menu's first rows: with lanes, one per busy lane (each running job its own
    row, which stops that job); else, or when no lane is busy, the one status line."""
    if snapshot.problem or not has_lanes(snapshot):
        return (status_row(snapshot, controls, now, jobs_folder),)
    busy = tuple(lane_row(lane, controls, now) for lane in lanes_of(snapshot)
                 if lane.running or lane.pending)
    return busy or (status_row(snapshot, controls, now, jobs_folder),)


def lane_row(lane: Lane, controls: Controls, now: float) -> Item:
    """A busy lane's line, keyed by its lane so it keeps its row while its time and
    counts move. A running job's Stop and Show log are keyed by the job: when the lane
    moves on to its next job, a click on a menu still showing the last one reaches
    that job's rows (dbusmenu keeps them), never stops the next one unseen."""
    name = printable(lane.name)
    job = lane.running
    if job is None:  # only waiting: nothing to click (a plain row, a key of its own)
        return Item(lane_line(lane, now), enabled=False, key=f"lane:{name}:waiting")
    return Item(lane_line(lane, now), key=f"lane:{name}", submenu=(
        Item("Stop", lambda: controls.stop(job.id), key=f"stop:{job.id}"),
        Item("Show log", lambda: controls.show_log(job.id), key=f"show-log:{job.id}")))


def pause_rows(snapshot: Snapshot, controls: Controls) -> tuple[Item, ...]:
    """Main alone: the Pause check item. With lanes: Pause or Resume for every lane at
    once (Resume once nothing starts anywhere), then `Lanes`, each lane's own."""
    if not has_lanes(snapshot):
        return (Item("Pause", controls.toggle_pause, checked=snapshot.paused, key="pause"),)
    # Keyed by what it does: a click on a label a moment old does what that label said.
    every = (Item("Resume", controls.resume, key="resume-all") if all_paused(snapshot)
             else Item("Pause", controls.pause, key="pause-all"))
    return (every, Item("Lanes", key="lanes", submenu=tuple(
        lane_controls(lane, controls, lane_retryable(snapshot, lane))
        for lane in lanes_of(snapshot))))


def lane_retryable(snapshot: Snapshot, lane: Lane) -> bool:
    """Whether the lane's Retry failed has a job to retry (reasons.in_retry_all). Failures
    older than those the snapshot carries cannot be judged here: then it may be tried."""
    shown = [job for job in snapshot.failed_jobs if job.lane == lane.name]
    return lane.failed > len(shown) or any(in_retry_all(job.reason) for job in shown)


def lane_controls(lane: Lane, controls: Controls, retryable: bool) -> Item:
    """`net` > Pause (or Resume), Open folder, Retry failed (greyed with nothing it
    would retry)."""
    name = lane.name
    toggle = (Item("Resume", lambda: controls.resume(name), key="resume") if lane.paused
              else Item("Pause", lambda: controls.pause(name), key="pause"))
    label = printable(name) + (" (paused)" if lane.paused else "")
    return Item(label, key=f"lane:{printable(name)}", submenu=(
        toggle,
        Item("Open folder", lambda: controls.open_lane(name), key="open-folder"),
        Item("Retry failed", lambda: controls.retry_all_failed(name),
             enabled=retryable, key="retry-failed")))


def quit_label(snapshot: Snapshot) -> str:
    """Quit stops a running job and gives its lease back: it is due again at the
    next start, or once resumed if the queue is paused (the pause outlives a quit)."""
    runs = running_jobs(snapshot)
    if len(runs) > 1:
        return several_quit_label(snapshot, runs)
    job = runs[0] if runs else None
    if job is None:
        return "Quit"
    if job.step and job.step_asks:  # its run ends in that step: the job fails step_unsure
        return (f"Quit (cuts {printable(job.name)} short in step "
                f"\"{printable(job.step[1])}\": it will ask whether that happened)")
    again = ("once resumed" if snapshot.paused or job.lane in snapshot.paused_lanes
             else "at the next start")
    return f"Quit (stops {printable(job.name)}; it runs again {again})"


def several_quit_label(snapshot: Snapshot, runs: tuple[RunningJob, ...]) -> str:
    """`Quit (stops backup and fetch_mail; they run again at the next start)`; a job
    in a step that asks is cut short there instead, and will ask."""
    asking = [job for job in runs if job.step and job.step_asks]
    others = [job for job in runs if job not in asking]
    if not asking:
        paused = snapshot.paused_lanes
        again = ("once resumed" if snapshot.paused or all(job.lane in paused for job in runs)
                 else "at the next start")
        return f"Quit (stops {and_list(printable(job.name) for job in others)}; " \
               f"they run again {again})"
    cuts = and_list(f"{printable(job.name)} short in step \"{printable(job.step[1])}\""
                    for job in asking if job.step)
    stops = f"stops {and_list(printable(job.name) for job in others)}; " if others else ""
    who = "it" if len(asking) == 1 else "each"
    return f"Quit ({stops}cuts {cuts}: {who} will ask whether that happened)"


def and_list(words) -> str:
    """`a`, `a and b`, `a, b and c`."""
    words = list(words)
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)


def menu(snapshot: Snapshot, controls: Controls, now: float, *,
         has_default_action: bool = True, starts_at_login: bool = False,
         jobs_folder: str = "", tz: tzinfo | None = None) -> tuple[Item, ...]:
    """The menu for `snapshot`, its times counted from `now` and read in `tz` (this
    machine's zone when None). Every row has a key (see Item)."""
    retryable = any(in_retry_all(job.reason) for job in snapshot.failed_jobs)
    failed = failed_rows(snapshot, controls, now, tz)
    waiting = waiting_rows(snapshot, controls, now, tz)
    return (
        *asking_section(snapshot, controls, now),
        *status_rows(snapshot, controls, now, jobs_folder),
        separator("sep-1"),
        Item(f"Failed jobs ({snapshot.failed_count})", enabled=bool(failed),
             submenu=failed, key="failed" if failed else "failed-none"),
        Item("Retry all failed", controls.retry_all_failed, enabled=retryable,
             default=retryable and has_default_action, key="retry-all"),
        *overdue_section(snapshot, now),
        *schedules_section(snapshot, controls, now, tz),
        Item(f"Waiting ({snapshot.pending})", enabled=bool(waiting), submenu=waiting,
             key="waiting" if waiting else "waiting-none"),
        separator("sep-2"),
        *pause_rows(snapshot, controls),
        Item("Open jobs folder", controls.open_jobs,
             default=not retryable and has_default_action, key="open-jobs"),
        Item("Open logs", controls.open_logs, key="open-logs"),
        Item("Start at login", controls.toggle_autostart, checked=starts_at_login,
             key="autostart"),
        separator("sep-3"),
        Item(quit_label(snapshot), controls.quit, key="quit"),
    )


def overdue_section(snapshot: Snapshot, now: float) -> tuple[Item, ...]:
    """`Overdue (N)` with a row per late series, only while there is one: nothing to
    click, each row says how late it is and the likely cause."""
    if not snapshot.overdue:
        return ()
    seen: dict[str, int] = {}
    rows = []
    for job in snapshot.overdue:
        # A series has no id here; its name, and which of that name, tell it apart.
        nth = seen[job.name] = seen.get(job.name, 0) + 1
        key = printable(job.name) + (f"#{nth}" if nth > 1 else "")
        rows.append(Item(overdue_label(job, now), enabled=False, key=f"overdue:{key}"))
    return (Item(f"Overdue ({len(snapshot.overdue)})", submenu=tuple(rows), key="overdue"),)


# -- Waiting for you: the questions jobs ask ---------------------------------------------


def asking_section(snapshot: Snapshot, controls: Controls, now: float) -> tuple[Item, ...]:
    """`Waiting for you (N)` first in the menu, then a row per question (oldest first)
    holding its choices, only while a job asks: what the user is wanted for, on top."""
    if not snapshot.asking_count:
        return ()
    rows = tuple(question_row(job, controls, now) for job in snapshot.asking)
    more = snapshot.asking_count - len(rows)
    not_shown = (Item(f"{more} more: sloth-tray list", enabled=False, key="asking-more"),
                 ) if more > 0 else ()
    return (Item(f"Waiting for you ({snapshot.asking_count})", enabled=False, key="asking"),
            *rows, *not_shown, separator("sep-0"))


def question_label(job: AskingJob) -> str:
    """`feed-check: Post today's feed?`"""
    return f"{named(job)}: {short(job.question, QUESTION_CHARS)}"


def question_row(job: AskingJob, controls: Controls, now: float) -> Item:
    """A question's row, keyed by the question (its job asks its next one in another
    row), its choices as items (each keyed by what it answers), then what its timeout
    will do."""
    key = job.key
    choices = tuple(
        Item(short(choice, CHOICE_CHARS),
             lambda choice=choice: controls.answer(job.id, choice, key),
             key=f"choice:{printable(choice)}")
        for choice in job.choices)
    timeout = ()
    if job.until is not None:
        then = (f"{short(job.default, CHOICE_CHARS)} is the answer"
                if job.default is not None else "the job fails unanswered")
        timeout = (separator("sep-1"),
                   Item(f"{then} {due_in(job.until, now).replace('due now', 'now')}",
                        enabled=False, key="timeout"))
    return Item(question_label(job), key=f"ask:{printable(key)}",
                submenu=(*choices, *timeout))


# -- Schedules: a row per series -------------------------------------------------------


def schedule_label(series: Schedule, now: float, tz: tzinfo | None) -> str:
    """`check_inbox — every 2m · next 14:02 · last ok 14:00`."""
    parts = [f"{printable(series.name)} — {printable(series.schedule)}"]
    if series.paused:
        parts.append("paused")
    elif series.next is None:
        parts.append("running")
    else:
        parts.append("next " + (f"{datetime.fromtimestamp(series.next, tz):%H:%M}"
                                if day_of(series.next, now, tz) == "today"
                                else when(series.next, now, tz)))
    if series.last_at is not None:
        moment = datetime.fromtimestamp(series.last_at, tz)
        day = day_of(series.last_at, now, tz)
        parts.append(f"last {'ok' if series.last_ok else 'failed'} "
                     + (f"{moment:%H:%M}" if day == "today" else when(series.last_at, now, tz)))
    return " · ".join(parts)


def schedule_row(series: Schedule, controls: Controls, now: float,
                 tz: tzinfo | None) -> Item:
    """A series' row, keyed by the series (its runs come and go; the row stays).
    Run now and Cancel schedule act on its waiting run; an overdue series carries
    the icon's clock."""
    waiting = series.next_id if series.next is not None else None
    toggle = (Item("Resume", lambda: controls.pause_series(series.key, False), key="resume")
              if series.paused else
              Item("Pause this schedule", lambda: controls.pause_series(series.key, True),
                   key="pause"))
    return Item(schedule_label(series, now, tz), key=f"schedule:{printable(series.key)}",
                icon=Look.OVERDUE if series.overdue else None, submenu=(
                    Item("Run now", lambda: controls.run_now(waiting or ""),
                         enabled=waiting is not None, key="run-now"),
                    toggle,
                    Item("Show last log", lambda: controls.show_log(series.last_id or ""),
                         enabled=series.last_id is not None, key="show-last-log"),
                    Item("Cancel schedule", lambda: controls.cancel(series.next_id or ""),
                         enabled=series.next_id is not None, key="cancel-schedule")))


def schedules_section(snapshot: Snapshot, controls: Controls, now: float,
                      tz: tzinfo | None) -> tuple[Item, ...]:
    """`Schedules (N)`, a row per live series, only while there is one."""
    if not snapshot.schedules:
        return ()
    return (Item(f"Schedules ({len(snapshot.schedules)})", key="schedules",
                 submenu=tuple(schedule_row(series, controls, now, tz)
                               for series in snapshot.schedules)),)


def tilde(path: str, home: str) -> str:
    """/home/ann/x -> ~/x: shorter in a menu."""
    return "~" + path[len(home):] if home and path.startswith(home + "/") else path


def default_action(items: tuple[Item, ...]) -> Item | None:
    return next((item for item in items if item.default), None)
