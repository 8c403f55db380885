"""What the tray shows for a Snapshot: the icon's look, the title, the menu.

Pure functions over immutable values, so every label, every enabled flag and
the default action are tested without a display; the surfaces only translate the
result into their toolkit's objects (pystray_surface.py, desktop/dbusmenu.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from sloth_tray.display import printable
from sloth_tray.engine import FailedJob, Snapshot, WaitingJob
from sloth_tray.icons import Look
from sloth_tray.overdue import OverdueJob
from sloth_tray.timefmt import format_duration

# A failed job's label: its name whole, then as much of the error as fits in the
# rest of FAILED_LABEL_CHARS, but never less than ERROR_CHARS_AT_LEAST of it.
FAILED_LABEL_CHARS = 48
ERROR_CHARS_AT_LEAST = 16
ERROR_ROW_CHARS = 120  # the error's own row, first in the job's submenu
REFRESH_SECONDS = 1.0  # how often an open menu's times move (a running job's)


class Controls(Protocol):
    """What the menu's items do; the tray wires these to the engine and the desktop."""

    def retry(self, job_id: str) -> None: ...
    def retry_all_failed(self) -> None: ...
    def cancel(self, job_id: str) -> None: ...
    def run_now(self, job_id: str) -> None: ...
    def show_log(self, job_id: str) -> None: ...
    def toggle_pause(self) -> None: ...
    def open_jobs(self) -> None: ...
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
    key: str = ""


SEPARATOR = Item("-")


def look(snapshot: Snapshot) -> Look:
    """Failed wins over everything: it is the one state that needs the user. Overdue
    (a recurring job late past its grace) comes next after running: it needs a look
    soon, and a pause may be its cause."""
    if snapshot.failed_count or snapshot.problem:
        return Look.FAILED
    if snapshot.running:
        return Look.RUNNING
    if snapshot.overdue:
        return Look.OVERDUE
    if snapshot.paused:
        return Look.PAUSED
    return Look.IDLE


def title(snapshot: Snapshot, now: float) -> str:
    """One line, e.g. `sloth: running tidy_downloads · 2 waiting · 1 failed`."""
    if snapshot.problem:
        return f"sloth: {snapshot.problem}"
    if snapshot.running:
        parts = [f"running {printable(snapshot.running.name)}"]
    elif snapshot.paused:
        parts = ["paused"]
    else:
        parts = ["idle"]
    if snapshot.pending:
        parts.append(f"{snapshot.pending} waiting")
    if snapshot.failed_count:
        parts.append(f"{snapshot.failed_count} failed")
    if snapshot.overdue:
        parts.append(f"{len(snapshot.overdue)} overdue")
    return "sloth: " + " · ".join(parts)


def status_line(snapshot: Snapshot, now: float, jobs_folder: str = "") -> str:
    """The menu's first row. Every time in it is counted from `now`, the moment the
    menu is built: a snapshot can be minutes old when the menu opens."""
    if snapshot.problem:
        return snapshot.problem
    if snapshot.running:
        job = snapshot.running
        return (f"Running {printable(job.name)} "
                f"(attempt {job.attempt}, {clock(now - job.started_at)})")
    if snapshot.paused:
        return "Paused"
    never_used = not (snapshot.pending or snapshot.done or snapshot.failed_count)
    if never_used and jobs_folder:
        return f"Idle — drop scripts into {jobs_folder}"
    if snapshot.next_wakeup is None:
        return "Idle — nothing waiting"
    return f"Idle — next job {due_in(snapshot.next_wakeup, now)}"


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
    if seconds < 60:
        return f"{max(1, int(seconds))} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min"
    return format_duration(seconds)


