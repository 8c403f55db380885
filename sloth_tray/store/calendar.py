"""A series' runs in the queue's file: a series' first calendar time, its next run
queued inside the transaction that ends the last (`follow`), a missed calendar run
settled at the claim (catchup=, window=), a retried run's clock, waits counted again
after the clock was set back (`reanchor`).

Functions of an open connection, called by Queue inside its own transactions. Times
are read in UTC for every=, and in this machine's zone (`local`, asked only when a
calendar needs it) for at= and cron=.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from datetime import UTC, tzinfo
from typing import Any

from sloth_tray.errors import SlothError
from sloth_tray.jobs import schedule, series
from sloth_tray.store import lanes, reads, rows
from sloth_tray.timefmt import format_duration

Zone = Callable[[], tzinfo]  # this machine's zone (or the injected one), read when needed

# Waiting jobs last changed after a time (by a clock that was ahead), to count again.
_AHEAD = ("SELECT id, not_before, updated_at, options FROM jobs INDEXED BY jobs_due_changed "
          "WHERE state = 'pending' AND updated_at > ?")


def zone_of(options: dict[str, Any], local: Zone) -> tzinfo:
    """The zone a job's times are read in: only a calendar needs this machine's."""
    return UTC if options.get("every") else local()


def first_time(options: dict[str, Any], earliest: float, local: Zone) -> float | None:
    """A calendar job's first run: its first calendar time after `earliest` (the
    push, plus any delay=); None for any other job."""
    calendar = schedule.calendar_of(options)
    if calendar is None:
        return None
    if options.get("every"):
        raise SlothError("the job's options: every, at and cron each say when the job "
                         "repeats: use one of them")
    first = schedule.next_time(calendar, earliest, local())
    options["scheduled"] = first  # the series' clock, as for every=
    return first


def restart(options: dict[str, Any], own: dict[str, Any], followed: int, now: float,
            local: Zone) -> None:
    """The series' clock of a retried run, in `options`: kept for a run that was
    followed (it queues no next run), or the series' next time after now."""
    if followed:
        options["scheduled"] = own.get("scheduled", now)
        return
    try:
        options["scheduled"] = series.next_time_after(options, now, zone_of(options, local))
    except schedule.BadSchedule:  # said when it ends (see follow)
        options["scheduled"] = now


def missed_head(db: sqlite3.Connection, now: float, waits: str,
                waits_params: dict[str, str]) -> str | None:
    """The job next in line, when it is a calendar run whose time was missed and
    that was not judged yet (nor made due by hand: run-now, retry, which give it a
    not_before other than its scheduled time). `waits`: reads.not_waiting's clause.
    A series paused on its own is not in line at all, nor is a job of a paused lane
    (or of any lane the whole queue's pause holds, lanes.NOT_PAUSED, the claim's own
    word): a pause keeps a job as it is, its missed run judged once it is resumed,
    never by a claim for another lane while it is held."""
    row = db.execute(
        "SELECT id FROM jobs WHERE rowid = (SELECT rowid FROM jobs "
        f"WHERE state = 'pending' AND not_before <= :now{waits} AND {reads.NOT_HELD} "
        f"AND {lanes.NOT_PAUSED} ORDER BY not_before, rowid LIMIT 1) "
        "AND not_before < :late AND json_extract(options, '$.scheduled') = not_before "
        "AND (json_type(options, '$.at') IS NOT NULL "
        "OR json_type(options, '$.cron') IS NOT NULL)",
        {"now": now, "late": now - schedule.GRACE, **waits_params},
    ).fetchone()
    return None if row is None else row[0]


def settle_missed_run(db: sqlite3.Connection, job_id: str, now: float, local: Zone) -> bool:
    """One late calendar run: it runs now for the times it stands for, or it
    moves to its next calendar time; every dropped time is told in a
    `skipped` event. False when there was nothing to do after all (it ran, was
    cancelled, or its series or its lane was paused since missed_head found it)."""
    row = db.execute("SELECT not_before, options FROM jobs WHERE id = ? AND "
                     f"state = 'pending' AND {reads.NOT_HELD} AND {lanes.NOT_PAUSED}",
                     (job_id,)).fetchone()
    if row is None:
        return False
    not_before, options = row[0], json.loads(row[1])
    calendar = calendar_or_none(db, job_id, options, now)
    if calendar is None or options.get("scheduled") != not_before \
            or not schedule.is_late(not_before, now):
        return False
    tz = local()
    plan = schedule.catch_up(calendar, not_before, now, tz,
                             catchup=options.get("catchup", "once"),
                             window=options.get("window"))
    events: list[tuple[str, str]] = []
    if plan.dropped:
        events.append(("skipped", f"missed {schedule.describe(plan.dropped, plan.dropped_more, tz)}"
                                  f" while nothing could run it; dropped: {plan.reason}"))
    if plan.run_now:
        options["scheduled"], due = plan.latest, now
        events.append(("caught_up", "one run now for the missed "
                                    f"{schedule.describe(plan.kept, plan.kept_more, tz)}"))
    else:
        options["scheduled"] = due = plan.next_due
    _move(db, job_id, now, due, options, events)
    return True


