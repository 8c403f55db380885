"""The tray in waybar under a headless sway: a Wayland panel whose tray module renders
the app's dbusmenu with libdbusmenu-gtk3, opened and clicked with a real (virtual)
pointer.

What waybar does that other hosts do not: on opening the menu it calls
`AboutToShowGroup([0])` and never `Event(0, "opened")` or `"closed"` (those come only
for submenus). So the app is never told that the root menu closed.

The app is started as the README says (`sloth-tray run --home ...`) with the panel's
WAYLAND_DISPLAY and session bus; its state is read with its CLI's --json. Every process
started here (sway runs as nobody) is killed by pid at the end.

SLOTH_TRAY_WAYBAR_SECONDS (default 20) is how long the relabelling test keeps a
submenu open while labels change; 60 is the full minute.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path

import pytest
from helpers.processes import wait_for
from waybar_host import (
    BAR,
    LEFT,
    MENU_SIGNALS,
    MONITOR_RULES,
    RIGHT,
    WATCHER,
    WAYBAR_ROWS,
    App,
    Monitor,
    Waybar,
    bus_time,
    differs,
    missing,
    quiet_after,
    row_y,
)

from sloth_tray.tray.dbusmenu import ASKED_FOR_ENV

pytestmark = pytest.mark.skipif(missing() is not None, reason=missing() or "")

RELABEL_SECONDS = float(os.environ.get("SLOTH_TRAY_WAYBAR_SECONDS", "20"))
SHOTS = os.environ.get("SLOTH_TRAY_SHOTS")  # a folder for screenshots of failures, if wanted
ASKED_FOR_HERE = 5.0  # the app's dbusmenu.ASKED_FOR where a test waits it out
ROW = WAYBAR_ROWS.row
# What libdbusmenu-gtk and GLib print when a menu item is used after it went away.
ASSERTIONS = re.compile(r"DBUSMENU_IS_MENUITEM|invalid unclassed pointer|CRITICAL")


@pytest.fixture
def waybar(pids):
    desktop = Waybar(pids)
    try:
        yield desktop.start()
    finally:
        desktop.disconnect()
        pids.cleanup()  # before the folder goes: sway, waybar, the bus, the pointer
        desktop.close()


@pytest.fixture
def app(waybar, pids, tmp_path):
    return app_in(waybar, pids, tmp_path)


def app_in(waybar, pids, tmp_path, env: dict[str, str] | None = None) -> App:
    """The app in waybar's tray (with `env` added to its environment), with a
    dbus-monitor watching its menu."""
    monitor = Monitor(pids, waybar.bus.address, MONITOR_RULES, tmp_path / "monitor.log")
    tray = App(pids, tmp_path / "home", {**waybar.env, **(env or {})}, waybar.bus, monitor)
    wait_for(tray.registered, what="the item to register with waybar")
    wait_for(lambda: waybar.shot().crop((0, 0, 640, BAR)).getcolors(1) is None,
             what="the icon in the bar")
    return tray


class OpenMenu:
    """The root menu opened with a right click on the icon: where it is on screen."""

    def __init__(self, waybar: Waybar, app: App) -> None:
        self.waybar, self.app = waybar, app
        x, y = waybar.icon()
        waybar.move(x, y)  # the pointer is drawn in the screenshots: the same in both
        self.bare = wait_for(lambda: self._steady(), what="a steady screen")
        self.opened_at = bus_time()
        waybar.click(x, y, RIGHT)
        self.box = wait_for(lambda: differs(self.bare, waybar.shot(), (0, BAR, 640, 360)),
                            timeout=5, what="the menu to open")
        self.shot = wait_for(lambda: self._steady(), what="the menu drawn")
        # The menu's top edge (it overlaps the bar): the column just inside its left edge.
        column = differs(self.bare, self.shot, (self.box[0] + 4, 0, self.box[0] + 5, 360))
        self.box = (self.box[0], column[1], self.box[2], self.box[3])
        self.root = app.menu().root()

    def _steady(self):
        first = self.waybar.shot()
        time.sleep(0.15)
        return first if differs(first, self.waybar.shot()) is None else None

    def row_box(self, label: str) -> tuple[int, int, int, int]:
        y = row_y(self.box[1], self.root, self.root.find(label))
        return (self.box[0] + 2, y - 10, self.box[2] - 2, y + 10)

    def click(self, label: str) -> None:
        box = self.row_box(label)
        self.waybar.click(box[0] + 40, (box[1] + box[3]) // 2, LEFT)

    def close(self) -> float:
        """A click on the desktop, away from the menu; when the menu is gone from screen."""
        self.waybar.move(20, 340)
        self.waybar.click(20, 340, LEFT)
        # Below the pointer drawn over the icon, above the one down here.
        wait_for(lambda: differs(self.bare, self.waybar.shot(), (0, 40, 640, 330)) is None,
                 timeout=5, what="the menu to close")
        return bus_time()


def test_a_running_jobs_time_moves_in_the_open_menu_and_keeps_its_row(waybar, app):
    app.nap()
    menu = OpenMenu(waybar, app)
    status = menu.root.visible()[0]
    assert status.label.startswith("Running nap"), menu.root.labels()
    assert app.monitor.calls("AboutToShowGroup", menu.opened_at), \
        "waybar did not call AboutToShowGroup on opening the menu"

    row = menu.row_box("Running nap")
    drawn = menu.shot.crop(row)
    wait_for(lambda: differs(drawn, waybar.shot().crop(row)), timeout=4,
             what="the running job's time to move in the open menu (waybar)")
    now = app.menu().root().visible()[0]
    assert now.label != status.label and now.label.startswith("Running nap")
    assert now.id == status.id, (f"the running row changed its id ({status.id} -> {now.id}) "
                                 f"when its time moved: waybar rebuilds the row")


def test_after_the_menu_closes_the_app_stops_sending_menu_signals(waybar, pids, tmp_path):
    """Never told the root menu closed, the app stops within the window waybar's question
    bought (dbusmenu.ASKED_FOR, shortened to ASKED_FOR_HERE: the same window, not 30 s
    of waiting)."""
    app = app_in(waybar, pids, tmp_path, {ASKED_FOR_ENV: str(ASKED_FOR_HERE)})
    app.nap()
    menu = OpenMenu(waybar, app)
    closed_at = menu.close()
    assert not [m for m in app.monitor.calls(since=menu.opened_at)
                if re.search(r'(?<!\d)0 "closed"', m.text())], \
        "waybar said the root menu closed: this test's premise is gone"
    took = quiet_after(app.monitor, closed_at, quiet=3.0, limit=ASKED_FOR_HERE + 5.0)
    print(f"menu signals stopped {took:.1f}s after the menu closed")


@contextlib.contextmanager
def screen_kept(waybar: Waybar, name: str):
    """On a failure inside, the screen is saved to $SLOTH_TRAY_SHOTS/waybar-NAME.png."""
    try:
        yield
    except AssertionError:
        if SHOTS:
            waybar.shot().save(Path(SHOTS) / f"waybar-{name}.png")
        raise


def drawn_down(shot, bare, x: int, y: int) -> int:
    """How many pixels of column x, from y down, differ from the bare desktop: the
    height of a popup drawn there."""
    height = 0
    while y + height < shot.height and differs(bare.crop((x, y + height, x + 1,
                                                          y + height + 1)),
                                               shot.crop((x, y + height, x + 1,
                                                          y + height + 1))):
        height += 1
    return height


class OpenSubmenu:
    """A running job (its time moves each second), one job waiting, the root menu open
    and its "Waiting (1)" submenu clicked open, the pointer on the submenu's first row
    (whose own "Run now" submenu opens on hover), as a user's would be."""

    def __init__(self, waybar: Waybar, app: App) -> None:
        self.waybar, self.app = waybar, app
        app.nap()
        app.add("later_1", "true\n", "--delay", "10m")
        self.waiting = len(app.jobs()) - 1  # the running one aside
        wait_for(lambda: f"Waiting ({self.waiting})" in app.menu().root().labels(),
                 what="the jobs waiting in the menu")
        self.open()

    def open(self) -> None:
        """The root menu, then its Waiting submenu, the pointer on the first row."""
        self.menu = OpenMenu(self.waybar, self.app)
        self.parent = self.menu.row_box("Waiting (")
        self.menu.click("Waiting (")
        self.box = wait_for(lambda: differs(self.menu.shot, self.waybar.shot(),
                                            (0, BAR, self.menu.box[0], 360)),
                            timeout=5, what="the Waiting submenu to open")
        self.waybar.move(self.box[0] + 60, self.box[1] + 16)

    def settled(self):
        """The submenu as drawn once two looks a moment apart agree (inside its
        border: the root menu beside it may be redrawn)."""
        left, top, right, bottom = self.box
        inside = (left + 4, top + 2, right - 6, bottom - 2)

        def same():
            first = self.waybar.shot().crop(inside)
            second = self.waybar.shot().crop(inside)
            return second if differs(first, second) is None else None
        return wait_for(same, timeout=5, what="the open submenu to settle")

    def one_more(self, *, on_screen: bool = True) -> None:
        """Another waiting job (counting down by the second): once the open menu shows
        "Waiting (N+1)" (`on_screen`), or once waybar has read the new layout."""
        before = self.waybar.shot().crop(self.parent)
        since = bus_time()
        self.waiting += 1
        self.app.add(f"later_{self.waiting}", "true\n", "--delay", f"{40 + self.waiting}s")
        if on_screen:
            wait_for(lambda: differs(before, self.waybar.shot().crop(self.parent)),
                     timeout=5, what=f"'Waiting ({self.waiting})' drawn in the open menu")
        else:
            label = f"Waiting ({self.waiting})"

            def told() -> list:
                return [m for m in self.app.monitor.signals(MENU_SIGNALS, since)
                        if m.member == "LayoutUpdated" or label in m.text()]
            sent = wait_for(told, timeout=5,
                            what=f"the app to tell waybar of '{label}' with the submenu "
                                 f"open ({since - self.menu.opened_at:.0f}s after it opened)")
            if sent[0].member == "LayoutUpdated":
                host = self.waybar.bus.owner(WATCHER)
                wait_for(lambda: [m for m in self.app.monitor.calls("GetLayout", since)
                                  if m.fields.get("sender") == host], timeout=5,
                         what=f"waybar to read the layout with '{label}'")

    def rows_drawn(self) -> int:
        """The submenu's height in rows, read down a column near its left edge (which
        the pointer and the submenu's own submenus leave be)."""
        return drawn_down(self.waybar.shot(), self.menu.bare, self.box[0] + 3,
                          self.box[1] + 4) // ROW


