"""GNOME Shell 43 with the AppIndicator extension, headless, as the tray's host in tests.

What a test gets:

- `Shell`: a private session bus (and a stand-in system bus; the shell dies without
  one), both run as nobody with gnome-shell, since gnome-shell refuses root; root's
  clients (the app, this harness) are let in by the bus's config. The extension is
  enabled with gsettings before the shell starts. `--unsafe-mode` opens
  org.gnome.Shell.Eval, through which the harness reads what the panel shows (the
  extension's indicator in Main.panel.statusArea and its PopupMenu rows). A pointer is
  an org.gnome.Mutter.RemoteDesktop session: relative motion and buttons, checked
  against where the shell says the pointer is.
- `App`: `sloth-tray run --home HOME` as the README says, on the shell's bus and
  with WAYLAND_DISPLAY set (without a display it runs headless); its state read with
  its own CLI's --json output, its menu with dbusmenu's GetLayout.
- `Monitor`: dbus-monitor on the shell's bus, for what the shell asks the app.

Every process started here is tracked by `Processes` and killed by pid (with the
processes it or the bus started, found by parent pid) when the test ends.
Nothing here depends on files outside the project.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dbus_fast import Message, MessageType, Variant
from dbus_fast.aio import MessageBus
from helpers.processes import wait_for

EXTENSION = "ubuntu-appindicators@ubuntu.com"  # Debian's gnome-shell-extension-appindicator
EXTENSION_DIRS = (Path("/usr/share/gnome-shell/extensions") / EXTENSION,)
APT_PACKAGES = "gnome-shell gnome-shell-extension-appindicator"
NOBODY = 65534
SCREEN = (1024, 768)
WATCHER = "org.kde.StatusNotifierWatcher"
WATCHER_PATH = "/StatusNotifierWatcher"
ITEM_INTERFACE = "org.kde.StatusNotifierItem"
ITEM_PATH = "/StatusNotifierItem"
DBUSMENU = "com.canonical.dbusmenu"
RD = "org.gnome.Mutter.RemoteDesktop"
LEFT, RIGHT = 272, 273  # evdev buttons
ESCAPE = 0xFF1B  # its X keysym
NULL_ARGUMENT = "Argument two may not be null"  # the extension's log when it drops an item

# A session bus like the stock one, with two changes: root's clients may connect (the bus
# runs as nobody, with the shell), and it starts only GNOME's own services (dconf, the
# shell's helpers), never another desktop's that this machine may have installed (KDE's
# notification service would take org.freedesktop.Notifications and never answer).
BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <keep_umask/>
  <listen>unix:tmpdir=/tmp</listen>
  <auth>EXTERNAL</auth>
  <servicedir>{services}</servicedir>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
  <policy context="default"><allow user="root"/></policy>
</busconfig>
"""
SERVICE_FILES = ("ca.desrt.dconf.service", "org.gnome.Shell.*.service")


def missing() -> str | None:
    """Why these tests cannot run here, or None."""
    if not sys.platform.startswith("linux"):
        return "GNOME Shell tests need Linux"
    tools = ["gnome-shell", "dbus-daemon", "dbus-monitor", "gsettings"]
    if os.geteuid() == 0:
        tools.append("setpriv")  # gnome-shell refuses root: it runs as nobody
    absent = [tool for tool in tools if shutil.which(tool) is None]
    if not any(folder.is_dir() for folder in EXTENSION_DIRS):
        absent.append(f"the AppIndicator extension ({EXTENSION})")
    if absent:
        return (f"not installed: {', '.join(absent)} "
                f"(apt-get install -y --no-install-recommends {APT_PACKAGES})")
    return None


# -- processes -----------------------------------------------------------------------


