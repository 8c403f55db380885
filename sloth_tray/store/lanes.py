"""Lanes in the queue's file: a lane is a folder in the jobs folder, and each lane runs
one job at a time, side by side with the others.

Every statement about lanes lives here, as functions of a connection inside the
Queue's transactions (and the glance's read): which lanes a claim may take from
(`CLAIMABLE`), the pause of one lane, a lane renamed, and each lane's counts.
Standard library only (and errors.py, as plain): `status` reads through this module.
"""

import os
import sqlite3

from sloth_tray.errors import SlothError

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    from typing import Any

MAIN = "main"  # drops straight into the jobs folder; every job before lanes
NAME_MAX = 100  # characters in a lane's name (a folder's name)
NAME_BYTES = 255  # and bytes: what a folder's name can hold on Linux (ext4, tmpfs)

# The partial index's condition: a query uses the index only when it says this very
# clause (SQLite does not reason that state = 'running' implies it). Two words, not the
# three live ones: SQLite tests a list of two with two comparisons, and builds a
# temporary table for a longer one each time a statement judges a row against it,
# which every write of a job's state does to keep the index (LIVE_INDEX).
LIVE = "state NOT IN ('done', 'cancelled')"
# The index as lanes first made it (SCHEMA: a shipped migration, whose text never
# changes), and as LIVE_INDEX makes it again.
_LIVE_AT_FIRST = "state IN ('pending', 'running', 'failed')"

SCHEMA = (
    # Every job is in exactly one lane; jobs from before lanes are in `main`.
    f"ALTER TABLE jobs ADD COLUMN lane TEXT NOT NULL DEFAULT '{MAIN}'",
    # The lanes the app knows of (their folders, seen by the daemon) and each one's own
    # word on the pause (PAUSED, RESUMED or 0). In the file, as the whole queue's pause
    # is: it outlives a restart.
    "CREATE TABLE lanes (name TEXT PRIMARY KEY, paused INTEGER NOT NULL DEFAULT 0) "
    "WITHOUT ROWID",
    # The few live jobs per lane, for the claim's "is this lane busy" and the counts;
    # done and cancelled jobs pile up by the million and stay out of it.
    f"CREATE INDEX jobs_live_lane ON jobs(lane, state) WHERE {_LIVE_AT_FIRST}",
    # Done and cancelled per lane, kept by triggers (the totals are their sums).
    "CREATE TABLE lane_counts (lane TEXT NOT NULL, state TEXT NOT NULL, n INTEGER NOT NULL, "
    "PRIMARY KEY (lane, state)) WITHOUT ROWID",
    "INSERT INTO lane_counts SELECT lane, state, count(*) FROM jobs "
    "WHERE state IN ('done', 'cancelled') GROUP BY lane, state",
    """CREATE TRIGGER lane_count_insert AFTER INSERT ON jobs
        WHEN NEW.state IN ('done', 'cancelled') BEGIN
        INSERT INTO lane_counts VALUES (NEW.lane, NEW.state, 1)
            ON CONFLICT DO UPDATE SET n = n + 1;
    END""",
    """CREATE TRIGGER lane_count_delete AFTER DELETE ON jobs
        WHEN OLD.state IN ('done', 'cancelled') BEGIN
        UPDATE lane_counts SET n = n - 1 WHERE lane = OLD.lane AND state = OLD.state;
    END""",
    """CREATE TRIGGER lane_count_update AFTER UPDATE OF state, lane ON jobs
        WHEN (OLD.state IS NOT NEW.state OR OLD.lane IS NOT NEW.lane)
         AND (OLD.state IN ('done', 'cancelled') OR NEW.state IN ('done', 'cancelled'))
        BEGIN
        UPDATE lane_counts SET n = n - 1 WHERE lane = OLD.lane AND state = OLD.state;
        INSERT INTO lane_counts SELECT NEW.lane, NEW.state, 1
            WHERE NEW.state IN ('done', 'cancelled')
            ON CONFLICT DO UPDATE SET n = n + 1;
    END""",
)

# The live jobs' index on LIVE, the words it has now: the same rows (every state is
# one of the five), at a write's cost of two comparisons.
LIVE_INDEX = (
    "DROP INDEX jobs_live_lane",
    f"CREATE INDEX jobs_live_lane ON jobs(lane, state) WHERE {LIVE}",
)

# The lanes that have a live job, a look each: from one lane to the next along the live
# jobs' index (a recursive skip), however many jobs wait in each. A SELECT of `lane`.
LIVE_LANES = ("WITH RECURSIVE live(lane) AS ("
              f" SELECT min(lane) FROM jobs INDEXED BY jobs_live_lane WHERE {LIVE}"
              " UNION ALL SELECT (SELECT min(lane) FROM jobs INDEXED BY jobs_live_lane"
              f" WHERE {LIVE} AND lane > live.lane) FROM live WHERE lane IS NOT NULL)"
              " SELECT lane FROM live WHERE lane IS NOT NULL")

