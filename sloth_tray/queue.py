"""The lease queue: one SQLite file, and the only module that writes SQL.

A running job is a lease, not a flag. `claim` hands a job out until
`lease_until`; the owner keeps it alive with `heartbeat`; `complete` and
`fail` only count when they come from the current owner (the owner is in the
WHERE clause). A worker that dies or sleeps simply stops renewing, and the
next `claim` after `lease_until` takes the job back. Nothing needs a reaper.

Each public method is one statement or one short transaction. Wall time comes
from the injected `clock`, so tests move time instead of sleeping.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from sloth_tray.errors import DatabaseProblem, SlothError, UnknownJob

Clock = Callable[[], float]

# Marks the file as ours (PRAGMA application_id): "SLTH".
APPLICATION_ID = 0x534C5448
ERROR_LIMIT = 2000  # characters of an error message kept in the row


class State(StrEnum):
    PENDING = "pending"  # waiting for not_before; claimable once it has passed
    RUNNING = "running"  # leased to lease_owner until lease_until
    DONE = "done"  # finished; result kept
    FAILED = "failed"  # gave up after max_attempts; last_error says why; retry() revives
    CANCELLED = "cancelled"  # the user said no; retry() revives


@dataclass(frozen=True)
class Job:
    id: str
    name: str
    state: State
    attempts: int
    max_attempts: int
    not_before: float
    lease_owner: str | None
    lease_until: float | None
    last_error: str | None
    result: str | None
    script: str | None
    options: dict[str, Any] = field(hash=False)
    created_at: float
    updated_at: float
    # The running attempt's process (pid, pgid, start time, run token), so a
    # later start-up can stop an orphan without ever killing a reused pid.
    child: dict[str, Any] | None = field(default=None, hash=False)

    @property
    def lease_seconds(self) -> float | None:
        """The job's own lease (its `lease=` option), if it has one."""
        lease = self.options.get("lease")
        return float(lease) if lease else None

    def as_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["state"] = self.state.value
        return data


@dataclass(frozen=True)
class Event:
    at: float
    kind: str
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"at": self.at, "kind": self.kind, "detail": self.detail}


