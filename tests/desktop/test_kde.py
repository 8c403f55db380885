"""The tray in KDE Plasma 5.27's system tray (plasmashell on Xvfb, a private bus): the
icon right-clicked, its menu clicked with the pointer (xdotool), the effects read with
the app's CLI (--json).

What Plasma does (seen with dbus-monitor): `AboutToShow(0)` and `Event(0, "opened")`
when the menu opens, `"closed"` when it closes, the layout read again on every
LayoutUpdated, `ProvideXdgActivationToken` on the item before each click, and
`Activate(x, y)` on a left click on the icon.

plasmashell takes a while to start, so one Plasma serves the whole file; each test has
its own app (the icon found again by diffing the panel). Every process started here,
and every daemon the bus started for Plasma, is killed by pid at the end.
"""

from __future__ import annotations

import re
import time

import pytest
from helpers.display import grab
from helpers.processes import Pids, wait_for
from kde_host import KDE_ROWS, SCREEN, Plasma, missing
from waybar_host import MONITOR_RULES, App, Monitor, bus_time, differs, quiet_after, row_y

pytestmark = pytest.mark.skipif(missing() is not None, reason=missing() or "")

QUIET_AFTER_CLOSE = 60.0  # at most; Plasma says "closed", so it should be at once
FAILING = "# sloth: max_attempts=1\necho 'disk check: 82% full' >&2\nexit 1\n"


@pytest.fixture(scope="module")
def plasma():
    pids = Pids()
    desktop = Plasma(pids)
    try:
        yield desktop.start()
    finally:
        desktop.adopt_strays()
        pids.cleanup()
        desktop.close()


@pytest.fixture
def app(plasma, pids, tmp_path):
    """The app in Plasma's tray, with a dbus-monitor on the bus; `app.icon` is where."""
    menus_closed(plasma)
    plasma.xdotool("mousemove", "500", "200")
    before = plasma.steady_panel()
    monitor = Monitor(pids, plasma.bus.address, MONITOR_RULES, tmp_path / "monitor.log")
    tray = App(pids, tmp_path / "home", plasma.env, plasma.bus, monitor)
    wait_for(tray.registered, timeout=20, what="the item to register with Plasma")
    tray.icon = plasma.icon(before)
    yield tray
    plasma.xdotool("key", "Escape", "Escape", "Escape")


def menus_closed(plasma: Plasma) -> None:
    # A failure's notification is a popup too, and Plasma keeps it up about 5 s: the
    # wait outlasts it.
    wait_for(lambda: not [box for box in plasma.popups() if box[3] > 60], timeout=15,
             what="every menu to close")


class KdeMenu:
    """The root menu, right-clicked open on the icon: its popup window and rows."""

    def __init__(self, plasma: Plasma, app: App) -> None:
        self.plasma, self.app = plasma, app
        self.box = self.open()
        self.shot = self.steady(self.box)
        self.root = app.menu().root()

    def open(self):
        """Right-click the icon until the new popup is this menu. A failure's
        notification can come up late, after the wait for every popup to close, and be
        taken for the menu; only the menu is preceded by Plasma's AboutToShow."""
        x, y = self.app.icon
        for _ in range(3):
            menus_closed(self.plasma)
            before = self.plasma.popups()
            self.opened_at = bus_time()
            # Moved and clicked at once: a hover long enough for the tooltip would
            # bring a popup of its own.
            box = self.plasma.new_popup(
                before,
                lambda: self.plasma.xdotool("mousemove", str(x), str(y), "click", "3"),
                "the menu to open")
            try:
                wait_for(lambda: self.app.monitor.calls("AboutToShow", since=self.opened_at),
                         timeout=5, what="Plasma's AboutToShow")
                return box
            except AssertionError:
                self.plasma.xdotool("key", "Escape")
        raise AssertionError("Plasma showed popups but never asked for the menu (AboutToShow)")

    def steady(self, box):
        x, y, w, h = box
        area = (x, y, x + w, y + h)

        def look():
            first = grab(self.plasma.env, area)
            time.sleep(0.2)
            return first if differs(first, grab(self.plasma.env, area)) is None else None
        return wait_for(look, timeout=5, what="the menu drawn")

    def row_point(self, box, menu, label: str) -> tuple[int, int]:
        return box[0] + 60, row_y(box[1], menu, menu.find(label), KDE_ROWS)

    def click(self, box, menu, label: str) -> None:
        x, y = self.row_point(box, menu, label)
        self.plasma.xdotool("mousemove", str(x), str(y + 3))
        self.plasma.xdotool("mousemove", str(x), str(y), "click", "1")

    def submenu(self, box, menu, label: str):
        """Open the submenu of row `label` with a click; its popup's box. Plasma places
        a first-level submenu off the screen's right edge the first time: Escape closes
        it, and the next click places it."""
        for _ in range(3):
            before = self.plasma.popups()
            found = self.plasma.new_popup(before, lambda: self.click(box, menu, label),
                                          f"the submenu of {label!r} to open")
            if found[0] + found[2] <= SCREEN[0]:
                self.steady(found)
                return found
            self.plasma.xdotool("key", "Escape")
            wait_for(lambda found=found: found not in self.plasma.popups(), timeout=5,
                     what="the misplaced submenu to close")
        raise AssertionError(f"the submenu of {label!r} keeps opening off the screen")

    def close(self) -> float:
        self.plasma.xdotool("key", "Escape")
        menus_closed(self.plasma)
        return bus_time()