# The live jobs' index with each one's due time after its state: how many of a lane's
# waiting jobs are due now is counted on the index alone (counts), not on their rows.
DUE_IN_LIVE_INDEX = (
    "DROP INDEX jobs_live_lane",
    f"CREATE INDEX jobs_live_lane ON jobs(lane, state, not_before) WHERE {LIVE}",
)

# A lane's own word on the pause (lanes.paused): paused by itself; or resumed by itself
# while the whole queue is paused (the others, and lanes made later, stay paused); 0:
# as the whole queue.
PAUSED, RESUMED = 1, -1
# The conditions on a job's lane below look its lane up (EXISTS, by the key), not
# `lane NOT IN (SELECT ...)`: SQLite builds a temporary table for such a list each
# time a statement runs, and a claim would pay for two or three of them.
WHOLE_QUEUE_PAUSED = "EXISTS (SELECT 1 FROM flags WHERE name = 'paused' AND value)"
NOT_PAUSED_ON_ITS_OWN = ("NOT EXISTS (SELECT 1 FROM lanes WHERE lanes.name = lane "
                         f"AND paused = {PAUSED})")
# A claim's condition on a job's lane: the lane starts jobs now.
NOT_PAUSED = (f"{NOT_PAUSED_ON_ITS_OWN} AND (NOT {WHOLE_QUEUE_PAUSED} "
              "OR EXISTS (SELECT 1 FROM lanes WHERE lanes.name = lane "
              f"AND paused = {RESUMED}))")
# A claim's condition on a pending job's lane: no job of that lane is running (its
# lease live or lapsed), and it is not paused. In the claim statement itself, so two
# claims, from any processes, never lease two jobs of one lane. (Said of a job read
# `FROM jobs`, the name its lane is found by.)
CLAIMABLE = ("NOT EXISTS (SELECT 1 FROM jobs AS busy INDEXED BY jobs_live_lane "
             f"WHERE {LIVE} AND state = 'running' AND busy.lane = jobs.lane) "
             f"AND {NOT_PAUSED}")


def problem(name: str) -> str | None:
    """Why `name` cannot name a lane, in one sentence; None when it can. A lane's name
    is a folder's: one name, not hidden, printable."""
    if not name:
        return "a lane needs a name"
    if len(name) > NAME_MAX or len(os.fsencode(name)) > NAME_BYTES:
        return f"a lane's name is at most {NAME_MAX} characters and {NAME_BYTES} bytes"
    if name.startswith(".") or "/" in name or "\\" in name:
        return f"{name!r} cannot name a lane: a lane is a folder in the jobs folder, " \
               "its name neither hidden (a leading dot) nor a path"
    if not name.isprintable():
        return "a lane's name cannot hold control characters"
    return None


def refuse_a_bad_name(name: str) -> None:
    """SlothError with the sentence that says why `name` cannot name a lane."""
    why = problem(name)
    if why is not None:
        raise SlothError(why)


def _words(db: sqlite3.Connection) -> dict[str, int]:
    return dict(db.execute("SELECT name, paused FROM lanes WHERE paused"))


def is_paused(name: str, words: dict[str, int], whole_queue_paused: bool) -> bool:
    """Whether lane `name` starts nothing now, by its own word and the whole queue's."""
    word = words.get(name, 0)
    return word == PAUSED or (whole_queue_paused and word != RESUMED)


def paused(db: sqlite3.Connection, name: str, whole_queue_paused: bool) -> bool:
    return is_paused(name, _words(db), whole_queue_paused)


def paused_lanes(db: sqlite3.Connection, whole_queue_paused: bool) -> set[str]:
    """The known lanes that start nothing now."""
    words = _words(db)
    return {name for name in known(db) if is_paused(name, words, whole_queue_paused)}


def order(name: str) -> tuple[bool, str]:
    """The key lanes are shown in, everywhere: main first, then by name."""
    return (name != MAIN, name)


def known(db: sqlite3.Connection) -> list[str]:
    """Every lane the queue knows of: those with a row (a folder seen, a pause) and
    those with a live job (LIVE_LANES), main always; sorted, main first."""
    names = {MAIN} | {row[0] for row in db.execute(
        f"SELECT name FROM lanes UNION SELECT lane FROM ({LIVE_LANES})")}
    return sorted(names, key=order)


def note(db: sqlite3.Connection, name: str) -> None:
    """The lane exists (its folder was seen, or a job was added to it)."""
    db.execute("INSERT INTO lanes(name) VALUES (?) ON CONFLICT DO NOTHING", (name,))


def forget(db: sqlite3.Connection, name: str) -> None:
    """Its folder is gone: the lane is known only while it has jobs. A lane with its
    own word on the pause stays known, so that word holds should the folder come back."""
    db.execute("DELETE FROM lanes WHERE name = ? AND NOT paused", (name,))