def short(text: str, limit: int = ERROR_ROW_CHARS) -> str:
    """One line, at most `limit` characters; control characters shown, never obeyed
    (a name or an error comes from a file anyone can write)."""
    text = printable(" ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def failed_label(job: FailedJob) -> str:
    """`nightly-backup-of-photos — rsync: connection re…`: the name is what tells
    the jobs apart, so it is never cut; the error gets what room is left."""
    name = printable(job.name)
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


def waiting_label(job: WaitingJob, now: float) -> str:
    """When a waiting job starts: `due in 5m`, or, once due, what it still waits for
    (`Waiting for AC power`)."""
    if job.waiting_for and job.due <= now:
        return f"Waiting for {job.waiting_for}"
    return due_in(job.due, now)


def failed_submenu(job: FailedJob, controls: Controls) -> tuple[Item, ...]:
    """The whole error first (as much as a menu row holds; Show log has the rest),
    then what can be done: a refused drop never runs, it can only be removed."""
    error = (Item(short(job.error, ERROR_ROW_CHARS), enabled=False), SEPARATOR) \
        if job.error.strip() else ()
    if job.refused:
        return (*error, Item("Remove", lambda: controls.cancel(job.id)))
    return (*error,
            Item("Retry", lambda: controls.retry(job.id)),
            Item("Show log", lambda: controls.show_log(job.id)),
            Item("Cancel", lambda: controls.cancel(job.id)))


def menu(snapshot: Snapshot, controls: Controls, now: float, *,
         has_default_action: bool = True, starts_at_login: bool = False,
         jobs_folder: str = "") -> tuple[Item, ...]:
    anything_failed = bool(snapshot.failed_jobs)
    retryable = any(not job.refused for job in snapshot.failed_jobs)
    failed = tuple(Item(failed_label(job), submenu=failed_submenu(job, controls))
                   for job in snapshot.failed_jobs)
    waiting = tuple(
        Item(f"{printable(job.name)} — {waiting_label(job, now)}",
             submenu=(Item("Run now", lambda job_id=job.id: controls.run_now(job_id)),))
        for job in snapshot.waiting
    )
    return (
        Item(status_line(snapshot, now, jobs_folder), enabled=False),
        SEPARATOR,
        Item(f"Failed jobs ({snapshot.failed_count})", enabled=anything_failed,
             submenu=failed),
        Item("Retry all failed", controls.retry_all_failed, enabled=retryable,
             default=retryable and has_default_action),
        *overdue_section(snapshot, now),
        Item(f"Waiting ({snapshot.pending})", enabled=bool(waiting), submenu=waiting),
        SEPARATOR,
        Item("Pause", controls.toggle_pause, checked=snapshot.paused),
        Item("Open jobs folder", controls.open_jobs,
             default=not retryable and has_default_action),
        Item("Open logs", controls.open_logs),
        Item("Start at login", controls.toggle_autostart, checked=starts_at_login),
        SEPARATOR,
        Item("Quit", controls.quit),
    )


def overdue_section(snapshot: Snapshot, now: float) -> tuple[Item, ...]:
    """`Overdue (N)` with a row per late series, only while there is one: nothing to
    click, each row says how late it is and the likely cause."""
    if not snapshot.overdue:
        return ()
    rows = tuple(Item(overdue_label(job, now), enabled=False) for job in snapshot.overdue)
    return (Item(f"Overdue ({len(snapshot.overdue)})", submenu=rows),)


def tilde(path: str, home: str) -> str:
    """/home/ann/x -> ~/x: shorter in a menu."""
    return "~" + path[len(home):] if home and path.startswith(home + "/") else path


def default_action(items: tuple[Item, ...]) -> Item | None:
    return next((item for item in items if item.default), None)


def failures_to_announce(before: Snapshot | None, after: Snapshot) -> list:
    """Jobs that failed for good since `before`: one notification each, never twice.
    Nothing is announced for the first snapshot (old failures are not news)."""
    if before is None:
        return []
    seen = {(job.id, job.at) for job in before.failed_jobs}
    return [job for job in after.failed_jobs if (job.id, job.at) not in seen]


def overdue_to_announce(before: Snapshot | None, after: Snapshot) -> list[OverdueJob]:
    """Series that became overdue since `before`: one notification each. A series
    stays the same overdue one (same name, same last success) until it succeeds;
    nothing is announced for the first snapshot (old news, as for failures)."""
    if before is None:
        return []
    seen = {(job.name, job.since) for job in before.overdue}
    return [job for job in after.overdue if (job.name, job.since) not in seen]
