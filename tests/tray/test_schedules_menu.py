"""The tray's Schedules submenu: a row per series, keyed by the series, read from a real
queue file through snapshot.read, each item calling the control it names."""

from __future__ import annotations

from datetime import UTC

from helpers.clock import FakeClock
from helpers.controls import Recorder
from helpers.queues import run_once

from sloth_tray.daemon import snapshot
from sloth_tray.store.queue import Queue
from sloth_tray.tray import presenter
from sloth_tray.tray.dbusmenu import properties


def schedules_of(menu):
    return next(item for item in menu if item.key == "schedules")


def test_a_row_per_series_with_its_actions_and_the_overdue_clock(tmp_path):
    clock = FakeClock(1_700_000_000.0)  # 2023-11-14 22:13:20 UTC
    with Queue(tmp_path / "queue.db", clock=clock, max_attempts=1) as queue:
        queue.push("check_inbox", script="/spool/a/check_inbox.sh", options={"every": 3600.0})
        first = run_once(queue)
        queue.push("feed", script="/spool/b/feed.sh", options={"every": 600.0})
        clock.advance(1000)  # feed never ran: overdue after 600 + 300
        queue.set_series_paused("check_inbox", True)
        shot, _ = snapshot.read(queue, (), frozenset())
        waiting = queue.jobs_named("check_inbox", ["pending"])[0].id
    controls = Recorder()
    menu = presenter.menu(shot, controls, clock.now, tz=UTC)
    section = schedules_of(menu)
    assert section.label == "Schedules (2)"
    inbox, feed = sorted(section.submenu, key=lambda item: item.label)
    assert inbox.key == "schedule:/spool/a/check_inbox.sh"
    assert inbox.label == "check_inbox — every 1h · paused · last ok 22:13"
    assert feed.label.startswith("feed — every 10m · next 22:13")
    assert feed.icon is not None and inbox.icon is None
    assert dict((name, value) for name, _, value in properties(feed))["icon-data"][:4] == \
        b"\x89PNG"
    by_key = {item.key: item for item in inbox.submenu}
    assert list(by_key) == ["run-now", "resume", "show-last-log", "cancel-schedule"]
    for item in inbox.submenu:
        item.action()
    assert controls.calls == [("run_now", waiting), ("pause_series", "/spool/a/check_inbox.sh",
                                                     False), ("show_log", first),
                              ("cancel", waiting)]
    assert [item.key for item in feed.submenu][1] == "pause"
    assert not dict((item.key, item) for item in feed.submenu)["show-last-log"].enabled


def test_no_series_no_section():
    menu = presenter.menu(snapshot.Snapshot(), Recorder(), 0.0, tz=UTC)
    assert all(item.key != "schedules" for item in menu)
