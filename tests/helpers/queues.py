"""A queue driven by hand: a due job run at once, a queue file an older version left."""

from __future__ import annotations

import contextlib
import os
import sqlite3

from sloth_tray.store.queue import Queue
from sloth_tray.store.schema import APPLICATION_ID, migrations


def run_once(queue: Queue) -> str | None:
    """Claim the job due now and complete it: its id, or None when nothing was due."""
    job = queue.claim("w")
    if job is None:
        return None
    assert queue.complete(job.id, "w", "ok")
    return job.id


def queue_file_of_schema(path, version: int, rows: tuple[tuple, ...] = ()) -> None:
    """The queue file an older sloth-tray (schema `version`) left, 0600, holding `rows`:
    (id, name, state, not_before, script, options JSON[, history JSON]) each, for the
    migration tests."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as raw:
        for statements in migrations()[:version]:
            for statement in statements:
                raw.execute(statement)
        raw.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        raw.execute(f"PRAGMA user_version = {version}")
        for row in rows:
            raw.execute("INSERT INTO jobs(id, name, state, max_attempts, not_before, script, "
                        "options, history, created_at, updated_at) "
                        "VALUES (?, ?, ?, 1, ?, ?, ?, ?, 0, 0)", (*row, "[]")[:7])
    os.chmod(path, 0o600)