# Each entry moves the schema one version forward; user_version = entries applied.
# Statements are kept apart (not one script) so a migration runs inside our own
# BEGIN IMMEDIATE: executescript() would commit behind our back.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE jobs (
            id           TEXT PRIMARY KEY,
            name         TEXT NOT NULL,
            state        TEXT NOT NULL,
            attempts     INTEGER NOT NULL DEFAULT 0,
            max_attempts INTEGER NOT NULL,
            not_before   REAL NOT NULL,
            lease_owner  TEXT,
            lease_until  REAL,
            last_error   TEXT,
            result       TEXT,
            script       TEXT,
            options      TEXT NOT NULL DEFAULT '{}',
            child        TEXT,
            created_at   REAL NOT NULL,
            updated_at   REAL NOT NULL
        )""",
        # One B-tree keyed by job: a job's history is one range, and each
        # event costs a single insert (no separate index to keep).
        """CREATE TABLE events (
            job_id TEXT NOT NULL,
            seq    INTEGER NOT NULL,
            at     REAL NOT NULL,
            kind   TEXT NOT NULL,
            detail TEXT NOT NULL DEFAULT '',
            PRIMARY KEY (job_id, seq)
        ) WITHOUT ROWID""",
        # Partial indexes hold only the few rows that are waiting, leased or
        # failed, however many finished ones pile up; each costs a write only
        # when a job enters or leaves that state. (No index on state itself:
        # the planner would prefer it to these, and every write would pay.)
        "CREATE INDEX jobs_due ON jobs(not_before) WHERE state = 'pending'",
        "CREATE INDEX jobs_leased ON jobs(lease_until) WHERE state = 'running'",
        "CREATE INDEX jobs_failed ON jobs(updated_at) WHERE state = 'failed'",
        # status() reads counts kept by triggers instead of counting a
        # million done rows on every call.
        "CREATE TABLE counts (state TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID",
        """INSERT INTO counts(state, n) VALUES
            ('pending', 0), ('running', 0), ('done', 0), ('failed', 0), ('cancelled', 0)""",
        """CREATE TRIGGER count_insert AFTER INSERT ON jobs BEGIN
            UPDATE counts SET n = n + 1 WHERE state = NEW.state;
        END""",
        """CREATE TRIGGER count_delete AFTER DELETE ON jobs BEGIN
            UPDATE counts SET n = n - 1 WHERE state = OLD.state;
        END""",
        """CREATE TRIGGER count_update AFTER UPDATE OF state ON jobs
            WHEN OLD.state IS NOT NEW.state BEGIN
            UPDATE counts SET n = n - 1 WHERE state = OLD.state;
            UPDATE counts SET n = n + 1 WHERE state = NEW.state;
        END""",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)

JOB_COLUMNS = (
    "id, name, state, attempts, max_attempts, not_before, lease_owner, lease_until, "
    "last_error, result, script, options, created_at, updated_at, child"
)


def _job(row: tuple) -> Job:
    (id_, name, state, attempts, max_attempts, not_before, lease_owner, lease_until,
     last_error, result, script, options, created_at, updated_at, child) = row
    return Job(
        id=id_, name=name, state=State(state), attempts=attempts, max_attempts=max_attempts,
        not_before=not_before, lease_owner=lease_owner, lease_until=lease_until,
        last_error=last_error, result=result, script=script, options=json.loads(options),
        created_at=created_at, updated_at=updated_at,
        child=json.loads(child) if child else None,
    )


def _seconds(value: float) -> str:
    """2 -> '2s', 90 -> '1m30s', 3600 -> '1h'. For event details."""
    value = int(round(value))
    hours, rest = divmod(value, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (seconds, "s")) if n]
    return "".join(parts) or "0s"


VALID_ID = re.compile(r"[0-9a-f]{12}")


def new_job_id() -> str:
    return secrets.token_hex(6)


SQLITE_MAGIC = b"SQLite format 3\x00"


def _prepare_file(path: Path) -> None:
    """Create the database file 0600 (SQLite would use the umask), or vet an existing one."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        _vet_existing(path)
        return
    except FileNotFoundError:
        raise DatabaseProblem(
            f"cannot create the queue at {path}: its folder does not exist"
        ) from None
    except PermissionError:
        raise DatabaseProblem(f"cannot create the queue at {path}: permission denied") from None
    os.close(fd)


def _vet_existing(path: Path) -> None:
    """SQLite takes a file too short to hold its header for an empty database and
    writes over it; a damaged or truncated queue must be refused instead."""
    try:
        with open(path, "rb") as existing:
            head = existing.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise DatabaseProblem(f"cannot read the queue {path}: {exc.strerror}") from None
    if head and head != SQLITE_MAGIC:
        raise DatabaseProblem(
            f"{path} is damaged or is not a sloth-tray queue (it does not start like an "
            "SQLite file); it was left as it is"
        )


