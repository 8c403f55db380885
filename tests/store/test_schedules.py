"""A series seen as a schedule (store/schedules.py, `sloth-tray schedules`): its next and
last run at each point of its life, on the injected clock."""

from __future__ import annotations

from conftest import FakeClock, run_once

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
