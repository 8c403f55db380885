"""Calendar schedules (at=, cron=) in local time, and what a laptop that slept through
its times gets: one run (catchup=once), none (catchup=skip), none past a window.

Time and the time zone are injected: Europe/Berlin moves its clocks on
2026-03-29 (02:00 -> 03:00) and 2026-10-25 (03:00 -> 02:00).
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime

import pytest
from helpers.clock import BERLIN, berlin
from helpers.examples import examples
from helpers.queues import run_once
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from sloth_tray.errors import SlothError
from sloth_tray.jobs import schedule
from sloth_tray.jobs.header import BadJobFile, parse_options
from sloth_tray.store import spool
from sloth_tray.store.queue import Queue, State

set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "sloth-tray-hypothesis"))
FUZZ = settings(max_examples=examples(300), deadline=None, database=None)

DAY = 86400.0


def shown(moment: float) -> str:
    return datetime.fromtimestamp(moment, BERLIN).strftime("%a %Y-%m-%d %H:%M %Z")


def run_times(calendar: schedule.Calendar, after: float, count: int) -> list[str]:
    times = []
    for _ in range(count):
        after = schedule.next_time(calendar, after, BERLIN)
        times.append(shown(after))
    return times


# -- calendar times ---------------------------------------------------------------------------


@pytest.mark.parametrize("calendar", [schedule.parse_at("02:30"),
                                      schedule.parse_cron("30 2 * * *")])
def test_a_0230_that_the_spring_jump_skips_runs_once_at_the_jump(calendar):
    assert run_times(calendar, berlin(2026, 3, 28, 3, 0), 3) == [
        "Sun 2026-03-29 03:00 CEST",  # 02:30 never happens: run when the clock jumps
        "Mon 2026-03-30 02:30 CEST",
        "Tue 2026-03-31 02:30 CEST",
    ]


@pytest.mark.parametrize("calendar", [schedule.parse_at("02:30"),
                                      schedule.parse_cron("30 2 * * *")])
def test_a_0230_that_autumn_shows_twice_runs_once_the_first_time(calendar):
    first = schedule.next_time(calendar, berlin(2026, 10, 24, 3, 0), BERLIN)
    assert first == berlin(2026, 10, 25, 2, 30, fold=0)  # CEST, the first of the two
    assert run_times(calendar, first, 1) == ["Mon 2026-10-26 02:30 CET"]
    # From inside the repeated hour, the second 02:30 is not another run either.
    assert run_times(calendar, berlin(2026, 10, 25, 2, 15, fold=1), 1) == [
        "Mon 2026-10-26 02:30 CET"]
    assert schedule.previous_time(calendar, berlin(2026, 10, 25, 2, 45, fold=1), BERLIN) == first


def test_two_times_inside_the_spring_gap_run_once_at_the_jump():
    calendar = schedule.parse_at("02:00,02:30,04:00")
    assert run_times(calendar, berlin(2026, 3, 29, 1, 0), 2) == [
        "Sun 2026-03-29 03:00 CEST", "Sun 2026-03-29 04:00 CEST"]


def test_weekday_lists_ranges_and_several_times_a_day():
    friday_noon = berlin(2026, 3, 6, 12, 0)
    assert run_times(schedule.parse_at("mon-fri@09:00"), friday_noon, 3) == [
        "Mon 2026-03-09 09:00 CET", "Tue 2026-03-10 09:00 CET", "Wed 2026-03-11 09:00 CET"]
    assert run_times(schedule.parse_at("sat,sun 10:30"), friday_noon, 3) == [
        "Sat 2026-03-07 10:30 CET", "Sun 2026-03-08 10:30 CET", "Sat 2026-03-14 10:30 CET"]
    assert run_times(schedule.parse_at("09:00,17:30"), friday_noon, 3) == [
        "Fri 2026-03-06 17:30 CET", "Sat 2026-03-07 09:00 CET", "Sat 2026-03-07 17:30 CET"]
    assert run_times(schedule.parse_at("fri-mon@9:00"), friday_noon, 4) == [  # wraps the week
        "Sat 2026-03-07 09:00 CET", "Sun 2026-03-08 09:00 CET", "Mon 2026-03-09 09:00 CET",
        "Fri 2026-03-13 09:00 CET"]


def test_cron_goes_through_croniter_and_agrees_with_at():
    start = berlin(2026, 3, 1, 0, 0)
    assert run_times(schedule.parse_cron("0 9 * * 1-5"), start, 15) == \
        run_times(schedule.parse_at("mon-fri@09:00"), start, 15)
    assert run_times(schedule.parse_cron("*/20 23 L * *"), berlin(2026, 3, 30, 0, 0), 4) == [
        "Tue 2026-03-31 23:00 CEST", "Tue 2026-03-31 23:20 CEST", "Tue 2026-03-31 23:40 CEST",
        "Thu 2026-04-30 23:00 CEST"]


# -- missed times ------------------------------------------------------------------------------

MONDAY_0900 = berlin(2026, 3, 2, 9, 0)


@pytest.mark.parametrize("catchup, window, now, run_now, kept, dropped", [
    ("once", None, berlin(2026, 3, 4, 12, 0), True, 3, 0),  # three 09:00s: one run
    ("skip", None, berlin(2026, 3, 4, 12, 0), False, 0, 3),
    ("skip", None, berlin(2026, 3, 4, 9, 0, ) + 30, True, 1, 2),  # today's 09:00 is on time
    ("once", 6 * 3600, berlin(2026, 3, 4, 12, 0), True, 1, 2),
    ("once", 6 * 3600, berlin(2026, 3, 4, 16, 0), False, 0, 3),  # all past the window
])
def test_missed_times_become_one_run_none_or_only_those_in_the_window(
        catchup, window, now, run_now, kept, dropped):
    plan = schedule.catch_up(schedule.parse_at("09:00"), MONDAY_0900, now, BERLIN,
                             catchup=catchup, window=window)
    assert (plan.run_now, len(plan.kept), len(plan.dropped)) == (run_now, kept, dropped)
    assert plan.next_due == berlin(2026, 3, 5, 9, 0)
    if run_now:
        assert plan.latest == berlin(2026, 3, 4, 9, 0)


def test_a_year_asleep_with_a_cron_every_minute_is_counted_quickly():
    calendar = schedule.parse_cron("* * * * *")
    now = MONDAY_0900 + 365 * DAY + 30
    plan = schedule.catch_up(calendar, MONDAY_0900, now, BERLIN, catchup="skip")
    assert plan.dropped_more
    assert plan.kept == (now - 30,), "only the minute that just passed is on time"
    assert "more than 1000 times" in schedule.describe(plan.dropped, True, BERLIN)


# -- the queue ---------------------------------------------------------------------------------


def kinds(queue: Queue, job_id: str) -> list[str]:
    return [event.kind for event in queue.history(job_id)]


def test_a_calendar_jobs_first_run_is_its_first_time_not_the_drop(berlin_queue, tmp_path):
    script = tmp_path / "spool" / "0123456789ab" / "report.sh"
    script.parent.mkdir(parents=True)
    script.write_text('#!/bin/sh\n# sloth: at="mon-fri 09:00" catchup=skip\necho hi\n')
    job_id = spool.push(berlin_queue, script, "0123456789ab")
    job = berlin_queue.get(job_id)
    assert job.not_before == berlin(2026, 3, 2, 9, 0)
    assert job.options == {"at": "mon-fri 09:00", "catchup": "skip",
                           "scheduled": berlin(2026, 3, 2, 9, 0)}
    assert berlin_queue.claim("w") is None  # 08:00: not yet
    assert queue_history_detail(berlin_queue, job_id) == "due in 1h"


def queue_history_detail(queue: Queue, job_id: str) -> str:
    return queue.history(job_id)[0].detail


def test_each_run_ends_by_queueing_the_next_calendar_time(berlin_queue):
    clock = berlin_queue.clock_
    clock.now = berlin(2026, 3, 6, 8, 0)  # a Friday
    berlin_queue.push("report", script="/spool/x/report.sh", options={"at": "mon-fri@09:00"})
    clock.now = berlin(2026, 3, 6, 9, 0) + 30
    first = run_once(berlin_queue)
    assert first is not None
    (following,) = berlin_queue.jobs(State.PENDING)
    assert shown(following.not_before) == "Mon 2026-03-09 09:00 CET"
    assert following.script == "/spool/x/report.sh"
    assert queue_history_detail(berlin_queue, following.id) == f"the next run after {first}"


def test_a_calendar_job_that_fails_for_good_still_queues_its_next_run(berlin_queue):
    clock = berlin_queue.clock_
    job_id = berlin_queue.push("flaky", max_attempts=1, options={"cron": "0 9 * * *"})
    clock.now = berlin(2026, 3, 2, 9, 0)
    berlin_queue.claim("w")
    assert berlin_queue.fail(job_id, "w", "boom") == State.FAILED
    (following,) = berlin_queue.jobs(State.PENDING)
    assert shown(following.not_before) == "Tue 2026-03-03 09:00 CET"


def test_the_end_of_a_run_and_its_next_run_commit_together(berlin_queue, monkeypatch):
    clock = berlin_queue.clock_
    job_id = berlin_queue.push("report", options={"at": "09:00"})
    clock.now = berlin(2026, 3, 2, 9, 0)
    berlin_queue.claim("w")

    def broken(*args, **kwargs):
        raise RuntimeError("the power went out")

    monkeypatch.setattr(schedule, "next_time", broken)
    with pytest.raises(RuntimeError):
        berlin_queue.complete(job_id, "w", "ok")
    assert berlin_queue.get(job_id).state == State.RUNNING, "not ended without its next run"
    monkeypatch.undo()
    assert berlin_queue.complete(job_id, "w", "ok")
    assert len(berlin_queue.jobs(State.PENDING)) == 1


def test_a_series_crosses_the_spring_jump_once(berlin_queue):
    clock = berlin_queue.clock_
    clock.now = berlin(2026, 3, 28, 3, 0)
    berlin_queue.push("nightly", options={"at": "02:30"})
    seen = []
    for _ in range(3):
        (job,) = berlin_queue.jobs(State.PENDING)
        seen.append(shown(job.not_before))
        clock.now = job.not_before + 5
        assert run_once(berlin_queue) == job.id
    assert seen == ["Sun 2026-03-29 03:00 CEST", "Mon 2026-03-30 02:30 CEST",
                    "Tue 2026-03-31 02:30 CEST"]


def asleep_through_three_mornings(queue: Queue, options: dict, wake: float) -> str:
    job_id = queue.push("morning", options={"at": "09:00", **options})  # pushed Mon 08:00
    queue.clock_.now = wake  # the lid closed Monday 08:30
    return job_id


def test_asleep_across_three_0900s_catchup_once_runs_once(berlin_queue):
    job_id = asleep_through_three_mornings(berlin_queue, {}, berlin(2026, 3, 4, 12, 0))
    assert run_once(berlin_queue) == job_id
    assert berlin_queue.claim("w") is None, "one catch-up run, not three"
    caught_up = [e for e in berlin_queue.history(job_id) if e.kind == "caught_up"]
    assert [e.detail for e in caught_up] == [
        "one run now for the missed 3 times: 2026-03-02 09:00 CET, 2026-03-03 09:00 CET, "
        "2026-03-04 09:00 CET"]
    (following,) = berlin_queue.jobs(State.PENDING)
    assert shown(following.not_before) == "Thu 2026-03-05 09:00 CET"


def test_asleep_across_three_0900s_catchup_skip_runs_none_and_says_so(berlin_queue):
    job_id = asleep_through_three_mornings(berlin_queue, {"catchup": "skip"},
                                           berlin(2026, 3, 4, 12, 0))
    assert berlin_queue.claim("w") is None
    job = berlin_queue.get(job_id)
    assert (job.state, job.runs, shown(job.not_before)) == (
        State.PENDING, 0, "Thu 2026-03-05 09:00 CET")
    assert kinds(berlin_queue, job_id) == ["pushed", "skipped"]
    detail = berlin_queue.history(job_id)[-1].detail
    assert detail.startswith("missed 3 times: 2026-03-02 09:00 CET, 2026-03-03 09:00 CET, "
                             "2026-03-04 09:00 CET while nothing could run it; dropped: "
                             "catchup=skip")
    berlin_queue.clock_.now = job.not_before + 1  # awake on Thursday: that one runs
    assert run_once(berlin_queue) == job_id


def test_asleep_past_the_window_runs_none_and_within_it_runs_the_last(berlin_queue):
    past = asleep_through_three_mornings(berlin_queue, {"window": 6 * 3600},
                                         berlin(2026, 3, 4, 16, 0))  # 7 h after Wednesday's
    assert berlin_queue.claim("w") is None
    assert kinds(berlin_queue, past) == ["pushed", "skipped"]
    assert "older than the window of 6h" in berlin_queue.history(past)[-1].detail
    berlin_queue.cancel(past)

    berlin_queue.clock_.now = berlin(2026, 3, 2, 8, 0)
    within = asleep_through_three_mornings(berlin_queue, {"window": 6 * 3600},
                                           berlin(2026, 3, 4, 12, 0))
    assert run_once(berlin_queue) == within
    assert kinds(berlin_queue, within)[1:3] == ["skipped", "caught_up"]
    assert berlin_queue.history(within)[2].detail.endswith("1 time: 2026-03-04 09:00 CET")


def test_a_run_made_due_by_hand_is_not_judged_late(berlin_queue):
    job_id = berlin_queue.push("morning", options={"at": "09:00", "catchup": "skip"})
    berlin_queue.clock_.now = berlin(2026, 3, 2, 8, 30)
    berlin_queue.run_now(job_id)
    berlin_queue.clock_.advance(3600)  # 09:30, busy elsewhere: still the user's run
    assert run_once(berlin_queue) == job_id


def test_a_retried_old_run_does_not_start_a_second_waiting_run(berlin_queue):
    job_id = berlin_queue.push("flaky", max_attempts=1, options={"at": "09:00"})
    berlin_queue.clock_.now = berlin(2026, 3, 2, 9, 0)
    berlin_queue.claim("w")
    berlin_queue.fail(job_id, "w", "boom")
    assert berlin_queue.retry(job_id)
    assert run_once(berlin_queue) == job_id
    assert len(berlin_queue.jobs(State.PENDING)) == 1


def test_a_retried_run_waiting_again_leaves_the_calendar_series_to_its_next_run(berlin_queue):
    job_id = berlin_queue.push("flaky", max_attempts=1, options={"at": "09:00"})
    berlin_queue.clock_.now = berlin(2026, 3, 2, 9, 0)
    berlin_queue.claim("w")
    berlin_queue.fail(job_id, "w", "boom")
    (waiting,) = berlin_queue.jobs(State.PENDING)  # Tuesday 09:00
    assert berlin_queue.retry(job_id, max_attempts=2)
    berlin_queue.claim("w")
    assert berlin_queue.fail(job_id, "w", "boom again") == "pending"  # waits for its backoff
    assert berlin_queue.run_now(waiting.id)  # before the retry's backoff ends
    assert run_once(berlin_queue) == waiting.id
    following = [job for job in berlin_queue.jobs(State.PENDING) if job.id != job_id]
    assert [berlin_queue.history(job.id)[0].detail for job in following] == [
        f"the next run after {waiting.id}"]
    # run now was an extra run: the series is next due where it was
    assert shown(following[0].not_before) == "Tue 2026-03-03 09:00 CET"


def test_every_and_a_calendar_together_are_refused_by_the_queue(berlin_queue):
    with pytest.raises(SlothError, match="use one of them"):
        berlin_queue.push("both", options={"every": 60, "at": "09:00"})
    with pytest.raises(SlothError, match="bad value 'noon' for at: use a time as HH:MM"):
        berlin_queue.push("bad", options={"at": "noon"})


def test_the_local_zone_follows_tz_with_its_daylight_saving_rules(monkeypatch):
    monkeypatch.setenv("TZ", "Europe/Berlin")
    zone = schedule.local_zone()
    assert zone.utcoffset(datetime(2026, 7, 1)) != zone.utcoffset(datetime(2026, 1, 1))


# -- the header --------------------------------------------------------------------------------


@pytest.mark.parametrize("line, options", [
    ('at=09:00', {"at": "09:00"}),
    ('at=9:00,17:30', {"at": "09:00,17:30"}),
    ('at=mon-fri@09:00', {"at": "mon-fri 09:00"}),
    ('at="mon-fri 09:00" catchup=skip', {"at": "mon-fri 09:00", "catchup": "skip"}),
    ('at="sat, sun 10:30"', {"at": "sat,sun 10:30"}),
    ('cron="0 9 * * 1-5" window=6h', {"cron": "0 9 * * 1-5", "window": 21600.0}),
    ('timeout="10m" at=SAT@10:30', {"timeout": 600.0, "at": "sat 10:30"}),
])
def test_calendar_headers_in_both_written_forms(line, options):
    assert parse_options(f"# sloth: {line}\n".encode(), "report.sh") == options


@pytest.mark.parametrize("line, message", [
    ("at=mon-fri 09:00", "report.sh, line 1: the value of at ends at the space before '09:00': "
                         "join days and times with @ (at=mon-fri@09:00) or put them in quotes "
                         '(at="mon-fri 09:00"), and several times with commas (at=09:00,17:30)'),
    ("cron=0 9 * * 1-5", "report.sh, line 1: the value of cron ends at the space before '9': "
                         'put all five fields in quotes, as in cron="0 9 * * 1-5"'),
    ("at=24:00", "report.sh, line 1: bad value '24:00' for at: use a time as HH:MM, several "
                 "joined by commas, after the days when not every day: 09:00, 09:00,17:30, "
                 'mon-fri@09:00, sat,sun@10:30, or "mon-fri 09:00" in quotes'),
    ("at=someday@09:00", "bad value 'someday@09:00' for at: use a time as HH:MM"),
    ('cron="0 9 * *"', "report.sh, line 1: bad value '0 9 * *' for cron: use five cron fields "
                       '(minute hour day month weekday) in quotes, as in cron="0 9 * * 1-5"'),
    ('cron="0 0 30 2 *"', "bad value '0 0 30 2 *' for cron: use five cron fields"),
    ("at=09:00 catchup=twice", "report.sh, line 1: bad value 'twice' for catchup: use once "
                               "(missed times become one run) or skip (missed times are "
                               "dropped)"),
    ("at=09:00 window=30s", "bad value '30s' for window: use a number of seconds, or a number "
                            "followed by s, m, h or d (90, 90s, 10m, 2h, 1d), between 1m and "
                            "3650d"),
    ('at="mon-fri', 'report.sh, line 1: the value of at opens a quote that does not close '
                    'before the next setting: write at="..."'),
    ("every=1h at=09:00", "report.sh, line 1: every, at and cron each say when the job "
                          "repeats: use one of them, not every and at"),
    ("catchup=skip", "report.sh, line 1: catchup applies only to at= and cron= schedules: "
                     "add one, or remove catchup="),
    ("at=09:00 catchup=skip window=1h", "report.sh, line 1: window applies only to "
                                        "catchup=once (catchup=skip drops every missed time)"),
])
def test_a_bad_calendar_header_is_one_sentence_naming_the_key_and_the_forms(line, message):
    with pytest.raises(BadJobFile) as caught:
        parse_options(f"# sloth: {line}\n".encode(), "report.sh")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


WORD_KEYS = ["at", "cron", "catchup", "window"]
schedule_texts = st.one_of(
    st.from_regex(r"((mon|tue|sun|fri|xyz)(-(fri|sat))?,?){0,3}[@ ]?[0-9]{1,3}:[0-9]{1,3}"
                  r"(,[0-9]{1,2}:[0-9]{2}){0,2}", fullmatch=True),
    st.lists(st.sampled_from(["*", "*/5", "0", "9", "1-5", "L", "30", "2", "61", "?", "a", "#"]),
             min_size=0, max_size=7).map(" ".join),
    st.sampled_from(["once", "skip", "ONCE", "6h", "59", "1m", "0", "-1h", "inf", "３h"]),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=25),
)


@pytest.mark.slow
@FUZZ
@given(key=st.sampled_from(WORD_KEYS), value=schedule_texts, quoted=st.booleans())
def test_fuzz_a_calendar_header_value_is_kept_whole_or_one_sentence_naming_the_key(
        key, value, quoted):
    if "\n" in value or "\r" in value or any(c in value for c in "\x0b\x0c\x1c\x1d\x1e\x85"
                                             "\u2028\u2029"):
        return  # a line break ends the header line itself
    written = f'"{value}"' if quoted else value
    companion = "" if key in ("at", "cron") else " at=09:00"
    try:
        options = parse_options(f"#!/bin/sh\n# sloth: {key}={written}{companion}\n".encode(),
                                "job.sh")
    except BadJobFile as exc:
        message = str(exc)
        assert message.startswith("job.sh, line 2: ") and "\n" not in message
        assert key in message
    else:
        kept = options[key]
        if key == "at":
            assert schedule.parse_at(kept).text == kept  # what is stored reads back the same
            assert schedule.next_time(schedule.parse_at(kept), MONDAY_0900, BERLIN) > MONDAY_0900
        elif key == "cron":
            assert schedule.parse_cron(kept).text == kept
            assert schedule.next_time(schedule.parse_cron(kept), MONDAY_0900, BERLIN) > \
                MONDAY_0900
        elif key == "catchup":
            assert kept in ("once", "skip")
        else:
            assert schedule.WINDOW.contains(kept)