def fail(app: App) -> str:
    job = app.add("disk_check", FAILING)
    wait_for(lambda: app.state(job) == "failed", what="the job to fail")
    return job


def a_menu_click(message) -> bool:
    """Whether a call on the bus is Plasma telling the app of a click in its menu."""
    return message.member in ("Event", "EventGroup") and '"clicked"' in message.text()


def clicked(app: App, since: float) -> None:
    """Plasma sent the app a click since `since`: a lost click and a slow retry then
    fail with different sentences."""
    wait_for(lambda: [m for m in app.monitor.calls(since=since) if a_menu_click(m)],
             timeout=10, what="Plasma to send the click to the app")


def retried(app: App, job: str, times: int) -> None:
    wait_for(lambda: app.history(job).count("retried") == times, timeout=10,
             what=f"the job retried {times} time(s)")
    wait_for(lambda: app.state(job) == "failed", what="the job to fail again")


def test_retry_all_failed_and_a_jobs_own_retry_work_in_plasmas_menu(plasma, app):
    job = fail(app)
    menu = KdeMenu(plasma, app)
    menu.click(menu.box, menu.root, "Retry all failed")
    clicked(app, menu.opened_at)
    retried(app, job, 1)

    menu = KdeMenu(plasma, app)
    failed = menu.submenu(menu.box, menu.root, "Failed jobs (1)")
    jobs_row = menu.root.find("Failed jobs (1)")
    own = menu.submenu(failed, jobs_row, "disk_check")
    menu.click(own, jobs_row.find("disk_check"), "Retry")
    clicked(app, menu.opened_at)
    retried(app, job, 2)


def test_plasma_gets_an_activation_token_reply_before_each_click(plasma, app):
    job = fail(app)
    x, y = app.icon
    plasma.xdotool("mousemove", str(x), str(y), "click", "1")  # Activate: Retry all failed
    retried(app, job, 1)
    menu = KdeMenu(plasma, app)
    menu.click(menu.box, menu.root, "Retry all failed")
    retried(app, job, 2)

    calls = app.monitor.calls()
    clicks = [m for m in calls if m.member == "Activate"
              or a_menu_click(m)]
    tokens = [m for m in calls if m.member == "ProvideXdgActivationToken"]
    assert len(clicks) == 2, [m.text() for m in clicks]
    since = 0.0
    for click in clicks:
        assert [m for m in tokens if since <= m.time <= click.time], \
            f"Plasma sent {click.text()} without ProvideXdgActivationToken first"
        since = click.time
    for token in tokens:  # Plasma asks before a right click too
        replies = wait_for(lambda token=token: app.monitor.replies_to(token), timeout=5,
                           what="the reply to ProvideXdgActivationToken")
        assert replies[0].kind == "method return", (
            f"{token.text()} got an error: {replies[0].fields.get('error_name')} "
            f"{' '.join(replies[0].args)}")


def test_times_move_in_plasmas_open_menu_and_stop_after_it_closes(plasma, app):
    app.nap()
    menu = KdeMenu(plasma, app)
    status = menu.root.visible()[0]
    assert status.label.startswith("Running nap"), menu.root.labels()
    opened = app.monitor.calls(since=menu.opened_at)
    assert [m for m in opened if m.member == "AboutToShow"], [m.text() for m in opened]

    x, y = menu.row_point(menu.box, menu.root, "Running nap")
    row = (menu.box[0] + 2, y - 11, menu.box[0] + menu.box[2] - 2, y + 11)
    drawn = grab(plasma.env, row)
    wait_for(lambda: differs(drawn, grab(plasma.env, row)), timeout=4,
             what="the running job's time to move in the open menu (Plasma)")
    now = app.menu().root().visible()[0]
    assert now.label != status.label and now.label.startswith("Running nap")
    assert now.id == status.id, f"the running row changed its id ({status.id} -> {now.id})"

    closed_at = menu.close()
    wait_for(lambda: [m for m in app.monitor.calls(since=menu.opened_at)
                      if re.search(r'(?<!\d)0 "closed"', m.text())], timeout=5,
             what='Plasma to say Event(0, "closed")')
    took = quiet_after(app.monitor, closed_at, quiet=3.0, limit=QUIET_AFTER_CLOSE)
    print(f"menu signals stopped {took:.1f}s after Plasma's menu closed")
