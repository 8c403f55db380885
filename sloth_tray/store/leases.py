"""A running job's lease in the queue's file, kept: renewed by its owner (`heartbeat`),
its run's process noted (`started`, or `found_started` by the start after a crash),
and every lease ended at once by the one process that holds the home (`expire_all`).
Each but the start's is one owner-checked UPDATE (`owned_update`): a write from a
worker that lost its lease changes nothing.

Functions of an open connection, called by Queue inside its own transactions (Queue
is the only writer); how a lease ends lives in ends.py.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from sloth_tray.store import rows


def owned_update(db: sqlite3.Connection, job_id: str, owner: str, now: float,
                 assignments: str, event: tuple[str, str] | None, **params: Any) -> bool:
    """One owner-checked UPDATE that also records `event` (if any); whether it held."""
    if event:
        history, event_params = rows.history(event)
        assignments += f", {history}"
    else:
        event_params = {}
    changed = db.execute(
        f"UPDATE jobs SET {assignments} "
        "WHERE id = :id AND state = 'running' AND lease_owner = :owner",
        {"id": job_id, "owner": owner, "now": now, **params, **event_params},
    ).rowcount
    return changed == 1


def heartbeat(db: sqlite3.Connection, job_id: str, owner: str, until: float) -> bool:
    """The lease renewed until `until`; False when `owner` no longer holds it. Not an
    event: it would flood the history."""
    return db.execute(
        "UPDATE jobs SET lease_until = ? "
        "WHERE id = ? AND state = 'running' AND lease_owner = ?",
        (until, job_id, owner),
    ).rowcount == 1


def started(db: sqlite3.Connection, job_id: str, owner: str, child: dict[str, Any],
            now: float) -> bool:
    """The attempt's process kept as the job's `child`: its token alone (no event), or
    with its pid, which is the `started` event (Queue.started)."""
    event = ("started", f"pid {child['pid']}") if "pid" in child else None
    return owned_update(db, job_id, owner, now, "child = :child", event,
                        child=json.dumps(child))


def found_started(db: sqlite3.Connection, token: str, pid: int, now: float) -> bool:
    """The running job whose run under `token` a start found a process of (`pid`),
    its `started` note never written (the app died between the spawn and that note):
    its pid noted, with the `started` event, so its reclaim counts the attempt."""
    history, params = rows.history(("started", f"pid {pid}, found by the next start"))
    return db.execute(
        f"UPDATE jobs SET child = json_set(child, '$.pid', :pid), {history} "
        "WHERE state = 'running' AND json_extract(child, '$.token') = :token "
        "AND json_extract(child, '$.pid') IS NULL",
        {"pid": pid, "token": token, "now": now, **params},
    ).rowcount == 1


def holds_run(db: sqlite3.Connection, job_id: str, owner: str, token: str) -> bool:
    """Whether `owner` holds the running job for the run under `token` (the claim wrote
    it): a claim made in a transaction that was undone, or a later claim's run, is not
    this run's."""
    return db.execute(
        "SELECT 1 FROM jobs WHERE id = ? AND state = 'running' AND lease_owner = ? "
        "AND json_extract(child, '$.token') = ?", (job_id, owner, token),
    ).fetchone() is not None


APP_GONE = "app_gone"  # in a run's `child`: expire_all ended its lease, its app gone


def expire_all(db: sqlite3.Connection, now: float) -> int:
    """Every running lease ended now, so the next claims reclaim those jobs; each run
    marked as one whose app was gone (its reclaim says so, not that its lease ran out)."""
    return db.execute(
        f"UPDATE jobs SET lease_until = ?, child = json_set(coalesce(child, '{{}}'), "
        f"'$.{APP_GONE}', json('true')) WHERE state = 'running' AND lease_until > ?",
        (now, now),
    ).rowcount
