"""The read-only queries the CLI, the tray and agents ask through Queue: a job by id or
by the start of one, lists of jobs (by state, folded by series, failed by series, by
name), a job's steps and history, what is due when. Functions over a connection, as
reads.py's are; Queue's thin methods open the connection's transaction and call them,
so a caller asks the Queue it holds; the commands that only read (`list`, `show`)
call them on a connection of their own (access.reading), without the Queue.
"""

import json
import sqlite3

from sloth_tray.errors import UnknownJob
from sloth_tray.store import lanes, reads, rows, schedules, schema
from sloth_tray.store.reads import NEVER
from sloth_tray.store.reasons import PERMANENT, Reason
from sloth_tray.store.rows import JOB_COLUMNS, Event, Job
from sloth_tray.store.states import State

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    from collections.abc import Collection
    from typing import Any

# The few waiting, leased or failed rows sit in a partial index; left alone, the planner
# would walk the whole table in rowid order.
PARTIAL_INDEX = {State.PENDING: "jobs_due", State.RUNNING: "jobs_leased",
                 State.FAILED: "jobs_failed"}


def get(db: sqlite3.Connection, job_id: str) -> Job:
    found = rows.jobs(db, f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
    if not found:
        raise UnknownJob(job_id)
    return found[0]


def exists(db: sqlite3.Connection, job_id: str) -> bool:
    return db.execute("SELECT 1 FROM jobs WHERE id = ?", (job_id,)).fetchone() is not None


def resolve(db: sqlite3.Connection, prefix: str) -> str:
    """The full id of the one job whose id starts with `prefix`."""
    prefix = prefix.strip().lower()
    if not prefix or any(c not in "0123456789abcdef" for c in prefix):
        raise UnknownJob(prefix, f"no job with id {prefix!r} (ids are 12 hex characters)")
    found = db.execute(
        "SELECT id FROM jobs WHERE id >= ? AND id < ? ORDER BY id LIMIT 2",
        (prefix, prefix + "g"),
    ).fetchall()
    if not found:
        raise UnknownJob(prefix)
    if len(found) > 1:
        raise UnknownJob(prefix, f"{prefix!r} matches more than one job; give more of the id")
    return found[0][0]


def shortest_unique_prefix(db: sqlite3.Connection, job_id: str, minimum: int = 6) -> str:
    """The shortest prefix (at least `minimum` long) that names only this job."""
    for length in range(minimum, len(job_id)):
        prefix = job_id[:length]
        n = db.execute(
            "SELECT count(*) FROM (SELECT 1 FROM jobs WHERE id >= ? AND id < ? LIMIT 2)",
            (prefix, prefix + "g"),
        ).fetchone()[0]
        if n == 1:
            return prefix
    return job_id


def jobs(db: sqlite3.Connection, state: State | str | None = None, limit: int | None = None,
         reason: Reason | str | None = None, lane: str | None = None) -> list[Job]:
    """Jobs, newest first; only those in `state`, failed for `reason`, and in `lane`,
    if given."""
    sql = f"SELECT {JOB_COLUMNS} FROM jobs"
    params: list[Any] = []
    where = []
    if state is not None:
        state = State(state)
        if state in PARTIAL_INDEX:
            sql += f" INDEXED BY {PARTIAL_INDEX[state]}"
        where.append(f"state = '{state.value}'")  # a literal: State() vetted it
    if reason is not None:
        where.append("reason = ?")
        params.append(Reason(reason).value)
    if lane is not None:
        where.append("lane = ?")
        params.append(lane)
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY rowid DESC"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    return rows.jobs(db, sql, params)


def failed_by_series(db: sqlite3.Connection, limit: int | None = None,
                     per_series: int | None = None) -> list[tuple[Job, str, int, float]]:
    """Failed jobs, newest first, at most `limit`, and of a recurring series only
    its newest `per_series` runs (a series failing daily would fill any list).
    Each comes with its series' key (its script, one per drop, else its name; ""
    for a job that does not repeat), how many runs of the series failed in all,
    and when the first of them did (for a job alone: 1, and its own failure)."""
    repeats = ("(json_extract(options, '$.every') > 0 "
               "OR json_type(options, '$.at') IS NOT NULL "
               "OR json_type(options, '$.cron') IS NOT NULL)")
    sql = (
        f"SELECT {JOB_COLUMNS}, series, failures, since FROM ("
        "SELECT *, row_number() OVER (PARTITION BY grp ORDER BY rid DESC) AS nth, "
        "count(*) OVER (PARTITION BY grp) AS failures, "
        "min(updated_at) OVER (PARTITION BY grp) AS since FROM ("
        f"SELECT *, rowid AS rid, CASE WHEN {repeats} THEN coalesce(script, name) "
        "ELSE '' END AS series, "
        f"CASE WHEN {repeats} THEN 's' || coalesce(script, name) ELSE 'j' || id END "
        "AS grp FROM jobs INDEXED BY jobs_failed WHERE state = 'failed')) "
        "WHERE nth <= coalesce(:per_series, nth) ORDER BY rid DESC LIMIT :limit")
    found = rows.named_rows(db, sql, {"per_series": per_series,
                                      "limit": -1 if limit is None else limit})
    return [(rows.job(row), row["series"], row["failures"], row["since"]) for row in found]


def failed_at_fault(db: sqlite3.Connection) -> int:
    """How many failed jobs failed for a reason only a change to their script can help
    (reasons.PERMANENT): what a burst of failures too long to list is made of."""
    reasons = sorted(reason.value for reason in PERMANENT)
    marks = ", ".join("?" * len(reasons))
    return db.execute(f"SELECT count(*) FROM jobs WHERE state = 'failed' "
                      f"AND reason IN ({marks})", reasons).fetchone()[0]


def upcoming(db: sqlite3.Connection, limit: int) -> list[Job]:
    """Pending jobs, soonest due first."""
    return rows.jobs(db, f"SELECT {JOB_COLUMNS} FROM jobs WHERE state = 'pending' "
                         "ORDER BY not_before, rowid LIMIT ?", (limit,))


def jobs_folded(db: sqlite3.Connection, state: State | str | None = None,
                limit: int | None = None, reason: Reason | str | None = None,
                lane: str | None = None) -> list[tuple[Job, int]]:
    """As jobs(), but of a series' done runs only the newest, each with how many
    older done runs of its series it stands for."""
    where, params = "", []
    if state is not None:
        where += f" AND jobs.state = '{State(state).value}'"  # a literal: State() vetted it
    if reason is not None:
        where += " AND jobs.reason = ?"
        params.append(Reason(reason).value)
    if lane is not None:
        where += " AND jobs.lane = ?"
        params.append(lane)
    sql = schedules.FOLDED_JOBS.format(
        columns=", ".join(f"jobs.{name}" for name in JOB_COLUMNS.split(", ")), where=where)
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    found = rows.named_rows(db, sql, params)
    return [(rows.job(row), row["earlier"]) for row in found]


def jobs_named(db: sqlite3.Connection, name: str, states: "Collection[State]") -> list[Job]:
    """The jobs called `name` exactly, in these states, newest first (names have
    no index: one walk of the table)."""
    marks = ", ".join("?" for _ in states)
    return rows.jobs(db, f"SELECT {JOB_COLUMNS} FROM jobs WHERE name = ? "
                         f"AND state IN ({marks}) ORDER BY rowid DESC",
                     (name, *(State(state).value for state in states)))


def names(db: sqlite3.Connection) -> list[str]:
    """Every job name the queue holds (for the nearest name to a typo)."""
    return [row[0] for row in db.execute("SELECT DISTINCT name FROM jobs")]


def step(db: sqlite3.Connection, job_id: str, name: str,
         occurrence: int | None = None) -> "dict[str, Any]":
    """One recorded step with its output: that occurrence, else its last. UnknownStep,
    naming the job's steps, when it has no such step."""
    from sloth_tray.store import steps  # here: `list` reads no step (a named tuple's class)

    found = steps.recorded(db, job_id, name, occurrence)
    if found is None:
        known = steps.names(db, job_id)
        which = f'step "{name}"' + (f" (occurrence {occurrence})" if occurrence else "")
        listed = ", ".join(f'"{known_name}"' for known_name in known)
        raise steps.UnknownStep(f"job {job_id} has no {which}"
                          + (f" (its steps: {listed})" if listed else " (it has no steps)"))
    return found.as_dict()


def history(db: sqlite3.Connection, job_id: str) -> list[Event]:
    """The job's events, oldest first."""
    row = db.execute("SELECT history FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        raise UnknownJob(job_id)
    return [Event(at, kind, detail) for at, kind, detail in json.loads(row[0])]


def waits_on(db: sqlite3.Connection, now: float, unmet: frozenset[str]) -> bool:
    """Whether some job due at `now` waits on a condition in `unmet`. Read among the
    jobs that require one (their own index): the loop asks before each sleep."""
    if not unmet:
        return False
    waits, params = reads.not_waiting(unmet)
    return db.execute(
        f"SELECT 1 FROM jobs INDEXED BY jobs_due_requiring WHERE {schema.REQUIRING} "
        f"AND not_before <= :now AND NOT (1{waits}) LIMIT 1", {"now": now, **params}
    ).fetchone() is not None


def next_due(db: sqlite3.Connection, unmet: frozenset[str] = frozenset(),
             renewed: "Collection[str]" = ()) -> float | None:
    """The earliest wall time at which a claim could return a job; None if never.
    Jobs waiting on a condition in `unmet` do not count: the change of that
    condition, not the clock, is what lets them start. Nor do jobs of a lane that
    is running one or is paused: that job's end, or the resume, lets them start.
    `renewed`: the ids of jobs whose leases the caller is renewing right now (its
    live runs): their lease ends are no time to wake. Any other lease, the
    caller's own included (a run that died with its worker), counts."""
    waits, waits_params = reads.not_waiting(unmet)
    ids = sorted(renewed)
    # Lane by lane, the lanes that could start a job (none of theirs running, not
    # paused), each on the live jobs' index: the jobs waiting behind a running one are
    # never read, where a look along every waiting job read them all, and in a burst
    # that is nearly every job (5 ms with ten thousand waiting, at each look).
    return db.execute(
        "SELECT min(t) FROM ("
        " SELECT (SELECT min(not_before) FROM jobs INDEXED BY jobs_live_lane"
        f" WHERE {lanes.LIVE} AND lane = free.lane AND state = 'pending'{waits}"
        f" AND not_before < {NEVER!r}"  # an ask with no timeout: its answer
        f" AND {reads.NOT_HELD}) AS t"
        f" FROM ({lanes.LIVE_LANES}) AS free WHERE NOT EXISTS (SELECT 1 FROM jobs AS busy"
        f" INDEXED BY jobs_live_lane WHERE {lanes.LIVE} AND state = 'running'"
        " AND busy.lane = free.lane)"
        f" AND {lanes.NOT_PAUSED}"
        " UNION ALL SELECT min(lease_until) FROM jobs WHERE state = 'running'"
        f" AND id NOT IN ({', '.join(':renewed' + str(i) for i in range(len(ids)))})"
        f" AND {lanes.NOT_PAUSED})",  # as claim: a paused lane's lease is not taken back
        {**waits_params, **{f"renewed{i}": job for i, job in enumerate(ids)}},
    ).fetchone()[0]


def prunable_scripts(db: sqlite3.Connection, before: float) -> list[str]:
    """The scripts of the jobs Queue.prune(before) would delete now."""
    return [row[0] for row in db.execute(
        "SELECT script FROM jobs WHERE state IN ('done', 'cancelled') "
        "AND updated_at < ? AND script IS NOT NULL", (before,))]


def folders_in_use(db: sqlite3.Connection, folders: list[str], spool: str) -> set[str]:
    """Which of these spool folders (`spool`/<12-hex id>) still hold some job's
    script: a recurring job's later runs share the first run's folder.
    One pass over the table, however many folders are asked about."""
    if not folders:
        return set()
    length = len(spool) + 1 + 12
    return {row[0] for row in db.execute(
        "SELECT DISTINCT substr(script, 1, :n) FROM jobs "
        "WHERE substr(script, 1, :n) IN (SELECT value FROM json_each(:folders))",
        {"n": length, "folders": json.dumps(folders)},
    )}
