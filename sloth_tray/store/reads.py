"""The numbers a glance at the queue needs: how many jobs are in each state, how
many are due, whether the queue is paused, which conditions hold due jobs back,
the recurring series to judge for lateness, and what each job waiting in a step
waits for (a sleep's end, a question's answer), as the looks say it.

Reads of a connection, nothing else. Queue answers with them, and
`sloth-tray status` calls them on a connection of its own (`read`), so that the
command loads neither the queue's writing code nor the calendar: it must answer
about as fast as an interpreter that opens SQLite (tests/bench/compare.py).

`status`'s connection cannot write (`query_only`), and this module loads no
queue.py, no dataclasses and no typing.
"""

import json
import re
import sqlite3
import time
from collections.abc import Callable

from sloth_tray.errors import SlothError, UnknownJob
from sloth_tray.paths import Home
from sloth_tray.store import lanes
from sloth_tray.store.schema import (
    REQUIRING,
    SERIES_KEY,
    SERIES_LIVE,
    connect,
    translated_errors,
)

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    import os
    from typing import Any

    # What a series is read as, in overdue.Series' order.
    SeriesRow = tuple[str, str | None, dict[str, Any], float | None, float, str | None]

BUSY_TIMEOUT = 5.0  # seconds a read waits for a writer, as the queue's own connection does
# A recurring run's first event names the run it follows; how far back a series is walked.
_FOLLOWS = r"the next run after ([0-9a-f]{12})"  # compiled by re once a series is walked
SERIES_WALK_LIMIT = 1000

# A claim's condition on a pending job: its series is not paused on its own.
NOT_HELD = f"{SERIES_KEY} NOT IN (SELECT series FROM paused_series)"

# The states a glance counts, in State's order, as the file spells them: words, not the
# enum (states.py), which would cost a glance about a hundredth of its time to build
# (tests/store/test_queue.py holds the two equal).
STATES = ("pending", "running", "done", "failed", "cancelled")
ENDED = ("done", "cancelled")  # counted in lane_counts by triggers, per lane
NEVER = 253402300799.0  # 9999-12-31: an ask with no timeout is due only once answered


def state_counts(db: sqlite3.Connection) -> dict[str, int]:
    """Jobs per state. Done and cancelled are summed from the trigger-kept
    `lane_counts` (a row per lane): those pile up by the million; the others are few
    and counted on their partial indexes."""
    found = dict(db.execute("SELECT state, sum(n) FROM lane_counts GROUP BY state"))
    found.update(db.execute(
        "SELECT 'pending', count(*) FROM jobs WHERE state = 'pending' UNION ALL "
        "SELECT 'running', count(*) FROM jobs WHERE state = 'running' UNION ALL "
        "SELECT 'failed', count(*) FROM jobs WHERE state = 'failed'"))
    return {state: found.get(state, 0) for state in STATES}


def counts(db: sqlite3.Connection, now: float) -> dict[str, int]:
    """state_counts(), and how many could be claimed at `now` (due, or with a lapsed
    lease), whatever lane or pause holds them."""
    due_now = db.execute(
        "SELECT (SELECT count(*) FROM jobs WHERE state = 'pending' AND not_before <= :now)"
        " + (SELECT count(*) FROM jobs WHERE state = 'running' AND lease_until <= :now)",
        {"now": now},
    ).fetchone()[0]
    return state_counts(db) | {"due_now": due_now}


def paused(db: sqlite3.Connection) -> bool:
    """One primary-key read: cheap enough for every pass of the daemon's loop."""
    row = db.execute("SELECT value FROM flags WHERE name = 'paused'").fetchone()
    return bool(row and row[0])


def unmet(db: sqlite3.Connection) -> frozenset[str]:
    """The conditions the running app last said do not hold."""
    row = db.execute("SELECT value FROM flags WHERE name = 'unmet'").fetchone()
    return frozenset(filter(None, str(row[0]).split(","))) if row else frozenset()


def not_waiting(unmet: frozenset[str] | set[str]) -> tuple[str, dict[str, str]]:
    """A WHERE clause's tail that leaves out jobs whose require= names a condition in
    `unmet`, and its parameters. Nothing at all when every condition holds: the usual
    claim stays the statement it always was."""
    if not unmet:
        return "", {}
    names = sorted(unmet)
    # require= is stored canonical ("ac,network"): a ",ac," inside ",ac,network,".
    tests = " OR ".join(f"instr(',' || json_extract(options, '$.require') || ',', :unmet{i})"
                        for i in range(len(names)))
    return (f" AND NOT coalesce({tests}, 0)",
            {f"unmet{i}": f",{name}," for i, name in enumerate(names)})