def children_of(pids: set[int]) -> set[int]:
    """Every live descendant of `pids` (by parent pid in /proc)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found: set[int] = set()
    frontier = set(pids)
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


class Processes:
    """What a test started; `stop()` kills each, and what each started, by pid."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def popen(self, *args, **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(*args, **kwargs)
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen, grace: float = 5.0) -> None:
        """SIGTERM (time to tidy up), then SIGKILL to it and everything it started."""
        family = children_of({proc.pid})
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        for pid in [proc.pid, *(family | children_of(family))]:
            if pid != proc.pid or proc.poll() is None:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        proc.wait(timeout=10)

    def stop_all(self) -> None:
        for proc in reversed(self.procs):  # the bus last: its clients first
            self.stop(proc, grace=2.0)
        self.procs.clear()


# -- a D-Bus client on a thread of its own ---------------------------------------------


class DBusCallError(AssertionError):
    pass


class Bus:
    """A dbus-fast connection whose loop runs on a thread, called synchronously."""

    def __init__(self, address: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name="gnome-host-bus")
        self.thread.start()

        async def connect() -> MessageBus:  # made on the loop: dbus-fast takes the running one
            return await MessageBus(bus_address=address).connect()

        self.bus: MessageBus = self.run(connect())

    def run(self, coro, timeout: float = 30.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, destination: str, path: str, interface: str, member: str,
             signature: str = "", body=(), timeout: float = 30.0) -> list[Any]:
        reply = self.run(self.bus.call(Message(
            destination=destination, path=path, interface=interface, member=member,
            signature=signature, body=list(body))), timeout)
        if reply.message_type == MessageType.ERROR:
            raise DBusCallError(f"{interface}.{member} on {destination}: "
                                f"{reply.error_name}: {reply.body}")
        return reply.body

    def get(self, destination: str, path: str, interface: str, name: str):
        (value,) = self.call(destination, path, "org.freedesktop.DBus.Properties", "Get",
                             "ss", (interface, name))
        return value.value

    def has_owner(self, name: str) -> bool:
        return self.call("org.freedesktop.DBus", "/org/freedesktop/DBus",
                         "org.freedesktop.DBus", "NameHasOwner", "s", (name,))[0]

    def owner(self, name: str) -> str:
        return self.call("org.freedesktop.DBus", "/org/freedesktop/DBus",
                         "org.freedesktop.DBus", "GetNameOwner", "s", (name,))[0]

    def signals(self, rule: str, keep) -> list[tuple[float, Message]]:
        """From now on, (time.monotonic(), message) of each message matching `rule` that
        `keep(message)` accepts is appended to the returned list."""
        seen: list[tuple[float, Message]] = []

        def handler(message: Message):
            if keep(message):
                seen.append((time.monotonic(), message))
            return None

        self.loop.call_soon_threadsafe(self.bus.add_message_handler, handler)
        self.call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                  "AddMatch", "s", (rule,))
        return seen

    def close(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self.bus.disconnect)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


# -- dbus-monitor --------------------------------------------------------------------


@dataclass
class Seen:
    """One message dbus-monitor printed."""

    kind: str  # "method call", "method return", "signal", "error"
    time: float
    sender: str
    destination: str
    fields: dict[str, str]  # serial, reply_serial, path, interface, member, error_name
    args: list[str]  # the body's lines, as dbus-monitor prints them

    @property
    def member(self) -> str:
        return self.fields.get("member", "")

    def strings(self) -> list[str]:
        """The body's top-level string arguments."""
        return [m.group(1) for line in self.args
                if (m := re.match(r'^   (?:string|object path) "(.*)"$', line))]


HEADER = re.compile(r"^(method call|method return|signal|error) time=(\S+) sender=(\S+) "
                    r"-> destination=(\S+) (.*)$")


