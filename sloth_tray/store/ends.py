"""A run's end in the queue's file: a job moved out of running and why (`finish`), a
lapsed lease taken back (`reclaim`), a run that ends waiting in a step (`wait`), a
failure's backoff (`fail`), a "later"'s (`later`), and a lease given back (`release`).

Functions of an open connection, called by Queue inside its own transactions (Queue
is the only writer). Whoever ends a run ends its steps still running too
(steps.end_run), and a series' run is followed by its next in the same transaction
(calendar.follow_series_run): a crash never ends a series.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from sloth_tray.store import calendar, leases, rows, steps
from sloth_tray.store.calendar import Zone
from sloth_tray.store.reasons import PERMANENT, Reason
from sloth_tray.store.states import State
from sloth_tray.timefmt import format_duration

ERROR_LIMIT = 2000  # characters of an error message kept in the row
LATER_FOR_AT_MOST = 86400.0  # seconds of nothing but "try again later" before giving up
# Events that end a run of "later"s: a run that ended otherwise, or the user's retry.
# A quit (`released`), a crash (`reclaimed`) or a sleep between two "later"s does not:
# a laptop shut down daily must not try for ever.
_ENDS_LATERS = frozenset({"completed", "backoff", "failed", "retried"})


def _trailing_laters(history: list, now: float) -> tuple[int, float]:
    """The unbroken run of "later"s that ends the history: how many, and for how long
    it has lasted at `now`, in real time as far as the file can tell. Each step from
    one event to the next (and to `now`) counts when the clock went forward, never
    when it went back: a clock set back re-anchors the count, as it re-anchors waits
    (calendar.reanchor), so "later"s said on a clock that was ahead are not owed the
    time it was ahead by."""
    start = len(history)
    for index in range(len(history) - 1, -1, -1):
        kind = history[index][1]
        if kind in _ENDS_LATERS:
            break
        if kind == "later":
            start = index
    times = [event[0] for event in history[start:]] + [now]
    count = sum(1 for event in history[start:] if event[1] == "later")
    return count, sum(max(times[i + 1] - times[i], 0.0) for i in range(len(times) - 1))


def _never_started(child: str | None) -> bool:
    """A run whose token was written at the claim, and whose process never was: the
    claim committed with the last job's outcome, and the daemon died before the spawn."""
    if not child:
        return False
    known = json.loads(child)
    return isinstance(known, dict) and "token" in known and "pid" not in known


def holds(db: sqlite3.Connection, job_id: str, owner: str | None) -> bool:
    """Whether `owner` holds the running job (no owner: the caller checked)."""
    if owner is None:
        return True
    return db.execute("SELECT 1 FROM jobs WHERE id = ? AND state = 'running' "
                      "AND lease_owner = ?", (job_id, owner)).fetchone() is not None


def held_with_steps(db: sqlite3.Connection, job_id: str, owner: str | None) -> bool | None:
    """Whether the job has any steps, when `owner` holds it running (no owner: the
    caller checked); None when it does not. One read where a run's end would make
    three: most jobs have no steps, and their end then cuts and looks at none."""
    steps_of = "EXISTS (SELECT 1 FROM steps WHERE job = :id)"
    if owner is None:
        return bool(db.execute(f"SELECT {steps_of}", {"id": job_id}).fetchone()[0])
    row = db.execute(f"SELECT {steps_of} FROM jobs WHERE id = :id AND state = 'running' "
                     "AND lease_owner = :owner", {"id": job_id, "owner": owner}).fetchone()
    return None if row is None else bool(row[0])