def not_held_back(db: sqlite3.Connection,
                  unmet: frozenset[str] | set[str]) -> tuple[str, dict[str, str]]:
    """not_waiting(), and the claim's other word on a pending job itself: its series
    is not paused on its own (NOT_HELD). What a glance leaves out of "due
    now", so that it counts what a claim would take. Nothing at all when no job can
    be held back (every condition holds, no series is paused): the due jobs are then
    counted on an index alone (lanes.counts)."""
    if not unmet and db.execute("SELECT 1 FROM paused_series LIMIT 1").fetchone() is None:
        return "", {}
    waits, params = not_waiting(unmet)
    return f"{waits} AND {NOT_HELD}", params


def waiting_on(db: sqlite3.Connection, now: float, unmet: frozenset[str]) -> dict[str, int]:
    """Due jobs that wait, per unmet condition (only those some job waits on). Empty
    when every condition holds. A run of a series paused on its own waits for that
    pause first (as `schedules` says): it is left out. Counted among the jobs that
    require a condition (their own index): each snapshot counts them."""
    found: dict[str, int] = {}
    for name in sorted(unmet):
        n = db.execute(
            f"SELECT count(*) FROM jobs INDEXED BY jobs_due_requiring WHERE {REQUIRING} "
            "AND not_before <= :now "
            "AND instr(',' || json_extract(options, '$.require') || ',', :name) "
            f"AND {NOT_HELD}",
            {"now": now, "name": f",{name},"}).fetchone()[0]
        if n:
            found[name] = n
    return found


def summary(db: sqlite3.Connection, now: float,
            held_back: "frozenset[str] | None" = None) -> "dict[str, Any]":
    """counts(), whether the queue is paused, and the same per lane ("lanes": see
    lanes.counts). While the queue is paused, nothing is due now,
    whatever the clock says: nothing will start. Jobs waiting for a condition are
    not due either ("waiting_on" says how many wait for which), nor are the runs of a
    series paused on its own: what is due is what a claim would take. `held_back`:
    unmet(db), when the caller has read it already."""
    is_paused = paused(db)
    held_back = unmet(db) if held_back is None else held_back
    waits = waiting_on(db, now, held_back)
    per_lane = lanes.counts(db, now, is_paused, not_held_back(db, held_back))
    # The live jobs as the lanes counted them (every lane with one is known), the
    # ended ones from every lane's trigger-kept count (lanes.counts shows fewer).
    ended = dict(db.execute("SELECT state, sum(n) FROM lane_counts GROUP BY state"))
    found: dict[str, Any] = {
        state: ended.get(state, 0) if state in ENDED else
        sum(lane[state] for lane in per_lane.values()) for state in STATES}
    # Due now: what a lane that starts jobs now would start (a paused lane's are not;
    # nor are jobs held back by an unmet condition or a series' own pause).
    found["due_now"] = sum(lane["due_now"] for lane in per_lane.values())
    found["lanes"] = per_lane
    return found | {"paused": is_paused} | ({"waiting_on": waits} if waits else {})


def recurring_series(db: sqlite3.Connection) -> "list[SeriesRow]":
    """Each live recurring series (one with a waiting or running run), with its last
    success: the fields of an overdue.Series.

    Cheap however many jobs wait or finished jobs pile up: the heads come from an
    index of their own (schema.SERIES_LIVE), and each run names the run it follows
    in its first event (`the next run after <id>`), so the walk back to the newest
    done run is a primary-key read per run that did not succeed. A run that was
    pruned was done (prune deletes only done and cancelled runs): its successor's
    creation, the moment it ended, stands for its success.
    """
    series: dict[tuple[str, str | None], SeriesRow] = {}
    heads = db.execute(
        "SELECT name, script, options, created_at, last_error, "
        "json_extract(history, '$[0][2]') FROM jobs INDEXED BY jobs_series_live "
        f"WHERE {SERIES_LIVE}").fetchall()
    for name, script, options, created_at, last_error, first_event in heads:
        last_success, first_created, error = _walk_back(db, created_at, last_error, first_event)
        known = series.get((name, script))
        if known is None or (last_success or 0) > (known[3] or 0):
            series[(name, script)] = (name, script, json.loads(options), last_success,
                                      first_created, error)
    return list(series.values())