class Monitor:
    """dbus-monitor on a bus, writing to a file that is parsed as it grows."""

    def __init__(self, procs: Processes, address: str, path: Path) -> None:
        self.path = path
        self._out = open(path, "wb")
        self.proc = procs.popen(["dbus-monitor", "--address", address], stdout=self._out,
                                stderr=subprocess.STDOUT)
        self._offset = 0
        self._partial = b""
        self.messages: list[Seen] = []
        # It prints the NameAcquired it gets once it is a monitor.
        wait_for(lambda: path.stat().st_size, timeout=10, what="dbus-monitor to start")

    def read(self) -> list[Seen]:
        """All messages so far."""
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        self._offset += len(data)
        data = self._partial + data
        # A message is whole once the next header (a line not starting with a space) began.
        lines = data.split(b"\n")
        last_header = max((i for i, line in enumerate(lines)
                           if line and not line.startswith(b" ")), default=0)
        keep, self._partial = lines[:last_header], b"\n".join(lines[last_header:])
        current: Seen | None = None
        for raw in keep:
            line = raw.decode("utf-8", "replace")
            match = HEADER.match(line)
            if match:
                kind, when, sender, destination, rest = match.groups()
                fields = dict(part.split("=", 1) for part in re.split(r";? ", rest)
                              if "=" in part)
                current = Seen(kind, float(when), sender, destination, fields, [])
                self.messages.append(current)
            elif current is not None and line.startswith(" "):
                current.args.append(line)
        return self.messages

    def replies_to(self, call: Seen) -> list[Seen]:
        serial = call.fields.get("serial")
        return [m for m in self.read() if m.kind in ("method return", "error")
                and m.fields.get("reply_serial") == serial and m.sender == call.destination]

    def close(self) -> None:
        self._out.close()


# -- the shell -----------------------------------------------------------------------


def _js(text: str) -> str:
    return json.dumps(text)


def indicator_js(item: str, body: str) -> str:
    """JS run with `a` bound to the indicator of the watcher's entry `item` (or null),
    `PopupMenu`, and helpers `rows(menu)` and `center(actor)`."""
    return f"""(() => {{
const PopupMenu = imports.ui.popupMenu;
const entry = Object.entries(Main.panel.statusArea).find(([k, v]) =>
    v && k === "appindicator-" + {_js(item)});
const a = entry ? entry[1] : null;
const center = o => {{ const [x, y] = o.get_transformed_position();
    const [w, h] = o.get_transformed_size();
    return [Math.round(x + w / 2), Math.round(y + h / 2)]; }};
const rows = menu => menu._getMenuItems().map(i => ({{
    separator: i instanceof PopupMenu.PopupSeparatorMenuItem,
    submenu: i instanceof PopupMenu.PopupSubMenuMenuItem,
    label: (i.label && !(i instanceof PopupMenu.PopupSeparatorMenuItem)) ? i.label.text : "",
    sensitive: i.sensitive,
    visible: i.visible,
    checked: i._ornament === PopupMenu.Ornament.CHECK,
    mapped: i.is_mapped(),
    y: i.is_mapped() ? Math.round(i.get_transformed_position()[1]) : null,
    center: i.is_mapped() ? center(i) : null,
}}));
{body}
}})()"""


@dataclass(frozen=True)
class Row:
    """A row as the shell shows it, or as the app's layout says it should be."""

    label: str  # "---" for a separator
    sensitive: bool = True
    checked: bool = False

    def __str__(self) -> str:
        marks = ("" if self.sensitive else " (insensitive)") + (" [x]" if self.checked else "")
        return self.label + marks


