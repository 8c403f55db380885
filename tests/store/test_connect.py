"""schema.connect: the one way the queue file is opened, by Queue and by `status`.
A new file gets the schema; an older one is migrated once, in one BEGIN IMMEDIATE;
the connection `status` reads through cannot write (PRAGMA query_only)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import random
import sqlite3
import stat

import pytest
from helpers.queues import queue_file_of_schema
from test_imports import loaded

from sloth_tray.errors import DatabaseProblem
from sloth_tray.paths import locate
from sloth_tray.store import reads, schema
from sloth_tray.store.schema import APPLICATION_ID, SCHEMA_VERSION, connect, migrations

OLD = 2  # a schema old enough that every later migration has work to do
ROW = ("0123456789ab", "old", "pending", 0, None, "{}")


@pytest.fixture
def said(monkeypatch) -> list[str]:
    """Every statement run on a connection opened from here on, in order."""
    statements: list[str] = []
    real = sqlite3.connect

    def traced(*args, **kwargs):
        db = real(*args, **kwargs)
        db.set_trace_callback(statements.append)
        return db

    monkeypatch.setattr(sqlite3, "connect", traced)
    return statements


def test_the_schema_version_counts_the_migrations():
    """SCHEMA_VERSION is written as a number (a glance reads it without making the
    migrations): a migration added without it would never run on an older file."""
    assert SCHEMA_VERSION == len(migrations())


# The digest of the first SHIPPED migrations' statements, as released: a file they
# made must match one a later sloth-tray makes, so their text never changes, only
# new migrations are added after them.
SHIPPED = 16
SHIPPED_DIGEST = "56282278d3fdb70e78e04533247f78a6af21cc812caef413ce0a609349c0d918"


def test_the_shipped_migrations_are_word_for_word_as_released():
    shipped = migrations()[:SHIPPED]
    assert hashlib.sha256(json.dumps(shipped).encode()).hexdigest() == SHIPPED_DIGEST


def migration_statements(since: int) -> list[str]:
    return [statement for statements in migrations()[since:] for statement in statements]


def test_a_new_file_gets_the_schema_in_wal_private_and_in_autocommit(tmp_path):
    path = tmp_path / "q.db"
    with contextlib.closing(connect(path, 5.0)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert {"jobs", "lane_counts", "flags"} <= {
            name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert db.isolation_level is None and not db.in_transaction  # the caller says BEGIN
        db.execute("INSERT INTO flags VALUES ('paused', 1)")  # a writer's connection writes
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_an_older_schema_is_migrated_once_in_one_begin_immediate(tmp_path, said):
    path = tmp_path / "q.db"
    queue_file_of_schema(path, OLD, rows=(ROW,))
    said.clear()
    connect(path, 5.0).close()
    assert said.count("BEGIN IMMEDIATE") == 1  # (a read transaction identifies the file)
    begin = said.index("BEGIN IMMEDIATE")
    assert said[begin:].count("COMMIT") == 1
    commit = said.index("COMMIT", begin)
    inside = said[begin + 1:commit]
    assert [s for s in inside if s in migration_statements(0)] == migration_statements(OLD)
    assert f"PRAGMA user_version = {SCHEMA_VERSION}" in inside
    assert not [s for s in said[:begin] + said[commit + 1:] if s in migration_statements(0)]

    said.clear()
    with contextlib.closing(connect(path, 5.0)) as db:  # up to date: nothing written again
        assert "BEGIN IMMEDIATE" not in said
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.execute("SELECT name, runs, reason, followed FROM jobs").fetchall() == [
            ("old", 0, None, 0)]


def test_a_migration_another_connection_made_while_this_one_waited_is_not_run_again(
        tmp_path, monkeypatch):
    """Read as old, then beaten to the write lock: inside BEGIN IMMEDIATE the version is
    read again and nothing is applied twice (an ALTER TABLE twice would fail)."""
    path = tmp_path / "q.db"
    queue_file_of_schema(path, OLD, rows=(ROW,))
    real, raced = schema.identify, []

    def stale(db, path):
        version = real(db, path)
        if not raced:
            raced.append(version)
            connect(path, 5.0).close()  # the other one migrates first
        return version

    monkeypatch.setattr(schema, "identify", stale)
    with contextlib.closing(connect(path, 5.0)) as db:
        assert raced == [OLD]
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.execute("SELECT count(*) FROM jobs").fetchone()[0] == 1


def test_a_migration_that_fails_leaves_the_file_as_it_was_and_unlocked(tmp_path, monkeypatch):
    path = tmp_path / "q.db"
    queue_file_of_schema(path, OLD, rows=(ROW,))
    shipped = migrations()
    failing = (*shipped[:-1], (*shipped[-1], "SELECT no_such_function()"))
    monkeypatch.setattr(schema, "migrations", lambda: failing)
    with pytest.raises(DatabaseProblem, match="no such function") as refused:
        connect(path, 0.1)
    assert "\n" not in str(refused.value)
    with contextlib.closing(sqlite3.connect(path, isolation_level=None, timeout=0)) as raw:
        raw.execute("BEGIN IMMEDIATE")  # no lock left behind
        assert raw.execute("PRAGMA user_version").fetchone()[0] == OLD
        assert "followed" not in {row[1] for row in raw.execute("PRAGMA table_info(jobs)")}
        assert not raw.execute("SELECT 1 FROM sqlite_master WHERE name = 'flags'").fetchall()
        raw.execute("ROLLBACK")


@pytest.mark.parametrize("before", ["new", "older", "current"])
def test_a_query_only_connection_is_brought_up_to_date_and_then_cannot_write(tmp_path, before):
    path = tmp_path / "q.db"
    if before == "older":
        queue_file_of_schema(path, OLD, rows=(ROW,))
    elif before == "current":
        connect(path, 5.0).close()
    with contextlib.closing(connect(path, 5.0, query_only=True)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.execute("PRAGMA query_only").fetchone()[0] == 1
        db.execute("BEGIN")  # a read transaction is allowed
        assert db.execute("SELECT count(*) FROM jobs").fetchone()[0] == (before == "older")
        db.execute("COMMIT")
        for write in ("INSERT INTO flags VALUES ('paused', 1)", "DELETE FROM jobs",
                      "PRAGMA user_version = 1", "CREATE TABLE mine (x)"):
            with pytest.raises(sqlite3.OperationalError, match="readonly"):
                db.execute(write)
    with contextlib.closing(sqlite3.connect(path)) as raw:
        assert raw.execute("SELECT count(*) FROM flags").fetchone()[0] == 0
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_status_reads_through_a_connection_that_cannot_write(tmp_path, monkeypatch):
    home = locate(tmp_path / "home").ensure()
    connect(home.db, 5.0).close()
    tried: list[BaseException] = []
    summary = reads.summary

    def writing_summary(db, now, *held_back):
        try:
            db.execute("INSERT INTO flags VALUES ('paused', 1)")
        except sqlite3.OperationalError as exc:
            tried.append(exc)
        return summary(db, now, *held_back)

    monkeypatch.setattr(reads, "summary", writing_summary)
    assert reads.read(home)["paused"] is False
    assert len(tried) == 1 and "readonly" in str(tried[0])


@pytest.mark.parametrize("before", ["new", "older"])
def test_status_makes_or_migrates_the_file_without_loading_the_queue(tmp_path, before):
    home = locate(tmp_path / "home").ensure()
    if before == "older":
        queue_file_of_schema(home.db, OLD, rows=(ROW,))
    modules = loaded("status", "--json", "--home", str(home.root))
    assert "sloth_tray.store.reads" in modules and "sloth_tray.store.queue" not in modules
    with contextlib.closing(sqlite3.connect(home.db)) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert raw.execute("SELECT count(*) FROM jobs").fetchone()[0] == (before == "older")


def test_status_never_migrates_on_top_of_a_damaged_page(tmp_path):
    """`status` alone opens an older file unchecked: it is read whole (schema.verify)
    before the migration writes, and refused as it is."""
    home = locate(tmp_path / "home").ensure()
    rows = tuple((f"{i:012x}", f"job-{i:04d}-" + "x" * 200, "pending", 0, None, "{}")
                 for i in range(100))
    queue_file_of_schema(home.db, OLD, rows=rows)
    data = bytearray(home.db.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    page = data.index(b"job-0050-") // page_size
    assert page > 0
    data[page * page_size:(page + 1) * page_size] = random.Random(7).randbytes(page_size)
    home.db.write_bytes(bytes(data))
    before = sorted(p.name for p in home.root.iterdir())
    with pytest.raises(DatabaseProblem, match="damaged") as refused:
        reads.read(home)
    assert "\n" not in str(refused.value)
    assert home.db.read_bytes() == bytes(data)
    assert sorted(p.name for p in home.root.iterdir()) == before


def test_a_process_reads_its_queue_file_whole_once_and_a_new_file_again(tmp_path,
                                                                         monkeypatch):
    """A process that lives on (the MCP server) reads its queue file whole once for each
    state of it, not at every use: each tool call read a file of 100,000 jobs whole,
    twice an add_job (28 ms each). A file written to since, or another put in its
    place, is read whole again, and refused if damaged."""
    home = locate(tmp_path / "home").ensure()
    rows = tuple((f"{i:012x}", f"job-{i:04d}-" + "x" * 200, "pending", 0, None, "{}")
                 for i in range(100))
    queue_file_of_schema(home.db, SCHEMA_VERSION, rows=rows)
    read_whole = []
    real = schema._problems_in

    def counted(path):
        read_whole.append(path)
        return real(path)

    monkeypatch.setattr(schema, "_problems_in", counted)
    for _ in range(3):
        schema.verify(home.db)
    assert len(read_whole) == 1
    data = bytearray(home.db.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    page = data.index(b"job-0050-") // page_size
    data[page * page_size:(page + 1) * page_size] = random.Random(7).randbytes(page_size)
    home.db.write_bytes(bytes(data))  # written to in place: the same inode
    with pytest.raises(DatabaseProblem, match="damaged"):
        schema.verify(home.db)
    copy = home.db.with_name("restored")
    copy.write_bytes(bytes(data))
    copy.chmod(0o600)
    os.replace(copy, home.db)  # another file put in its place
    with pytest.raises(DatabaseProblem, match="damaged"):
        schema.verify(home.db)
    assert len(read_whole) == 3


def test_a_file_this_process_wrote_and_closed_is_not_read_whole_again(tmp_path, monkeypatch):
    """The last connection to close copies the WAL into the file (a checkpoint): the
    file changes, by SQLite's own hand. A file found sound stays so: the MCP server,
    with no app holding the queue open, read it whole again after each add_job."""
    from sloth_tray.store.queue import Queue

    home = locate(tmp_path / "home").ensure()
    Queue(home.db).close()
    read_whole = []
    real = schema._problems_in
    monkeypatch.setattr(schema, "_problems_in", lambda path: read_whole.append(path)
                        or real(path))
    schema.verify(home.db)
    changed = os.stat(home.db).st_ctime_ns
    for n in range(3):
        with Queue(home.db) as queue:
            queue.push(f"job-{n}")
        schema.verify(home.db)
    assert os.stat(home.db).st_ctime_ns != changed  # the closes wrote to the file
    assert len(read_whole) == 1


def _open_when_told(path, go, results) -> None:
    """In a child process: wait for the word, open the queue file, say how it went."""
    go.wait()
    try:
        connect(path, 5.0).close()
        results.put("ok")
    except Exception as exc:  # said back to the test, which names it
        results.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.slow
def test_processes_opening_a_new_queue_file_at_the_same_moment_all_get_it(tmp_path):
    """The daemon's first start and a command typed at the same moment (or two
    commands) meet on a file that does not exist yet. Each must get the queue: none may
    see the other's half-made file as "something else", and none may be told it is
    locked when it never waited (SQLite answers busy to a switch to WAL at once,
    without waiting for the other connection)."""
    # fork: with forkserver the 100 children took 12 s, not 2; a child only opens a file,
    # so no lock another thread of this process may hold at the fork is one it takes.
    forks = multiprocessing.get_context("fork")
    problems = []
    for round_ in range(25):
        path = tmp_path / f"q{round_}.db"
        go, results = forks.Event(), forks.Queue()
        children = [forks.Process(target=_open_when_told, args=(path, go, results))
                    for _ in range(4)]
        try:
            for child in children:
                child.start()
            go.set()
            said = [results.get(timeout=30) for _ in children]
        finally:
            for child in children:
                child.join(timeout=10)
                if child.is_alive():
                    child.kill()
                    child.join()
        problems += [f"round {round_}: {word}" for word in said if word != "ok"]
        with contextlib.closing(connect(path, 5.0)) as db:
            assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert problems == []


# Characters a file: URI gives a meaning to (`?` starts the options, `#` a fragment, `%`
# an escape), a space, non-ASCII, and what a shell or a URL would make something of.
URI_MEANINGFUL = "a %3F?#é [x]&=+;,'"


def test_a_queue_whose_path_has_uri_characters_is_read_whole_where_it_is(tmp_path):
    """`list` reads the file whole (schema.verify) through a file: URI it writes itself:
    at a home named with URI characters it reads that very file, sound, then damaged."""
    import subprocess
    import sys

    from sloth_tray.store.queue import Queue

    folder = tmp_path / URI_MEANINGFUL
    folder.mkdir()
    home = locate(folder / "home").ensure()
    with Queue(home.db) as queue:
        for n in range(100):
            queue.push(f"job-{n:04d}-" + "x" * 200)
    listed = subprocess.run([sys.executable, "-m", "sloth_tray", "list", "--json", "--home",
                             str(home.root)], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert '"job-0099-' in listed.stdout
    schema.verify(home.db)  # sound, at its own path
    data = bytearray(home.db.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    page = data.index(b"job-0050-") // page_size
    data[page * page_size:(page + 1) * page_size] = random.Random(7).randbytes(page_size)
    home.db.write_bytes(bytes(data))
    schema._SOUND.clear()
    with pytest.raises(DatabaseProblem, match="is damaged"):
        schema.verify(home.db)
    assert home.db.read_bytes() == bytes(data)
