"""Every run happens once: a series after a late start, a run made due by hand, a
series started again, a clock set wrong and then corrected, a run of "try later"
across quits, and a claim whose run never started.

Through the Queue with an injected clock (and zone): each test states what a user
of a repeating job would check.
"""

from __future__ import annotations

from helpers.clock import berlin
from helpers.queues import run_once

from sloth_tray.store.queue import LATER_FOR_AT_MOST, Queue, Reason, State

HOUR, DAY, YEAR = 3600.0, 86400.0, 365 * 86400.0


def waiting(queue: Queue):
    (job,) = queue.jobs(State.PENDING)
    return job


def kinds(queue: Queue, job_id: str) -> list[str]:
    return [event.kind for event in queue.history(job_id)]


# -- a series started late --------------------------------------------------------------------


def test_an_every_job_started_periods_late_runs_once_and_then_a_period_later(queue, clock):
    """every=5s, run, 12 s pass (a sleep, a pause, a long job): one run, not two."""
    queue.push("tick", options={"every": 5})
    assert run_once(queue)
    clock.advance(12)
    late = clock.now
    assert run_once(queue)
    assert queue.claim("w") is None, "the missed periods were one run"
    assert waiting(queue).not_before == late + 5


def test_an_every_job_behind_a_long_job_runs_once_when_it_ends(queue, clock):
    queue.push("long")
    queue.push("tick", options={"every": 1})
    long = queue.claim("w")
    clock.advance(10)  # ten periods of the series pass while `long` runs
    queue.complete(long.id, "w")
    started = clock.now
    assert run_once(queue)
    assert queue.claim("w") is None
    assert waiting(queue).not_before == started + 1


def test_a_series_on_time_keeps_its_period_between_runs(queue, clock):
    queue.push("hourly", options={"every": HOUR})
    start = clock.now
    job = queue.claim("w")
    clock.advance(30)
    queue.complete(job.id, "w")
    assert waiting(queue).not_before == start + HOUR  # on the schedule, not 30 s late


# -- run now -----------------------------------------------------------------------------------


def test_run_now_on_an_every_series_is_an_extra_run_and_leaves_the_schedule(queue, clock):
    queue.push("hourly", options={"every": HOUR})
    start = clock.now
    assert run_once(queue)
    clock.advance(60)
    hurried = waiting(queue)
    assert queue.run_now(hurried.id)
    assert run_once(queue) == hurried.id
    assert waiting(queue).not_before == start + HOUR, "the next run is where it was"


def test_run_now_on_a_calendar_series_keeps_its_next_time(berlin_queue):
    clock = berlin_queue.clock_
    berlin_queue.push("report", options={"at": "08:35"})
    clock.now = berlin(2026, 3, 2, 8, 35)
    assert run_once(berlin_queue)
    clock.now += 17
    tomorrow = waiting(berlin_queue)
    assert tomorrow.not_before == berlin(2026, 3, 3, 8, 35)
    berlin_queue.run_now(tomorrow.id)
    assert run_once(berlin_queue) == tomorrow.id
    assert waiting(berlin_queue).not_before == berlin(2026, 3, 3, 8, 35), "tomorrow is kept"


def test_a_hurried_run_that_waits_past_its_time_is_that_times_run(queue, clock):
    queue.push("hourly", options={"every": HOUR})
    assert run_once(queue)
    hurried = waiting(queue)
    queue.run_now(hurried.id)
    clock.advance(2 * HOUR)  # paused, asleep: it starts after its own time
    started = clock.now
    assert run_once(queue) == hurried.id
    assert queue.claim("w") is None, "not its time's run as well"
    assert waiting(queue).not_before == started + HOUR


# -- retrying the cancelled waiting run ----------------------------------------------------------


def test_retrying_the_cancelled_waiting_run_of_a_calendar_series_starts_it_again(berlin_queue):
    clock = berlin_queue.clock_
    job_id = berlin_queue.push("report", options={"at": "09:00"})
    assert berlin_queue.cancel(job_id)
    clock.now = berlin(2026, 3, 12, 8, 0)  # ten days later
    assert berlin_queue.retry(job_id)
    assert run_once(berlin_queue) == job_id
    assert berlin_queue.claim("w") is None, "one run now, not a catch-up as well"
    assert "caught_up" not in kinds(berlin_queue, job_id)
    assert waiting(berlin_queue).not_before == berlin(2026, 3, 12, 9, 0)


def test_retrying_the_cancelled_waiting_run_of_an_every_series_starts_it_again(queue, clock):
    job_id = queue.push("daily", options={"every": DAY})
    assert queue.cancel(job_id)
    clock.advance(10 * DAY)
    restarted = clock.now
    assert queue.retry(job_id)
    assert run_once(queue) == job_id
    assert queue.claim("w") is None
    assert waiting(queue).not_before == restarted + DAY


# -- a clock set wrong, then corrected -------------------------------------------------------------


