"""A snapshot is one read: its counts and its lists come from one commit of the queue
file, whatever another connection commits while it is read, and reading it writes
nothing."""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from sloth_tray.daemon.engine import Engine
from sloth_tray.daemon.snapshot import Snapshot
from sloth_tray.paths import locate
from sloth_tray.store.queue import Queue, State

WRITES = ("UPDATE", "INSERT", "DELETE", "REPLACE")

set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "sloth-tray-hypothesis"))


class Elsewhere:
    """Another connection to the same file (as the command line's, in another process)
    that commits one change each time the watched connection starts a read: between
    any two parts of a snapshot, the file moves on. Its changes keep the queue under
    what a snapshot lists in full, so each count must equal its list's length."""

    def __init__(self, path, changes: list[str]) -> None:
        self.queue = Queue(path, max_attempts=1)
        self.changes = changes  # taken in turn: "push", "push-lane", "refuse", "cancel"
        self.made = 0

    def seen(self, statement: str) -> None:
        if statement.lstrip().split(None, 1)[0].upper() not in ("SELECT", "WITH"):
            return
        change = self.changes[self.made % len(self.changes)]
        self.made += 1
        pending = self.queue.jobs(State.PENDING)
        failed = self.queue.jobs(State.FAILED)
        # Each change moves some count, every time: the file never settles.
        if change in ("push", "push-lane"):
            if len(pending) < 5:
                self.queue.push("elsewhere", delay=3600,
                                lane="net" if change == "push-lane" else "main")
            else:
                self.queue.cancel(pending[0].id)
        elif change == "refuse" and pending and len(failed) < 5:
            self.queue.refuse(pending[-1].id, "its script is gone")
        elif change == "cancel" and failed:
            self.queue.cancel(failed[-1].id)
        elif pending:
            self.queue.cancel(pending[-1].id)
        else:
            self.queue.push("elsewhere", delay=3600)


def agrees_with_itself(snapshot: Snapshot) -> None:
    """What one commit of the file would give: few enough jobs that every pending and
    failed one is listed, so each count is its list's length and the lanes' sum."""
    assert snapshot.problem is None
    assert snapshot.pending == len(snapshot.waiting), snapshot
    assert snapshot.failed_count == len(snapshot.failed_jobs), snapshot
    assert sum(lane.pending for lane in snapshot.lanes) == snapshot.pending, snapshot
    assert sum(lane.failed for lane in snapshot.lanes) == snapshot.failed_count, snapshot
    assert not {w.id for w in snapshot.waiting} & {f.id for f in snapshot.failed_jobs}
    if snapshot.waiting:
        assert snapshot.next_wakeup == min(w.due for w in snapshot.waiting), snapshot


def snapshots_read_while(home, changes: list[str]) -> list[Snapshot]:
    """The snapshots an engine publishes over a drain (nothing due: it only reads),
    with the file changed by another connection at every read its own makes."""
    queue = Queue(home.db, max_attempts=1)
    try:
        for n in range(3):
            queue.push(f"waits{n}", delay=3600, lane="net" if n % 2 else "main")
        queue.refuse(queue.push("gone", delay=3600), "its script is gone")
        engine = Engine(queue, home)
        seen: list[Snapshot] = []
        engine.subscribe(seen.append)
        elsewhere = Elsewhere(home.db, changes)
        queue._db.set_trace_callback(elsewhere.seen)
        try:
            engine.run(drain=True)
        finally:
            queue._db.set_trace_callback(None)
            elsewhere.queue.close()
        assert elsewhere.made > 0 and seen
        return seen
    finally:
        queue.close()


@pytest.mark.parametrize("changes", [["push", "push-lane", "refuse"], ["refuse"],
                                     ["push-lane", "cancel"], ["push", "refuse", "cancel"]])
def test_a_snapshot_read_while_the_file_changes_agrees_with_itself(home, changes):
    for snapshot in snapshots_read_while(home, changes):
        agrees_with_itself(snapshot)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.lists(st.sampled_from(["push", "push-lane", "refuse", "cancel"]),
                        min_size=1, max_size=6))
def test_whatever_commits_between_its_parts_a_snapshot_agrees_with_itself(tmp_path_factory,
                                                                           changes):
    home = locate(tmp_path_factory.mktemp("home") / "home").ensure()
    for snapshot in snapshots_read_while(home, changes):
        agrees_with_itself(snapshot)


class Statements:
    """Every statement a connection runs, as it runs them."""

    def __init__(self, queue: Queue) -> None:
        self.said: list[str] = []
        queue._db.set_trace_callback(self.said.append)

    def words(self) -> list[str]:
        return [statement.lstrip().split(None, 1)[0].upper() for statement in self.said]


def test_a_snapshot_is_one_read_transaction_that_writes_nothing(home):
    """One deferred BEGIN ... COMMIT, every read inside it; no write, even after the
    clock was set back (which the loop's own look, next_wakeup, writes for)."""
    from sloth_tray.daemon import snapshot as snapshot_module

    clock_at = [2_000_000.0]
    queue = Queue(home.db, clock=lambda: clock_at[0], max_attempts=1)
    try:
        queue.push("later", delay=3600)
        queue.push("other", delay=60, lane="net")
        queue.refuse(queue.push("gone", delay=3600), "its script is gone")
        clock_at[0] -= 7200  # set back: the waits were changed "in the future"
        statements = Statements(queue)
        snapshot, _ = snapshot_module.read(queue, (), frozenset())
        words = statements.words()
        assert words[0] == "BEGIN" and statements.said[0].strip().upper() == "BEGIN"
        assert words[-1] == "COMMIT"
        assert words.count("BEGIN") == 1 and words.count("COMMIT") == 1
        assert not [word for word in words if word in WRITES], statements.said
        assert (snapshot.pending, snapshot.failed_count) == (2, 1)
    finally:
        queue.close()
