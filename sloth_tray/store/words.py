"""A person's word on a job in the queue's file: retry (`retry`), run now (`run_now`),
cancel (`cancel`), stop (`stop`), refuse (`refuse`), and an answer to what it asks
(`answer`). Each moves the job, with the event that says why, in one UPDATE.

Functions of an open connection, called by Queue inside its own transactions (Queue
is the only writer). A step a person's word cut short asks nothing (steps.cut); a
series' run retried or stopped keeps or restarts its series (calendar.restart,
ends.finish).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from sloth_tray.errors import SlothError, UnknownJob
from sloth_tray.jobs import series
from sloth_tray.store import calendar, ends, rows, steps
from sloth_tray.store.calendar import Zone
from sloth_tray.store.reasons import Reason

RETRIABLE = ("done", "failed", "cancelled")


class Refused(SlothError):
    """A refused drop was asked to run: it never may."""


def change(db: sqlite3.Connection, job_id: str, now: float, from_states: tuple[str, ...],
           kind: str, assignments: str, error: str | None = None, *,
           refuse_refused: bool = False, **values: Any) -> bool:
    """The job, if in one of `from_states`, changed by `assignments` with a `kind` event
    (`error`, else what it was); False when it was in none. UnknownJob when there is no
    such job; Refused, with `refuse_refused`, when it is a refused drop."""
    row = db.execute("SELECT state, reason, name, last_error FROM jobs WHERE id = ?",
                     (job_id,)).fetchone()
    if row is None:
        raise UnknownJob(job_id)
    state, reason, name, last_error = row
    if refuse_refused and reason == Reason.REFUSED.value:
        raise Refused(f"{name} ({job_id}) was {last_error}; a refused job never "
                      f"runs (`sloth-tray cancel {job_id}` removes it)")
    if state not in from_states:
        return False
    history, params = rows.history((kind, error or f"was {state}"))
    db.execute(f"UPDATE jobs SET {assignments}, updated_at = :now, {history} "
               "WHERE id = :id",
               {"now": now, "id": job_id, "error": error, **values, **params})
    return True


def answer(db: sqlite3.Connection, job_id: str, choice: str, now: float) -> steps.Step:
    """A person's answer to what the job asks (Queue.answer): due now if pending."""
    row = db.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        raise UnknownJob(job_id)
    step = steps.answer(db, job_id, row[0], choice, now)
    history, params = rows.history(
        ("answered", f"{choice} (to {json.dumps(step.question, ensure_ascii=False)})"))
    db.execute("UPDATE jobs SET not_before = CASE WHEN state = 'pending' THEN :now "
               f"ELSE not_before END, updated_at = :now, {history} WHERE id = :id",
               {"now": now, "id": job_id, **params})
    return step


def retry(db: sqlite3.Connection, job_id: str, now: float, local: Zone, *,
          options: dict[str, Any] | None, max_attempts: int | None,
          step_done: str | None, forget_from: str | None, fresh: bool) -> bool:
    """A done, failed or cancelled job due now with a fresh set of attempts (Queue.retry:
    its options, its steps, its series); False when it is in none of those states."""
    row = db.execute("SELECT options, followed, state FROM jobs WHERE id = ?",
                     (job_id,)).fetchone()
    if row is None:
        raise UnknownJob(job_id)
    own, followed, state = json.loads(row[0]), row[1], row[2]
    if state not in RETRIABLE:
        return False
    said = steps.on_retry(db, job_id, now, step_done, forget_from, fresh)
    new = dict(own if options is None else options)
    if series.repeats(new):
        calendar.restart(new, own, followed, now, local)
    assignments = ("state = 'pending', not_before = :now, attempts = 0, "
                   "last_error = NULL, reason = NULL, options = :options")
    params: dict[str, Any] = {"options": json.dumps(new, sort_keys=True)}
    if max_attempts is not None:
        assignments += ", max_attempts = :max_attempts"
        params["max_attempts"] = int(max_attempts)
    return change(db, job_id, now, RETRIABLE, "retried", assignments,
                  "; ".join([f"was {state}", *said]), refuse_refused=True, **params)


def run_now(db: sqlite3.Connection, job_id: str, now: float) -> bool:
    """A pending job due now (the tray's `Run now`)."""
    return change(db, job_id, now, ("pending",), "hurried", "not_before = :now")


def cancel(db: sqlite3.Connection, job_id: str, now: float) -> bool:
    """Pending, failed or running -> cancelled, its lease taken away (Queue.cancel)."""
    cancelled = change(db, job_id, now, ("pending", "failed", "running"), "cancelled",
                       "state = 'cancelled', lease_owner = NULL, lease_until = NULL")
    if cancelled:  # a person's word ends it: a step it cut short asks nothing
        steps.cut(db, job_id, now)
    return cancelled


def stop(db: sqlite3.Connection, job_id: str, now: float, local: Zone) -> bool:
    """Running -> cancelled, its series followed (Queue.stop); False when not running."""
    row = db.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        raise UnknownJob(job_id)
    if row[0] != "running":
        return False
    return ends.finish(db, job_id, now, "cancelled", ("cancelled", "stopped"),
                       local, follow=True) is not None


def refuse(db: sqlite3.Connection, job_id: str, now: float, error: str,
           reason: Reason) -> bool:
    """A pending or failed job that cannot run as it is -> failed, with that sentence."""
    return change(db, job_id, now, ("pending", "failed"), "failed",
                  "state = 'failed', last_error = :error, reason = :reason",
                  error=error, reason=Reason(reason).value)
