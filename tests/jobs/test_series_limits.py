"""A recurring job at the edges of its schedule: a period shorter than the job ahead of
it, a calendar time on a daylight-saving day slept through, a cron job every minute
asleep for a week, a run that starts periods late, a run made due by hand, and a
series started again long after it was cancelled.

Scripts with a `# sloth:` header are pushed into the queue as the inbox pushes a drop;
the clock (and, for calendars, the zone) is injected, and moving it is a sleep.
Each test checks what the user sees: which run runs, how many, and when the next is.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from helpers.clock import BERLIN, FakeClock, berlin

from sloth_tray.store import spool
from sloth_tray.store.queue import Job, Queue, State

HOUR, DAY = 3600.0, 86400.0


def shown(moment: float) -> str:
    return datetime.fromtimestamp(moment, BERLIN).strftime("%a %Y-%m-%d %H:%M:%S %Z")


class Series:
    """A queue on an injected clock, and the scripts dropped into it."""

    def __init__(self, folder: Path, start: float) -> None:
        self.folder = folder
        self.clock = FakeClock(start)
        self.queue = Queue(folder / "queue.db", clock=self.clock, tz=BERLIN, lease_seconds=60,
                           max_attempts=3)
        self.drops = 0

    def drop(self, header: str) -> str:
        """A script with this `# sloth:` header, queued as the inbox queues a drop."""
        self.drops += 1
        job_id = f"{self.drops:012x}"
        script = self.folder / "spool" / job_id / f"job{self.drops}.sh"
        script.parent.mkdir(parents=True)
        script.write_text(f"#!/bin/sh\n# sloth: {header}\necho hi\n")
        return spool.push(self.queue, script, job_id)

    @property
    def now(self) -> float:
        return self.clock.now

    def claim(self) -> Job | None:
        return self.queue.claim("worker")

    def complete(self, job: Job) -> None:
        assert self.queue.complete(job.id, "worker", "ok"), f"{job.id} could not complete"

    def run(self, seconds: float = 0.0) -> Job | None:
        """Claim the job due now, run it for `seconds`, complete it: the job, or None."""
        job = self.claim()
        if job is not None:
            self.clock.advance(seconds)
            self.complete(job)
        return job

    def waiting(self, script_of: str) -> list[Job]:
        """The waiting runs of the series `script_of` (a job id of it) belongs to."""
        script = self.queue.get(script_of).script
        return [j for j in self.queue.jobs(State.PENDING) if j.script == script]

    def next_run(self, script_of: str) -> Job:
        runs = self.waiting(script_of)
        assert len(runs) == 1, (
            f"the series has {len(runs)} runs waiting: "
            f"{[(j.id, shown(j.not_before)) for j in runs]}")
        return runs[0]

    def kinds(self, job_id: str) -> list[str]:
        return [event.kind for event in self.queue.history(job_id)]


@pytest.fixture
def series(tmp_path):
    made = Series(tmp_path, berlin(2026, 3, 2, 8, 0))  # a Monday, 08:00
    yield made
    made.queue.close()


def at(series: Series, moment: float) -> None:
    """The clock jumps to `moment` (the laptop slept): nothing is claimed meanwhile."""
    assert moment >= series.now
    series.clock.now = moment


def test_an_every_second_job_behind_a_ten_second_job_runs_once_then_a_second_after(series):
    """every=1s behind a job that runs 10 s: when the long job ends the series runs once
    (the ten missed seconds are that one run), and its next run is 1 s after that run
    started; never two runs of the series back to back at the same moment."""
    long = series.drop("timeout=1h")
    tick = series.drop("every=1s")
    first = series.claim()
    assert first is not None and first.id == long, "the older job first"
    series.clock.advance(10)
    series.complete(first)
    started = series.now
    ran = series.run()
    assert ran is not None and ran.id == tick, "the series runs when the long job ends"
    again = series.claim()
    assert again is None, (
        f"a second run of the series ({again and again.id}) right after the first, at the "
        "same moment: the missed seconds were to be one run")
    following = series.next_run(tick)
    assert following.not_before == started + 1, (
        f"the next run is due {following.not_before - started:+g} s after the run started; "
        "it must be 1 s (one period) after it")
    series.clock.advance(1)
    assert series.run() is not None, "and it runs then"


@pytest.mark.parametrize(("pushed", "slept_from", "wake", "missed", "next_time"), [
    # Spring: 02:00 -> 03:00 on Sunday 29 March; 02:30 never shows, its run is at 03:00.
    (berlin(2026, 3, 28, 12, 0), berlin(2026, 3, 28, 23, 0), berlin(2026, 3, 29, 10, 0),
     berlin(2026, 3, 29, 3, 0), "Mon 2026-03-30 02:30:00 CEST"),
    # Autumn: 03:00 -> 02:00 on Sunday 25 October; 02:30 shows twice, runs the first time.
    (berlin(2026, 10, 24, 12, 0), berlin(2026, 10, 24, 23, 0), berlin(2026, 10, 25, 10, 0),
     berlin(2026, 10, 25, 2, 30), "Mon 2026-10-26 02:30:00 CET"),
    # Autumn, waking at the second 02:40 (an hour after the first 02:30, after the change).
    (berlin(2026, 10, 24, 12, 0), berlin(2026, 10, 24, 23, 0),
     berlin(2026, 10, 25, 2, 40, fold=1), berlin(2026, 10, 25, 2, 30),
     "Mon 2026-10-26 02:30:00 CET"),
], ids=["spring-forward", "autumn-back", "autumn-back-woken-in-the-repeated-hour"])
def test_at_0230_slept_through_on_a_daylight_saving_day_runs_once_then_the_next_day(
        tmp_path, pushed, slept_from, wake, missed, next_time):
    """at=02:30, asleep across the night the clocks change: on waking, exactly one run
    for the missed time, and the next run is the next day's 02:30, not a second run the
    same night (the repeated autumn hour included)."""
    series = Series(tmp_path, pushed)
    try:
        nightly = series.drop("at=02:30")
        assert series.queue.get(nightly).not_before == missed, shown(
            series.queue.get(nightly).not_before)
        at(series, slept_from)
        assert series.claim() is None, "nothing before the night"
        at(series, wake)
        ran = series.run(seconds=30)
        assert ran is not None and ran.id == nightly, "the missed 02:30 runs on waking"
        assert series.claim() is None, "one run for the missed time, not two"
        following = series.next_run(nightly)
        assert shown(following.not_before) == next_time, (
            f"the next run is at {shown(following.not_before)}, not {next_time}")
        at(series, following.not_before - 1)
        assert series.claim() is None, "nothing until then"
    finally:
        series.queue.close()


def test_a_cron_job_every_minute_asleep_for_a_week_runs_once_then_at_the_next_minute(series):
    """cron="* * * * *", asleep for a week: one run on waking, which says it stands for
    the missed minutes (`caught_up`), and the next run at the next whole minute after
    it started; the series never has two runs waiting."""
    every_minute = series.drop('cron="* * * * *"')  # pushed at 08:00: first run at 08:01
    at(series, berlin(2026, 3, 2, 8, 1))
    first = series.run(seconds=2)
    assert first is not None and first.id == every_minute
    assert len(series.waiting(every_minute)) == 1
    at(series, berlin(2026, 3, 9, 8, 1) + 37.5)  # asleep from 08:01:02 until a week on
    woke = series.now
    assert len(series.waiting(every_minute)) == 1, "the sleep queued nothing"
    late = series.claim()
    assert late is not None, "one run on waking"
    assert "caught_up" in series.kinds(late.id), (
        f"the run on waking must say it stands for the missed minutes: {series.kinds(late.id)}")
    assert series.waiting(every_minute) == [], "nothing else waits while it runs"
    series.clock.advance(3)
    series.complete(late)
    assert series.claim() is None, "one run for the whole week, not one a minute"
    following = series.next_run(every_minute)
    next_minute = berlin(2026, 3, 9, 8, 2)
    assert following.not_before == next_minute, (
        f"the run started at {shown(woke)}; the next is due at {shown(following.not_before)}, "
        f"not at the next whole minute, {shown(next_minute)}")


def test_every_5s_run_late_is_the_only_run_due_and_the_next_is_5s_after_it_started(series):
    """every=5s: run, then 12 s pass (two periods and more): the one run due stands for
    them; a third claim right after it finds nothing, and the next run is due 5 s after
    the late run started, not at once."""
    tick = series.drop("every=5s")
    assert series.run() is not None
    series.clock.advance(12)
    started = series.now
    late = series.run()
    assert late is not None, "the late run runs"
    third = series.claim()
    assert third is None, (
        f"a second run ({third and third.id}) right after the late one, at the same moment")
    following = series.next_run(tick)
    assert following.not_before == started + 5, (
        f"the next run is due {following.not_before - started:+g} s after the late run "
        "started; it must be 5 s after it")


def test_run_now_on_an_hourly_series_keeps_the_next_run_at_its_scheduled_time(series):
    """every=1h: a minute after a run, Run now on the waiting run runs it at once; the
    run after it is still due when the hurried one was scheduled (the hour)."""
    hourly = series.drop("every=1h")
    start = series.now
    assert series.run() is not None
    series.clock.advance(60)
    waiting = series.next_run(hourly)
    assert waiting.not_before == start + HOUR
    assert series.queue.run_now(waiting.id)
    hurried = series.queue.get(waiting.id)
    assert (hurried.not_before, hurried.options["scheduled"]) == (series.now, start + HOUR), (
        "run-now makes it due now and leaves its scheduled time as it was")
    ran = series.run(seconds=5)
    assert ran is not None and ran.id == waiting.id
    assert series.claim() is None
    following = series.next_run(hourly)
    assert following.not_before == start + HOUR, (
        f"run-now moved the series: its next run is due at {shown(following.not_before)}, "
        f"the schedule said {shown(start + HOUR)}")


@pytest.mark.parametrize("retry", [
    lambda queue, job_id: spool.retry(queue, job_id),  # the tray's and the CLI's: header read
    lambda queue, job_id: queue.retry(job_id),  # the queue's own, the options as they were
], ids=["header-read-again", "options-kept"])
def test_retrying_the_cancelled_0900_run_ten_days_later_at_0800_runs_once_then_at_0900(
        series, retry):
    """at=09:00: the waiting run was cancelled (the series ended). Retried ten days later
    at 08:00, it runs now, once, with no catch-up of the days it was off; the next run
    is at 09:00 that same day."""
    morning = series.drop("at=09:00")
    at(series, berlin(2026, 3, 2, 9, 0))
    assert series.run(seconds=10) is not None
    waiting = series.next_run(morning)
    assert shown(waiting.not_before) == "Tue 2026-03-03 09:00:00 CET"
    at(series, berlin(2026, 3, 2, 9, 30))
    assert series.queue.cancel(waiting.id)
    at(series, berlin(2026, 3, 12, 8, 0))  # ten days later
    assert retry(series.queue, waiting.id)
    ran = series.run(seconds=5)
    assert ran is not None and ran.id == waiting.id, "the retried run runs now"
    assert "caught_up" not in series.kinds(waiting.id), (
        f"a retry is one run by hand, not a catch-up: {series.kinds(waiting.id)}")
    assert series.claim() is None, "one run now, not a second for the missed days"
    following = series.next_run(morning)
    assert shown(following.not_before) == "Thu 2026-03-12 09:00:00 CET", (
        f"the next run is at {shown(following.not_before)}; it must be 09:00 that same day")
    assert "caught_up" not in series.kinds(following.id)