def _move(db: sqlite3.Connection, job_id: str, now: float, due: float,
          options: dict[str, Any], events: list[tuple[str, str]]) -> None:
    """A waiting run due at `due` instead, with its series' clock in `options`."""
    history, params = rows.history(*events)
    db.execute(f"UPDATE jobs SET not_before = :due, options = :options, "
               f"updated_at = :now, {history} WHERE id = :id",
               {"due": due, "options": json.dumps(options, sort_keys=True),
                "now": now, "id": job_id, **params})


def calendar_or_none(db: sqlite3.Connection, job_id: str, options: dict[str, Any],
                     now: float) -> schedule.Calendar | None:
    """The job's calendar. One that cannot be read (the file was edited by hand)
    is said in the job's history rather than raised in the daemon's face."""
    try:
        return schedule.calendar_of(options)
    except schedule.BadSchedule as exc:
        note_unreadable_schedule(db, job_id, now, exc)
        return None


def note_unreadable_schedule(db: sqlite3.Connection, job_id: str, now: float,
                             exc: schedule.BadSchedule) -> None:
    history, params = rows.history(("note", f"its schedule cannot be read ({exc}); "
                                            "no further run is queued"))
    db.execute(f"UPDATE jobs SET {history} WHERE id = :id",
               {"id": job_id, "now": now, **params})


def _last_claim(history: list, default: float) -> float:
    """When the last attempt in this history was claimed."""
    for at, kind, _detail in reversed(history):
        if kind == "claimed":
            return float(at)
    return default


# What follow_series_run reads of the run that ended (RETURNING these, by name).
FOLLOWED_FROM = "name, script, max_attempts, options, followed, history, lane, source"


def follow_series_run(db: sqlite3.Connection, job_id: str, now: float, local: Zone,
                      ended: sqlite3.Row) -> None:
    """Queue a series' next run, inside the transaction that ended this one: a
    crash can never end a series. When it is due is series.next_due's rule; a
    calendar time that has passed by then is judged at the claim (catchup=).

    A run is followed once (`followed`): a retried old run, whose next run was
    queued when it first ended, adds none.
    """
    options = json.loads(ended["options"])
    if ended["followed"] or not series.repeats(options):
        return
    started = _last_claim(json.loads(ended["history"]), now)
    try:
        due = series.next_due(options, started, now, zone_of(options, local))
    except schedule.BadSchedule as exc:  # the file was edited by hand
        note_unreadable_schedule(db, job_id, now, exc)
        return
    options["scheduled"] = due
    # The next run is in the series' lane: a series stays where it was dropped.
    rows.insert_job(db, name=ended["name"], state="pending",
                    max_attempts=ended["max_attempts"], not_before=due, script=ended["script"],
                    options=json.dumps(options, sort_keys=True), created_at=now,
                    updated_at=now, lane=ended["lane"], source=ended["source"],
                    history=json.dumps([[now, "pushed", f"the next run after {job_id}"]]))
    db.execute("UPDATE jobs SET followed = 1 WHERE id = ?", (job_id,))


def any_ahead(db: sqlite3.Connection, now: float) -> bool:
    """Whether some waiting job last changed after `now` (see reanchor)."""
    return db.execute(_AHEAD, (now + series.CLOCK_SLACK,)).fetchone() is not None


def reanchor(db: sqlite3.Connection, now: float, local: Zone) -> int:
    """Every waiting job last changed after `now` (by a clock that was ahead) waits
    what it had left to wait when it changed, counted from now (series.reanchored),
    with a `reanchored` event. Returns how many moved."""
    moved = 0
    for job_id, not_before, changed, options_text in db.execute(
            _AHEAD, (now + series.CLOCK_SLACK,)).fetchall():
        options = json.loads(options_text)
        try:
            due = series.reanchored(options, not_before, changed, now,
                                    zone_of(options, local))
        except schedule.BadSchedule:
            due = now + max(not_before - changed, 0.0)
        due = min(due, not_before)
        if "scheduled" in options:  # the series' clock moves with its run
            options["scheduled"] = (due if options["scheduled"] == not_before
                                    else options["scheduled"] - (not_before - due))
        _move(db, job_id, now, due, options, [(
            "reanchored",
            f"the clock was set back {format_duration(changed - now)}: due in "
            f"{format_duration(due - now)}, not in {format_duration(not_before - now)}")])
        moved += 1
    return moved
