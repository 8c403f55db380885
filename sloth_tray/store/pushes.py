"""A job pushed into the queue's file: what it is given checked, each bad value told in
one sentence before anything is written (`checked_row`), and its row added with its
lane (`add`).

Functions called by Queue: `checked_row` before its transaction opens, `add` inside it
(Queue is the only writer).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from sloth_tray import limits
from sloth_tray.errors import SlothError
from sloth_tray.jobs.header import checked_options
from sloth_tray.store import calendar, lanes, rows
from sloth_tray.store.calendar import Zone
from sloth_tray.store.reasons import Reason
from sloth_tray.timefmt import format_duration


def checked_row(now: float, local: Zone, *, name: str, script: str | None, delay: float,
                max_attempts: int, options: dict[str, Any] | None, job_id: str | None,
                error: str | None, reason: Reason, lane: str, key: str | None,
                source: str | None) -> dict[str, Any]:
    """The new job's columns, for `add` (Queue.push: what each argument means); a value
    no claim could use raises SlothError with its sentence."""
    max_attempts = int(limits.ATTEMPTS.check(max_attempts))
    delay = limits.DELAY.check(delay)
    lanes.refuse_a_bad_name(lane)
    if key is not None and rows.key_problem(key):
        raise SlothError(rows.key_problem(key))
    if job_id is not None and not rows.VALID_ID.fullmatch(job_id):
        raise SlothError(f"{job_id!r} is not a job id (12 lowercase hex characters)")
    options = checked_options(options or {})  # a value no claim could use: refused
    if options.get("every"):
        options.setdefault("scheduled", now + delay)  # the series' clock
    not_before = calendar.first_time(options, now + delay, local)
    if not_before is None:
        not_before = now + delay
    else:
        delay = not_before - now
    events = [[now, "pushed", f"due in {format_duration(delay)}" if delay else ""]]
    if error is not None:
        events.append([now, "failed", error])
    return dict(
        job_id=job_id, name=name, state="pending" if error is None else "failed", lane=lane,
        max_attempts=max_attempts, not_before=not_before, script=script,
        options=json.dumps(options, sort_keys=True, allow_nan=False), created_at=now,
        updated_at=now, history=json.dumps(events), last_error=error,
        reason=None if error is None else Reason(reason).value, key=key, source=source)


def add(db: sqlite3.Connection, row: dict[str, Any]) -> str:
    """The job's row inserted (rows.insert_job: a key's job already there is that job's
    id); its lane known with its first job."""
    if row["lane"] != lanes.MAIN:
        lanes.note(db, row["lane"])
    return rows.insert_job(db, **row)
