"""A series seen as a schedule (store/schedules.py, `sloth-tray schedules`): its next and
last run at each point of its life, on the injected clock."""

from __future__ import annotations

import sqlite3

from helpers.clock import BERLIN, FakeClock, berlin
from helpers.queues import run_once

from sloth_tray.cli.reading import schedule_rows
from sloth_tray.store.queue import Queue

PERIOD = 120.0  # every=2m


def only(queue: Queue, **kwargs) -> dict:
    [found] = queue.schedules(**kwargs)
    return found


def mine(queue: Queue) -> dict:
    return next(found for found in queue.schedules() if found["name"] == "check_inbox")


def row(queue: Queue, name: str = "check_inbox") -> dict[str, str]:
    """The row of `schedules`' table for the series `name`, by column."""
    header, *lines = schedule_rows(queue.schedules(ended=True), queue.clock())
    return next(dict(zip(header, line, strict=True)) for line in lines
                if line[0] == name)


def test_a_series_across_sleep_failure_retry_pause_and_cancel(tmp_path):
    clock = FakeClock()
    start = clock.now
    queue = Queue(tmp_path / "queue.db", clock=clock, max_attempts=1)
    first = queue.push("check_inbox", script="/spool/a/check_inbox.sh",
                       options={"every": PERIOD})
    queue.push("other", script="/spool/b/other.sh", options={"every": 3600.0}, delay=7200)

    series = queue.schedules()[0]  # the soonest first
    assert (series["name"], series["schedule"], series["next"], series["last"]) == \
        ("check_inbox", "every 2m", start, None)
    assert series["series"] == "/spool/a/check_inbox.sh"
    assert row(queue)["LEFT"] == "due now" and row(queue)["OUTCOME"] == "never ran"

    clock.advance(5)
    assert run_once(queue) == first
    found = mine(queue)
    assert found["next"] == start + 5 + PERIOD  # one period after it started
    assert found["last"]["id"] == first and found["last"]["outcome"] == "ok"
    assert found["last"]["at"] == start + 5 and found["runs"] == 1
    assert row(queue)["LEFT"] == "2m" and row(queue)["PASSED"] == "now"

    # The laptop sleeps for an hour: one late run stands for what it missed.
    clock.advance(3600)
    assert mine(queue)["next"] == start + 5 + PERIOD
    assert row(queue)["LEFT"] == "due now" and row(queue)["PASSED"] == "1h ago"
    caught_up = queue.claim("w")
    assert caught_up.name == "check_inbox"
    clock.advance(3)
    queue.fail(caught_up.id, "w", "exit status 3")
    found = mine(queue)
    assert found["next"] == start + 3605 + PERIOD  # counted from the late start
    assert found["last"]["outcome"] == "failed" and found["last"]["error"] == "exit status 3"
    assert found["last"]["duration"] == 3.0 and found["failures_in_a_row"] == 1
    assert row(queue)["OUTCOME"] == "failed: exit status 3 (3s)"

    # Retried: it runs once more, ok; the series' schedule stays where it was.
    assert queue.retry(caught_up.id)
    assert run_once(queue) == caught_up.id
    found = mine(queue)
    assert found["next"] == start + 3605 + PERIOD and found["last"]["outcome"] == "ok"
    assert found["failures_in_a_row"] == 0 and found["runs"] == 3

    # Paused on its own: its due run waits for the pause, claims nothing, and says so.
    assert queue.set_series_paused("check_inbox", True) == 1
    clock.advance(PERIOD)
    found = mine(queue)
    assert found["state"] == "paused" and found["waiting_for"] == "this schedule's pause"
    assert queue.claim("w") is None
    assert queue.next_due() == start + 7200  # the other series', not the held one's
    assert row(queue)["LEFT"] == "waits for this schedule's pause"
    assert queue.set_series_paused("check_inbox", False) == 1
    assert queue.claim("w").name == "check_inbox"
    clock.advance(1)
    queue.complete(queue.jobs("running")[0].id, "w")

    # Cancelled: the series ends, and is shown only when asked for.
    waiting = mine(queue)["next_id"]
    assert queue.cancel(waiting)
    assert [s["name"] for s in queue.schedules()] == ["other"]
    ended = [s for s in queue.schedules(ended=True) if s["name"] == "check_inbox"]
    assert ended[0]["state"] == "ended" and ended[0]["next"] is None
    assert ended[0]["last"]["outcome"] == "ok"
    queue.close()