def _walk_back(db: sqlite3.Connection, created_at: float, last_error: str | None,
               first_event: str | None) -> tuple[float | None, float, str | None]:
    """(last success, first creation, the last run's error) for the run so made."""
    error = last_error  # the head's own failed attempt (it waits for a retry)
    for _ in range(SERIES_WALK_LIMIT):
        match = re.fullmatch(_FOLLOWS, first_event or "")
        if match is None:
            return None, created_at, error  # the series' first run: it never succeeded
        row = db.execute("SELECT state, updated_at, created_at, last_error, "
                         "json_extract(history, '$[0][2]') FROM jobs WHERE id = ?",
                         (match.group(1),)).fetchone()
        if row is None:
            return created_at, created_at, error  # pruned, so it was done
        state, updated_at, created_at, run_error, first_event = row
        if state == "done":
            return updated_at, created_at, error
        if error is None and state == "failed":
            error = run_error
    return None, created_at, error  # failing for longer than anyone looks back


def overdue_count(db: sqlite3.Connection, now: float, *, is_paused: bool) -> int:
    """How many recurring series are overdue at `now`. Only a queue that has some
    loads the code that judges them (and a calendar series, the machine's time zone)."""
    rows = recurring_series(db)
    if not rows:
        return 0
    from sloth_tray.jobs import overdue

    series = [overdue.Series(*row) for row in rows]
    return len(overdue.find(series, now, None, paused=is_paused).overdue)


def waiting_for(db: sqlite3.Connection, jobs: list[str] | None = None) -> dict[str, dict]:
    """For each pending job (of `jobs`; None: all) that waits in a step: what for, as
    `show --json` says it: {"kind": "time"|"answer", "until", "question", "choices",
    "default", "step", "name", "words"}, in the order they began to wait."""
    found = {}
    which = "" if jobs is None else "steps.job IN (SELECT value FROM json_each(:jobs)) AND "
    for job, job_name, name, kind, wake_at, question, choices, default in db.execute(
            "SELECT steps.job, jobs.name, steps.name, steps.kind, steps.wake_at, "
            "steps.question, steps.choices, steps.default_choice FROM steps JOIN jobs "
            f"ON jobs.id = steps.job WHERE {which}jobs.state = 'pending' "
            "AND steps.state = 'waiting' AND steps.answer IS NULL ORDER BY steps.rowid",
            {"jobs": json.dumps(jobs or [])}):
        found[job] = {"kind": "time" if kind == "sleep" else "answer", "until": wake_at,
                      "question": question, "choices": json.loads(choices) if choices else None,
                      "default": default, "step": name, "name": job_name,
                      "words": words_for(kind, wake_at, question)}
    return found


def words_for(kind: str, wake_at: float | None, question: str | None) -> str:
    """`sleeping until 14:00`, `asking "Send it?"`."""
    if kind == "sleep":
        return f"sleeping until {short_time(wake_at or 0)}"
    return f"asking {json.dumps(question, ensure_ascii=False)}"


def short_time(moment: float) -> str:
    """14:00 today (14:00:05 when not on the minute), else with its date."""
    local = time.localtime(moment)
    clock = "%H:%M" if local.tm_sec == 0 else "%H:%M:%S"
    if time.strftime("%Y-%m-%d", local) == time.strftime("%Y-%m-%d"):
        return time.strftime(clock, local)
    return time.strftime(f"%Y-%m-%d {clock}", local)


def running_job(db: sqlite3.Connection) -> "dict[str, Any] | None":
    """The job running now (the one claimed last, should there be more): its id, name,
    and when its run began (`since`); None when none runs."""
    row = db.execute("SELECT id, name, updated_at FROM jobs INDEXED BY jobs_leased "
                     "WHERE state = 'running' ORDER BY updated_at DESC, rowid DESC "
                     "LIMIT 1").fetchone()
    return None if row is None else {"id": row[0], "name": row[1], "since": row[2]}


def running_by_lane(db: sqlite3.Connection) -> "dict[str, dict[str, Any]]":
    """The job running in each lane, named as running_job() names one, with its
    attempts (what a start after a crash does with it): {lane: {id, name, since,
    attempts, max_attempts}}. A lane runs one job at a time; should it hold more (a
    lease that lapsed and was taken back elsewhere), the one claimed last."""
    found: dict[str, dict[str, Any]] = {}
    for lane, job_id, name, since, attempts, max_attempts in db.execute(
            "SELECT lane, id, name, updated_at, attempts, max_attempts FROM jobs "
            "INDEXED BY jobs_leased WHERE state = 'running' ORDER BY updated_at, rowid"):
        found[lane] = {"id": job_id, "name": name, "since": since, "attempts": attempts,
                       "max_attempts": max_attempts}
    return found


