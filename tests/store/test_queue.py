from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import stat
import subprocess
import sys
import threading

import pytest
from helpers.queues import queue_file_of_schema, run_once

from sloth_tray.errors import DatabaseProblem, UnknownJob
from sloth_tray.store import queries, reads
from sloth_tray.store.queue import Queue, Reason, State
from sloth_tray.store.schema import REPEATS, SCHEMA_VERSION, SERIES_LIVE


def kinds(queue: Queue, job_id: str) -> list[str]:
    return [event.kind for event in queue.history(job_id)]


def test_push_makes_a_pending_job_with_a_12_hex_id(queue, clock):
    job_id = queue.push("tidy", script="/tmp/tidy.sh", options={"timeout": 60})
    assert re.fullmatch(r"[0-9a-f]{12}", job_id)
    job = queue.get(job_id)
    assert (job.name, job.state, job.attempts, job.max_attempts) == ("tidy", State.PENDING, 0, 3)
    assert job.not_before == clock.now
    assert job.options == {"timeout": 60}
    assert kinds(queue, job_id) == ["pushed"]


def test_a_delayed_job_is_not_claimed_early_and_is_claimed_once_due(queue, clock):
    job_id = queue.push("later", delay=30)
    assert queue.claim("w") is None
    assert queue.next_wakeup() == clock.now + 30
    clock.advance(29.9)
    assert queue.claim("w") is None
    clock.advance(0.1)
    job = queue.claim("w")
    assert job is not None and job.id == job_id
    assert (job.state, job.attempts, job.lease_owner, job.lease_until) == (
        State.RUNNING, 1, "w", clock.now + 10)


def test_claim_takes_the_oldest_due_job_first(queue, clock):
    first = queue.push("first")
    clock.advance(1)
    second = queue.push("second")
    assert queue.claim("w").id == first
    assert queue.claim("w") is None, "one lane runs one job at a time"
    assert queue.complete(first, "w")
    assert queue.claim("w").id == second
    assert queue.claim("w") is None


def test_a_dead_workers_lease_is_recovered_by_the_next_claim(queue, clock):
    job_id = queue.push("job")
    queue.claim("dead-worker")
    clock.advance(9.9)
    assert queue.claim("other") is None  # the lease still holds
    clock.advance(0.1)
    job = queue.claim("other")
    assert job.id == job_id and job.attempts == 2 and job.lease_owner == "other"
    assert kinds(queue, job_id) == ["pushed", "claimed", "reclaimed", "claimed"]
    assert not queue.complete(job_id, "dead-worker")  # the old owner is out


def test_failure_backs_off_2_4_then_capped_and_lands_in_failed(tmp_path, clock):
    queue = Queue(tmp_path / "q.db", clock=clock, max_attempts=4, backoff_cap=6)
    job_id = queue.push("flaky")
    delays = []
    for attempt in range(1, 4):
        job = queue.claim("w")
        assert job.attempts == attempt
        assert queue.fail(job_id, "w", f"error {attempt}") == "pending"
        delay = queue.get(job_id).not_before - clock.now
        delays.append(delay)
        clock.advance(delay - 0.01)
        assert queue.claim("w") is None, "claimed during the backoff"
        clock.advance(0.01)
    assert delays == [2, 4, 6]  # 2**1, 2**2, then 2**3 capped at 6
    queue.claim("w")
    assert queue.fail(job_id, "w", "the last straw") == "failed"
    job = queue.get(job_id)
    assert (job.state, job.last_error, job.attempts) == (State.FAILED, "the last straw", 4)
    clock.advance(10_000)
    assert queue.claim("w") is None
    assert queue.next_wakeup() is None
    assert kinds(queue, job_id)[-2:] == ["claimed", "failed"]
    assert "next try in 2s" in queue.history(job_id)[2].detail


def test_a_heartbeat_from_a_non_owner_cannot_steal_or_extend_the_lease(queue, clock):
    job_id = queue.push("job")
    queue.claim("owner")
    clock.advance(5)
    assert not queue.heartbeat(job_id, "intruder")
    assert queue.get(job_id).lease_until == clock.now + 5  # unchanged
    assert queue.get(job_id).lease_owner == "owner"
    assert queue.heartbeat(job_id, "owner")
    assert queue.get(job_id).lease_until == clock.now + 10


def test_a_heartbeat_is_not_an_event(queue):
    job_id = queue.push("job")
    queue.claim("w")
    for _ in range(5):
        queue.heartbeat(job_id, "w")
    assert kinds(queue, job_id) == ["pushed", "claimed"]


def test_an_owner_whose_lease_lapsed_but_was_not_taken_renews_it(queue, clock):
    # The laptop slept: the lease ran out but nobody claimed the job meanwhile.
    job_id = queue.push("job")
    queue.claim("sleeper")
    clock.advance(3600)
    assert queue.heartbeat(job_id, "sleeper")
    assert queue.complete(job_id, "sleeper")


def test_complete_and_fail_from_a_replaced_owner_change_nothing(queue, clock):
    job_id = queue.push("job")
    queue.claim("old")
    clock.advance(10)
    queue.claim("new")
    before = queue.get(job_id)
    events_before = queue.history(job_id)
    assert queue.complete(job_id, "old", "stale result") is None
    assert queue.fail(job_id, "old", "stale error") is None
    assert queue.get(job_id) == before
    assert queue.history(job_id) == events_before
    assert queue.complete(job_id, "new", "fresh") == State.DONE
    assert queue.get(job_id).result == "fresh"