class Shell:
    """One headless gnome-shell with its buses, pointer and log."""

    def __init__(self, procs: Processes, root: Path) -> None:
        self.procs = procs
        self.root = root
        self.run_dir = root / "run"
        self.home = root / "home"
        self.log = root / "shell.log"
        self.address = f"unix:path={self.run_dir}/bus"
        self.system_address = f"unix:path={self.run_dir}/sysbus"
        self.bus: Bus | None = None
        self._pointer_session: str | None = None
        self.proc: subprocess.Popen | None = None
        self.started_in = 0.0  # seconds from nothing to a shell ready for an item
        self.double_click = 0.4  # seconds; the shell's own setting once it runs
        self._last_click: tuple[float, tuple[int, int]] = (0.0, (-100, -100))

    # -- start ---------------------------------------------------------------------

    def _as_nobody(self) -> list[str]:
        if os.geteuid() != 0:
            return []
        return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]

    def _env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
            "HOME": str(self.home), "XDG_RUNTIME_DIR": str(self.run_dir),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            "XDG_DATA_HOME": str(self.home / ".local/share"),
            "DBUS_SESSION_BUS_ADDRESS": self.address,
            "DBUS_SYSTEM_BUS_ADDRESS": self.system_address,
            "NO_AT_BRIDGE": "1",  # no accessibility bus started on the private bus
            "GSETTINGS_BACKEND": "dconf",
        }

    def start(self) -> Shell:
        began = time.monotonic()
        self.root.chmod(0o755)  # nobody must reach run/ and home/ inside
        for folder in (self.run_dir, self.home):
            folder.mkdir()
            if os.geteuid() == 0:
                os.chown(folder, NOBODY, NOBODY)
        self.run_dir.chmod(0o700)
        services = self.root / "services"
        services.mkdir()
        for pattern in SERVICE_FILES:
            for found in Path("/usr/share/dbus-1/services").glob(pattern):
                shutil.copy(found, services / found.name)
        config = self.root / "bus.conf"
        config.write_text(BUS_CONFIG.format(services=services))
        env = self._env()
        for address in (self.address, self.system_address):
            self.procs.popen([*self._as_nobody(), "dbus-daemon", f"--config-file={config}",
                              "--nofork", f"--address={address}"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for address in (self.address, self.system_address):
            socket_path = address.removeprefix("unix:path=")
            wait_for(lambda p=socket_path: os.path.exists(p), timeout=20,
                     what="the private buses' sockets")
        # The extension on, before the shell starts.
        for key, value in (("disable-user-extensions", "false"),
                           ("enabled-extensions", f"['{EXTENSION}']")):
            subprocess.run([*self._as_nobody(), "gsettings", "set", "org.gnome.shell", key,
                            value], env=env, check=True, timeout=30)
        with open(self.log, "wb") as log:
            self.proc = self.procs.popen(
                [*self._as_nobody(), "gnome-shell", "--headless", "--wayland", "--no-x11",
                 "--virtual-monitor", f"{SCREEN[0]}x{SCREEN[1]}", "--unsafe-mode"],
                env=env, stdout=log, stderr=subprocess.STDOUT)
        self.bus = Bus(self.address)
        wait_for(lambda: self._died() or (self.bus.has_owner("org.gnome.Shell")
                                          and self.bus.has_owner(WATCHER)),
                 timeout=90, what="gnome-shell and the extension's StatusNotifierWatcher",
                 every=0.1)
        self._check_alive()
        def started() -> bool:
            try:
                return self.eval("!Main.layoutManager._startingUp && Main.extensionManager"
                                 f".lookup({_js(EXTENSION)}).state === 1")
            except DBusCallError:  # the name is owned a moment before Eval is exported
                return False

        wait_for(started, timeout=60,
                 what="the shell's start-up to end with the extension enabled", every=0.1)
        # GNOME 40+ starts in the overview: back to the desktop, as a user's session is.
        self.eval("Main.overview.hide(); true")
        wait_for(lambda: self.eval("!Main.overview.visible && !Main.overview.animationInProgress"),
                 timeout=30, what="the overview to close", every=0.1)
        # The pointer now: its session adds the shell's remote-access indicator to the
        # panel, which moves the items beside it.
        self._session()
        self.park_pointer()
        self.double_click = 0.05 + self.eval(
            "imports.gi.Clutter.Settings.get_default().double_click_time") / 1000
        self.started_in = time.monotonic() - began
        return self

    def _died(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def _check_alive(self) -> None:
        if self._died():
            raise AssertionError(f"gnome-shell exited ({self.proc.returncode}); its log:\n"
                                 + self.log_text()[-3000:])

    def stop(self) -> None:
        if self.bus is not None:
            self.bus.close()
            self.bus = None

    # -- what it shows -------------------------------------------------------------

    def eval(self, code: str):
        """org.gnome.Shell.Eval: the JSON of the value (None for undefined)."""
        self._check_alive()
        ok, text = self.bus.call("org.gnome.Shell", "/org/gnome/Shell", "org.gnome.Shell",
                                 "Eval", "s", (code,))
        if not ok:
            raise AssertionError(f"the shell's Eval failed: {text}\n{code}")
        return json.loads(text) if text else None

    def log_text(self, start: int = 0) -> str:
        with open(self.log, "rb") as f:
            f.seek(start)
            return f.read().decode("utf-8", "replace")

    def log_size(self) -> int:
        return self.log.stat().st_size

    def registered(self) -> list[str]:
        return list(self.bus.get(WATCHER, WATCHER_PATH, WATCHER,
                                 "RegisteredStatusNotifierItems"))

    def indicator(self, item: str) -> dict | None:
        """The extension's indicator for the item `item`: key, visible, mapped,
        whether it is ready and its menu open; None when there is none."""
        return self.eval(indicator_js(item, """
if (!a) return null;
return {key: entry[0], visible: a.visible, mapped: a.is_mapped(), open: a.menu.isOpen,
        ready: !!(a._indicator && a._indicator.isReady), center: center(a),
        accessible_name: a.accessible_name};"""))

    def rows(self, item: str) -> list[dict]:
        """The top level of the indicator's menu, in the menu box's order (its order
        on screen), each row's label, sensitivity, check mark and place."""
        return self.eval(indicator_js(item, "return a ? rows(a.menu) : [];"))

    def submenu_rows(self, item: str, label: str) -> list[dict]:
        return self.eval(indicator_js(item, f"""
const item = a && a.menu._getMenuItems().find(i => i.menu && i.label.text === {_js(label)});
return item ? rows(item.menu) : [];"""))

    def shown_rows(self, item: str) -> list[Row]:
        """The visible top-level rows, top to bottom as drawn (by their place on screen
        when the menu is open)."""
        rows = [r for r in self.rows(item) if r["visible"]]
        if all(r["y"] is not None for r in rows):
            rows.sort(key=lambda r: r["y"])
        return [Row("---") if r["separator"] else Row(r["label"], r["sensitive"], r["checked"])
                for r in rows]

    def screenshot(self, target: Path) -> None:
        """The whole screen as a PNG at `target` (org.gnome.Shell.Screenshot, open in
        unsafe mode); the shell writes it as nobody, in a folder of its own first."""
        shots = self.root / "shots"
        if not shots.exists():
            shots.mkdir()
            if os.geteuid() == 0:
                os.chown(shots, NOBODY, NOBODY)
        made = shots / target.name
        ok, _used = self.bus.call("org.gnome.Shell.Screenshot", "/org/gnome/Shell/Screenshot",
                                  "org.gnome.Shell.Screenshot", "Screenshot", "bbs",
                                  (False, False, str(made)))
        assert ok, "the shell took no screenshot"
        shutil.copy(made, target)

    # -- a pointer -----------------------------------------------------------------

    def pointer(self) -> tuple[int, int]:
        x, y, _mods = self.eval("global.get_pointer()")
        return x, y

    def _session(self) -> str:
        if self._pointer_session is None:
            (session,) = self.bus.call(RD, "/org/gnome/Mutter/RemoteDesktop", RD,
                                       "CreateSession")
            self.bus.call(RD, session, RD + ".Session", "Start")
            self._pointer_session = session
        return self._pointer_session

    def move(self, x: int, y: int) -> None:
        """Move the pointer to (x, y), by relative motion, until the shell says it is there."""
        session = self._session()
        for _ in range(5):
            px, py = self.pointer()
            if (px, py) == (x, y):
                return
            self.bus.call(RD, session, RD + ".Session", "NotifyPointerMotionRelative", "dd",
                          (float(x - px), float(y - py)))
            try:
                wait_for(lambda was=(px, py): self.pointer() != was, timeout=2,
                         what="the pointer to move")
            except AssertionError:
                pass
        raise AssertionError(f"the pointer did not reach {x},{y}: it is at {self.pointer()}")

    def click(self, x: int, y: int, button: int = LEFT) -> None:
        """Press and release `button` at (x, y). Never a double click by accident: the
        extension takes two clicks on its icon within the double-click time for the
        item's Activate (the app's default action), so a second click near the last
        one waits that time out (a clock, not an event: nothing else to wait on)."""
        last_at, last_where = self._last_click
        if (abs(last_where[0] - x) + abs(last_where[1] - y) < 40
                and time.monotonic() - last_at < self.double_click):
            time.sleep(self.double_click - (time.monotonic() - last_at))
        self.move(x, y)
        session = self._session()
        for down in (True, False):
            self.bus.call(RD, session, RD + ".Session", "NotifyPointerButton", "ib",
                          (button, down))
        self._last_click = (time.monotonic(), (x, y))

    def key(self, keysym: int) -> None:
        session = self._session()
        for down in (True, False):
            self.bus.call(RD, session, RD + ".Session", "NotifyKeyboardKeysym", "ub",
                          (keysym, down))

    def park_pointer(self) -> None:
        """Somewhere harmless: the desktop's middle (no hot corner, no panel, no menu)."""
        self.move(SCREEN[0] // 2, SCREEN[1] - 100)

    # -- the indicator's menu, by the pointer -----------------------------------------

    def open_menu(self, item: str) -> None:
        """Click the indicator (as a user does) and wait until its menu is open and
        still (the menu slides and fades in)."""
        # A click the shell took while it laid the panel out again opens nothing; a
        # user clicks again, and so does this, up to three times (past the double-click
        # time: click() waits it out).
        for tries_left in (2, 1, 0):
            self.close_menus(item)
            self.move(*self.icon_center(item))
            self.click(*self.icon_center(item))  # where it is now that the pointer is on it
            try:
                wait_for(lambda: (self.indicator(item) or {}).get("open"), timeout=4,
                         what="the indicator's menu to open")
                break
            except AssertionError:
                if not tries_left:
                    raise
        self.settled(item)

    def icon_center(self, item: str) -> tuple[int, int]:
        """The indicator's middle on screen, once it stays put (the panel lays itself out
        again when items come and go)."""
        last: list = [None]

        def still():
            where = self.indicator(item)
            center = where["center"] if where and where["mapped"] else None
            if center is None or None in center:
                last[0] = None
                return None
            same, last[0] = center == last[0], center
            return same and tuple(center)

        return wait_for(still, timeout=5, what=f"the indicator of {item} on the panel",
                        every=0.05)

    def settled(self, item: str) -> list[dict]:
        """Wait until two reads of the menu's rows in a row are alike (nothing moving)."""
        last: list = [None]

        def still():
            now = self.rows(item)
            same, last[0] = now == last[0], now
            return same and now

        return wait_for(still, timeout=5, what="the menu to stop moving", every=0.1)

    def close_menus(self, item: str) -> None:
        """Close the menu, if open, with Escape, as a user does (a click on the icon
        soon after the one that opened it would be a double click)."""
        where = self.indicator(item)
        if where and where["open"]:
            self.key(ESCAPE)
            wait_for(lambda: not (self.indicator(item) or {}).get("open"), timeout=5,
                     what="the menu to close")

    def close_any_menu(self) -> None:
        """Tidying up between tests (not a user's action): the panel's open menu closed."""
        self.eval("const m = Main.panel.menuManager.activeMenu; if (m) m.close(); true")

    def click_row(self, item: str, label: str, submenu: str | None = None) -> None:
        """Click the top-level row (or the row of an open submenu) labelled `label`."""
        rows = self.submenu_rows(item, submenu) if submenu else self.settled(item)
        found = [r for r in rows if r["label"] == label and r["center"]]
        assert found, f"no row {label!r} on screen; rows: {[r['label'] for r in rows]}"
        self.click(*found[0]["center"])


def new_shell(procs: Processes) -> Shell:
    """A fresh shell in a folder of its own (removed by `remove_folder`)."""
    # Not under pytest's tmp_path: that is private to root, and the shell runs as nobody.
    shell = Shell(procs, Path(tempfile.mkdtemp(prefix="sloth-gnome-")))
    try:
        return shell.start()
    except BaseException:
        shell.stop()
        remove_folder(shell)  # its processes are the caller's to stop, by pid
        raise


def remove_folder(shell: Shell) -> None:
    shutil.rmtree(shell.root, ignore_errors=True)


# -- the app -------------------------------------------------------------------------


def sloth_command() -> list[str]:
    """The app as installed (the venv's console script), else `python -m sloth_tray`;
    SLOTH_TRAY_GNOME_APP names another (a built bundle, an older build to compare)."""
    if os.environ.get("SLOTH_TRAY_GNOME_APP"):
        return shlex.split(os.environ["SLOTH_TRAY_GNOME_APP"])
    script = Path(sys.executable).parent / "sloth-tray"
    return [str(script)] if script.exists() else [sys.executable, "-m", "sloth_tray"]


def unmnemonic(label: str) -> str:
    """What the extension makes of a dbusmenu label: `.replace(/_([^_])/, '$1')`."""
    return re.sub(r"_([^_])", r"\1", label, count=1)


class App:
    """`sloth-tray run --home HOME` on the shell's bus."""

    def __init__(self, procs: Processes, shell: Shell, home: Path) -> None:
        self.procs = procs
        self.shell = shell
        self.home = home
        self.proc: subprocess.Popen | None = None
        # The watcher's entry for the app's item: "<bus name>" when the app registered
        # a name, "<unique name>@<path>" when it registered a path; the extension's
        # indicator is Main.panel.statusArea["appindicator-" + item].
        self.item = ""
        self.bus_name = ""
        self.item_path = ITEM_PATH
        self._pids: dict[str, int] = {}
        self.registered_at = 0.0  # time.monotonic() when the watcher first listed the item
        self.rescues = 0  # times the harness registered the item again (see `start`)
        self.log_start = 0

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTH_TRAY_")}
        env.update({
            "DBUS_SESSION_BUS_ADDRESS": self.shell.address,
            "DBUS_SYSTEM_BUS_ADDRESS": self.shell.system_address,
            "WAYLAND_DISPLAY": "wayland-0", "XDG_RUNTIME_DIR": str(self.shell.run_dir),
            "HOME": str(self.home.parent), "XDG_CACHE_HOME": str(self.home.parent / "cache"),
            "XDG_CONFIG_HOME": str(self.home.parent / "config"),
            "XDG_DATA_HOME": str(self.home.parent / "data"),
            "SLOTH_TRAY_CONFIG": str(self.home.parent / "config.toml"),  # none: defaults
            "NO_AT_BRIDGE": "1",
        })
        env.pop("DISPLAY", None)
        env.pop("PYSTRAY_BACKEND", None)
        return env

    def cli(self, *argv: str, check: bool = True) -> Any:
        done = subprocess.run([*sloth_command(), *argv, "--home", str(self.home)],
                              env=self.env(), capture_output=True, text=True, timeout=60)
        if check:
            assert done.returncode == 0, f"sloth-tray {' '.join(argv)}: {done.stderr}"
        return json.loads(done.stdout) if "--json" in argv else done.stdout

    def jobs(self) -> list[dict]:
        return self.cli("list", "--limit", "0", "--json")

    def job(self, job_id: str) -> dict:
        return self.cli("show", job_id, "--json")

    def drop(self, name: str, text: str) -> None:
        """A script dropped into the jobs folder, whole (written aside, then moved in)."""
        jobs = Path(self.cli("paths", "--json")["jobs"])
        wait_for(jobs.is_dir, what="the jobs folder")
        aside = self.home.parent / f".{name}.part"
        aside.write_text(text)
        aside.rename(jobs / name)

    def job_named(self, name: str, state: str | None = None, timeout: float = 20) -> dict:
        def find():
            return next((job for job in self.jobs() if job["name"] == name
                         and (state is None or job["state"] == state)), None)
        return wait_for(find, timeout=timeout, what=f"job {name} to be {state or 'queued'}",
                        every=0.2)

    def start(self, *, rescue: bool = False) -> App:
        """Start the app and wait until the watcher lists its item. With `rescue`, also
        wait until the extension shows it, registering the item again (as the app
        itself would for a restarted panel) while the extension dropped it: the tests
        of the menu then run whatever the start-up race did (test G1 is the one that
        shows that race)."""
        self.home.parent.mkdir(parents=True, exist_ok=True)
        self.log_start = self.shell.log_size()
        with open(self.home.parent / "app.log", "ab") as log:
            self.proc = self.procs.popen([*sloth_command(), "run", "--home", str(self.home)],
                                         env=self.env(), stdout=log, stderr=subprocess.STDOUT)

        def listed():
            if self.proc.poll() is not None:
                raise AssertionError(f"sloth-tray exited ({self.proc.returncode}):\n"
                                     + (self.home.parent / "app.log").read_text()[-2000:])
            return self._find_item()

        self.item = wait_for(listed, timeout=30, what="the app's item to register",
                             every=0.02)
        name, _, path = self.item.partition("@")
        self.bus_name, self.item_path = name, path or ITEM_PATH
        self.registered_at = time.monotonic()
        if rescue:
            self._until_shown()
        return self

    def _find_item(self) -> str | None:
        """The watcher's entry whose connection is the app's process."""
        bus = self.shell.bus
        for entry in self.shell.registered():
            name = entry.partition("@")[0]
            if name not in self._pids:
                try:
                    unique = name if name.startswith(":") else bus.owner(name)
                    self._pids[name] = bus.call(
                        "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                        "GetConnectionUnixProcessID", "s", (unique,))[0]
                except DBusCallError:
                    continue  # gone already
            if self._pids[name] == self.proc.pid:
                return entry
        return None

    def _until_shown(self) -> None:
        for _ in range(5):
            def settled():
                where = self.shell.indicator(self.item)
                if where and where["ready"] and where["visible"]:
                    return "shown"
                if self.item not in self.shell.registered():
                    return "dropped"
                return None
            if wait_for(settled, timeout=10, what="the extension to show or drop the item",
                        every=0.1) == "shown":
                return
            self.rescues += 1
            # By its bus name, or by the app's unique name when the app registered a
            # path: the watcher makes the same entry of ":1.N" as of ":1.N@/StatusNotifierItem".
            self.shell.bus.call(WATCHER, WATCHER_PATH, WATCHER, "RegisterStatusNotifierItem",
                                "s", (self.bus_name,))
        raise AssertionError(f"the extension dropped {self.item} 5 times")

    def stop(self) -> None:
        if self.proc is not None:
            self.procs.stop(self.proc, grace=10)
            self.procs.procs.remove(self.proc)
            self.proc = None

    def menu_path(self) -> str:
        return self.shell.bus.get(self.bus_name, self.item_path, ITEM_INTERFACE, "Menu")

    def layout(self) -> list[dict]:
        """The top level of the app's dbusmenu: id and properties of each row."""
        _revision, (_root, _props, children) = self.shell.bus.call(
            self.bus_name, self.menu_path(), DBUSMENU, "GetLayout", "iias", (0, -1, []))
        rows = []
        for child in children:
            node_id, props, _kids = child.value
            rows.append({"id": node_id, **{k: (v.value if isinstance(v, Variant) else v)
                                           for k, v in props.items()}})
        return rows

    def layout_rows(self) -> list[Row]:
        """The rows the shell should show, from the layout: visible ones, in order."""
        return [Row("---") if r.get("type") == "separator" else
                Row(unmnemonic(r.get("label", "")), bool(r.get("enabled", True)),
                    r.get("toggle-type") == "checkmark" and r.get("toggle-state") == 1)
                for r in self.layout() if r.get("visible", True)]

    def shell_log(self) -> str:
        """What the shell logged since this app started."""
        return self.shell.log_text(self.log_start)