def next_job(db: sqlite3.Connection,
             unmet: frozenset[str] = frozenset()) -> "dict[str, Any] | None":
    """The waiting job a claim takes next (the soonest due, a job that waits for an
    unmet condition, in a lane paused on its own or of a series paused on its own left
    out; while the whole queue is paused, the one that starts first after `resume`):
    its id, name and due time; None when none waits."""
    waits, params = not_waiting(unmet)
    row = db.execute("SELECT id, name, not_before FROM jobs INDEXED BY jobs_due "
                     f"WHERE state = 'pending'{waits} AND {lanes.NOT_PAUSED_ON_ITS_OWN} "
                     f"AND {NOT_HELD} "
                     f"AND not_before < {NEVER!r} "  # an ask: due once answered
                     "ORDER BY not_before, rowid LIMIT 1", params).fetchone()
    return None if row is None else {"id": row[0], "name": row[1], "due": row[2]}


def newest_named(db: sqlite3.Connection, name: str) -> str | None:
    """The id of the newest job called `name` exactly, or None. (Names have no index:
    found from the newest row back, at once for a name in use; a name no job has
    is a walk of the whole table, about 0.1 s per million jobs.)"""
    row = db.execute("SELECT id FROM jobs WHERE name = ? ORDER BY rowid DESC LIMIT 1",
                     (name,)).fetchone()
    return None if row is None else row[0]


def ids_starting(db: sqlite3.Connection, prefix: str, limit: int = 2) -> list[str]:
    """The ids that start with `prefix` (at most `limit`), on the primary key."""
    prefix = prefix.lower()
    if not prefix or any(c not in "0123456789abcdef" for c in prefix):
        return []
    return [row[0] for row in db.execute(
        "SELECT id FROM jobs WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
        (prefix, prefix + "g", limit))]


def find_job(db: sqlite3.Connection, given: str) -> str:
    """The id of the job `given` names, as a person types it: its id, enough of the
    start of its id to name one job, or its name (a name means its newest job).
    When `given` is both the start of an id and another job's name, it is neither:
    one sentence names both (nothing is done to a job the person may not mean).
    UnknownJob, in one sentence, when it names none."""
    text = given.strip()
    ids = ids_starting(db, text)
    if len(text) == 12 and ids == [text.lower()]:
        return ids[0]  # a whole id
    named = newest_named(db, given)
    if named is not None and ids in ([], [named]):
        return named
    if named is None and len(ids) == 1:
        return ids[0]
    if named is None and ids:
        raise UnknownJob(given, f"{given!r} matches more than one job; give more of the id")
    if named is None:
        raise UnknownJob(given, f"no job has the id or name {given!r}")
    starts = f"the start of job {ids[0]}'s id" if len(ids) == 1 else "the start of other ids"
    raise SlothError(f"{given!r} is the name of job {named} and {starts}: give the whole id "
                     "of the job you mean")


def reader(path: "str | os.PathLike[str]") -> sqlite3.Connection:
    """A connection that cannot write (query_only), for reads beside a Queue's."""
    return connect(path, BUSY_TIMEOUT, query_only=True)


# -- `sloth-tray status` ---------------------------------------------------------------


def empty() -> "dict[str, Any]":
    """What `status` says of a home with no queue in it: nothing anywhere."""
    return {state: 0 for state in STATES} | {
        "due_now": 0, "paused": False, "overdue": 0, "running_job": None, "next": None,
        "lanes": {}, "waiting": {}}


def read(home: Home, clock: Callable[[], float] = time.time, *,
         per_lane: bool = False) -> "dict[str, Any] | None":
    """summary(), the overdue count, and the job running and the one next, as
    `sloth-tray status` shows them, read in one snapshot of the file; None when
    there is no queue to read (Home.readable: a missing home is never made). The
    home is vetted first, as for every command; an older file is migrated
    (schema.connect), and the connection read through cannot write (query_only).
    `per_lane` adds "running_by_lane" (running_by_lane()), which the human `status`
    shows and `status --json` leaves out: its lanes carry their counts."""
    if not home.readable():
        return None
    db = reader(home.db)
    try:
        with translated_errors(home.db, BUSY_TIMEOUT):
            db.execute("BEGIN")  # one read transaction: every number from the same moment
            now = clock()
            held_back = unmet(db)
            found = summary(db, now, held_back)
            found["overdue"] = overdue_count(db, now, is_paused=found["paused"])
            found["running_job"] = running_job(db)
            found["next"] = next_job(db, held_back)
            found["waiting"] = waiting_for(db)  # asleep, or asking
            if per_lane:
                found["running_by_lane"] = running_by_lane(db)
            db.execute("COMMIT")
    finally:
        db.close()
    return found