def test_overdue_and_lane(tmp_path):
    clock = FakeClock()
    queue = Queue(tmp_path / "queue.db", clock=clock, max_attempts=1)
    queue.push("feed", script="/spool/a/feed.sh", options={"every": 600.0}, lane="net")
    clock.advance(600 + 300 + 1)  # a period and the least grace, and nothing ran
    assert only(queue)["overdue"]
    assert "overdue" in row(queue, "feed")["NOTE"]
    assert queue.schedules(lane="main") == [] and only(queue, lane="net")["lane"] == "net"
    queue.close()


def test_a_paused_series_is_neither_next_nor_due_in_status_and_the_snapshot(home):
    """What the claim passes over, every glance passes over too: status's next and
    due counts (per lane and in all), the snapshot's, the waits on a condition."""
    from sloth_tray.daemon import snapshot
    from sloth_tray.store import reads

    clock = FakeClock()
    with Queue(home.db, clock=clock) as queue:
        queue.push("check_inbox", script="/spool/a/check_inbox.sh", options={"every": PERIOD})
        queue.push("feed", script="/spool/b/feed.sh",
                   options={"every": PERIOD, "require": "network"})
        later = queue.push("tidy", delay=600)
        assert queue.set_series_paused("check_inbox", True) == 1
        assert queue.set_series_paused("feed", True) == 1
        queue.set_unmet({"network"})
        assert queue.claim("w", unmet=frozenset({"network"})) is None  # the claim's word
        assert queue.next_due(frozenset({"network"})) == clock.now + 600
        shot, _ = snapshot.read(queue, (), frozenset({"network"}))
        lane_counts = queue.lane_counts()
        held = {found["name"]: found["waiting_for"] for found in queue.schedules()}
    found = reads.read(home, clock, per_lane=True)
    assert found["next"]["id"] == later  # not check_inbox, due now but held
    assert (found["due_now"], found["lanes"]["main"]["due_now"]) == (0, 0)
    assert "waiting_on" not in found  # feed waits for its pause, not the network
    assert (shot.due_now, shot.lanes[0].due_now) == (0, 0)
    assert lane_counts["main"]["due_now"] == 0
    assert held == {"check_inbox": "this schedule's pause", "feed": "this schedule's pause"}


def test_a_paused_calendar_series_is_not_caught_up_by_a_claim(berlin_queue):
    """A missed calendar run of a series paused on its own is left as it was: no
    catch-up, no skip, no move, until the series is resumed."""
    clock = berlin_queue.clock_
    berlin_queue.push("report", script="/spool/r/report.sh", options={"at": "08:35"})
    other = berlin_queue.push("digest", script="/spool/d/digest.sh", options={"at": "08:40"})
    clock.now = berlin(2026, 3, 2, 8, 35)
    assert run_once(berlin_queue)
    clock.now = berlin(2026, 3, 2, 8, 40)
    assert run_once(berlin_queue) == other
    assert berlin_queue.set_series_paused("report", True) == 1
    [held] = berlin_queue.jobs_named("report", ["pending"])
    assert held.not_before == berlin(2026, 3, 3, 8, 35)
    before = berlin_queue.history(held.id)

    clock.now = berlin(2026, 3, 6, 12, 0)  # four days off: both series missed runs
    caught_up = berlin_queue.claim("w")
    assert caught_up is not None and caught_up.name == "digest"  # not held up behind it
    kept = berlin_queue.get(held.id)
    assert (kept.not_before, kept.options, kept.updated_at) == \
        (held.not_before, held.options, held.updated_at)
    assert berlin_queue.history(held.id) == before

    assert berlin_queue.set_series_paused("report", False) == 1
    berlin_queue.complete(caught_up.id, "w")
    resumed = berlin_queue.claim("w")
    assert resumed.id == held.id
    assert "caught_up" in [event.kind for event in berlin_queue.history(held.id)]


