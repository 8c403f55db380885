"""Series as schedules: one row per series with its next and last run (`read`), a
series held on its own (`paused_series`, in the claim's condition `NOT_HELD`), and
a series' done runs folded into its newest (`FOLDED_JOBS`, for `list`).

A series is the runs of one drop that repeats (every=, at= or cron=): its runs
share the drop's spooled script, so `coalesce(script, name)` is what ties them
together (`SERIES_KEY`, as Queue.failed_by_series groups failed runs).

Functions of a connection, inside the Queue's transactions or the read of
`sloth-tray schedules`; standard library only, and no queue.py: the command reads.
"""

import json
import sqlite3

from sloth_tray.store import lanes, reads
from sloth_tray.store.schema import REPEATS, SERIES_KEY, SERIES_LIVE
from sloth_tray.store.states import State

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    from datetime import tzinfo
    from typing import Any

# Every job, newest first, but a series' done runs: only its newest, with how many
# older done runs it stands for (`earlier`). {where}: the caller's filter.
FOLDED_JOBS = (
    "SELECT {columns}, coalesce(folded.n - 1, 0) AS earlier FROM jobs LEFT JOIN ("
    "SELECT rowid AS rid, row_number() OVER w AS nth, "
    f"count(*) OVER (PARTITION BY {SERIES_KEY}) AS n FROM jobs "
    f"WHERE state = 'done' AND {REPEATS} "
    f"WINDOW w AS (PARTITION BY {SERIES_KEY} ORDER BY rowid DESC)) AS folded "
    "ON folded.rid = jobs.rowid WHERE (folded.nth IS NULL OR folded.nth = 1){where} "
    "ORDER BY jobs.rowid DESC")


def schedule_text(options: "dict[str, Any]") -> str:
    """The schedule as its header wrote it: `every 2m`, `mon-fri@09:00`, `cron "30 7 * * 1"`."""
    every = options.get("every")
    if every:
        from sloth_tray.limits import compact_duration

        return f"every {compact_duration(float(every))}"
    if options.get("at") is not None:
        days, _, times = str(options["at"]).rpartition(" ")  # kept as "mon-fri 09:00"
        return f"{days}@{times}" if days else times
    if options.get("cron") is not None:
        return f'cron "{options["cron"]}"'
    return "-"


def paused_keys(db: sqlite3.Connection) -> set[str]:
    return {row[0] for row in db.execute("SELECT series FROM paused_series")}


def live_keys_named(db: sqlite3.Connection, name: str) -> list[str]:
    """The keys of the series called `name` that go on (a run waiting or running)."""
    return [row[0] for row in db.execute(
        f"SELECT DISTINCT {SERIES_KEY} FROM jobs WHERE state IN ('pending', 'running') "
        f"AND name = ? AND {REPEATS}", (name,))]


def series_names(db: sqlite3.Connection) -> list[str]:
    """The names of every series that goes on (for the nearest name to a typo)."""
    return [row[0] for row in db.execute(
        f"SELECT DISTINCT name FROM jobs WHERE state IN ('pending', 'running') AND {REPEATS}")]


def set_paused(db: sqlite3.Connection, keys: list[str], paused: bool) -> int:
    """Hold these series (or let them go); how many changed."""
    changed = 0
    for key in keys:
        if paused:
            changed += db.execute("INSERT INTO paused_series VALUES (?) ON CONFLICT DO NOTHING",
                                  (key,)).rowcount
        else:
            changed += db.execute("DELETE FROM paused_series WHERE series = ?", (key,)).rowcount
    return changed


def set_paused_named(db: sqlite3.Connection, name: str, paused: bool) -> int:
    """Hold every live series called `name` (or let it go; an ended one's word on the
    pause goes too): how many series it names (Queue.set_series_paused)."""
    keys = live_keys_named(db, name)
    if not paused:
        keys += [key for key in paused_keys(db) if key not in keys
                 and db.execute(f"SELECT 1 FROM jobs WHERE {SERIES_KEY} = ? "
                                "AND name = ? LIMIT 1", (key, name)).fetchone()]
    set_paused(db, keys, paused)
    return len(keys)


def _last_claim(history: list) -> float | None:
    for at, kind, _detail in reversed(history):
        if kind == "claimed":
            return float(at)
    return None


