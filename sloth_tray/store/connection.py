"""One SQLite connection shared by a Queue's threads: its lock, its transactions (a
batch, a savepoint, a read, one write) and how durable a commit is.

Every Queue method goes through one of these, so that a transition and its event
commit together, a batch's writes share one fsync, and a failed commit never leaves
the connection holding the write lock.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Self

from sloth_tray.store import schema
from sloth_tray.store.schema import connect, translated_errors


class SharedConnection:
    """The file's connection, safe to share between threads (each use holds the lock)."""

    def __init__(self, path: str | os.PathLike[str], *, synchronous: str,
                 busy_timeout: float) -> None:
        self.path = Path(path)
        self.busy_timeout = float(busy_timeout)
        self._lock = threading.RLock()  # re-entered by the writes inside a batch()
        self._in_transaction = False  # ours, open (under the lock): a batch's writes join it
        self._synchronous = synchronous
        # Made, identified, in WAL and migrated (schema.connect); autocommit: we say
        # BEGIN and COMMIT ourselves. Shared between threads, guarded by self._lock.
        self._db = connect(self.path, self.busy_timeout, synchronous=synchronous,
                           check_same_thread=False)
        # SQLite's errors as one sentence naming the file, around each use (no state)
        self._errors = translated_errors(self.path, self.busy_timeout)
        self._one_statement = _Autocommit(self._lock, self._db, self._errors)

    def close(self) -> None:
        with self._lock:
            schema.close(self._db, self.path)  # its checkpoint keeps a sound file sound

    def release_memory(self) -> None:
        """Hand back the pages this connection keeps cached (SQLite's shrink_memory). An
        app that goes idle calls it: the next job's few reads find those pages again in
        the system's file cache, and a long history read once is not held all night."""
        with self._lock, self._errors:
            self._db.execute("PRAGMA shrink_memory")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transactions ------------------------------------------------------

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """The writes made inside, on this thread, as one transaction: one commit,
        one fsync where each would have had its own. All or none of them land.

        The daemon's loop records an attempt's outcome and claims the next job in
        one (outcome.record + claim): two commits per job where there were four.
        """
        with self._transaction():
            yield

    @contextlib.contextmanager
    def savepoint(self) -> Iterator[None]:
        """Inside a batch: what is written in here is undone alone if it raises,
        and the batch's other writes still commit."""
        with self._lock, self._errors:
            self._db.execute("SAVEPOINT part")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK TO part")
                self._db.execute("RELEASE part")
                raise
            self._db.execute("RELEASE part")

    def still_in_transaction(self) -> bool:
        """Inside a batch, after a savepoint failed: whether the batch's transaction is
        still open. SQLite ends it itself on some failures (a full disk); the batch's
        later writes would then each commit alone, so it must end there."""
        with self._lock:
            return self._db.in_transaction

    @contextlib.contextmanager
    def read(self) -> Iterator[None]:
        """The reads made inside, on this thread, as one read transaction (a deferred
        BEGIN ... COMMIT): each sees the file as of the same commit, whatever other
        connections commit meanwhile, and no writer elsewhere waits for it (WAL).

        This Queue's other threads wait until it ends: reads only, and short. A write
        inside would make it a write transaction, which a commit elsewhere since its
        first read refuses. Inside a batch, the batch is the transaction."""
        with self._lock, self._errors:
            if self._db.in_transaction:
                yield
                return
            self._db.execute("BEGIN")
            try:
                yield
                self._db.execute("COMMIT")
            except BaseException:
                self._roll_back()
                raise

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT: take the write lock before reading. Inside one
        already open on this connection (a batch), that one is the transaction."""
        with self._lock, self._errors:
            if self._in_transaction:
                yield self._db
                return
            self._db.execute("BEGIN IMMEDIATE")
            self._in_transaction = True
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                self._roll_back()
                raise
            finally:
                self._in_transaction = False

    def _roll_back(self) -> None:
        """After a failure inside a transaction, or of its COMMIT (a full disk): never
        leave the connection inside one, holding the write lock with nothing to end it.
        SQLite may have rolled it back itself already."""
        if self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):  # the first failure is the one to say
                self._db.execute("ROLLBACK")

    def _autocommit(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """The connection with no transaction of ours: for reads, or one write
        statement, which is its own transaction (a lone UPDATE needs no BEGIN/COMMIT
        round trips). Inside a batch, its statements join the batch's."""
        return self._one_statement

    @contextlib.contextmanager
    def _without_own_fsync(self) -> Iterator[None]:
        """A write committed without waiting for the disk (synchronous=NORMAL, in WAL
        mode): a crash of this process loses nothing (the system holds the WAL), and
        the next full commit makes it durable with its own fsync, the WAL being
        written in order. Only a power cut before that can lose it: fit for notes
        like `started`, whose token the claim already made durable. Back to back, a
        job then waits for the disk twice (push; outcome + next claim), not three."""
        if self._synchronous.upper() != "FULL" or self._db.in_transaction:
            yield  # the level cannot change inside a transaction: it commits as it is
            return
        with self._lock, self._errors:
            self._db.execute("PRAGMA synchronous = NORMAL")
            try:
                yield
            finally:
                self._db.execute(f"PRAGMA synchronous = {self._synchronous}")


class _Autocommit:
    """SharedConnection._autocommit: its lock held, SQLite's errors translated. A class
    made once, not a generator made at each use: the queue enters it around most of
    the statements it runs, several times a job. It keeps nothing of one use (the
    lock is re-entrant), so one serves every thread."""

    __slots__ = ("_lock", "_db", "_errors")

    def __init__(self, lock: threading.RLock, db: sqlite3.Connection,
                 errors: translated_errors) -> None:
        self._lock, self._db, self._errors = lock, db, errors

    def __enter__(self) -> sqlite3.Connection:
        self._lock.acquire()
        return self._db

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: object) -> bool:
        try:
            return self._errors.__exit__(kind, exc, traceback)
        finally:
            self._lock.release()