def finish(db: sqlite3.Connection, job_id: str, now: float, state: str,
           event: tuple[str, str], local: Zone, *, owner: str | None = None,
           follow: bool = False, **columns: Any) -> State | None:
    """Move a job out of running and record why: only if `owner` holds it, when
    given (else the caller checked). The state it was left in; None when it was not
    moved.

    Its steps still running were cut short. If one of them (or one earlier, still
    waiting for an answer) asks before it runs again, the run ends failed for that
    (STEP_UNSURE), whatever `state` it would have ended in, unless a person ended it
    (cancelled): a person says whether the step happened.

    A run of a series that ends (done, or failed for good, or stopped: `follow`)
    is followed by its next run in this same transaction: a crash can never end a
    series.
    """
    cut = False  # its steps still running, cut short already (or it has none)
    if state != State.CANCELLED and columns.get("reason") != Reason.STEP_UNSURE:
        has_steps = held_with_steps(db, job_id, owner)
        if has_steps is None:  # not `owner`'s: nothing is moved
            return None
        unsure, cut = steps.end_run(db, job_id, now) if has_steps else None, True
        if unsure is not None:  # an attempt that did not count still does not
            state, event = State.FAILED, ("failed", unsure)
            columns = {"last_error": unsure, "reason": Reason.STEP_UNSURE.value,
                       **{k: v for k, v in columns.items() if k == "attempts"}}
    history, params = rows.history(event)
    sets = "".join(f", {name} = :{name}" for name in columns)
    held = " AND state = 'running' AND lease_owner = :owner" if owner is not None else ""
    found = rows.named_rows(
        db, "UPDATE jobs SET state = :state, lease_owner = NULL, lease_until = NULL, "
        f"updated_at = :now{sets}, {history} WHERE id = :id{held} "
        f"RETURNING {calendar.FOLLOWED_FROM}",
        {"state": state, "now": now, "id": job_id, "owner": owner, **columns, **params})
    if not found:
        return None
    if not cut:  # a cancel, or an end for a step that asks: cut here, nothing asked
        steps.cut(db, job_id, now)
    if follow or state in (State.DONE, State.FAILED):
        calendar.follow_series_run(db, job_id, now, local, found[0])
    return State(state)


def fail_unsure(db: sqlite3.Connection, job_id: str, now: float, error: str, local: Zone,
                **columns: Any) -> State | None:
    """The run ended in a step that asks: failed for good, for a person's word."""
    return finish(db, job_id, now, State.FAILED, ("failed", error), local,
                  last_error=error, reason=Reason.STEP_UNSURE.value, **columns)


def reclaim(db: sqlite3.Connection, job_id: str, now: float, local: Zone) -> str | None:
    """Take back an expired lease: the `reclaimed` event's detail, or None when the
    job is not to be handed out as it is: its run never started (then it is given
    back, its attempt not counted), or that was its last attempt (then it is
    failed for good)."""
    attempts, max_attempts, owner, lease_until, history, child = db.execute(
        "SELECT attempts, max_attempts, lease_owner, lease_until, history, child "
        "FROM jobs WHERE id = ?",
        (job_id,),
    ).fetchone()
    waited = steps.run_wait(db, job_id, json.loads(child or "{}").get("token"))
    if waited is not None:  # its run recorded a wait, then its app went: it waits
        wait_or_unanswered(db, job_id, now, waited, local)
        return None
    app_gone = json.loads(child or "{}").get(leases.APP_GONE, False)
    if _never_started(child):
        given_back, params = rows.history(("released", (
            f"its run never started: its app {owner} was gone before its script was "
            "started" if app_gone else f"its run never started: the lease of {owner} ran "
            "out before its script was started")))
        db.execute("UPDATE jobs SET state = 'pending', not_before = :now, "
                   "attempts = max(attempts - 1, 0), lease_owner = NULL, "
                   f"lease_until = NULL, updated_at = :now, {given_back} WHERE id = :id",
                   {"now": now, "id": job_id, **params})
        unsure = steps.end_run(db, job_id, now)
        if unsure is not None:
            fail_unsure(db, job_id, now, unsure, local)
        return None
    if attempts < max_attempts:
        unsure = steps.end_run(db, job_id, now)
        if unsure is not None:  # a step that asks was cut short: failed, for a word
            fail_unsure(db, job_id, now, unsure, local)
            return None
        if app_gone:  # ended by the start that found its app gone, not run out
            return f"its app {owner} was gone at this start"
        return f"lease of {owner} expired {format_duration(now - lease_until)} ago"
    expiries = 1 + sum(1 for _, kind, _ in json.loads(history) if kind == "reclaimed")
    last = f"the last time its app {owner} was gone" if app_gone else f"last holder {owner}"
    error = (
        f"its lease expired {expiries} time{'s' if expiries > 1 else ''} without it "
        f"finishing ({last}); gave up after {attempts} attempts"
    )
    finish(db, job_id, now, "failed", ("failed", error), local, last_error=error,
           reason=Reason.LEASE_EXPIRED.value)
    return None


def wait(db: sqlite3.Connection, job_id: str, owner: str, token: str | None, now: float,
         local: Zone) -> State | None:
    """The run under `token` ended in a step that waits (Queue.wait); None when `owner`
    does not hold the job, or its run recorded no wait."""
    if not holds(db, job_id, owner):
        return None
    waited = steps.run_wait(db, job_id, token)
    if waited is None:
        return None
    return wait_or_unanswered(db, job_id, now, waited, local, owner=owner)