def set_paused(db: sqlite3.Connection, name: str, paused: bool,
               whole_queue_paused: bool) -> None:
    """Pause or resume one lane. Resuming one lane of a queue paused as a whole resumes
    that lane alone: the others, and lanes made later, stay paused."""
    word = PAUSED if paused else RESUMED if whole_queue_paused else 0
    db.execute("INSERT INTO lanes(name, paused) VALUES (?, ?) "
               "ON CONFLICT DO UPDATE SET paused = excluded.paused", (name, word))


def set_pause(db: sqlite3.Connection, paused: bool, lane: str | None,
              whole_queue_paused: bool) -> None:
    """The pause of `lane`, else of the whole queue (Queue.set_paused): kept in the
    file, a whole pause holds lanes made later too, and a whole resume resumes every
    lane, those paused one by one as well."""
    if lane is not None:
        set_paused(db, lane, paused, whole_queue_paused)
        return
    db.execute("INSERT INTO flags(name, value) VALUES ('paused', ?) "
               "ON CONFLICT(name) DO UPDATE SET value = excluded.value", (int(bool(paused)),))
    (pause_all if paused else resume_all)(db)


def pause_all(db: sqlite3.Connection) -> None:
    """The whole queue was paused: no lane stays resumed on its own."""
    db.execute(f"UPDATE lanes SET paused = 0 WHERE paused = {RESUMED}")


def resume_all(db: sqlite3.Connection) -> None:
    db.execute("UPDATE lanes SET paused = 0 WHERE paused")


def rename(db: sqlite3.Connection, old: str, new: str) -> int:
    """The lane's folder was renamed: its jobs go with it, and its pause. Should the
    new lane be running a job already, the old lane's running job ends under the old
    name: one lane never holds two running jobs. Returns the jobs moved."""
    moved = db.execute(
        "UPDATE jobs SET lane = :new WHERE lane = :old AND NOT (state = 'running' AND "
        "EXISTS (SELECT 1 FROM jobs INDEXED BY jobs_live_lane "
        f"WHERE {LIVE} AND lane = :new AND state = 'running'))",
        {"old": old, "new": new}).rowcount
    row = db.execute("SELECT paused FROM lanes WHERE name = ?", (old,)).fetchone()
    db.execute("DELETE FROM lanes WHERE name = ?", (old,))
    # Its own pause wins, then its own resume: a word said of either lane holds.
    db.execute("INSERT INTO lanes(name, paused) VALUES (?, ?) ON CONFLICT DO UPDATE SET "
               f"paused = CASE WHEN {PAUSED} IN (paused, excluded.paused) THEN {PAUSED} "
               f"WHEN {RESUMED} IN (paused, excluded.paused) THEN {RESUMED} ELSE 0 END",
               (new, row[0] if row else 0))
    return moved


def counts(db: sqlite3.Connection, now: float, whole_queue_paused: bool,
           not_waiting: tuple[str, dict[str, str]] = ("", {})) -> "dict[str, dict[str, Any]]":
    """Per lane: jobs in each state, how many are due now (`not_waiting`: the clause
    that leaves out pending jobs held back otherwise, reads.not_held_back: an unmet
    condition, a series paused on its own), and whether it is paused.
    A paused lane has nothing due now: nothing of it will start."""
    states = ("pending", "running", "done", "failed", "cancelled")
    words = _words(db)
    # The known lanes only: a lane whose folder went and whose jobs all ended is shown
    # no more (its done jobs still count in the totals).
    found: dict[str, dict[str, Any]] = {
        name: dict.fromkeys(states, 0) | {
            "due_now": 0, "paused": is_paused(name, words, whole_queue_paused)}
        for name in known(db)}
    for name, state, n in db.execute("SELECT lane, state, n FROM lane_counts WHERE n > 0"):
        if name in found:
            found[name][state] = n
    waits, params = not_waiting
    due: dict[str, int] = {}
    # One pass over the live jobs' index: each lane's jobs per state, and how many of
    # its waiting ones are due now, read on the index alone when no job is held back
    # otherwise (the usual case: a held-back job is told by its row).
    for name, state, n, due_now in db.execute(
            f"SELECT lane, state, count(*), count(CASE WHEN state = 'pending' AND "
            f"not_before <= :now THEN 1 END) FROM jobs INDEXED BY jobs_live_lane "
            f"WHERE {LIVE} GROUP BY lane, state", {"now": now}):
        found[name][state] = n  # a lane with a live job is known
        if due_now and not waits:
            due[name] = due_now
    if waits:
        due = dict(db.execute(
            "SELECT lane, count(*) FROM jobs INDEXED BY jobs_live_lane "
            f"WHERE {LIVE} AND state = 'pending' AND not_before <= :now{waits} GROUP BY lane",
            {"now": now, **params}))
    for name, n in db.execute("SELECT lane, count(*) FROM jobs WHERE state = 'running' "
                              "AND lease_until <= :now GROUP BY lane", {"now": now}):
        due[name] = due.get(name, 0) + n  # a lapsed lease is due: the claim takes it back
    for name, n in due.items():
        entry = found[name]  # a lane with a due job is known
        entry["due_now"] = 0 if entry["paused"] else n
    return found  # known() is in order: main first