def read(db: sqlite3.Connection, now: float, tz: "tzinfo | None" = None, *,
         lane: str | None = None, ended: bool = False) -> "list[dict[str, Any]]":
    """One dict per series, soonest next run first (running ones first, ended last):
    what `sloth-tray schedules` shows, its times Unix seconds. `ended`: series
    that no longer go on (cancelled) too. `tz`: a calendar's zone (None: this
    machine's), for the overdue judgement."""

    whole_paused = reads.paused(db)
    words = dict(db.execute("SELECT name, paused FROM lanes WHERE paused"))
    held = paused_keys(db)
    unmet = reads.unmet(db)
    groups: dict[str, list[tuple]] = {}
    # The runs of the series on their own index; without `ended`, of those that go on
    # alone (their live runs have an index too): never every job the queue kept.
    going_on = "" if ended else (f" AND {SERIES_KEY} IN (SELECT {SERIES_KEY} FROM jobs "
                                 f"INDEXED BY jobs_series_live WHERE {SERIES_LIVE})")
    for row in db.execute(
            f"SELECT {SERIES_KEY}, id, name, lane, state, not_before, updated_at, runs, "
            f"last_error, options, attempts FROM jobs INDEXED BY jobs_series_runs "
            f"WHERE {REPEATS}{going_on} ORDER BY rowid DESC"):
        groups.setdefault(row[0], []).append(row[1:])
    deadlines = _overdue_keys(db, now, tz) if groups else set()
    found = []
    for key, runs in groups.items():
        head = next((run for run in runs if run[3] in (State.PENDING, State.RUNNING)), None)
        if head is None and not ended:
            continue
        newest = head or runs[0]
        job_id, name, its_lane, state, not_before, _updated, _runs, _error, options_text, _ = \
            newest
        if lane is not None and its_lane != lane:
            continue
        options = json.loads(options_text)
        finished = sorted((run for run in runs if run[3] in (State.DONE, State.FAILED)),
                          key=lambda run: run[5], reverse=True)
        retrying = head is not None and state == State.PENDING and newest[9] > 0 \
            and newest[7] is not None  # its last attempt failed; it is tried again
        if retrying:
            finished.insert(0, newest)
        in_a_row = 0
        for run in finished:
            if run[3] == State.DONE:
                break
            in_a_row += 1
        last = None
        if finished:
            run = finished[0]
            history = json.loads(db.execute("SELECT history FROM jobs WHERE id = ?",
                                            (run[0],)).fetchone()[0])
            started = _last_claim(history)
            last = {"id": run[0], "at": run[5],
                    "outcome": "ok" if run[3] == State.DONE else "failed",
                    "error": None if run[3] == State.DONE else run[7],
                    "retried": run is newest,  # a failed attempt of the run that waits
                    "duration": None if started is None else max(run[5] - started, 0.0)}
        paused = key in held
        waiting_for = None
        if head is not None and state == State.PENDING:
            if paused:
                waiting_for = "this schedule's pause"
            elif lanes.is_paused(its_lane, words, whole_paused):
                waiting_for = "the queue's pause" if whole_paused and not words.get(its_lane) \
                    else f"lane {its_lane}'s pause"
            elif not_before <= now and unmet:
                from sloth_tray.jobs.conditions import waiting_for as condition

                waiting_for = condition(options, unmet)
        found.append({
            "series": key, "name": name, "lane": its_lane, "schedule": schedule_text(options),
            "state": "ended" if head is None else "paused" if paused else state,
            "next_id": job_id if head is not None else None,
            "next": not_before if head is not None and state == State.PENDING else None,
            "running_since": _updated if head is not None and state == State.RUNNING else None,
            "waiting_for": waiting_for, "last": last,
            "runs": sum(run[6] for run in runs), "failures_in_a_row": in_a_row,
            "overdue": head is not None and key in deadlines,
        })
    found.sort(key=lambda row: (row["state"] == "ended", row["running_since"] is None,
                                row["next"] if row["next"] is not None else 0.0, row["name"]))
    return found


def _overdue_keys(db: sqlite3.Connection, now: float, tz: "tzinfo | None") -> set[str]:
    """The keys of the series overdue at `now` (overdue.py's rule, as `status` counts)."""

    rows = reads.recurring_series(db)
    if not rows:
        return set()
    from sloth_tray.jobs import overdue

    late = set()
    for row in rows:
        deadline = overdue.deadline_of(overdue.Series(*row), tz, now)
        if deadline is not None and deadline <= now:
            late.add(row[1] if row[1] is not None else row[0])
    return late
