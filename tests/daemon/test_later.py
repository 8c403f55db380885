"""Exit 75 (EX_TEMPFAIL, "try again later"): rescheduled with backoff, no attempt used,
and not forever: after a day of nothing but "later" the job fails and says so."""

from __future__ import annotations

import sys

import pytest

from sloth_tray.daemon.outcome import Effect, Ending, record
from sloth_tray.daemon.runner import Runner
from sloth_tray.paths import locate
from sloth_tray.store.queue import LATER_FOR_AT_MOST, Queue, Reason, State

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /bin/sh")


def test_a_script_that_exits_75_asks_to_be_run_later(tmp_path):
    home = locate(tmp_path / "home").ensure()
    queue = Queue(home.db)
    script = home.spool / "offline.sh"
    script.write_text('echo "the server is down, try later" >&2\nexit 75\n')
    job_id = queue.push("offline", script=str(script), max_attempts=1)
    job = queue.claim("me")
    attempt = Runner(queue, home, "me").run(job)
    assert (attempt.ending, attempt.code) == (Ending.LATER, 75)
    result = record(queue, "me", job, attempt)
    assert result.effect == Effect.LATER
    job = queue.get(job_id)
    assert (job.state, job.attempts) == (State.PENDING, 0), "max_attempts=1 and still pending"
    assert job.last_error == "the server is down, try later"
    assert queue.history(job_id)[-1].kind == "later"


def later_once(queue: Queue, clock) -> float:
    job = queue.claim("me")
    assert job is not None, "the job should be due"
    assert queue.later(job.id, "me", "not now") == State.PENDING
    delay = queue.get(job.id).not_before - clock.now
    clock.advance(delay)
    return delay


def test_later_backs_off_without_using_attempts_and_gives_up_after_a_day(queue, clock):
    job_id = queue.push("offline", max_attempts=3)
    delays = [later_once(queue, clock) for _ in range(5)]
    assert delays == [2.0, 4.0, 6.0, 6.0, 6.0]  # 2**n, capped (the fixture's cap is 6 s)
    assert queue.get(job_id).attempts == 0

    clock.advance(LATER_FOR_AT_MOST)  # a day of nothing but "later"
    job = queue.claim("me")
    assert queue.later(job.id, "me", "still not now") == State.FAILED
    failed = queue.get(job_id)
    assert (failed.state, failed.reason) == (State.FAILED, Reason.LATER_TOO_LONG)
    assert "asked to run later for" in failed.last_error and "still not now" in failed.last_error


def test_a_real_failure_between_laters_starts_the_day_again(queue, clock):
    job_id = queue.push("flaky", max_attempts=5)
    later_once(queue, clock)
    clock.advance(LATER_FOR_AT_MOST - 60)
    job = queue.claim("me")
    queue.fail(job.id, "me", "exit 1")
    clock.advance(3600)
    job = queue.claim("me")
    assert queue.later(job.id, "me", "later") == State.PENDING  # the day counts from here
    assert queue.get(job_id).attempts == 1  # the real failure used one, the laters none


def test_later_only_counts_from_the_leases_owner(queue):
    job_id = queue.push("offline")
    queue.claim("me")
    assert queue.later(job_id, "someone else", "later") is None
    assert queue.get(job_id).state == State.RUNNING
