"""Exit 75 (EX_TEMPFAIL, "try again later"): rescheduled with backoff, no attempt used,
and not forever: after a day of nothing but "later" the job fails and says so."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest
from helpers.clock import FakeClock
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

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



MONTH = 31 * 86400.0


def hourly_queue(tmp_path, clock) -> Queue:
    """A queue whose "later"s back off to an hour at most, as the app's do: a day of them
    is a few dozen runs."""
    return Queue(tmp_path / "hourly.db", clock=clock, backoff_cap=3600)


def laters_until_it_gives_up(queue: Queue, clock, job_id: str, *, at_most: float) -> float:
    """Claim the job and have it say "later" each time it is due, until it fails: the
    time the clock moved meanwhile (each wait as the queue set it)."""
    began = clock.now
    while clock.now - began < at_most:
        queue.next_wakeup()  # the look the daemon makes before each sleep
        clock.now = max(clock.now, queue.get(job_id).not_before)
        job = queue.claim("me")
        assert job is not None, "the job should be due"
        if queue.later(job.id, "me", "not now") == State.FAILED:
            return clock.now - began
    return clock.now - began


def test_laters_on_a_clock_a_month_ahead_give_up_a_day_after_the_clock_is_set_right(tmp_path,
                                                                                   clock):
    """Three "later"s on a clock a month ahead, then the clock set right: the day of
    "later" counts real time, not the month the clock was wrong by."""
    queue = hourly_queue(tmp_path, clock)
    job_id = queue.push("offline", max_attempts=3)
    clock.advance(MONTH)  # the clock is a month ahead
    wrong_clock = sum(later_once(queue, clock) for _ in range(3))  # real seconds too
    clock.advance(-MONTH)  # set right
    took = laters_until_it_gives_up(queue, clock, job_id, at_most=3 * 86400)
    failed = queue.get(job_id)
    assert (failed.state, failed.reason) == (State.FAILED, Reason.LATER_TOO_LONG), \
        f"still {failed.state.value} {took / 86400:.1f} days after the clock was set right"
    # A day after the first "later", give or take the last wait (an hour at most).
    assert LATER_FOR_AT_MOST <= wrong_clock + took <= LATER_FOR_AT_MOST + 3600


# -- stated as the user would ------------------------------------------------------------

set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "sloth-tray-hypothesis"))

# Where the clock is set back: after which "later", how far, and how long into the wait
# that followed it (a fraction of it).
SET_BACK = st.tuples(st.integers(1, 40), st.floats(1.0, 2 * MONTH), st.floats(0.0, 1.0))


@settings(max_examples=25, deadline=None, database=None)
@given(ahead=st.floats(0.0, 2 * MONTH), set_backs=st.lists(SET_BACK, max_size=3))
def test_a_job_that_keeps_saying_try_later_gives_up_after_a_day_of_real_time(ahead, set_backs):
    """However far ahead the clock starts and however often it is set back, a job that
    says "try later" every time gives up once a day of real time has passed since its
    first "later", and not before: at most an hour's wait (the backoff's cap) later for
    each time the clock was set back in the middle of one, and once more for the last."""
    with tempfile.TemporaryDirectory() as folder:
        wall = FakeClock(1_000_000.0 + ahead)
        queue = Queue(Path(folder) / "queue.db", clock=wall, backoff_cap=3600)
        try:
            job_id = queue.push("offline")
            real, said, gave_up = 0.0, 0, False
            jumps = sorted(set_backs)
            while said < 2000:
                queue.next_wakeup()  # the daemon's look before it sleeps
                wait = max(queue.get(job_id).not_before - wall.now, 0.0)
                while jumps and jumps[0][0] == said:  # set back during this wait
                    _, back, part = jumps.pop(0)
                    wall.advance(wait * part)
                    real += wait * part
                    wall.advance(-back)
                    queue.next_wakeup()
                    wait = max(queue.get(job_id).not_before - wall.now, 0.0)
                wall.advance(wait)
                real += wait  # real time, from the first "later" on
                job = queue.claim("me")
                assert job is not None, "the job should be due"
                said += 1
                if queue.later(job.id, "me", "not now") == State.FAILED:
                    gave_up = True
                    break
        finally:
            queue.close()
    assert gave_up, f"still trying after {real / 86400:.1f} days of real time"
    assert LATER_FOR_AT_MOST <= real <= LATER_FOR_AT_MOST + 3600 * (len(set_backs) + 1), \
        f"gave up after {real / 86400:.2f} days of real time"