def test_a_lease_that_expires_on_the_last_attempt_ends_failed(queue, clock):
    job_id = queue.push("hangs")
    for _ in range(3):
        assert queue.claim("w").id == job_id
        clock.advance(10)
    assert queue.claim("w") is None
    job = queue.get(job_id)
    assert job.state == State.FAILED
    assert "lease expired 3 times" in job.last_error
    assert kinds(queue, job_id) == [
        "pushed", "claimed", "reclaimed", "claimed", "reclaimed", "claimed", "failed"]
    assert queue.next_wakeup() is None


def test_a_run_its_app_left_is_taken_back_at_the_next_start_as_its_apps_not_a_lapse(
        queue, clock):
    """A start ends the leases of the app before it (it holds the home: that app is
    gone), long before they would run out. The history says so, not "expired 0s ago"
    of a lease with most of its minute left."""
    ran, never = queue.push("ran"), queue.push("never")
    assert queue.claim("gone:1", token="t1").id == ran
    assert queue.started(ran, "gone:1", {"token": "t1", "pid": 1, "pgid": 1, "start": "1"})
    clock.advance(3)
    assert queue.expire_leases() == 1  # what the next start does first
    assert queue.claim("new:2").id == ran
    assert queue.history(ran)[-2].detail == "its app gone:1 was gone at this start"
    assert queue.complete(ran, "new:2")
    assert queue.claim("gone:1", token="t2").id == never  # its app died before the spawn
    assert queue.expire_leases() == 1
    assert queue.claim("new:2").id == never
    released = [e.detail for e in queue.history(never) if e.kind == "released"]
    assert released == ["its run never started: its app gone:1 was gone before its "
                        "script was started"]
    last = queue.push("last", max_attempts=1)  # on its last attempt: failed, and says why
    assert queue.complete(never, "new:2")
    assert queue.claim("new:2", token="t4").id == last
    assert queue.started(last, "new:2", {"token": "t4", "pid": 2, "pgid": 2, "start": "2"})
    assert queue.expire_leases() == 1
    assert queue.claim("next:3") is None
    assert queue.get(last).last_error == ("its lease expired 1 time without it finishing "
                                          "(the last time its app new:2 was gone); gave up "
                                          "after 1 attempts")


def test_an_expired_last_attempt_does_not_hide_the_next_due_job(queue, clock):
    hung = queue.push("hung", max_attempts=1)
    queue.claim("w")
    clock.advance(10)
    waiting = queue.push("waiting")
    assert queue.claim("w").id == waiting
    assert queue.get(hung).state == State.FAILED


def test_retry_makes_a_failed_job_due_now_with_attempts_reset(queue, clock):
    job_id = queue.push("job", max_attempts=1)
    queue.claim("w")
    queue.fail(job_id, "w", "boom")
    clock.advance(100)
    assert queue.retry(job_id)
    job = queue.get(job_id)
    assert (job.state, job.attempts, job.not_before, job.last_error) == (
        State.PENDING, 0, clock.now, None)
    assert queue.claim("w").id == job_id
    assert kinds(queue, job_id)[-2:] == ["retried", "claimed"]


def test_retry_of_a_pending_job_does_nothing_and_an_unknown_id_is_an_error(queue):
    job_id = queue.push("job")
    assert queue.retry(job_id) is False
    with pytest.raises(UnknownJob, match="no job with id 'nosuchjob'"):
        queue.retry("nosuchjob")


def test_release_gives_the_job_back_without_counting_the_attempt(queue, clock):
    job_id = queue.push("job")
    queue.claim("w")
    assert not queue.release(job_id, "someone-else")
    assert queue.release(job_id, "w")
    job = queue.get(job_id)
    assert (job.state, job.attempts, job.lease_owner, job.not_before) == (
        State.PENDING, 0, None, clock.now)
    assert queue.claim("w2").attempts == 1
    assert kinds(queue, job_id) == ["pushed", "claimed", "released", "claimed"]


def test_cancel_pending_failed_and_running(queue, clock):
    pending = queue.push("p")
    assert queue.cancel(pending) and queue.get(pending).state == State.CANCELLED
    assert queue.cancel(pending) is False  # already cancelled
    running = queue.push("r")
    queue.claim("w")
    assert queue.cancel(running)
    assert not queue.heartbeat(running, "w"), "the worker must learn it lost the job"
    assert queue.complete(running, "w") is None
    assert queue.retry(running) and queue.get(running).state == State.PENDING


def test_status_counts_every_state_and_what_is_due(queue, clock):
    assert queue.status() == {
        "pending": 0, "running": 0, "done": 0, "failed": 0, "cancelled": 0, "due_now": 0}
    a = queue.push("a")
    queue.push("b", delay=60)
    c = queue.push("c")
    queue.claim("w")  # a
    queue.complete(a, "w")
    queue.claim("w")  # c
    assert queue.status() == {
        "pending": 1, "running": 1, "done": 1, "failed": 0, "cancelled": 0, "due_now": 0}
    clock.advance(10)  # c's lease expired: due again
    assert queue.status()["due_now"] == 1
    assert queue.next_wakeup() == clock.now
    assert c


def test_a_glance_counts_every_state_there_is():
    """A glance counts the states by their words (reads.STATES: it builds no enum), so
    a state added to State must be added there too, or status would never show it."""
    assert reads.STATES == tuple(State)
    assert set(reads.ENDED) == {State.DONE, State.CANCELLED}


def test_jobs_lists_newest_first_and_filters_by_state(queue, clock):
    ids = [queue.push(f"job{i}") for i in range(4)]
    queue.cancel(ids[1])
    assert [job.id for job in queue.jobs()] == ids[::-1]
    assert [job.id for job in queue.jobs(limit=2)] == ids[:1:-1]
    assert [job.id for job in queue.jobs(State.CANCELLED)] == [ids[1]]
    assert [job.id for job in queue.jobs("pending")] == [ids[3], ids[2], ids[0]]


