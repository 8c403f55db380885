"""KDE Plasma 5.27's system tray for the end-to-end tests: plasmashell on Xvfb with a
private session bus (and a stand-in system bus), no window manager.

- Everything shares one environment, exported before the session bus starts: the bus
  starts kded5 (whose statusnotifierwatcher module owns org.kde.StatusNotifierWatcher),
  kglobalaccel5 and kactivitymanagerd on demand with the bus's environment, and
  plasmashell aborts without them.
- A fresh HOME gives Plasma's default layout: a bottom panel with the system tray. The
  app's icon is found by diffing the panel before and after the item registers.
- The menu is a QMenu, a plasmashell popup window: found with xdotool/xwininfo and
  clicked with xdotool. A first-level submenu may open off the right edge of the screen
  the first time (Plasma's); Escape and opening it again places it.

Bus-activated daemons are ours too: at the end every process on the private buses
(and every descendant of what was started here) is killed by pid.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from helpers.display import grab, start_xvfb
from helpers.processes import Pids, wait_for
from waybar_host import WATCHER, Bus, RowMetrics, differs, missing_tools

SCREEN = (1024, 600)
PANEL = 44  # the default bottom panel's height
TOOLS = ("Xvfb", "plasmashell", "kded5", "xdotool", "xwininfo", "xdpyinfo", "dbus-daemon",
         "dbus-monitor")
# Plasma's QMenu (Breeze, default fonts), as measured on Xvfb.
KDE_ROWS = RowMetrics(first=16, row=26, separator=7)


def missing() -> str | None:
    return missing_tools(TOOLS)


def children(pid: int) -> list[int]:
    """Every descendant of `pid` now."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class Plasma:
    """Xvfb + a private session bus (+ a stand-in system bus) + plasmashell."""

    def __init__(self, pids: Pids) -> None:
        self.pids = pids
        self.root = Path(tempfile.mkdtemp(prefix="sloth-kde-"))
        self.run_dir = self.root / "run"
        self.run_dir.mkdir(mode=0o700)
        self.home = self.root / "home"
        self.home.mkdir()
        self.env: dict[str, str] = {}
        self._buses: list[Bus] = []

    def start(self) -> Plasma:
        display = start_xvfb(self.pids, f"{SCREEN[0]}x{SCREEN[1]}x24")
        env = {**os.environ, "DISPLAY": display, "HOME": str(self.home),
               "XDG_RUNTIME_DIR": str(self.run_dir),
               "XDG_CONFIG_HOME": str(self.home / ".config"),
               "XDG_CACHE_HOME": str(self.home / ".cache"),
               "XDG_DATA_HOME": str(self.home / ".local/share"),
               "DBUS_SESSION_BUS_ADDRESS": f"unix:path={self.run_dir}/bus",
               "DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={self.run_dir}/sysbus",
               "NO_AT_BRIDGE": "1", "QT_QPA_PLATFORM": "xcb", "KDE_FULL_SESSION": "true",
               "XDG_CURRENT_DESKTOP": "KDE", "KDE_SESSION_VERSION": "5",
               "XDG_SESSION_TYPE": "x11"}
        env.pop("WAYLAND_DISPLAY", None)
        self.env = env
        wait_for(lambda: subprocess.run(["xdpyinfo"], env=env, capture_output=True)
                 .returncode == 0, what="Xvfb to answer")
        for variable in ("DBUS_SESSION_BUS_ADDRESS", "DBUS_SYSTEM_BUS_ADDRESS"):
            self.pids.popen(["dbus-daemon", "--session", "--nofork",
                             f"--address={env[variable]}"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            socket = Path(env[variable].removeprefix("unix:path="))
            wait_for(socket.exists, what="a private bus to listen")
            self._buses.append(Bus(env[variable]))
        self.bus = self._buses[0]
        self.log = self.root / "plasma.log"
        with self.log.open("w") as log:
            self.shell = self.pids.popen(["plasmashell"], env=env, stdout=log,
                                         stderr=subprocess.STDOUT)
        wait_for(lambda: self.bus.owner(WATCHER) or self.shell.poll() is not None,
                 timeout=90, what="kded5's StatusNotifierWatcher")
        assert self.shell.poll() is None, self.log.read_text()
        wait_for(self._panel_steady, timeout=60, what="Plasma's panel drawn and still")
        return self

    def _panel_steady(self):
        panel = (0, SCREEN[1] - PANEL, SCREEN[0], SCREEN[1])
        first = grab(self.env, panel)
        if first.getcolors(1):  # not drawn yet: one colour
            return None
        time.sleep(0.5)
        return differs(first, grab(self.env, panel)) is None

    def panel_shot(self):
        return grab(self.env, (0, SCREEN[1] - PANEL, SCREEN[0], SCREEN[1]))

    def steady_panel(self, timeout: float = 20.0):
        """The panel once two looks half a second apart agree (clock seconds aside:
        the default clock shows minutes)."""
        def look():
            first = self.panel_shot()
            time.sleep(0.5)
            return first if differs(first, self.panel_shot()) is None else None
        return wait_for(look, timeout=timeout, what="the panel to be still")

    def icon(self, before) -> tuple[int, int]:
        """The middle of the left-most group of panel columns that changed since
        `before` (the panel without the app's icon)."""
        def shown():  # Plasma draws a registered item a moment later: longer under load
            after = self.steady_panel()
            return after if differs(before, after) else None

        after = wait_for(shown, timeout=20.0, what="the app's icon to show in the panel")
        mask = differs_columns(before, after)
        run = [mask[0]]
        for x in mask[1:]:
            if x - run[-1] > 3:
                break
            run.append(x)
        column = differs(before, after, (run[0], 0, run[-1] + 1, PANEL))
        return (run[0] + run[-1]) // 2, SCREEN[1] - PANEL + (column[1] + column[3]) // 2

    def xdotool(self, *args: str) -> None:
        subprocess.run(["xdotool", *args], env=self.env, check=True)

    def popups(self) -> set[tuple[int, int, int, int]]:
        """Visible plasmashell windows that are menus: (x, y, width, height); the
        desktop and the panel left out."""
        found = subprocess.run(["xdotool", "search", "--onlyvisible", "--classname",
                                "plasmashell"], env=self.env, capture_output=True,
                               text=True).stdout.split()
        boxes = set()
        for window in found:
            info = subprocess.run(["xwininfo", "-id", window], env=self.env,
                                  capture_output=True, text=True).stdout
            values = {}
            for line in info.splitlines():
                key, _, value = line.strip().partition(":")
                values[key] = value.strip()
            try:
                box = (int(values["Absolute upper-left X"]),
                       int(values["Absolute upper-left Y"]),
                       int(values["Width"]), int(values["Height"]))
            except (KeyError, ValueError):
                continue
            if box[3] > 20 and box[2] < 600:
                boxes.add(box)
        return boxes

    def new_popup(self, before: set, act, what: str, timeout: float = 5.0):
        """Do `act`, then wait for a popup that was not there before."""
        act()
        return wait_for(lambda: next(iter(sorted(self.popups() - before)), None),
                        timeout=timeout, what=what)

    def bus_pids(self) -> set[int]:
        """Every process with a connection on the private buses."""
        found = set()
        for bus in self._buses:
            try:
                names = bus.call("org.freedesktop.DBus", "/org/freedesktop/DBus",
                                 "org.freedesktop.DBus", "ListNames")[0]
            except (RuntimeError, TimeoutError):
                continue
            for name in names:
                if name.startswith(":"):
                    pid = bus.pid(name)
                    if pid and pid != os.getpid():
                        found.add(pid)
        return found

    def adopt_strays(self) -> None:
        """Hand every bus-activated daemon and descendant to `pids` to be killed."""
        known = set(self.pids.pids)
        strays = self.bus_pids()
        for pid in list(known):
            strays.update(children(pid))
        for pid in sorted(strays - known - {os.getpid()}):
            self.pids.add(pid)

    def close(self) -> None:
        for bus in self._buses:
            bus.close()
        shutil.rmtree(self.root, ignore_errors=True)


def differs_columns(a, b, threshold: int = 40) -> list[int]:
    """The x of every column in which two images differ."""
    from PIL import ImageChops

    mask = ImageChops.difference(a.convert("RGB"), b.convert("RGB")).convert("L").point(
        lambda v: 255 if v > threshold else 0)
    width, height = mask.size
    pixels = mask.load()
    return [x for x in range(width) if any(pixels[x, y] for y in range(height))]