def wait_or_unanswered(db: sqlite3.Connection, job_id: str, now: float, waited: steps.Step,
                       local: Zone, owner: str | None = None) -> State | None:
    """The job waits, pending, due at the step's wake time, its attempt uncounted; or,
    when its ask went unanswered, fails (UNANSWERED)."""
    attempts = db.execute("SELECT attempts FROM jobs WHERE id = ?",
                          (job_id,)).fetchone()[0]
    if waited.state == "unanswered":
        error = steps.unanswered_sentence(job_id, waited)
        return finish(db, job_id, now, State.FAILED, ("failed", error), local,
                      owner=owner, last_error=error, reason=Reason.UNANSWERED.value,
                      attempts=max(attempts - 1, 0))
    return finish(db, job_id, now, State.PENDING, ("waiting", steps.wait_words(waited)),
                  local, owner=owner, not_before=steps.due_at(waited, now),
                  attempts=max(attempts - 1, 0))


def later(db: sqlite3.Connection, job_id: str, owner: str, detail: str, now: float,
          local: Zone, backoff_cap: float) -> State | None:
    """The run asked to run again later (Queue.later); None when `owner` does not hold
    the lease."""
    detail = detail[:ERROR_LIMIT]
    row = db.execute(
        "SELECT history, attempts FROM jobs WHERE id = ? AND state = 'running' "
        "AND lease_owner = ?", (job_id, owner)).fetchone()
    if row is None:
        return None
    history, attempts = row
    earlier, lasted = _trailing_laters(json.loads(history), now)
    if lasted >= LATER_FOR_AT_MOST:
        error = (f"it asked to run later for {format_duration(lasted)} "
                 f"({earlier + 1} times); gave up. Last: {detail}")[:ERROR_LIMIT]
        finish(db, job_id, now, "failed", ("failed", error), local, last_error=error,
               reason=Reason.LATER_TOO_LONG.value)
        return State.FAILED
    delay = min(2.0 ** min(earlier + 1, 64), backoff_cap)  # 2.0**1024 overflows
    return finish(db, job_id, now, "pending",  # failed, in a step that asks
                  ("later", f"{detail}; asked to run later: next try in "
                            f"{format_duration(delay)}"), local,
                  last_error=detail, not_before=now + delay,
                  attempts=max(attempts - 1, 0))  # this attempt does not count


def fail(db: sqlite3.Connection, job_id: str, owner: str, error: str, reason: Reason,
         now: float, local: Zone, backoff_cap: float) -> State | None:
    """A failed attempt (Queue.fail): backed off, or failed for good at its last attempt
    or for a PERMANENT reason; None when `owner` does not hold the lease."""
    error = error[:ERROR_LIMIT]
    row = db.execute(
        "SELECT attempts, max_attempts FROM jobs "
        "WHERE id = ? AND state = 'running' AND lease_owner = ?",
        (job_id, owner),
    ).fetchone()
    if row is None:
        return None
    attempts, max_attempts = row
    reason = Reason(reason)
    if attempts >= max_attempts or reason in PERMANENT:
        finish(db, job_id, now, "failed", ("failed", error), local, last_error=error,
               reason=reason.value)
        return State.FAILED
    delay = min(2.0**attempts, backoff_cap)
    return finish(db, job_id, now, "pending",  # failed, in a step that asks
                  ("backoff", f"attempt {attempts} of {max_attempts} failed: "
                              f"{error}; next try in {format_duration(delay)}"), local,
                  last_error=error, reason=reason.value, not_before=now + delay)


def release(db: sqlite3.Connection, job_id: str, owner: str, why: str | None, now: float,
            local: Zone) -> State | None:
    """The lease given back, the attempt not counted (Queue.release): pending, or failed
    when the run was cut short in a step that asks; None when `owner` did not hold it."""
    if not holds(db, job_id, owner):
        return None
    unsure = steps.end_run(db, job_id, now)
    if unsure is not None:  # the attempt does not count, as for any release
        attempts = db.execute("SELECT attempts FROM jobs WHERE id = ?",
                              (job_id,)).fetchone()[0]
        return fail_unsure(db, job_id, now, unsure, local, attempts=max(attempts - 1, 0))
    released = leases.owned_update(
        db, job_id, owner, now, "state = 'pending', not_before = :now, "
        "attempts = max(attempts - 1, 0), lease_owner = NULL, lease_until = NULL, "
        "updated_at = :now", ("released", why or f"by {owner}"))
    return State.PENDING if released else None