def test_prune_removes_old_finished_jobs_with_their_events(queue, clock):
    old = queue.push("old")
    queue.claim("w")
    queue.complete(old, "w")
    failed = queue.push("failed", max_attempts=1)
    queue.claim("w")
    queue.fail(failed, "w", "x")
    clock.advance(100)
    recent = queue.push("recent")
    queue.cancel(recent)
    assert [job_id for job_id, _ in queue.prune(before=clock.now - 50)] == [old]
    with pytest.raises(UnknownJob):
        queue.get(old)
    with pytest.raises(UnknownJob):
        queue.history(old)
    assert queue.get(failed).state == State.FAILED  # failures wait for the user
    assert queue.status()["done"] == 0 and queue.status()["cancelled"] == 1


def test_resolve_accepts_a_unique_prefix(queue):
    job_id = queue.push("job")
    assert queue.resolve(job_id[:5]) == job_id
    assert queue.resolve(job_id.upper()) == job_id
    with pytest.raises(UnknownJob, match="no job with id 'zz-top'"):
        queue.resolve("zz-top")
    with pytest.raises(UnknownJob):
        queue.resolve("0" * 12 if not job_id.startswith("0") else "f" * 12)


def test_two_queues_in_many_threads_never_hand_one_job_to_two_owners(tmp_path):
    """Nor two jobs of one lane at once: the claim statement keeps a lane to one."""
    path = tmp_path / "shared.db"
    producer = Queue(path)
    pushed = {producer.push(f"job{i}", lane=f"lane{i % 4}") for i in range(300)}
    queues = [Queue(path), Queue(path)]
    claimed: list[tuple[str, str]] = []
    lock = threading.Lock()
    both_at_once: list[str] = []

    def worker(q: Queue, owner: str) -> None:
        while True:
            job = q.claim(owner)
            if job is None:
                if not q.summary()["pending"]:
                    return
                continue  # every lane with work is busy: look again
            # Held: the file must say this one job of its lane is running, whatever
            # the other threads claimed meanwhile.
            running = q.jobs(State.RUNNING, lane=job.lane)
            with lock:
                claimed.append((job.id, owner))
                if len(running) > 1:
                    both_at_once.append(job.lane)
            assert q.complete(job.id, owner)

    threads = [threading.Thread(target=worker, args=(queues[i % 2], f"worker{i}"))
               for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    ids = [job_id for job_id, _ in claimed]
    assert len(ids) == len(set(ids)) == 300
    assert set(ids) == pushed
    assert len({owner for _, owner in claimed}) > 1, "only one worker got work: no contention"
    assert not both_at_once, f"two jobs of one lane ran at once: {both_at_once[:5]}"
    assert producer.status()["done"] == 300


def test_a_new_file_is_private_and_gets_the_schema_and_reopening_keeps_the_data(tmp_path):
    path = tmp_path / "q.db"
    with Queue(path) as q:
        job_id = q.push("kept")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with Queue(path) as q:
        assert q.get(job_id).name == "kept"


def test_a_file_from_a_newer_schema_is_refused_not_downgraded(tmp_path):
    path = tmp_path / "q.db"
    Queue(path).close()
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = path.read_bytes()
    with pytest.raises(DatabaseProblem, match="newer sloth-tray"):
        Queue(path)
    assert path.read_bytes() == before
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1


def test_a_corrupt_file_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "q.db"
    garbage = b"this is not a database\n" * 300
    path.write_bytes(garbage)
    with pytest.raises(DatabaseProblem, match="damaged or is not a sloth-tray queue"):
        Queue(path)
    assert path.read_bytes() == garbage
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.db"]


@pytest.mark.parametrize("content", [b"x", b"\n", b"SQLite format 2\x00" + b"\x00" * 100,
                                     b"SQLite format 2\x00" + b"\x00" * 1000])
def test_a_file_too_short_or_wrong_to_be_a_database_is_not_written_over(tmp_path, content):
    path = tmp_path / "q.db"
    path.write_bytes(content)
    with pytest.raises(DatabaseProblem, match="it was left as it is"):
        Queue(path)
    assert path.read_bytes() == content


def test_someone_elses_sqlite_file_is_refused(tmp_path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE photos (id INTEGER)")
    with pytest.raises(DatabaseProblem, match="not a sloth-tray queue"):
        Queue(path)
    with sqlite3.connect(path) as raw:
        tables = [r[0] for r in raw.execute("SELECT name FROM sqlite_master")]
    assert tables == ["photos"]


@contextlib.contextmanager
def locked_by_another_program(path):
    """The queue's file write-locked by another connection, for as long as inside."""
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()


def test_a_database_locked_past_the_busy_timeout_is_one_sentence(tmp_path):
    path = tmp_path / "q.db"
    q = Queue(path, busy_timeout=0.1)
    with locked_by_another_program(path), \
            pytest.raises(DatabaseProblem, match="locked by another program"):
        q.push("job")
    assert q.push("job")  # once the lock is gone, work goes on


def test_a_lone_statement_refused_by_a_lock_is_one_sentence_and_lets_go_of_the_queue(
        tmp_path):
    """A claim's statements run alone, outside any transaction of ours: refused, they
    still end in one sentence, and the queue's own lock is let go, so that its other
    threads go on."""
    path = tmp_path / "q.db"
    q = Queue(path, busy_timeout=0.1)
    job_id = q.push("job")
    with locked_by_another_program(path), \
            pytest.raises(DatabaseProblem, match="locked by another program"):
        q.claim("w")
    claimed: list = []
    other = threading.Thread(target=lambda: claimed.append(q.claim("w")), daemon=True)
    other.start()
    other.join(10)
    assert not other.is_alive(), "the queue's lock was kept by the refused statement"
    assert claimed[0].id == job_id


def test_a_recurring_job_is_followed_by_its_next_run_one_period_after_it_was_due(queue, clock):
    first = queue.push("hourly", script="/spool/x/hourly.sh", options={"every": 3600})
    start = clock.now
    queue.claim("w")
    clock.advance(30)
    assert queue.complete(first, "w", "ok")
    (after,) = queue.jobs(State.PENDING)
    assert after.not_before == start + 3600  # on the schedule, not 30 s late
    assert (after.name, after.script, after.options["every"]) == (
        "hourly", "/spool/x/hourly.sh", 3600)
    assert queue.history(after.id)[0].detail == f"the next run after {first}"


def test_missed_runs_of_a_recurring_job_coalesce_into_one_prompt_run(queue, clock):
    queue.push("hourly", options={"every": 3600})
    job = queue.claim("w")
    queue.complete(job.id, "w")
    clock.advance(10 * 3600)  # the lid was closed all night
    due = [j for j in queue.jobs(State.PENDING) if j.not_before <= clock.now]
    assert len(due) == 1, "one catch-up run, not ten"
    job = queue.claim("w")
    assert queue.claim("w") is None
    started = clock.now
    clock.advance(5)
    queue.complete(job.id, "w")
    (following,) = queue.jobs(State.PENDING)
    assert following.not_before == started + 3600  # the series goes on from the late run
    clock.now = following.not_before
    job = queue.claim("w")
    queue.complete(job.id, "w")
    (then,) = queue.jobs(State.PENDING)
    assert then.not_before == following.not_before + 3600


def test_a_recurring_job_that_fails_for_good_still_schedules_the_next_run(queue, clock):
    job_id = queue.push("flaky", max_attempts=1, options={"every": 60})
    queue.claim("w")
    assert queue.fail(job_id, "w", "boom") == "failed"
    assert len(queue.jobs(State.PENDING)) == 1


def test_a_retried_run_of_a_series_whose_next_run_waits_adds_no_second_one(queue, clock):
    job_id = queue.push("flaky", max_attempts=1, options={"every": 3600})
    queue.claim("w")
    queue.fail(job_id, "w", "boom")  # failed for good: the series' next run waits
    (waiting,) = queue.jobs(State.PENDING)
    assert queue.retry(job_id)
    assert queue.claim("w").id == job_id  # the retry is due now, the next run in an hour
    assert queue.complete(job_id, "w")
    assert [job.id for job in queue.jobs(State.PENDING)] == [waiting.id]


def test_a_retried_run_waiting_again_leaves_the_series_to_its_next_run(queue, clock):
    """The retried run fails once more and waits for its retry; meanwhile the series'
    next run runs: the series goes on from that one, whatever becomes of the retry."""
    job_id = queue.push("flaky", max_attempts=1, options={"every": 3600})
    queue.claim("w")
    queue.fail(job_id, "w", "boom")
    (waiting,) = queue.jobs(State.PENDING)
    assert queue.retry(job_id, max_attempts=2)
    queue.claim("w")
    assert queue.fail(job_id, "w", "boom again") == "pending"  # waits for its backoff
    assert queue.run_now(waiting.id)
    clock.advance(1)
    assert queue.claim("w").id == waiting.id
    assert queue.complete(waiting.id, "w")
    assert queue.cancel(job_id)
    (following,) = queue.jobs(State.PENDING)
    assert queue.history(following.id)[0].detail == f"the next run after {waiting.id}"


def test_a_run_is_followed_once_and_a_cancelled_series_restarts_from_its_waiting_run(
        queue, clock):
    job_id = queue.push("flaky", max_attempts=1, options={"every": 3600})
    queue.claim("w")
    queue.fail(job_id, "w", "boom")
    (waiting,) = queue.jobs(State.PENDING)
    assert queue.cancel(waiting.id)  # the user ended the series
    assert queue.retry(job_id)  # an old run, once more: it does not restart the series
    queue.claim("w")
    assert queue.complete(job_id, "w")
    assert queue.jobs(State.PENDING) == []
    assert queue.retry(waiting.id)  # its waiting run, revived: the series goes on
    clock.advance(1)
    queue.claim("w")
    assert queue.complete(waiting.id, "w")
    (following,) = queue.jobs(State.PENDING)
    assert queue.history(following.id)[0].detail == f"the next run after {waiting.id}"


def test_cancelling_a_recurring_job_ends_the_series(queue, clock):
    job_id = queue.push("hourly", options={"every": 3600})
    assert queue.cancel(job_id)
    assert queue.jobs(State.PENDING) == []
    job_id = queue.push("hourly", options={"every": 3600})
    queue.claim("w")
    queue.cancel(job_id)  # while running: the worker loses its lease, nothing follows
    assert queue.complete(job_id, "w") is None
    assert queue.jobs(State.PENDING) == []


def test_stopping_a_running_run_gives_up_the_run_not_the_series(queue, clock):
    """The tray's Stop: the run is cancelled and its worker loses the lease; a
    repeating job's next run is queued, one period after this run started."""
    job_id = queue.push("hourly", options={"every": 3600})
    queue.claim("w")
    clock.advance(60)
    assert queue.stop(job_id)
    assert queue.get(job_id).state == State.CANCELLED
    assert not queue.heartbeat(job_id, "w") and queue.complete(job_id, "w") is None
    [following] = queue.jobs(State.PENDING)
    assert following.name == "hourly" and following.not_before == pytest.approx(
        clock() - 60 + 3600)
    assert queue.stop(job_id) is False  # no longer running: nothing to stop
    assert queue.stop(following.id) is False and queue.get(following.id).state == State.PENDING
    once = queue.push("once")
    queue.claim("w")
    assert queue.stop(once) and len(queue.jobs(State.PENDING)) == 1  # nothing follows
    with pytest.raises(UnknownJob):
        queue.stop("nope")


def test_a_refused_push_is_born_failed_and_never_claimed(queue):
    job_id = queue.push("evil", error="refused: not owned by you")
    job = queue.get(job_id)
    assert (job.state, job.last_error) == (State.FAILED, "refused: not owned by you")
    assert kinds(queue, job_id) == ["pushed", "failed"]
    assert queue.claim("w") is None


def test_refuse_fails_a_pending_job_with_the_reason(queue):
    job_id = queue.push("gone")
    assert queue.refuse(job_id, "its script is gone")
    assert queue.get(job_id).last_error == "its script is gone"
    assert queue.history(job_id)[-1].detail == "its script is gone"
    assert queue.get(job_id).reason == Reason.SCRIPT_GONE
    done = queue.push("done")
    queue.claim("w")
    queue.complete(done, "w")
    assert queue.refuse(done, "too late") is False  # a finished job stays finished


def test_two_queues_in_one_process_keep_their_locks_so_the_wal_is_never_deleted(tmp_path):
    # Opening a second Queue must not drop the first one's POSIX locks: another
    # process closing its connection would then delete the WAL still in use.
    path = tmp_path / "q.db"
    first = Queue(path)
    second = Queue(path)
    first.push("before")
    count = [sys.executable, "-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
             "print(c.execute('SELECT count(*) FROM jobs').fetchone()[0]); c.close()", str(path)]
    assert subprocess.run(count, capture_output=True, text=True).stdout.strip() == "1"
    first.push("after")
    assert subprocess.run(count, capture_output=True, text=True).stdout.strip() == "2"
    assert (tmp_path / "q.db-wal").exists()
    second.close()
    first.close()


def test_a_pause_is_kept_in_the_file_off_until_set_and_seen_by_every_connection(queue, clock):
    assert not queue.paused()
    queue.push("due")
    assert queue.summary() == {"pending": 1, "running": 0, "done": 0, "failed": 0,
                               "cancelled": 0, "due_now": 1, "paused": False,
                               "lanes": {"main": {"pending": 1, "running": 0, "done": 0,
                                                  "failed": 0, "cancelled": 0, "due_now": 1,
                                                  "paused": False}}}
    queue.set_paused(True)
    queue.set_paused(True)  # twice is the same as once
    with Queue(queue.path, clock=clock) as other:  # another process, a later start
        assert other.paused()
        assert other.summary()["due_now"] == 0, "nothing will start while paused"
        assert other.summary()["paused"] is True
        other.set_paused(False)
    assert not queue.paused()
    assert queue.summary()["due_now"] == 1


def test_a_queue_of_the_previous_schema_is_migrated_in_place_and_is_not_paused(tmp_path):
    path = tmp_path / "q.db"
    queue_file_of_schema(path, 2, rows=(("0123456789ab", "old", "pending", 0, None, "{}"),))
    with Queue(path) as q:
        assert q.get("0123456789ab").name == "old"
        assert not q.paused()
        q.set_paused(True)
        assert q.paused()
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 16


def test_a_queue_that_kept_its_totals_apart_counts_them_from_its_lanes(tmp_path):
    path = tmp_path / "q.db"
    queue_file_of_schema(path, 13, rows=(
        ("0123456789aa", "a", "done", 0, None, "{}"),
        ("0123456789ab", "b", "done", 0, None, "{}"),
        ("0123456789ac", "c", "cancelled", 0, None, "{}"),
        ("0123456789ad", "d", "pending", 0, None, "{}")))
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as raw:
        raw.execute("UPDATE jobs SET lane = 'other' WHERE name IN ('b', 'd')")
        assert raw.execute("SELECT state, n FROM counts ORDER BY state").fetchall() == [
            ("cancelled", 1), ("done", 2)]
    with Queue(path) as q:
        assert q.status() == {"pending": 1, "running": 0, "done": 2, "failed": 0,
                              "cancelled": 1, "due_now": 1}
        assert run_once(q) == "0123456789ad"
        assert q.prune(before=float("inf")) == [("0123456789aa", None), ("0123456789ab", None),
                                                ("0123456789ac", None), ("0123456789ad", None)]
        assert q.status()["done"] == q.status()["cancelled"] == 0
    with contextlib.closing(sqlite3.connect(path)) as raw:
        assert raw.execute("SELECT count(*) FROM sqlite_master WHERE name = 'counts' "
                           "OR name LIKE 'count_%'").fetchone() == (0,)


def test_a_queue_whose_live_index_had_three_words_gets_two_and_runs_one_job_a_lane(tmp_path):
    path = tmp_path / "q.db"
    queue_file_of_schema(path, 12, rows=(
        ("0123456789aa", "busy", "running", 0, None, "{}"),
        ("0123456789ab", "next in main", "pending", 0, None, "{}"),
        ("0123456789ac", "other lane", "pending", 1, None, "{}"),
        ("0123456789ad", "old", "done", 0, None, "{}")))
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as raw:
        raw.execute("UPDATE jobs SET lane = 'other' WHERE name = 'other lane'")
        raw.execute("UPDATE jobs SET lease_owner = 'w', lease_until = 1e12 "
                    "WHERE state = 'running'")
    with Queue(path) as q:
        assert q.claim("me").name == "other lane"  # main runs its job still
        assert q.claim("me") is None
        assert q.lane_counts()["main"]["running"] == 1
    with contextlib.closing(sqlite3.connect(path)) as raw:
        assert raw.execute("SELECT sql FROM sqlite_master WHERE name = 'jobs_live_lane'"
                           ).fetchone()[0].endswith("WHERE state NOT IN ('done', 'cancelled')")
        assert raw.execute("SELECT lane, state FROM jobs INDEXED BY jobs_live_lane "
                           "WHERE state NOT IN ('done', 'cancelled') ORDER BY lane, state"
                           ).fetchall() == [("main", "pending"), ("main", "running"),
                                            ("other", "running")]


def test_a_queue_of_schema_14_reads_its_waiting_jobs_and_series_on_their_new_indexes(
        tmp_path):
    """The live jobs' index gains their due time, and the series' live runs and all
    their runs get indexes of their own: built from the jobs already there, so a
    glance counts and finds them as before."""
    path = tmp_path / "q.db"
    every, at = json.dumps({"every": 3600}), json.dumps({"at": "09:00"})
    queue_file_of_schema(path, 14, rows=(
        ("0123456789aa", "due", "pending", 0, None, "{}"),
        ("0123456789ab", "later", "pending", 1e12, None, "{}"),
        ("0123456789ac", "net's", "pending", 0, None, "{}"),
        ("0123456789ad", "hourly", "pending", 1e12, "/s/hourly.sh", every),
        ("0123456789ae", "daily", "running", 0, "/s/daily.sh", at),
        ("0123456789af", "broken", "failed", 0, None, "{}"),
        ("0123456789b0", "old", "done", 0, None, every)))
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as raw:
        raw.execute("UPDATE jobs SET lane = 'net' WHERE name IN ('net''s', 'daily')")
        raw.execute("UPDATE jobs SET lease_owner = 'w', lease_until = 1e12 "
                    "WHERE state = 'running'")
    with Queue(path) as q:
        summary = q.summary()
        assert {name: (lane["pending"], lane["running"], lane["failed"], lane["due_now"])
                for name, lane in summary["lanes"].items()} == {
                    "main": (3, 0, 1, 1), "net": (1, 1, 0, 1)}
        assert (summary["pending"], summary["running"], summary["failed"],
                summary["done"], summary["due_now"]) == (4, 1, 1, 1, 2)
        assert sorted(series.name for series in q.recurring_series()) == ["daily", "hourly"]
    with contextlib.closing(sqlite3.connect(path)) as raw:
        assert raw.execute("SELECT name FROM jobs INDEXED BY jobs_series_live WHERE "
                           f"{SERIES_LIVE} ORDER BY name").fetchall() == [("daily",),
                                                                            ("hourly",)]
        assert raw.execute("SELECT count(*) FROM jobs INDEXED BY jobs_live_lane WHERE "
                           "state NOT IN ('done', 'cancelled') AND state = 'pending' "
                           "AND not_before <= 0").fetchone() == (2,)
        assert raw.execute(f"SELECT name FROM jobs INDEXED BY jobs_series_runs WHERE {REPEATS} "
                           "ORDER BY name").fetchall() == [("daily",), ("hourly",), ("old",)]


def test_a_series_from_schema_5_is_followed_once_and_not_by_the_old_trigger(tmp_path, clock):
    """Schema 5 followed every= runs in a trigger; migrated, the queue follows them
    itself, once: a run that ends queues one next run, not two."""
    path = tmp_path / "q.db"
    options = json.dumps({"every": 3600, "scheduled": clock.now})
    queue_file_of_schema(path, 5, rows=(
        ("0123456789ab", "hourly", "pending", clock.now, "/spool/x/hourly.sh", options),))
    with Queue(path, clock=clock) as q:
        started = clock.now
        assert q.claim("w").id == "0123456789ab"
        clock.advance(30)
        assert q.complete("0123456789ab", "w")
        (following,) = q.jobs(State.PENDING)
        assert following.not_before == started + 3600


def test_a_series_from_schema_4_keeps_one_waiting_run_once_migrated(tmp_path, clock):
    """Schema 4's trigger queued a second waiting run when a retried run of a series
    ended; the migration replaces it."""
    path = tmp_path / "q.db"
    options = json.dumps({"every": 3600, "scheduled": clock.now})
    follows = json.dumps([[0, "pushed", "the next run after 0123456789ab"]])
    queue_file_of_schema(path, 4, rows=(
        ("0123456789ab", "hourly", "failed", clock.now, "/spool/x/hourly.sh", options),
        ("ba9876543210", "hourly", "pending", clock.now + 3600, "/spool/x/hourly.sh", options,
         follows)))
    with Queue(path, clock=clock) as q:
        assert q.retry("0123456789ab")
        assert q.claim("w").id == "0123456789ab"
        assert q.complete("0123456789ab", "w")
        assert [job.id for job in q.jobs(State.PENDING)] == ["ba9876543210"]


def test_the_started_note_waits_for_no_fsync_of_its_own_and_the_token_does(queue):
    """Back to back a job waits for the disk twice (push; outcome + next claim): the
    `started` note rides on the next full commit. The token before a spawn is on disk
    before the process exists. Either way the level comes back to FULL."""
    job_id = queue.push("a")
    job = queue.claim("me")
    said: list[str] = []
    queue._db.set_trace_callback(said.append)
    assert queue.started(job.id, "me", {"token": "t"})
    assert not any("NORMAL" in line for line in said)
    said.clear()
    assert queue.started(job.id, "me", {"token": "t", "pid": 1, "pgid": 1, "start": "1"})
    pragmas = [line for line in said if line.startswith("PRAGMA")]
    assert pragmas == ["PRAGMA synchronous = NORMAL", "PRAGMA synchronous = FULL"]
    queue._db.set_trace_callback(None)
    assert queue._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert [e.kind for e in queue.history(job_id)][-1] == "started"


@pytest.mark.parametrize("ending", ["fail", "later", "release", "complete"])
def test_a_run_that_ends_in_a_step_that_asks_is_failed_once_and_says_so(tmp_path, clock, ending):
    """Whatever ended the run, the job's history says one thing: failed, for the step
    (no `backoff` or `released` first), and the call says the state it left."""
    from sloth_tray.for_jobs import sloth_step

    with Queue(tmp_path / "q.db", clock=clock) as queue:
        job_id = queue.push("invoice")
        queue.claim("w", token="t1")
        run = sloth_step.Run(str(queue.path), job_id, "t1", "w")
        sloth_step.begin(queue._db, run, "send", ask=True, kind="shell", now=clock.now)
        said = {"fail": lambda: queue.fail(job_id, "w", "exit 1"),
                "later": lambda: queue.later(job_id, "w", "busy"),
                "release": lambda: queue.release(job_id, "w"),
                "complete": lambda: queue.complete(job_id, "w")}[ending]()
        job = queue.get(job_id)
        assert said == job.state == State.FAILED and job.reason == Reason.STEP_UNSURE
        assert [event.kind for event in queue.history(job_id)] == ["pushed", "claimed", "failed"]
        assert job.last_error.startswith('step "send" was cut short')
        assert job.attempts == (0 if ending in ("later", "release") else 1)


def test_the_queue_fails_a_job_for_a_step_that_asks_in_the_words_the_job_says_it(tmp_path, clock):
    """The job's failure (store/steps.py) and what its next run of the step would say
    (sloth_step, which the queue cannot import) are one sentence, a name needing quotes
    and all."""
    from sloth_tray.for_jobs import sloth_step

    with Queue(tmp_path / "q.db", clock=clock) as queue:
        job_id = queue.push("invoice")
        queue.claim("w", token="t1")
        run = sloth_step.Run(str(queue.path), job_id, "t1", "w")
        sloth_step.begin(queue._db, run, "send it's", ask=True, kind="shell", now=clock.now)
        clock.advance(5)
        assert queue.fail(job_id, "w", "exit 1") == State.FAILED
        (step,) = queue.steps(job_id)
        said = queue.get(job_id).last_error
    assert said == sloth_step.unsure_sentence(job_id, "send it's", step)
    assert "--step-done 'send it'\"'\"'s'" in said and "(run 1)" in said


@pytest.mark.parametrize("options", [{"every": 60.0}, {"cron": "*/5 * * * *"}, {"at": "09:00"}],
                         ids=["every", "cron", "at"])
def test_each_run_of_a_series_is_in_the_lane_it_was_dropped_into(queue, clock, options):
    first = queue.push("sync", script="/x/sync.sh", options=dict(options), lane="net")
    clock.advance(86400)  # every kind is due by then
    for _ in range(2):
        run = queue.claim("w")
        assert run is not None and run.lane == "net"
        assert queue.complete(run.id, "w") == State.DONE
        (waiting,) = queue.jobs(State.PENDING)
        assert waiting.lane == "net" and waiting.id != first
        clock.advance(86400)


@pytest.mark.parametrize("pause", ["its lane", "the queue"])
def test_a_lease_that_ran_out_in_a_paused_lane_wakes_nothing_until_the_resume(
        queue, clock, pause):
    """A run that died (another app's, or a worker of ours) leaves its lease to run out.
    While its lane is paused nothing takes it back, so its end is no time to wake: a
    wake-up time in the past would have the app's loop spin until the resume."""
    lane = "net" if pause == "its lane" else None
    job_id = queue.push("sync", lane="net")
    assert queue.claim("other").id == job_id
    queue.set_paused(True, lane=lane)
    clock.advance(3600)
    assert queue.claim("me") is None
    assert queue.next_wakeup() is None
    queue.set_paused(False, lane=lane)
    assert queue.next_wakeup() <= clock.now
    assert queue.claim("me").id == job_id


@pytest.mark.parametrize("pause", ["its lane", "the queue", "the queue, its lane resumed"])
def test_a_job_waiting_in_a_paused_lane_is_no_time_to_wake(queue, clock, pause):
    """A paused lane's jobs start at the resume, not when they fall due: while it holds,
    their due times wake nothing. A lane resumed on its own under the queue's pause
    runs, and its due times count."""
    queue.push("sync", lane="net", delay=30)
    queue.push("other lane's", lane="web", delay=90)
    if pause == "its lane":
        queue.set_paused(True, lane="net")
        assert queue.next_wakeup() == clock.now + 90  # the other lane's, not net's
        queue.set_paused(False, lane="net")
    elif pause == "the queue":
        queue.set_paused(True)
        assert queue.next_wakeup() is None
        queue.set_paused(False)
    else:
        queue.set_paused(True)
        queue.set_paused(False, lane="net")
        assert queue.next_wakeup() == clock.now + 30
        return
    assert queue.next_wakeup() == clock.now + 30


# -- the claim, read whole ------------------------------------------------------------------

def _docstring_sql(doc: str) -> list[str]:
    """The SQL blocks of a docstring (each after a line ending `::`), whitespace made one."""
    return [" ".join(block.split()) for block in re.findall(r"::\n\n((?:        .*\n)+)", doc)]


def _as_traced(sql: str, params: dict) -> str:
    """`sql` as SQLite traces it once run: each :name replaced by the value it bound."""
    def literal(match: re.Match) -> str:
        value = params[match.group(1)]
        if value is None:
            return "NULL"
        if isinstance(value, str):
            return "'" + value.replace("'", "''") + "'"
        return repr(value)

    return re.sub(r":(\w+)", literal, " ".join(sql.split()))


def _once(traced: list[str]) -> list[str]:
    """A trace with each statement once: its triggers trace it again under its own text."""
    return [line for i, line in enumerate(traced) if i == 0 or traced[i - 1] != line]


def test_the_claims_docstring_shows_its_statements_whole():
    from sloth_tray.store.claims import claim_statements

    usual = claim_statements()
    assert _docstring_sql(claim_statements.__doc__) == [
        " ".join(sql.split()) for sql in (usual.due, usual.lapsed, usual.taken_back,
                                          usual.ahead)]
    assert usual.params == {}
    # The clauses the docstring says join each `<= :now`, in its order.
    some = claim_statements("net", {"b", "a"}, frozenset({"ac", "battery"}))
    waits = ("AND NOT coalesce(instr(',' || json_extract(options, '$.require') || ',', "
             ":unmet0) OR instr(',' || json_extract(options, '$.require') || ',', :unmet1), 0)")
    lanes = "AND lane = :lane AND lane NOT IN (:skip0, :skip1)"
    assert some.due == usual.due.replace("not_before <= :now",
                                         f"not_before <= :now {waits} {lanes}")
    assert some.lapsed == usual.lapsed.replace(
        "not_before <= :now", f"not_before <= :now {waits} {lanes}").replace(
        "lease_until <= :now", f"lease_until <= :now {lanes}")
    assert some.taken_back == usual.taken_back
    assert some.ahead == usual.ahead.replace("not_before <= :now",
                                             f"not_before <= :now {waits} {lanes}")
    assert some.params == {"unmet0": ",ac,", "unmet1": ",battery,", "lane": "net",
                           "skip0": "a", "skip1": "b"}


def test_a_claim_builds_no_temporary_table_but_the_one_its_returning_fills(queue, clock):
    """SQLite makes a temporary b-tree for `x IN (a, b, c)` and `x NOT IN (SELECT ...)`
    each time a statement runs (the live index's condition included, tested at every
    write of a state): a claim, a lapsed lease's look and a run's end make none."""
    from sloth_tray.store.queue import claim_statements

    def temporary_tables(sql: str, params: dict) -> int:
        return sum(row[1] == "OpenEphemeral" for row in queue._db.execute(f"EXPLAIN {sql}",
                                                                           params))

    bound = {"now": clock.now, "owner": "me", "lease": 60.0, "child": None}
    usual = claim_statements()
    assert temporary_tables(usual.due, bound) == 1  # RETURNING's rows
    assert temporary_tables(usual.lapsed, bound) == 0
    assert temporary_tables(usual.ahead, bound) == 0  # nor the guess at a lane's next
    assert temporary_tables("UPDATE jobs SET state = 'done' WHERE id = :id",
                            {"id": queue.push("job")}) == 0


def test_a_claim_runs_the_statements_its_docstring_shows(queue, clock):
    """What SQLite ran, as it traces it, is the docstring's SQL with the values bound:
    the usual claim, then a lapsed lease taken back."""
    from sloth_tray.store.claims import claim_statements

    due, lapsed, taken_back, _ = _docstring_sql(claim_statements.__doc__)
    said: list[str] = []
    job_id = queue.push("job")
    queue._db.set_trace_callback(said.append)
    assert queue.claim("dead", token="t1").id == job_id
    bound = {"now": clock.now, "owner": "dead", "lease": queue.lease_seconds,
             "child": '{"token": "t1"}'}
    usual = [_as_traced(lapsed, bound), _as_traced(due, bound)]
    said[:] = _once(said)
    assert [line for line in said if line in usual] == usual
    assert said[-1] == usual[-1]  # autocommit: the lease is the claim's last word
    assert queue.started(job_id, "dead", {"token": "t1", "pid": 1, "pgid": 1, "start": "1"})
    clock.advance(queue.lease_seconds)  # its run started, and its worker is gone
    said.clear()
    assert queue.claim("other").id == job_id
    bound |= {"now": clock.now, "owner": "other", "child": None, "id": job_id,
              "reclaimed": "lease of dead expired 0s ago"}
    back = [_as_traced(lapsed, bound), _as_traced(lapsed, bound), _as_traced(taken_back, bound)]
    said[:] = _once(said)
    assert [line for line in said if line in back] == back  # looked at again inside BEGIN
    assert said[-2:] == [back[-1], "COMMIT"]
    assert kinds(queue, job_id)[-2:] == ["reclaimed", "claimed"]
    queue._db.set_trace_callback(None)


def _steps_of(db: sqlite3.Connection, look) -> int:
    """The SQLite virtual machine's steps `look` costs on `db`: what a query reads."""
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    db.set_progress_handler(count, 1)
    try:
        look()
    finally:
        db.set_progress_handler(None, 1)
    return steps[0]


@pytest.mark.parametrize("look", ["waits_on", "reanchor", "waiting_on"])
def test_the_looks_of_every_pass_cost_the_same_however_long_the_line_of_due_jobs(
        tmp_path, clock, look):
    """The loop looks before each sleep whether a due job waits on an unmet condition,
    and whether a waiting job changed "in the future" (a clock set back); each
    snapshot counts the due jobs waiting per unmet condition. In a burst, with none
    of either, these looks must not read every due job, or a burst of n costs n
    squared."""
    from sloth_tray.store import calendar, reads

    def cost(due: int) -> int:
        queue = Queue(tmp_path / f"q{due}.db", clock=clock, synchronous="OFF")
        with queue.batch():
            for i in range(due):
                queue.push(f"j{i}", script=f"/spool/{i}.sh")
            queue.push("needs ac", script="/spool/ac.sh", delay=3600,
                       options={"require": "ac"})
        queue.claim("me")  # its lane is busy: the rest wait behind it
        with contextlib.closing(sqlite3.connect(queue.path)) as db:
            if look == "waits_on":
                run = lambda: queries.waits_on(db, clock.now, frozenset({"ac", "network"}))  # noqa: E731
            elif look == "waiting_on":
                run = lambda: reads.waiting_on(db, clock.now, frozenset({"ac", "network"}))  # noqa: E731
            else:
                run = lambda: calendar.any_ahead(db, clock.now)  # noqa: E731
            assert not run()
            steps = _steps_of(db, run)
        queue.close()
        return steps

    few, many = cost(10), cost(2000)
    assert many < 2 * few + 100, f"{look}: {few} steps with 10 due jobs, {many} with 2000"