class Queue:
    """A SQLite lease queue. Safe to share between threads; one file, many processes."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock = time.time,
        lease_seconds: float = 60.0,
        max_attempts: int = 5,
        backoff_cap: float = 3600.0,
        synchronous: str = "FULL",
        busy_timeout: float = 5.0,
    ) -> None:
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.path = Path(path)
        self.clock = clock
        self.lease_seconds = float(lease_seconds)
        self.max_attempts = int(max_attempts)
        self.backoff_cap = float(backoff_cap)
        self.busy_timeout = float(busy_timeout)
        self._lock = threading.Lock()
        _prepare_file(self.path)
        try:
            self._db = sqlite3.connect(
                self.path,
                isolation_level=None,  # we say BEGIN and COMMIT ourselves
                check_same_thread=False,  # guarded by self._lock
                timeout=self.busy_timeout,
            )
        except sqlite3.Error as exc:
            raise DatabaseProblem(f"cannot open the queue at {self.path}: {exc}") from None
        try:
            self._open(synchronous)
        except BaseException:
            self._db.close()
            raise

    # -- opening -----------------------------------------------------------

    def _open(self, synchronous: str) -> None:
        # Read before writing anything: a file that is not ours, or is damaged,
        # must come out of here exactly as it went in.
        with self._translated_errors():
            version, app_id, tables = self._identify()
            if version > SCHEMA_VERSION:
                raise DatabaseProblem(
                    f"{self.path} was written by a newer sloth-tray (schema {version}, "
                    f"this one knows {SCHEMA_VERSION}); upgrade sloth-tray to use it"
                )
            if (version and app_id != APPLICATION_ID) or (not version and tables):
                raise DatabaseProblem(
                    f"{self.path} is an SQLite file of something else, not a sloth-tray "
                    "queue; it was left as it is"
                )
            if self._db.execute("PRAGMA journal_mode = WAL").fetchone()[0].lower() != "wal":
                raise DatabaseProblem(f"cannot switch {self.path} to WAL mode")
            self._db.execute(f"PRAGMA synchronous = {synchronous}")
            if version < SCHEMA_VERSION:
                self._migrate()

    def _identify(self) -> tuple[int, int, int]:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        app_id = self._db.execute("PRAGMA application_id").fetchone()[0]
        tables = self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        return version, app_id, tables

    def _migrate(self) -> None:
        with self._transaction() as db:
            # Another process may have migrated while we waited for the lock.
            version = db.execute("PRAGMA user_version").fetchone()[0]
            for statements in MIGRATIONS[version:]:
                for statement in statements:
                    db.execute(statement)
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ----------------------------------------------------------

    @contextlib.contextmanager
    def _translated_errors(self) -> Iterator[None]:
        """Turn SQLite's exceptions into one sentence that names the file."""
        try:
            yield
        except SlothError:
            raise
        except sqlite3.OperationalError as exc:
            text = str(exc)
            if "locked" in text or "busy" in text:
                raise DatabaseProblem(
                    f"the queue {self.path} is locked by another program "
                    f"(waited {self.busy_timeout:g} s); try again when it lets go"
                ) from None
            raise DatabaseProblem(f"cannot use the queue {self.path}: {text}") from None
        except sqlite3.DatabaseError as exc:
            raise DatabaseProblem(
                f"{self.path} is damaged or is not a sloth-tray queue ({exc}); "
                "it was left as it is"
            ) from None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT: take the write lock before reading."""
        with self._lock, self._translated_errors():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._translated_errors():
            yield self._db

    @staticmethod
    def _event(db: sqlite3.Connection, job_id: str, at: float, kind: str, detail: str = "") -> None:
        db.execute(
            "INSERT INTO events(job_id, seq, at, kind, detail) VALUES (?1, "
            "(SELECT coalesce(max(seq), 0) + 1 FROM events WHERE job_id = ?1), ?2, ?3, ?4)",
            (job_id, at, kind, detail),
        )

    # -- writes --------------------------------------------------------------

    def push(
        self,
        name: str,
        *,
        script: str | None = None,
        delay: float = 0.0,
        max_attempts: int | None = None,
        options: dict[str, Any] | None = None,
        job_id: str | None = None,
    ) -> str:
        """Add a pending job due `delay` seconds from now; returns its 12-hex id.

        `job_id` (from new_job_id()) lets a caller name the job's spool folder
        before the job exists, so a crash in between can be reconciled.
        """
        attempts_allowed = self.max_attempts if max_attempts is None else int(max_attempts)
        if attempts_allowed < 1:
            raise SlothError("max_attempts must be at least 1")
        now = self.clock()
        encoded = json.dumps(options or {}, sort_keys=True)
        chosen = job_id
        if chosen is not None and not VALID_ID.fullmatch(chosen):
            raise SlothError(f"{chosen!r} is not a job id (12 lowercase hex characters)")
        with self._transaction() as db:
            while True:
                job_id = chosen or new_job_id()
                try:
                    db.execute(
                        "INSERT INTO jobs(id, name, state, max_attempts, not_before, script, "
                        "options, created_at, updated_at) "
                        "VALUES (?, ?, 'pending', ?, ?, ?, ?, ?, ?)",
                        (job_id, name, attempts_allowed, now + delay, script, encoded, now, now),
                    )
                except sqlite3.IntegrityError:
                    if chosen:
                        raise SlothError(f"there is already a job with id {chosen}") from None
                    continue  # 1 in 2**48: draw again
                break
            self._event(db, job_id, now, "pushed", f"due in {_seconds(delay)}" if delay else "")
        return job_id

    def claim(self, owner: str) -> Job | None:
        """Lease the oldest due job to `owner`, or return None when nothing is due.

        Due means pending with not_before <= now, or running with an expired
        lease (its worker is gone). An expired lease at max_attempts ends the
        job as failed instead of handing it out again.
        """
        now = self.clock()
        with self._transaction() as db:
            while True:
                # Cheap look-ups on the partial indexes first; the full row
                # comes back from the UPDATE itself.
                pending = db.execute(
                    "SELECT id, not_before FROM jobs WHERE state = 'pending' "
                    "AND not_before <= ? ORDER BY not_before, rowid LIMIT 1",
                    (now,),
                ).fetchone()
                expired = db.execute(
                    "SELECT id, lease_until FROM jobs WHERE state = 'running' "
                    "AND lease_until <= ? ORDER BY lease_until, rowid LIMIT 1",
                    (now,),
                ).fetchone()
                if pending is None and expired is None:
                    return None
                if expired is not None and (pending is None or expired[1] <= pending[1]):
                    if not self._reclaim(db, expired[0], now):
                        continue  # that used its last attempt; look again
                    job_id = expired[0]
                else:
                    job_id = pending[0]
                row = db.execute(
                    "UPDATE jobs SET state = 'running', lease_owner = :owner, "
                    "lease_until = :now + coalesce(json_extract(options, '$.lease'), :lease), "
                    "attempts = attempts + 1, updated_at = :now, child = NULL "
                    f"WHERE id = :id RETURNING {JOB_COLUMNS}",
                    {"owner": owner, "now": now, "lease": self.lease_seconds, "id": job_id},
                ).fetchone()
                job = _job(row)
                self._event(db, job.id, now, "claimed",
                            f"attempt {job.attempts} of {job.max_attempts} by {owner}")
                return job

    def _reclaim(self, db: sqlite3.Connection, job_id: str, now: float) -> bool:
        """Take back an expired lease. False when that used up the last attempt."""
        attempts, max_attempts, owner, lease_until = db.execute(
            "SELECT attempts, max_attempts, lease_owner, lease_until FROM jobs WHERE id = ?",
            (job_id,),
        ).fetchone()
        expiries = 1 + db.execute(
            "SELECT count(*) FROM events WHERE job_id = ? AND kind = 'reclaimed'", (job_id,)
        ).fetchone()[0]
        if attempts >= max_attempts:
            error = (
                f"its lease expired {expiries} time{'s' if expiries > 1 else ''} without it "
                f"finishing (last holder {owner}); gave up after {attempts} attempts"
            )
            db.execute(
                "UPDATE jobs SET state = 'failed', last_error = ?, lease_owner = NULL, "
                "lease_until = NULL, updated_at = ? WHERE id = ?",
                (error, now, job_id),
            )
            self._event(db, job_id, now, "failed", error)
            return False
        self._event(db, job_id, now, "reclaimed",
                    f"lease of {owner} expired {_seconds(now - lease_until)} ago")
        return True

    def heartbeat(self, job_id: str, owner: str, lease: float | None = None) -> bool:
        """Extend the lease; False means `owner` no longer holds it (stop the work).

        `lease` is the job's own lease length, when it has one.
        """
        now = self.clock()
        with self._reading() as db:  # one UPDATE: autocommit is its transaction
            changed = db.execute(
                "UPDATE jobs SET lease_until = ? "
                "WHERE id = ? AND state = 'running' AND lease_owner = ?",
                (now + (lease or self.lease_seconds), job_id, owner),
            ).rowcount
        return changed == 1

    def complete(self, job_id: str, owner: str, result: str = "") -> bool:
        now = self.clock()
        with self._transaction() as db:
            changed = db.execute(
                "UPDATE jobs SET state = 'done', result = ?, lease_owner = NULL, "
                "lease_until = NULL, updated_at = ? "
                "WHERE id = ? AND state = 'running' AND lease_owner = ?",
                (result, now, job_id, owner),
            ).rowcount
            if changed:
                self._event(db, job_id, now, "completed", result)
        return changed == 1

    def fail(self, job_id: str, owner: str, error: str, *, permanent: bool = False) -> str | None:
        """Record a failed attempt: back off and retry, or give up at max_attempts.

        `permanent` gives up at once: trying again cannot help (a script
        nothing knows how to run, a bad header). Returns the new state
        ('pending' or 'failed'), or None when `owner` does not hold the lease
        (then nothing changes).
        """
        now = self.clock()
        error = error[:ERROR_LIMIT]
        with self._transaction() as db:
            row = db.execute(
                "SELECT attempts, max_attempts FROM jobs "
                "WHERE id = ? AND state = 'running' AND lease_owner = ?",
                (job_id, owner),
            ).fetchone()
            if row is None:
                return None
            attempts, max_attempts = row
            if attempts < max_attempts and not permanent:
                delay = min(2.0**attempts, self.backoff_cap)
                db.execute(
                    "UPDATE jobs SET state = 'pending', not_before = ?, last_error = ?, "
                    "lease_owner = NULL, lease_until = NULL, updated_at = ? WHERE id = ?",
                    (now + delay, error, now, job_id),
                )
                self._event(db, job_id, now, "backoff",
                            f"attempt {attempts} of {max_attempts} failed: {error}; "
                            f"next try in {_seconds(delay)}")
                return State.PENDING.value
            db.execute(
                "UPDATE jobs SET state = 'failed', last_error = ?, lease_owner = NULL, "
                "lease_until = NULL, updated_at = ? WHERE id = ?",
                (error, now, job_id),
            )
            self._event(db, job_id, now, "failed", error)
            return State.FAILED.value

    def started(self, job_id: str, owner: str, child: dict[str, Any]) -> bool:
        """Remember the attempt's process; owner-checked like a heartbeat."""
        now = self.clock()
        with self._transaction() as db:
            changed = db.execute(
                "UPDATE jobs SET child = ? WHERE id = ? AND state = 'running' AND lease_owner = ?",
                (json.dumps(child), job_id, owner),
            ).rowcount
            if changed:
                self._event(db, job_id, now, "started", f"pid {child.get('pid')}")
        return changed == 1

    def note(self, job_id: str, kind: str, detail: str) -> None:
        """Add an event to a job's history (e.g. 'slept': the computer was suspended)."""
        with self._transaction() as db:
            if db.execute("SELECT 1 FROM jobs WHERE id = ?", (job_id,)).fetchone() is None:
                raise UnknownJob(job_id)
            self._event(db, job_id, self.clock(), kind, detail)

    def expire_leases(self) -> int:
        """End every running lease now, so the next claims reclaim those jobs.

        Only for the one process that holds the home's instance lock: it
        knows any job still marked running was left by a process that died.
        """
        now = self.clock()
        with self._transaction() as db:
            return db.execute(
                "UPDATE jobs SET lease_until = ? WHERE state = 'running' AND lease_until > ?",
                (now, now),
            ).rowcount

    def retry(self, job_id: str) -> bool:
        """A failed or cancelled job becomes due now, with a fresh set of attempts."""
        return self._change(job_id, ("failed", "cancelled"), "retried",
                            "state = 'pending', not_before = :now, attempts = 0, "
                            "last_error = NULL")

    def release(self, job_id: str, owner: str) -> bool:
        """Clean shutdown: give the lease back; the attempt does not count."""
        now = self.clock()
        with self._transaction() as db:
            changed = db.execute(
                "UPDATE jobs SET state = 'pending', not_before = ?, "
                "attempts = max(attempts - 1, 0), lease_owner = NULL, lease_until = NULL, "
                "updated_at = ? "
                "WHERE id = ? AND state = 'running' AND lease_owner = ?",
                (now, now, job_id, owner),
            ).rowcount
            if changed:
                self._event(db, job_id, now, "released", f"by {owner}")
        return changed == 1

    def cancel(self, job_id: str) -> bool:
        """Pending, failed or running -> cancelled.

        Cancelling a running job takes its lease away: the worker's next
        heartbeat returns False and it stops the work.
        """
        return self._change(job_id, ("pending", "failed", "running"), "cancelled",
                            "state = 'cancelled', lease_owner = NULL, lease_until = NULL")

    def _change(
        self, job_id: str, from_states: tuple[str, ...], kind: str, assignments: str
    ) -> bool:
        now = self.clock()
        with self._transaction() as db:
            row = db.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise UnknownJob(job_id)
            if row[0] not in from_states:
                return False
            db.execute(f"UPDATE jobs SET {assignments}, updated_at = :now WHERE id = :id",
                       {"now": now, "id": job_id})
            self._event(db, job_id, now, kind, f"was {row[0]}")
        return True

    def prune(self, before: float) -> int:
        """Delete done and cancelled jobs that ended before `before`, with their events."""
        with self._transaction() as db:
            finished = (
                "SELECT id FROM jobs WHERE state IN ('done', 'cancelled') AND updated_at < ?"
            )
            db.execute(f"DELETE FROM events WHERE job_id IN ({finished})", (before,))
            return db.execute(
                "DELETE FROM jobs WHERE state IN ('done', 'cancelled') AND updated_at < ?",
                (before,),
            ).rowcount

    # -- reads ---------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        with self._reading() as db:
            row = db.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise UnknownJob(job_id)
        return _job(row)

    def resolve(self, prefix: str) -> str:
        """The full id of the one job whose id starts with `prefix`."""
        prefix = prefix.strip().lower()
        if not prefix or any(c not in "0123456789abcdef" for c in prefix):
            raise UnknownJob(prefix, f"no job with id {prefix!r} (ids are 12 hex characters)")
        with self._reading() as db:
            rows = db.execute(
                "SELECT id FROM jobs WHERE id >= ? AND id < ? ORDER BY id LIMIT 2",
                (prefix, prefix + "g"),
            ).fetchall()
        if not rows:
            raise UnknownJob(prefix)
        if len(rows) > 1:
            raise UnknownJob(prefix, f"{prefix!r} matches more than one job; give more of the id")
        return rows[0][0]

    def shortest_unique_prefix(self, job_id: str, minimum: int = 6) -> str:
        """The shortest prefix (at least `minimum` long) that names only this job."""
        with self._reading() as db:
            for length in range(minimum, len(job_id)):
                prefix = job_id[:length]
                n = db.execute(
                    "SELECT count(*) FROM (SELECT 1 FROM jobs WHERE id >= ? AND id < ? LIMIT 2)",
                    (prefix, prefix + "g"),
                ).fetchone()[0]
                if n == 1:
                    return prefix
        return job_id

    def jobs(self, state: State | str | None = None, limit: int | None = None) -> list[Job]:
        """Jobs, newest first."""
        sql = f"SELECT {JOB_COLUMNS} FROM jobs"
        params: list[Any] = []
        if state is not None:
            # A literal, not a parameter: only then can SQLite use the partial
            # index of that state. (State() has vetted the value.)
            sql += f" WHERE state = '{State(state).value}'"
        sql += " ORDER BY rowid DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        with self._reading() as db:
            return [_job(row) for row in db.execute(sql, params)]

    def upcoming(self, limit: int) -> list[Job]:
        """Pending jobs, soonest due first."""
        with self._reading() as db:
            rows = db.execute(
                f"SELECT {JOB_COLUMNS} FROM jobs WHERE state = 'pending' "
                "ORDER BY not_before, rowid LIMIT ?",
                (limit,),
            ).fetchall()
        return [_job(row) for row in rows]

    def history(self, job_id: str) -> list[Event]:
        """The job's events, oldest first."""
        with self._reading() as db:
            rows = db.execute(
                "SELECT at, kind, detail FROM events WHERE job_id = ? ORDER BY seq", (job_id,)
            ).fetchall()
            known = rows or db.execute("SELECT 1 FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if not known:
            raise UnknownJob(job_id)
        return [Event(*row) for row in rows]

    def status(self) -> dict[str, int]:
        now = self.clock()
        with self._reading() as db:
            counts = dict(db.execute("SELECT state, n FROM counts"))
            due_now = db.execute(
                "SELECT (SELECT count(*) FROM jobs WHERE state = 'pending' AND not_before <= :now)"
                " + (SELECT count(*) FROM jobs WHERE state = 'running' AND lease_until <= :now)",
                {"now": now},
            ).fetchone()[0]
        return {state.value: counts.get(state.value, 0) for state in State} | {"due_now": due_now}

    def next_wakeup(self) -> float | None:
        """The earliest wall time at which claim() could return a job; None if never."""
        with self._reading() as db:
            return db.execute(
                "SELECT min(t) FROM ("
                " SELECT min(not_before) AS t FROM jobs WHERE state = 'pending'"
                " UNION ALL SELECT min(lease_until) FROM jobs WHERE state = 'running')"
            ).fetchone()[0]
