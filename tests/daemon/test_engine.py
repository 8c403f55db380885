"""The loop, in-process: snapshots, pause, drain, recovery, trouble with the database."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import sqlite3
import subprocess
import sys
import threading
import time

import pytest
from helpers.clock import FakeClock
from helpers.processes import wait_for
from hypothesis import given
from hypothesis import strategies as st

from sloth_tray.daemon import snapshot as snapshot_module
from sloth_tray.daemon.alarm import make_alarm
from sloth_tray.daemon.engine import Engine
from sloth_tray.daemon.snapshot import FailedSeries, Snapshot, StepProgress
from sloth_tray.store.queue import Queue, Reason, State

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /bin/sh")


def push_script(queue: Queue, home, name: str, text: str, **push) -> str:
    path = home.spool / name
    path.write_text(text)
    return queue.push(path.stem, script=str(path), **push)


def test_a_snapshot_names_the_agent_that_added_a_job_and_no_one_for_a_drop(home):
    queue = Queue(home.db, max_attempts=1)
    agent = push_script(queue, home, "bad.sh", "exit 1", source="Claude Desktop")
    later = push_script(queue, home, "later.sh", "true", delay=3600, source="Cursor")
    dropped = push_script(queue, home, "drop.sh", "true", delay=3600, source="dropped")
    engine = Engine(queue, home)
    seen: list[Snapshot] = []
    engine.subscribe(seen.append)
    engine.run(drain=True)
    assert [(f.id, f.by) for f in seen[-1].failed_jobs] == [(agent, "Claude Desktop")]
    assert {w.id: w.by for w in seen[-1].waiting} == {later: "Cursor", dropped: None}


def test_owner_is_host_and_pid(home):
    engine = Engine(Queue(home.db), home)
    host, pid = engine.owner.rsplit(":", 1)
    assert host and int(pid) > 0


def test_drain_runs_every_due_job_and_publishes_what_happened(home):
    queue = Queue(home.db, max_attempts=1)
    ok = push_script(queue, home, "ok.sh", "echo fine")
    bad = push_script(queue, home, "bad.sh", "echo 'disk check: 82% full' >&2; exit 1")
    later = push_script(queue, home, "later.sh", "echo later", delay=3600)
    engine = Engine(queue, home)
    seen: list[Snapshot] = []
    results = []
    engine.subscribe(seen.append)
    engine.on_result(lambda job, result: results.append((job.name, result.effect.value)))
    engine.run(drain=True)
    assert results == [("ok", "done"), ("bad", "failed")]
    # The first is shown running; `bad`, right behind it and over at once, need not be.
    assert "ok" in {s.running.name for s in seen if s.running}
    final = seen[-1]
    assert final.stopped and final.running is None
    assert (final.done, final.failed_count, final.pending) == (1, 1, 1)
    assert [(f.id, f.error) for f in final.failed_jobs] == [
        (bad, "exit status 1: disk check: 82% full")]
    assert [w.id for w in final.waiting] == [later]
    assert final.next_wakeup == queue.get(later).not_before
    assert queue.get(ok).state == State.DONE


def test_the_log_line_of_a_result_ends_with_what_the_job_said_or_its_name(home, caplog):
    caplog.set_level("INFO", logger="sloth_tray")
    queue = Queue(home.db)
    quiet = push_script(queue, home, "quiet.sh", "true")
    said = push_script(queue, home, "said.sh", "echo moved 4 files")
    Engine(queue, home).run(drain=True)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("done ")]
    assert lines == [f"done quiet ({quiet})", f"done said ({said}): moved 4 files"]


def test_back_to_back_a_job_that_runs_a_moment_is_shown_running_while_it_runs(home, tmp_path):
    """Right behind another job, a job is published as running once it has run
    SHOW_RUNNING_AFTER: a burst of tiny jobs skips their snapshots, a real one never."""
    queue = Queue(home.db)
    go = tmp_path / "go"
    push_script(queue, home, "tiny.sh", "true")
    push_script(queue, home, "slow.sh", until(go))
    with draining(Engine(queue, home), go) as (_engine, seen, _thread):
        wait_for(lambda: any(s.running and s.running.name == "slow" for s in seen),
                 timeout=5, what="the slow job to be shown running")
    assert seen[-1].running is None and seen[-1].done == 2


def until(go) -> str:
    """A script that runs until the file `go` exists."""
    return f"while [ ! -e {go} ]; do sleep 0.01; done"


@contextlib.contextmanager
def draining(engine: Engine, go):
    """The engine draining its queue on a thread of its own, with every Snapshot it
    publishes; at the end `go` is made (the scripts waiting on it end) and the thread
    joined."""
    seen: list[Snapshot] = []
    engine.subscribe(seen.append)
    thread = threading.Thread(target=engine.run, kwargs={"drain": True})
    thread.start()
    try:
        yield engine, seen, thread
    finally:
        go.touch()
        thread.join(15)


class Commits:
    """Counts the transactions a connection commits: each COMMIT of a BEGIN ... COMMIT
    that wrote (a read transaction, a snapshot's, commits nothing), and each write
    statement run outside one (autocommit: its own transaction)."""

    WRITES = ("UPDATE", "INSERT", "DELETE", "REPLACE")

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.count = 0
        self._open = False
        self._wrote = False
        self._last = ""
        connection.set_trace_callback(self._saw)

    def _saw(self, statement: str) -> None:
        # A statement's triggers are traced again under the statement's own text.
        again, self._last = statement == self._last, statement
        word = statement.lstrip().split(None, 1)[0].upper()
        if word == "BEGIN":
            self._open, self._wrote = True, "IMMEDIATE" in statement.upper()
        elif word in ("COMMIT", "ROLLBACK"):
            self.count += word == "COMMIT" and self._wrote
            self._open = False
        elif word in self.WRITES and self._open:
            self._wrote = True
        elif word in self.WRITES and not again:
            self.count += 1


def test_back_to_back_a_job_costs_two_commits_in_the_loop(home):
    """The outcome and the next claim share one commit; the runner's `started` is the
    other. It was four: claim, started (token), started (pid), outcome."""
    per_run = []
    for jobs in (5, 15):
        queue = Queue(home.root / f"q{jobs}.db")
        for n in range(jobs):
            push_script(queue, home, f"j{jobs}-{n}.sh", "true")
        engine = Engine(queue, home)
        commits = Commits(queue._db)
        engine.run(drain=True)
        assert queue.summary()["done"] == jobs
        per_run.append(commits.count)
        queue.close()
    assert (per_run[1] - per_run[0]) / 10 == 2


def test_paused_claims_nothing_and_resume_goes_on(home, tmp_path):
    queue = Queue(home.db)
    engine = Engine(queue, home)
    seen: list[Snapshot] = []
    engine.subscribe(seen.append)
    engine.pause()
    wait_for(lambda: seen and seen[-1].paused, what="the pause to be published")
    thread = threading.Thread(target=engine.run)
    thread.start()
    try:
        job_id = push_script(queue, home, "a.sh", "echo a")
        engine.wake()
        wait_for(lambda: seen[-1].paused and seen[-1].pending == 1,
                 what="a paused snapshot with the job waiting")
        assert seen[-1].due_now == 0  # nothing will start while paused
        assert queue.get(job_id).state == State.PENDING
        engine.resume()
        wait_for(lambda: queue.get(job_id).state == State.DONE, what="the job to run")
    finally:
        engine.stop()
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_a_pause_is_kept_in_the_queue_where_every_connection_and_restart_sees_it(home):
    queue = Queue(home.db)
    other = Queue(home.db)  # another process's, as the command line's
    engine = Engine(queue, home)
    engine.pause()
    wait_for(other.paused, what="the pause to reach the database")
    assert engine.paused
    assert Engine(Queue(home.db), home).paused  # a new start is paused too
    engine.resume()
    wait_for(lambda: not other.paused(), what="the resume to reach the database")
    assert not engine.paused


def test_a_pause_and_resume_written_elsewhere_hold_and_free_the_running_loop(home):
    queue = Queue(home.db)
    other = Queue(home.db)
    engine = Engine(queue, home)
    seen: list[Snapshot] = []
    engine.subscribe(seen.append)
    thread = threading.Thread(target=engine.run)
    thread.start()
    try:
        wait_for(lambda: seen and not seen[-1].paused, what="the first snapshot")
        other.set_paused(True)
        engine.wake()  # the doorbell
        wait_for(lambda: seen[-1].paused, what="the pause to be seen")
        job_id = push_script(other, home, "a.sh", "echo a")
        engine.wake()
        wait_for(lambda: seen[-1].pending == 1, what="the new job in a snapshot")
        assert (seen[-1].paused, seen[-1].due_now) == (True, 0)
        assert queue.get(job_id).state == State.PENDING
        other.set_paused(False)
        engine.wake()
        wait_for(lambda: queue.get(job_id).state == State.DONE, what="the job to run")
        assert not engine.paused
    finally:
        engine.stop()
        thread.join(timeout=10)


def test_a_change_made_elsewhere_while_a_job_runs_is_published_within_a_second(home):
    queue = Queue(home.db, max_attempts=1)
    failed = push_script(queue, home, "bad.sh", "exit 1")
    Engine(queue, home).run(drain=True)
    later = push_script(queue, home, "later.sh", "echo later", delay=3600)
    slow = push_script(queue, home, "slow.sh", "sleep 60")
    engine = Engine(queue, home)
    seen: list[Snapshot] = []
    engine.subscribe(seen.append)
    thread = threading.Thread(target=engine.run)
    thread.start()
    try:
        wait_for(lambda: seen and seen[-1].running, what="the slow job to start")
        assert (seen[-1].failed_count, seen[-1].pending) == (1, 1)
        with Queue(home.db) as cli:  # the command line's own connection
            assert cli.retry(failed) and cli.cancel(later)
        engine.wake()  # its doorbell
        wait_for(lambda: seen[-1].failed_count == 0 and seen[-1].waiting[0].id == failed,
                 timeout=1.0, what="the retry and the cancel in a snapshot")
        assert seen[-1].running.id == slow and seen[-1].pending == 1
        assert queue.get(slow).state == State.RUNNING  # the job still runs

        engine.cancel(failed)  # the tray's menu, while the job runs
        wait_for(lambda: seen[-1].pending == 0, timeout=1.0, what="the tray's cancel shown")
        assert seen[-1].running.id == slow
    finally:
        engine.stop()
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_a_listener_that_subscribes_after_a_job_started_is_shown_it_running(home):
    """The inbox starts a drop as it queues it, which can be before the tray's icon is
    up and subscribed (a loaded machine): the tray must still show the job running,
    not its first look, until some later change."""
    queue = Queue(home.db)
    slow = push_script(queue, home, "slow.sh", "sleep 60")
    engine = Engine(queue, home)
    thread = threading.Thread(target=engine.run)
    thread.start()
    try:
        wait_for(lambda: engine.snapshot.running, what="the slow job shown running")
        seen: list[Snapshot] = []
        engine.subscribe(seen.append)
        assert [s.running.id for s in seen] == [slow]  # told at once, not at the next change

        def broken(snapshot: Snapshot) -> None:
            raise RuntimeError("a listener's bug")
        engine.subscribe(broken)  # its own: the subscriber goes on (the tray's start)
        engine.cancel(slow)
        wait_for(lambda: seen[-1].running is None, what="the cancel shown past the bug")
    finally:
        engine.stop()
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_recover_takes_back_jobs_left_running_at_once(home):
    queue = Queue(home.db, lease_seconds=3600)
    job_id = push_script(queue, home, "a.sh", "echo again")
    queue.claim("dead-host:1")
    engine = Engine(queue, home)
    engine.recover()
    engine.run(drain=True)
    job = queue.get(job_id)
    assert (job.state, job.attempts) == (State.DONE, 2)
    assert "reclaimed" in [e.kind for e in queue.history(job_id)]


def test_a_locked_database_is_reported_in_the_snapshot_and_nothing_is_lost(home):
    queue = Queue(home.db, busy_timeout=0.05)
    job_id = push_script(queue, home, "a.sh", "echo ok")
    engine = Engine(queue, home)
    seen: list[Snapshot] = []
    engine.subscribe(seen.append)
    blocker = sqlite3.connect(home.db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    thread = threading.Thread(target=engine.run)
    thread.start()
    try:
        wait_for(lambda: seen and seen[-1].problem, what="the problem to be published")
        assert "locked by another program" in seen[-1].problem
        blocker.execute("ROLLBACK")
        engine.wake()
        wait_for(lambda: queue.get(job_id).state == State.DONE, what="the job to run after")
        wait_for(lambda: seen[-1].problem is None, what="the problem to clear")
    finally:
        blocker.close()
        engine.stop()
        thread.join(timeout=10)


def test_the_trays_retry_all_skips_refused_drops_and_says_how_many(home, caplog):
    caplog.set_level(logging.INFO, logger="sloth_tray")
    queue = Queue(home.db, max_attempts=1)
    refused = push_script(queue, home, "link.sh", "echo never",
                          error="refused: it is a symbolic link; drop the script itself")
    flaky = push_script(queue, home, "flaky.sh", "exit 1")
    Engine(queue, home).run(drain=True)
    assert queue.get(flaky).state == State.FAILED

    engine = Engine(queue, home)  # a running app's, as the tray's menu reaches it
    engine.retry_all_failed()
    wait_for(lambda: queue.get(flaky).state == State.PENDING, what="the retry")
    engine.retry(refused)  # a per-job retry of a refusal is said, and changes nothing
    wait_for(lambda: any("never runs" in r.getMessage() for r in caplog.records),
             what="the refusal to be said")
    assert queue.get(refused).state == State.FAILED
    assert "skipped 1 refused" in caplog.text


def test_a_pause_that_comes_while_a_job_runs_claims_nothing_with_its_outcome(home, tmp_path):
    """The next job is claimed in the outcome's commit, unless the queue was paused
    meanwhile (by the command line, in another process)."""
    queue, other = Queue(home.db), Queue(home.db)
    started, go = tmp_path / "started", tmp_path / "go"
    first = push_script(queue, home, "first.sh",
                        f"touch {started}; while [ ! -e {go} ]; do sleep 0.02; done")
    second = push_script(queue, home, "second.sh", "echo second")
    engine = Engine(queue, home)
    thread = threading.Thread(target=engine.run)
    thread.start()
    try:
        wait_for(started.exists, what="the first job to start")
        other.set_paused(True)
        go.touch()
        wait_for(lambda: queue.get(first).state == State.DONE, what="the first job to end")
    finally:
        engine.stop()
        thread.join(10)
    job = queue.get(second)
    assert (job.state, job.attempts) == (State.PENDING, 0)
    assert "claimed" not in [event.kind for event in queue.history(second)]


def test_a_stop_right_after_an_outcome_gives_back_the_job_claimed_with_it(home):
    queue = Queue(home.db)
    first = push_script(queue, home, "first.sh", "echo first")
    second = push_script(queue, home, "second.sh", "echo second")
    engine = Engine(queue, home)
    engine.on_result(lambda job, result: engine.stop())  # after the commit that claimed
    engine.run()
    assert queue.get(first).state == State.DONE
    job = queue.get(second)
    assert (job.state, job.attempts) == (State.PENDING, 0)
    assert [event.kind for event in queue.history(second)][-2:] == ["claimed", "released"]


# -- failed runs of a series: one series, its newest runs ----------------------------------


def failing_runs(queue: Queue, home, name: str, times: int, clock: FakeClock) -> str:
    """A job that repeats every minute, failed for good on each of `times` runs, a
    minute apart; the series' key (its script)."""
    script = home.spool / f"{name}.sh"
    queue.push(name, script=str(script), options={"every": 60}, max_attempts=1)
    for _ in range(times):
        clock.advance(60)
        job = queue.claim("w")
        assert job is not None and job.name == name
        assert queue.fail(job.id, "w", f"{name} failed", Reason.EXIT_CODE) == State.FAILED
    (waiting,) = queue.jobs(State.PENDING)  # its next run: cancelled, out of the way
    assert queue.cancel(waiting.id)
    return str(script)


def failing_once(queue: Queue, name: str, clock: FakeClock) -> str:
    clock.advance(60)
    job_id = queue.push(name, max_attempts=1)
    assert queue.claim("w").id == job_id
    assert queue.fail(job_id, "w", f"{name} failed", Reason.EXIT_CODE) == State.FAILED
    return job_id


def snapshot_of(queue: Queue, home) -> Snapshot:
    engine = Engine(queue, home)
    engine.run(drain=True)  # nothing is due: one look, published
    return engine.snapshot


def test_a_failing_series_is_carried_as_its_newest_runs_and_a_count(home, monkeypatch):
    monkeypatch.setattr(snapshot_module, "SHOWN_RUNS_PER_SERIES", 3)
    clock = FakeClock()
    queue = Queue(home.db, clock=clock)
    tidy = failing_runs(queue, home, "tidy", 5, clock)
    first_tidy = clock.now
    disk = failing_once(queue, "disk_check", clock)
    backup = failing_runs(queue, home, "backup", 2, clock)
    snapshot = snapshot_of(queue, home)
    assert snapshot.failed_count == 8
    assert [(job.name, job.series) for job in snapshot.failed_jobs] == [
        ("backup", backup), ("backup", backup), ("disk_check", ""),
        ("tidy", tidy), ("tidy", tidy), ("tidy", tidy)]
    assert snapshot.failed_jobs[2].id == disk
    assert [job.at for job in snapshot.failed_jobs] == sorted(
        (job.at for job in snapshot.failed_jobs), reverse=True)
    assert set(snapshot.failed_series) == {
        FailedSeries(tidy, "tidy", 5, first_tidy - 4 * 60),
        FailedSeries(backup, "backup", 2, clock.now - 60)}


def test_the_failed_runs_carried_stay_bounded(home, monkeypatch):
    monkeypatch.setattr(snapshot_module, "SHOWN_FAILED", 4)
    clock = FakeClock()
    queue = Queue(home.db, clock=clock)
    failing_runs(queue, home, "tidy", 6, clock)
    newest = failing_once(queue, "disk_check", clock)
    snapshot = snapshot_of(queue, home)
    assert snapshot.failed_count == 7
    assert len(snapshot.failed_jobs) == 4 and snapshot.failed_jobs[0].id == newest
    assert [(s.name, s.failures) for s in snapshot.failed_series] == [("tidy", 6)]


def test_cancel_all_cancels_every_failed_run_of_the_series_and_the_series_goes_on(
        home, monkeypatch):
    """The menu's `Cancel all N` on a series: the runs not carried in the snapshot too."""
    monkeypatch.setattr(snapshot_module, "SHOWN_RUNS_PER_SERIES", 2)
    clock = FakeClock()
    queue = Queue(home.db, clock=clock)
    tidy = failing_runs(queue, home, "tidy", 4, clock)
    other = failing_once(queue, "disk_check", clock)
    queue.push("tidy", script=tidy, options={"every": 60}, delay=3600)  # its waiting run
    engine = Engine(queue, home)
    engine.cancel_failed_runs(tidy)
    engine.run(drain=True)  # the action thread's work is done before the loop's end
    assert [job.id for job in queue.jobs(State.FAILED)] == [other]
    assert [job.name for job in queue.jobs(State.CANCELLED)].count("tidy") == 5
    assert [job.name for job in queue.jobs(State.PENDING)] == ["tidy"]
    assert engine.snapshot.failed_series == ()


def test_stopping_a_running_run_of_a_series_lets_the_series_go_on(home, tmp_path):
    """The menu's Stop on the running job (Engine.stop_run: Queue.stop, and the runner
    nudged)."""
    queue = Queue(home.db)
    go = tmp_path / "go"
    job = push_script(queue, home, "tidy.sh", until(go), options={"every": 3600})
    with draining(Engine(queue, home), go) as (engine, seen, thread):
        wait_for(lambda: any(s.running and s.running.id == job for s in seen),
                 what="the job to be shown running")
        engine.stop_run(job)
        wait_for(lambda: not thread.is_alive() or seen[-1].running is None,
                 what="the run to stop")
    assert queue.get(job).state == State.CANCELLED
    assert [j.name for j in queue.jobs(State.PENDING)] == ["tidy"], "the series' next run"


# -- steps: the running one named, how far a failed job got, a cut step's question ------


def test_a_running_job_is_shown_in_its_step_as_the_step_starts(home, tmp_path):
    """A real child's `sloth-tray step`s; each rings the doorbell, which the app's
    watcher turns into wake() (called here by hand: no watcher in this test)."""
    queue = Queue(home.db)
    started, go = tmp_path / "started", tmp_path / "go"
    push_script(queue, home, "backup.sh",
                "sloth-tray step fetch -- true\n"
                f"sloth-tray step upload -- sh -c 'touch {started}; {until(go)}'\n")
    with draining(Engine(queue, home), go) as (engine, seen, _thread):
        wait_for(started.exists, what="the second step to start")
        engine.wake()
        wait_for(lambda: seen[-1].running and seen[-1].running.step == (2, "upload"),
                 what="the running step to be published")
    assert seen[-1].running is None and seen[-1].done == 1
    assert [(s["name"], s["state"]) for s in queue.steps(queue.jobs(State.DONE)[0].id)] == [
        ("fetch", "done"), ("upload", "done")]


def ran_steps(queue: Queue, home, name: str, steps: list[tuple[str, str, bool]]) -> str:
    """A job claimed and given steps by its run (name, how it ended: done, failed or
    running, whether it asks), its attempt then failed (exit status 1): its id."""
    from sloth_tray.for_jobs import sloth_step

    job_id = push_script(queue, home, f"{name}.sh", "exit 0", max_attempts=1)
    job = queue.claim("w", token=f"token-{name}")
    assert job is not None and job.id == job_id
    run = sloth_step.Run(str(home.db), job_id, f"token-{name}", "w")
    db = sqlite3.connect(home.db, isolation_level=None)
    try:
        for step, ending, ask in steps:
            decision = sloth_step.begin(db, run, step, ask=ask, kind="shell", now=queue.clock())
            assert decision.action == "run"
            if ending != "running":
                assert sloth_step.finish(db, run, step, decision.occurrence,
                                         ok=ending == "done", exit_code=0, output=b"",
                                         output_size=0, now=queue.clock())
    finally:
        db.close()
    assert queue.fail(job_id, "w", "exit status 1") == State.FAILED
    return job_id


def test_a_failed_job_carries_how_far_its_steps_got_and_the_step_that_asks(home):
    queue = Queue(home.db)
    plain = push_script(queue, home, "plain.sh", "exit 1", max_attempts=1)
    Engine(queue, home).run(drain=True)
    upload = ran_steps(queue, home, "upload", [("fetch", "done", False),
                                               ("pack", "done", False),
                                               ("upload", "failed", False)])
    invoice = ran_steps(queue, home, "invoice", [("prepare", "done", False),
                                                 ("send", "running", True)])
    # The step that asks is not the first one not done: an earlier one failed, and the
    # job went on.
    late = ran_steps(queue, home, "late", [("check", "failed", False),
                                           ("pay", "running", True)])
    snapshot = snapshot_of(queue, home)
    by_id = {job.id: job for job in snapshot.failed_jobs}
    assert (by_id[plain].progress, by_id[plain].unsure_step) == (None, None)
    assert (by_id[upload].progress, by_id[upload].unsure_step) == (
        StepProgress(3, 2, "upload", "failed"), None)
    assert by_id[invoice].reason == Reason.STEP_UNSURE
    assert (by_id[invoice].progress, by_id[invoice].unsure_step) == (
        StepProgress(2, 1, "send", "cut"), "send")
    assert (by_id[late].progress, by_id[late].unsure_step) == (
        StepProgress(2, 0, "check", "failed"), "pay")


def test_the_menus_answers_to_a_cut_step_retry_the_job_and_a_stale_click_does_nothing(
        home):
    queue = Queue(home.db)
    invoice = ran_steps(queue, home, "invoice", [("send", "running", True)])
    again = ran_steps(queue, home, "again", [("send", "running", True)])
    engine = Engine(queue, home)
    engine.retry(invoice, "send")  # Mark "send" done
    engine.retry(again)  # Run "send" again
    done = push_script(queue, home, "ok.sh", "true")
    engine.run(drain=True)  # the action thread's work is done before the loop's end
    assert queue.get(done).state == State.DONE
    [send] = queue.steps(invoice)
    assert (send["state"], send["marked_at"] is not None) == ("done", True)
    [cut] = queue.steps(again)
    assert (cut["state"], cut["ask"]) == ("cut", 0)  # it runs again with the job
    assert {queue.get(invoice).state, queue.get(again).state} == {State.DONE}
    # A menu or a notification read before the job was done: its click runs nothing.
    runs = queue.get(done).runs
    engine = Engine(queue, home)
    engine.retry(done)
    engine.run(drain=True)
    assert (queue.get(done).state, queue.get(done).runs) == (State.DONE, runs)


def test_a_drained_run_waits_for_the_menus_retry_still_being_made(home):
    """`run(drain=True)` ends once nothing is due and nothing runs: a retry asked for
    from the menu just before, still on its way to the file as the loop finds nothing
    due, is waited for and run, not left pending."""
    queue = Queue(home.db)
    failed = push_script(queue, home, "fails.sh", "exit 3", max_attempts=1)
    engine = Engine(queue, home)
    engine.run(drain=True)
    assert queue.get(failed).state == State.FAILED
    engine = Engine(queue, home)
    looked, gate = threading.Event(), threading.Event()
    engine.subscribe(lambda snapshot: looked.set())
    engine._actions.submit(gate.wait)  # the change is held up behind this one
    engine.retry(failed)
    loop = threading.Thread(target=engine.run, kwargs={"drain": True})
    loop.start()
    try:
        assert looked.wait(15), "the loop took no look"
    finally:
        gate.set()
        loop.join(15)
    assert not loop.is_alive()
    assert (queue.get(failed).state, queue.get(failed).runs) == (State.FAILED, 2)


def test_retry_all_failed_from_the_menu_leaves_a_step_that_asks(tmp_path):
    """The tray's Retry all: a job cut short in a step that asks waits for its own
    answer, while the other failed jobs go back in line."""
    from sloth_tray.for_jobs import sloth_step
    from sloth_tray.store import spool

    with Queue(tmp_path / "q.db") as queue:
        unsure = queue.push("invoice")
        queue.claim("w", token="t1")
        run = sloth_step.Run(str(queue.path), unsure, "t1", "w")
        sloth_step.begin(queue._db, run, "send", ask=True, kind="shell", now=queue.clock())
        queue.release(unsure, "w")
        plain = queue.push("plain", max_attempts=1)
        queue.claim("w")
        queue.fail(plain, "w", "exit 1")
        assert spool.retry_all_failed(queue) == (1, 0)
        assert (queue.get(unsure).state, queue.get(plain).state) == ("failed", "pending")


# -- lanes: the loop and the lanes' workers ------------------------------------------------


def test_a_lease_that_lapsed_under_a_live_worker_is_never_taken_back_by_the_loop(
        home, tmp_path):
    """The laptop slept past a running job's lease, and a drop into another lane wakes
    the loop before the job's runner renews: the loop must not start the job a second
    time beside the run still going on."""
    offset = [0.0]
    queue = Queue(home.db, clock=lambda: time.time() + offset[0])
    go, effects = tmp_path / "go", tmp_path / "effects"
    long_job = push_script(queue, home, "long.sh",
                           f"echo start >> {effects}\n{until(go)}\n")
    engine = Engine(queue, home)
    thread = threading.Thread(target=engine.run)
    thread.start()
    try:
        wait_for(lambda: effects.exists(), what="the long job to start")
        offset[0] += 2 * queue.lease_seconds + 1  # the nap: its lease has lapsed
        other = push_script(queue, home, "tidy.sh", "true", lane="net")
        engine.job_added()
        wait_for(lambda: queue.get(other).state == State.DONE, what="the other lane's job")
        assert effects.read_text().splitlines() == ["start"], "the job ran a second time"
        assert "reclaimed" not in [e.kind for e in queue.history(long_job)]
        go.touch()  # the run goes on to its end before the engine stops (no quit races it)
        wait_for(lambda: queue.get(long_job).state != State.RUNNING,
                 what="the long job to end")
    finally:
        go.touch()
        engine.stop()
        thread.join(15)
    # The run that outlived its lease still held it: its end is recorded as its own.
    job = queue.get(long_job)
    assert (job.state, job.runs) == (State.DONE, 1)
    assert effects.read_text().splitlines() == ["start"]


def test_a_listener_that_raises_leaves_no_lane_stuck_behind_a_job_claimed_for_it(home):
    """The next job of a lane is claimed with the last outcome; whatever goes wrong in
    the worker after that, that job runs (or is given back), never left leased."""
    queue = Queue(home.db)
    first = push_script(queue, home, "first.sh", "true")
    second = push_script(queue, home, "second.sh", "true")
    engine = Engine(queue, home)

    def broken(job, result):
        raise BrokenPipeError("the reader of the output went away")

    engine.on_result(broken)
    engine.run(drain=True)
    assert [queue.get(job).state for job in (first, second)] == [State.DONE, State.DONE]


def test_a_drop_into_a_lane_the_engine_runs_rings_no_pass_of_the_loop(home, tmp_path):
    """A burst of drops into a lane whose worker runs: that worker claims each with the
    last outcome, so the loop is not woken for them (each pass reads the whole line of
    due jobs); a drop into a lane with no worker still wakes it, and the busy lane's
    jobs all run."""
    rings = [0]

    class CountedAlarm(type(make_alarm())):
        def ring(self) -> None:
            rings[0] += 1
            super().ring()

    queue = Queue(home.db)
    go, effects = tmp_path / "go", tmp_path / "effects"
    push_script(queue, home, "long.sh", f"echo start >> {effects}\n{until(go)}\n")
    engine = Engine(queue, home, alarm=CountedAlarm())
    thread = threading.Thread(target=engine.run)
    thread.start()
    try:
        wait_for(lambda: effects.exists(), what="the long job to start")
        before = rings[0]
        burst = [push_script(queue, home, f"b{i}.sh", "true") for i in range(20)]
        for _ in burst:
            engine.job_added("main")
        assert rings[0] == before, "a drop into the running lane woke the loop"
        other = push_script(queue, home, "tidy.sh", "true", lane="net")
        engine.job_added("net")
        assert rings[0] == before + 1
        wait_for(lambda: queue.get(other).state == State.DONE, what="the other lane's job")
        go.touch()
        wait_for(lambda: all(queue.get(job).state == State.DONE for job in burst),
                 what="the burst, run by the main lane's worker")
    finally:
        go.touch()
        engine.stop()
        thread.join(15)


def test_a_job_run_alone_reads_the_queue_for_the_tray_once_started_and_once_ended(
        home, monkeypatch):
    """Its lane's worker shows it running once it has spawned; its end is shown by the
    loop's look that the worker's end rings for. Each snapshot read is of the whole
    queue: the worker read two more, right after the outcome and as it left, each the
    same as the loop's."""
    from sloth_tray.daemon import engine as engine_module

    read, reads = engine_module.snapshots.read, []

    def counted(queue, running, *args, **kwargs):
        running = list(running)
        reads.append((threading.current_thread().name.startswith("lane "), bool(running),
                      kwargs.get("stopped", False)))
        return read(queue, running, *args, **kwargs)

    monkeypatch.setattr(engine_module.snapshots, "read", counted)
    queue = Queue(home.db)
    push_script(queue, home, "alone.sh", "true")
    seen: list[Snapshot] = []
    engine = Engine(queue, home)
    engine.subscribe(seen.append)
    engine.run(drain=True)
    assert queue.summary()["done"] == 1
    # (on the lane's worker, with a job running, the stop's): the spawn's, the end's
    assert [r for r in reads if not r[2]] == [(True, True, False), (False, False, False)], reads
    assert any(s.running and s.running.name == "alone" for s in seen)
    assert seen[-1].running is None and seen[-1].done == 1


def test_nothing_is_published_after_the_stopped_snapshot(home):
    """A drain returns once its last worker has left its workers; that worker's thread
    may still be ending then. Whatever it does, the stop's snapshot stays the last."""
    queue = Queue(home.db)
    for n in range(3):
        push_script(queue, home, f"quick{n}.sh", "true")
    seen: list[Snapshot] = []
    engine = Engine(queue, home)
    engine.subscribe(seen.append)
    others = set(threading.enumerate())
    engine.run(drain=True)
    wait_for(lambda: not any(t.name.startswith("lane ") and t not in others
                             for t in threading.enumerate()),
             what="this engine's lane workers to end")
    assert queue.summary()["done"] == 3
    assert seen[-1].stopped and seen[-1].running is None, seen[-1]


# -- the next run prepared while the one before runs (daemon/ahead.py) ------------------


def said_by_its_run(queue: Queue, home, name: str, out) -> str:
    """A job that writes what its run was told: its id, its token, its attempt."""
    return push_script(queue, home, f"{name}.sh",
                       f'echo "$SLOTH_JOB_ID $SLOTH_RUN_TOKEN $SLOTH_ATTEMPT" > {out}')


def prepared_runs(monkeypatch, while_running) -> list[tuple[str, bool]]:
    """Each Runner.prepare of the test, as (job id, whether `while_running` held then)."""
    from sloth_tray.daemon.runner import Runner

    seen: list[tuple[str, bool]] = []
    prepare = Runner.prepare

    def watched(self, job):
        seen.append((job.id, while_running()))
        return prepare(self, job)

    monkeypatch.setattr(Runner, "prepare", watched)
    return seen


def run_until(engine: Engine, done) -> None:
    thread = threading.Thread(target=engine.run)
    thread.start()
    try:
        done()
    finally:
        engine.stop()
        thread.join(10)


def test_the_next_run_is_prepared_while_the_one_before_runs(home, tmp_path, monkeypatch):
    """Back to back, the job the outcome's claim takes was guessed while the job before
    ran, and its run prepared then, once: the spawn follows the commit at once. It runs
    as its row says, under the token the claim stored."""
    queue = Queue(home.db)
    go, out = tmp_path / "go", tmp_path / "out"
    first = push_script(queue, home, "first.sh", until(go))
    second = said_by_its_run(queue, home, "second", out)
    prepared = prepared_runs(monkeypatch, lambda: not go.exists())
    engine = Engine(queue, home)

    def both_ran() -> None:
        wait_for(lambda: (second, True) in prepared, what="the second run prepared")
        go.touch()
        wait_for(lambda: queue.get(second).state == State.DONE, what="the second job")

    run_until(engine, both_ran)
    assert [job for job, _ in prepared] == [first, second]  # the second, once: ahead
    job = queue.get(second)
    assert out.read_text().split() == [second, job.child["token"], "1"]


def test_a_wrong_guess_at_the_next_job_is_never_what_runs(home, tmp_path, monkeypatch):
    """The job guessed is cancelled while the one before runs: the claim takes another,
    which runs prepared as itself (its id, its attempt, the token its row holds), and
    the run prepared for the guess is never spawned."""
    queue, other = Queue(home.db), Queue(home.db)
    go = tmp_path / "go"
    push_script(queue, home, "first.sh", until(go))
    guessed = said_by_its_run(queue, home, "guessed", tmp_path / "guessed.out")
    taken = said_by_its_run(queue, home, "taken", tmp_path / "taken.out")
    prepared = prepared_runs(monkeypatch, lambda: not go.exists())
    engine = Engine(queue, home)

    def guessed_then_cancelled() -> None:
        wait_for(lambda: (guessed, True) in prepared, what="the guess prepared")
        assert other.cancel(guessed)
        go.touch()
        wait_for(lambda: queue.get(taken).state == State.DONE, what="the job taken")

    run_until(engine, guessed_then_cancelled)
    assert not (tmp_path / "guessed.out").exists()
    assert queue.get(guessed).state == State.CANCELLED
    assert (taken, False) in prepared  # prepared once claimed, the guess being wrong
    job = queue.get(taken)
    assert (tmp_path / "taken.out").read_text().split() == [taken, job.child["token"], "1"]


def test_a_lanes_first_job_is_shown_running_at_once_however_slow_snapshots_are(
        home, tmp_path, monkeypatch):
    """A drop into an idle app is shown running as it starts, even right after a
    snapshot that was slow to read: only a job that follows another in its lane waits
    the longer moment a slow read calls for."""
    monkeypatch.setattr(snapshot_module, "show_running_after", lambda read: 3600.0)
    queue = Queue(home.db)
    go = tmp_path / "go"
    push_script(queue, home, "slow.sh", until(go), delay=0.5)  # due once the app is idle
    engine = Engine(queue, home)
    seen: list[Snapshot] = []
    engine.subscribe(seen.append)

    def shown_running() -> None:
        wait_for(lambda: any(s.running and s.running.name == "slow" for s in seen),
                 timeout=5, what="the lane's first job to be shown running")
        go.touch()

    run_until(engine, shown_running)


def test_a_guessed_job_whose_working_folder_went_meanwhile_fails_as_it_says(
        home, tmp_path, monkeypatch):
    """The next job's run is prepared while the one before runs; its working folder is
    removed before its turn comes. It is prepared again once claimed, and fails for
    what it is, in the words a job never guessed would get."""
    queue = Queue(home.db, max_attempts=1)
    go, work = tmp_path / "go", tmp_path / "work"
    work.mkdir()
    push_script(queue, home, "first.sh", until(go))
    second = push_script(queue, home, "second.sh", "true", options={"cwd": str(work)})
    prepared = prepared_runs(monkeypatch, lambda: not go.exists())

    def folder_gone_then_run() -> None:
        wait_for(lambda: (second, True) in prepared, what="the second run prepared")
        work.rmdir()
        go.touch()
        wait_for(lambda: queue.get(second).state == State.FAILED, what="the second to fail")

    run_until(Engine(queue, home), folder_gone_then_run)
    job = queue.get(second)
    assert job.reason == Reason.COULD_NOT_START
    assert job.last_error == (f"cannot start the job: its working folder {work} is gone (it "
                              "was there when the job was added)")


@given(read=st.floats(min_value=0.0, max_value=1e12) | st.just(math.inf))
def test_back_to_back_snapshots_take_at_most_their_share_of_the_time(read):
    """However long a snapshot takes to read (it counts every waiting job), a burst of
    tiny jobs spends at most SNAPSHOT_SHARE of its time on them; a quick read leaves
    the moment a job runs unseen as it was."""
    from sloth_tray.daemon.snapshot import SHOW_RUNNING_AFTER, SNAPSHOT_SHARE, show_running_after

    moment = show_running_after(read)
    assert moment >= SHOW_RUNNING_AFTER
    if math.isinf(read):
        assert moment == math.inf  # never shown while back to back: no snapshot
    else:
        assert read / moment <= SNAPSHOT_SHARE * (1 + 1e-9)  # the float's last bit
    if read <= SNAPSHOT_SHARE * SHOW_RUNNING_AFTER:
        assert moment == SHOW_RUNNING_AFTER


# Run in a process of its own: SQLite's count is the whole process's, and in a test
# worker other tests' connections come and go (their freed pages may be reused).
IDLE_CACHE_SCRIPT = """
import ctypes, json, sqlite3, sys, threading, time
from pathlib import Path
from sloth_tray.daemon.engine import Engine
from sloth_tray.paths import locate
from sloth_tray.store.queue import Queue, State

def until(condition, seconds=15.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)

home = locate(Path(sys.argv[1])).ensure()
queue = Queue(home.db)
raw = sqlite3.connect(home.db)
raw.executemany(
    "INSERT INTO jobs(id, name, state, max_attempts, not_before, created_at, updated_at, "
    "history) VALUES (?, ?, 'done', 1, 0, 0, 0, ?)",
    [(f"{n:012x}", f"old-{n}", '[[0, "completed", "' + "x" * 300 + '"]]')
     for n in range(6000)])
raw.commit()
raw.close()
with open("/proc/self/maps") as maps:
    loaded = {line.split()[-1] for line in maps if "libsqlite3" in line}
if len(loaded) != 1:
    sys.exit(print(json.dumps({"skip": "Python's sqlite3 is not one shared library"})))
library = ctypes.CDLL(loaded.pop())  # the very one Python loaded: the same handle
library.sqlite3_memory_used.restype = ctypes.c_int64
held = library.sqlite3_memory_used
before = held()
if before == 0:  # built without its count (SQLITE_DEFAULT_MEMSTATUS=0)
    sys.exit(print(json.dumps({"skip": "this SQLite keeps no count of its memory"})))
assert len(queue.jobs(State.DONE)) == 6000  # read through the app's connection
filled = held()
(home.spool / "one.sh").write_text("true")
queue.push("one", script=str(home.spool / "one.sh"))
engine = Engine(queue, home)
thread = threading.Thread(target=engine.run)
thread.start()
until(lambda: queue.summary()["done"] == 6001)
until(lambda: held() < before + (filled - before) / 4)
print(json.dumps({"before": before, "filled": filled, "after": held(),
                  "done": queue.summary()["done"]}))
engine.stop()
thread.join(15)
"""


def test_an_idle_loop_keeps_none_of_the_page_cache_its_work_filled(tmp_path):
    """An app that has run a long history waits holding none of the pages it read: an
    app up for weeks must not hold a full page cache through each idle night. What
    SQLite holds is asked of SQLite itself (sqlite3_memory_used)."""
    done = subprocess.run([sys.executable, "-c", IDLE_CACHE_SCRIPT, str(tmp_path / "home")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    if "skip" in found:
        pytest.skip(found["skip"])
    before, filled, after = found["before"], found["filled"], found["after"]
    assert found["done"] == 6001, "the job did not run"
    assert filled - before > 1024 * 1024, "the reads filled no page cache to give back"
    assert after < before + (filled - before) / 4, (
        f"the idle loop kept its page cache: {after:,} bytes held, {before:,} before the "
        f"reads, {filled:,} after them")