def test_a_clock_set_back_a_year_holds_nothing_up(berlin_queue):
    clock = berlin_queue.clock_
    real = clock.now
    clock.now = real + YEAR  # a wrong clock: a year ahead
    delayed = berlin_queue.push("later", delay=HOUR)
    berlin_queue.push("hourly", options={"every": HOUR})
    berlin_queue.push("morning", options={"at": "09:00"})
    assert run_once(berlin_queue)  # the hourly one, now; its next run in an hour
    clock.now = real + 60  # corrected
    assert berlin_queue.next_wakeup() <= clock.now + HOUR
    waits = {job.name: job.not_before - clock.now for job in berlin_queue.jobs(State.PENDING)}
    assert waits["later"] <= HOUR and waits["hourly"] <= HOUR
    morning = [j for j in berlin_queue.jobs(State.PENDING) if j.name == "morning"][0]
    assert morning.not_before == berlin(2026, 3, 2, 9, 0), "its next 09:00 on the right clock"
    assert morning.options["scheduled"] == morning.not_before
    assert "reanchored" in kinds(berlin_queue, delayed)


def test_a_backoff_waits_its_own_length_after_the_clock_is_corrected(queue, clock):
    real = clock.now
    clock.now = real + DAY
    job_id = queue.push("flaky")
    queue.claim("w")
    assert queue.fail(job_id, "w", "boom") == State.PENDING  # backs off 2 s
    clock.now = real
    queue.claim("w")  # the next look
    assert queue.get(job_id).not_before <= clock.now + 2


def test_a_clock_set_back_an_hour_moves_no_calendar_run_onto_a_time_it_ran(berlin_queue):
    """A clock kept in local time by another system: an hour ahead, then set right."""
    clock = berlin_queue.clock_
    berlin_queue.push("morning", options={"at": "09:00"})
    clock.now = berlin(2026, 3, 2, 9, 0)  # really 08:00
    assert run_once(berlin_queue)
    clock.now = berlin(2026, 3, 2, 8, 1)
    berlin_queue.next_wakeup()
    assert waiting(berlin_queue).not_before == berlin(2026, 3, 3, 9, 0), "not twice today"


def test_a_clock_set_back_less_than_a_second_changes_nothing(queue, clock):
    job_id = queue.push("later", delay=HOUR)
    clock.advance(-0.5)
    queue.claim("w")
    assert queue.get(job_id).not_before == clock.now + 0.5 + HOUR
    assert "reanchored" not in kinds(queue, job_id)


def test_overdue_counts_from_now_when_the_last_success_lies_in_the_future(queue, clock):
    queue.push("hourly", options={"every": HOUR})
    real = clock.now
    clock.now = real + YEAR
    assert run_once(queue)
    clock.now = real  # corrected: the last success is a year ahead
    verdict = queue.overdue(paused=False)
    assert verdict.next_change is not None and verdict.next_change <= clock.now + 2 * HOUR


# -- "try later" across quits -------------------------------------------------------------------


def test_a_day_of_try_later_is_counted_across_quits(tmp_path, clock):
    queue = Queue(tmp_path / "later.db", clock=clock, backoff_cap=HOUR)
    job_id = queue.push("offline")
    start = clock.now
    laters = 0
    for _ in range(1000):  # far more passes than a day of backoffs capped at an hour needs
        if clock.now - start > 2 * LATER_FOR_AT_MOST:
            break
        job = queue.claim("w")
        if job is None:
            clock.now = queue.next_wakeup()
            continue
        if laters % 3 == 2:  # the laptop shuts down while it runs: a quit gives it back
            assert queue.release(job.id, "w")
            laters += 1
            continue
        if queue.later(job.id, "w", "not now") == State.FAILED:
            break
        laters += 1
    job = queue.get(job_id)
    assert (job.state, job.reason) == (State.FAILED, Reason.LATER_TOO_LONG)
    assert clock.now - start < LATER_FOR_AT_MOST + HOUR
    queue.close()


def test_a_release_does_not_start_the_backoff_of_try_later_again(queue, clock):
    job_id = queue.push("offline")
    for _ in range(3):
        queue.claim("w")
        queue.later(job_id, "w", "not now")
        clock.now = queue.get(job_id).not_before
    queue.claim("w")
    queue.release(job_id, "w")
    queue.claim("w")
    queue.later(job_id, "w", "not now")
    assert queue.get(job_id).not_before - clock.now == 6.0  # 2**4, capped at 6, not 2


# -- a claim whose run never started ---------------------------------------------------------------


def test_a_lease_whose_run_never_started_is_given_back_not_counted(queue, clock):
    """Claimed with the last job's outcome, then the daemon died before the spawn."""
    job_id = queue.push("once", max_attempts=1)
    assert queue.claim("dead", token="run-token").id == job_id
    clock.advance(11)  # its lease runs out
    job = queue.claim("next")
    assert job is not None and job.id == job_id, "it runs: its one attempt was never used"
    assert job.attempts == 1
    assert "released" in kinds(queue, job_id) and "reclaimed" not in kinds(queue, job_id)


def test_a_lease_whose_run_started_is_taken_back_and_counted(queue, clock):
    job_id = queue.push("once", max_attempts=1)
    queue.claim("dead", token="run-token")
    assert queue.started(job_id, "dead", {"token": "run-token", "pid": 4242})
    clock.advance(11)
    assert queue.claim("next") is None
    job = queue.get(job_id)
    assert (job.state, job.reason) == (State.FAILED, Reason.LEASE_EXPIRED)