def test_an_open_submenu_stays_whole_while_its_parent_is_relabelled(waybar, app):
    """GTK on Wayland drew an open submenu that gained a row as a blank strip with a
    scroll arrow: while it is open its rows stay (their labels move), its parent says
    "Waiting (N)", and the new rows are there once it opens again."""
    opened = OpenSubmenu(waybar, app)
    rows = opened.rows_drawn()
    drawn = opened.settled()
    for _ in range(2):
        with screen_kept(waybar, f"submenu-{opened.waiting + 1}"):
            # Told, not looked at: the row's own Run now/Cancel popup, open on hover,
            # covers the parent's label.
            opened.one_more(on_screen=False)
            assert differs(drawn, opened.settled()) is None, "the open submenu was redrawn"
            assert opened.rows_drawn() == rows
    opened.menu.close()
    opened.open()
    with screen_kept(waybar, "submenu-reopened"):
        wait_for(lambda: opened.rows_drawn() >= opened.waiting * rows, timeout=5,
                 what=f"the reopened submenu to show its {opened.waiting} rows")


def test_waybar_logs_no_dbusmenu_assertion_while_labels_change_under_an_open_submenu(
        waybar, app):
    logged = len(waybar.log())
    opened = OpenSubmenu(waybar, app)
    deadline = time.monotonic() + RELABEL_SECONDS
    while time.monotonic() < deadline:
        opened.one_more(on_screen=False)  # on screen: the test above
        time.sleep(min(4.0, max(0.0, deadline - time.monotonic())))  # labels tick meanwhile
    opened.menu.close()
    lines = waybar.log()[logged:].splitlines()
    other = sorted({line for line in lines if line.strip() and "] [info] " not in line})
    print(f"waybar's other log lines in {RELABEL_SECONDS:.0f}s: {other}")
    found = [line for line in lines if ASSERTIONS.search(line)]
    assert not found, (f"waybar logged {len(found)} dbusmenu assertion(s) in "
                       f"{RELABEL_SECONDS:.0f}s, first: {found[0]}")


def test_retry_all_failed_in_waybars_menu_retries_the_job(waybar, app):
    failing = app.add("disk_check", "# sloth: max_attempts=1\nexit 1\n")
    wait_for(lambda: app.state(failing) == "failed", what="the job to fail")
    menu = OpenMenu(waybar, app)
    menu.click("Retry all failed")
    wait_for(lambda: "retried" in app.history(failing), timeout=5,
             what="the click on Retry all failed to retry the job")