def _missed_runs(queue: Queue, held_lane: str, running_lane: str) -> tuple[object, str]:
    """`report` (in `held_lane`) and `digest` (in `running_lane`) each ran on Monday,
    their next runs queued for Tuesday. Returns report's waiting run and digest's."""
    clock = queue.clock_
    queue.push("report", script="/spool/r/report.sh", options={"at": "08:35"}, lane=held_lane)
    other = queue.push("digest", script="/spool/d/digest.sh", options={"at": "08:40"},
                       lane=running_lane)
    clock.now = berlin(2026, 3, 2, 8, 35)
    assert run_once(queue)
    clock.now = berlin(2026, 3, 2, 8, 40)
    assert run_once(queue) == other
    [held] = queue.jobs_named("report", ["pending"])
    assert held.not_before == berlin(2026, 3, 3, 8, 35)
    return held, other


def _left_as_it_was(queue: Queue, held) -> None:
    """A claim four days later takes the other lane's caught-up run and leaves
    report's missed run untouched: no catch-up, no skip, no move."""
    before = queue.history(held.id)
    queue.clock_.now = berlin(2026, 3, 6, 12, 0)  # four days off: both series missed runs
    caught_up = queue.claim("w")
    assert caught_up is not None and caught_up.name == "digest"  # not held up behind it
    assert "caught_up" in [event.kind for event in queue.history(caught_up.id)]
    kept = queue.get(held.id)
    assert (kept.not_before, kept.options, kept.updated_at) == \
        (held.not_before, held.options, held.updated_at)
    assert queue.history(held.id) == before
    queue.complete(caught_up.id, "w")


def _caught_up_once_resumed(queue: Queue, held) -> None:
    resumed = queue.claim("w")
    assert resumed.id == held.id
    assert "caught_up" in [event.kind for event in queue.history(held.id)]


def test_a_missed_calendar_run_of_a_paused_lane_is_not_caught_up_by_a_claim(berlin_queue):
    """A paused lane is held as it is: a claim made for another lane judges none of
    its missed runs; once the lane is resumed, the run is caught up as usual."""
    held, _ = _missed_runs(berlin_queue, "reports", "main")
    berlin_queue.set_paused(True, lane="reports")
    _left_as_it_was(berlin_queue, held)
    berlin_queue.set_paused(False, lane="reports")
    _caught_up_once_resumed(berlin_queue, held)


def test_a_missed_calendar_run_of_a_paused_queue_is_caught_up_only_in_a_resumed_lane(
        berlin_queue):
    """The whole queue paused holds every lane but those resumed on their own: a
    claim judges only their missed runs, and the others' once the queue resumes."""
    held, _ = _missed_runs(berlin_queue, "main", "digests")
    berlin_queue.set_paused(True)
    berlin_queue.set_paused(False, lane="digests")
    _left_as_it_was(berlin_queue, held)
    berlin_queue.set_paused(False)
    _caught_up_once_resumed(berlin_queue, held)


def test_a_lane_paused_after_its_missed_run_was_found_is_not_settled(berlin_queue):
    """The pause is looked at again in the transaction that settles the run: a lane
    paused between the look at the head of the line and the settling keeps its run."""
    from sloth_tray.store import calendar

    held, _ = _missed_runs(berlin_queue, "reports", "main")
    now = berlin(2026, 3, 6, 12, 0)
    db = sqlite3.connect(berlin_queue.path)
    try:
        assert calendar.missed_head(db, now, "", {}) == held.id
        berlin_queue.set_paused(True, lane="reports")
        with db:
            assert not calendar.settle_missed_run(db, held.id, now, lambda: BERLIN)
    finally:
        db.close()
    kept = berlin_queue.get(held.id)
    assert (kept.not_before, kept.options) == (held.not_before, held.options)
