"""A Wayland panel for the end-to-end tests: waybar's tray under a headless sway, with
a private session bus, a virtual pointer and grim for screenshots.

waybar's `tray` module is the org.kde.StatusNotifierWatcher and the host: it draws
the item's icon and renders its com.canonical.dbusmenu menu with libdbusmenu-gtk3,
as on sway, Hyprland and the other wlroots desktops.

- sway refuses to run as root: only sway runs as nobody (setpriv), headless, with
  pixman, in a runtime folder it owns; everything else runs as the test's user on the
  same sockets.
- The headless seat has no pointer: `vptr.c` (the wlr virtual-pointer protocol in
  `vp.xml`, compiled here with gcc) makes one and reads `move X Y W H`,
  `press BTN`, `release BTN` on stdin, answering `ok ...` once the compositor has
  the event.

Also here, for this file's tests and kde_host's: the app under test (started as the
README says, its state read with its CLI's --json), a D-Bus monitor that parses what
dbus-monitor prints, and the app's menu read over the bus as a host reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbus_fast import Message as Outgoing
from dbus_fast import MessageType
from dbus_fast.aio import MessageBus
from helpers.processes import Pids, wait_for

HERE = Path(__file__).resolve().parent
NOBODY = 65534
SCREEN = (640, 360)  # sway's headless output (sway.conf)
BAR = 30  # waybar's height (waybar.json)
BAR_BACKGROUND = (0x30, 0x30, 0x30)  # waybar.css
LEFT, RIGHT = 272, 273  # linux/input-event-codes.h
WATCHER = "org.kde.StatusNotifierWatcher"
MENU_INTERFACE = "com.canonical.dbusmenu"
ITEM_INTERFACE = "org.kde.StatusNotifierItem"

TOOLS = ("sway", "waybar", "grim", "wayland-scanner", "gcc", "dbus-daemon", "dbus-monitor")
if os.geteuid() == 0:
    TOOLS += ("setpriv",)

SWAY_CONF = f"xwayland disable\noutput HEADLESS-1 resolution {SCREEN[0]}x{SCREEN[1]}\n"
WAYBAR_JSON = {
    "layer": "top", "position": "top", "height": BAR,
    "modules-left": [], "modules-center": [], "modules-right": ["tray"],
    "tray": {"icon-size": 22, "spacing": 8},
}
WAYBAR_CSS = ('* { font-family: "DejaVu Sans"; font-size: 13px; }\n'
              "window#waybar { background: #303030; color: #ffffff; }\n")


def missing_tools(tools) -> str | None:
    if not sys.platform.startswith("linux"):
        return "the desktop tests need Linux"
    absent = [tool for tool in tools if shutil.which(tool) is None]
    if absent:
        return f"not installed: {', '.join(absent)} (.ci/run installs them)"
    return None


def missing() -> str | None:
    """Why waybar's tests cannot run here, or None."""
    why = missing_tools(TOOLS)
    if why:
        return why
    if not Path("/usr/include/wayland-client.h").exists():
        return "not installed: libwayland-dev (the virtual pointer is compiled against it)"
    return None


# -- the session bus, read and watched -------------------------------------------------


class Bus:
    """A client connection to one bus address (dbus-fast, the app's own D-Bus library, on
    a loop thread of its own), for the calls a panel or a user's tools make."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._bus = self._do(self._connect(address))

    @staticmethod
    async def _connect(address: str) -> MessageBus:
        return await MessageBus(bus_address=address).connect()

    def _do(self, work, timeout: float = 10.0):
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout)

    def call(self, dest: str, path: str, interface: str, member: str, signature: str = "",
             *args: Any) -> list[Any]:
        """The reply's values (variants as dbus_fast.Variant); RuntimeError on an error."""
        message = Outgoing(destination=dest, path=path, interface=interface, member=member,
                          signature=signature, body=list(args))
        reply = self._do(asyncio.wait_for(self._bus.call(message), 5.0))
        if reply.message_type == MessageType.ERROR:
            raise RuntimeError(f"{member} on {dest}: {reply.error_name} {reply.body}")
        return reply.body

    def get(self, dest: str, path: str, interface: str, prop: str) -> Any:
        return self.call(dest, path, "org.freedesktop.DBus.Properties", "Get", "ss",
                         interface, prop)[0].value

    def owner(self, name: str) -> str | None:
        try:
            return self.call("org.freedesktop.DBus", "/org/freedesktop/DBus",
                             "org.freedesktop.DBus", "GetNameOwner", "s", name)[0]
        except RuntimeError:
            return None

    def pid(self, name: str) -> int | None:
        try:
            return self.call("org.freedesktop.DBus", "/org/freedesktop/DBus",
                             "org.freedesktop.DBus", "GetConnectionUnixProcessID", "s",
                             name)[0]
        except RuntimeError:
            return None

    def items(self) -> list[str]:
        """The watcher's registered items (bus names, or `name/path` as waybar keeps them)."""
        try:
            return self.get(WATCHER, "/StatusNotifierWatcher", WATCHER,
                            "RegisteredStatusNotifierItems")
        except RuntimeError:
            return []

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._loop.call_soon_threadsafe(self._bus.disconnect)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)


@dataclass
class Row:
    """One menu item as a host sees it: its id, properties and children."""

    id: int
    props: dict[str, Any]
    children: list[Row] = field(default_factory=list)

    @property
    def label(self) -> str:
        return str(self.props.get("label", "")).replace("__", "_")

    @property
    def separator(self) -> bool:
        return self.props.get("type") == "separator"

    def visible(self) -> list[Row]:
        return [row for row in self.children if row.props.get("visible", True)]

    def find(self, prefix: str) -> Row:
        """The first row at any depth whose label starts with `prefix`."""
        for row in self.children:
            if row.label.startswith(prefix):
                return row
            try:
                return row.find(prefix)
            except LookupError:
                pass
        raise LookupError(f"no row starts with {prefix!r} in {self.labels()}")

    def labels(self) -> list[str]:
        return [row.label for row in self.children]


def _row(value: list[Any]) -> Row:
    node_id, props, children = value
    plain = {name: variant.value for name, variant in props.items()}
    return Row(node_id, plain, [_row(child.value) for child in children])


class Menu:
    """The app's dbusmenu, read as a host reads it (GetLayout of everything)."""

    def __init__(self, bus: Bus, name: str, path: str = "/MenuBar") -> None:
        self.bus, self.name, self.path = bus, name, path

    def layout(self) -> tuple[int, Row]:
        revision, root = self.bus.call(self.name, self.path, MENU_INTERFACE, "GetLayout",
                                       "iias", 0, -1, [])
        return revision, _row(root)

    def root(self) -> Row:
        return self.layout()[1]


@dataclass
class Message:
    kind: str  # "method call", "method return", "signal", "error"
    time: float  # wall time the bus stamped on it
    fields: dict[str, str]
    args: list[str]

    @property
    def member(self) -> str:
        return self.fields.get("member", "")

    @property
    def interface(self) -> str:
        return self.fields.get("interface", "")

    def text(self) -> str:
        """`Member(args)` with the arguments as dbus-monitor printed them, on one line."""
        flat = " ".join(" ".join(self.args).split())
        flat = re.sub(r"\b(int32|uint32|string|variant|array|struct|boolean) ", "", flat)
        return f"{self.member}({flat})"


HEADER = re.compile(r"^(method call|method return|signal|error) time=(\S+) (.*)$")


class Monitor:
    """dbus-monitor on a bus: every message matching `rules`, parsed as it comes."""

    def __init__(self, pids: Pids, address: str, rules: list[str], log: Path) -> None:
        self.messages: list[Message] = []
        self._lock = threading.Lock()
        self._log = log.open("w")
        self.proc = pids.popen(["dbus-monitor", "--address", address, *rules],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        # dbus-monitor says nothing until it is a monitor: call something it matches.
        wait_for(lambda: any(m.kind == "signal" and m.member in ("NameAcquired", "NameLost")
                             for m in self.snapshot()) or self.proc.poll() is not None,
                 timeout=10, what="dbus-monitor to start")

    def _read(self) -> None:
        current: Message | None = None
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._log.write(line)
            self._log.flush()
            head = HEADER.match(line)
            if head:
                fields = dict(re.findall(r"(\w+)=([^ ;]*)", head.group(3)))
                current = Message(head.group(1), float(head.group(2)), fields, [])
                with self._lock:
                    self.messages.append(current)
            elif current is not None:
                current.args.append(line.strip())
        self._log.close()

    def snapshot(self) -> list[Message]:
        with self._lock:
            return list(self.messages)

    def calls(self, member: str | None = None, since: float = 0.0) -> list[Message]:
        return [m for m in self.snapshot() if m.kind == "method call" and m.time >= since
                and (member is None or m.member == member)]

    def signals(self, members: tuple[str, ...], since: float = 0.0) -> list[Message]:
        return [m for m in self.snapshot() if m.kind == "signal" and m.time >= since
                and m.member in members]

    def replies_to(self, call: Message) -> list[Message]:
        """The method return or error that answered `call`."""
        serial = call.fields.get("serial")
        sender = call.fields.get("sender")
        return [m for m in self.snapshot() if m.kind in ("method return", "error")
                and m.fields.get("reply_serial") == serial
                and m.fields.get("destination") == sender]

    def menu_calls(self, since: float, until: float = float("inf")) -> list[str]:
        """What hosts asked of the dbusmenu (and the item) between two wall times."""
        return [m.text() for m in self.snapshot()
                if m.kind in ("method call", "signal") and since <= m.time <= until
                and m.interface in (MENU_INTERFACE, ITEM_INTERFACE)]


MENU_SIGNALS = ("LayoutUpdated", "ItemsPropertiesUpdated")
MONITOR_RULES = [f"interface='{MENU_INTERFACE}'", f"interface='{ITEM_INTERFACE}'",
                 "type='error'", "type='method_return'"]  # replies carry no interface


def bus_time() -> float:
    """Now, on the clock dbus-monitor stamps messages with."""
    return time.time()


def quiet_after(monitor: Monitor, since: float, quiet: float, limit: float) -> float:
    """Seconds from `since` to the last menu signal, once none has come for `quiet`
    seconds; fails when they still come `limit` seconds after `since`."""
    while True:
        sent = monitor.signals(MENU_SIGNALS, since)
        last = max((m.time for m in sent), default=since)
        now = bus_time()
        if now - last >= quiet:
            return last - since
        if now - since > limit + quiet:
            raise AssertionError(
                f"the app still sends {sent[-1].member} {now - since:.0f}s after the menu "
                f"closed ({len(sent)} menu signals since)")
        time.sleep(0.1)


# -- the app under test ----------------------------------------------------------------


def sloth_command() -> list[str]:
    """`sloth-tray` as installed beside this Python (the README's way), else -m."""
    exe = Path(sys.executable).with_name("sloth-tray")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "sloth_tray"]


class App:
    """`sloth-tray run --home HOME` in a desktop's environment; state through its CLI."""

    def __init__(self, pids: Pids, home: Path, env: dict[str, str], bus: Bus,
                 monitor: Monitor) -> None:
        self.home, self.env, self.bus, self.monitor = home, env, bus, monitor
        home.mkdir(mode=0o700, exist_ok=True)
        self.log = home.parent / f"{home.name}-stderr.log"
        self.pids = pids
        with self.log.open("w") as err:
            self.proc = pids.popen([*sloth_command(), "run", "--home", str(home)], env=env,
                                   stdout=subprocess.DEVNULL, stderr=err)
        pids.gentle.append(self.proc)  # SIGTERM first: it stops a running job's process
        self.name, self.item_path = "", "/StatusNotifierItem"

    def registered(self) -> str:
        """The item's bus name once the panel's watcher lists it: whichever registered
        item's connection is this process (items register by name or by path)."""
        for item in self.bus.items():
            name, _, path = item.partition("/")
            if name and self.bus.pid(name) == self.proc.pid:
                self.name, self.item_path = name, "/" + (path or "StatusNotifierItem")
                return name
        assert self.proc.poll() is None, f"the app exited: {self.log.read_text()}"
        return ""

    def menu(self) -> Menu:
        path = self.bus.get(self.name, self.item_path, ITEM_INTERFACE, "Menu")
        return Menu(self.bus, self.name, path)

    def cli(self, *argv: str) -> str:
        done = subprocess.run([*sloth_command(), *argv, "--home", str(self.home)],
                              env=self.env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"sloth-tray {' '.join(argv)}: {done.stderr}"
        return done.stdout

    def add(self, name: str, text: str, *extra: str) -> str:
        script = self.home.parent / f"{name}.sh"
        script.write_text(text)
        return self.cli("add", str(script), *extra).strip()

    def nap(self, name: str = "nap") -> str:
        """A job that runs for ten minutes, once it runs; its process is killed at the
        end with the rest."""
        started = self.home.parent / f"{name}.pid"
        job = self.add(name, f"echo $$ > {started}.part && mv {started}.part {started}\n"
                             "exec sleep 600\n")
        self.pids.add(int(wait_for(lambda: started.exists() and started.read_text(),
                                   what=f"the job {name} to start")))
        wait_for(lambda: self.state(job) == "running", what=f"the job {name} to be running")
        return job

    def jobs(self) -> list[dict[str, Any]]:
        return json.loads(self.cli("list", "--json", "--limit", "0"))

    def show(self, job_id: str) -> dict[str, Any]:
        return json.loads(self.cli("show", "--json", job_id))

    def state(self, job_id: str) -> str:
        return self.show(job_id)["state"]

    def history(self, job_id: str) -> list[str]:
        return [event["kind"] for event in self.show(job_id)["history"]]


# -- the desktop -----------------------------------------------------------------------


def differs(a, b, box=None, threshold: int = 24):
    """The bounding box of where two screenshots differ (within `box`), or None."""
    from PIL import ImageChops

    if box:
        a, b = a.crop(box), b.crop(box)
    mask = ImageChops.difference(a.convert("RGB"), b.convert("RGB")).convert("L").point(
        lambda v: 255 if v > threshold else 0)
    found = mask.getbbox()
    if found and box:
        found = (found[0] + box[0], found[1] + box[1], found[2] + box[0], found[3] + box[1])
    return found


class Waybar:
    """sway (headless) + waybar + a private session bus + a virtual pointer."""

    def __init__(self, pids: Pids) -> None:
        self.pids = pids
        # Not under pytest's 0700 temporary folder: sway runs as nobody and reads from here.
        self.root = Path(tempfile.mkdtemp(prefix="sloth-waybar-"))
        self.root.chmod(0o755)
        self.run_dir = self.root / "run"
        self.run_dir.mkdir(mode=0o700)
        if os.geteuid() == 0:
            os.chown(self.run_dir, NOBODY, NOBODY)
        (self.root / "sway.conf").write_text(SWAY_CONF)
        (self.root / "waybar.json").write_text(json.dumps(WAYBAR_JSON))
        (self.root / "waybar.css").write_text(WAYBAR_CSS)
        (self.root / "home").mkdir()
        self.env: dict[str, str] = {}
        self.bus: Bus | None = None
        self._acks: queue.Queue[str] = queue.Queue()

    def start(self) -> Waybar:
        env = {**os.environ, "HOME": str(self.root / "home"), "NO_AT_BRIDGE": "1",
               "XDG_RUNTIME_DIR": str(self.run_dir), "GDK_BACKEND": "wayland"}
        env.pop("DISPLAY", None)
        bus = self.pids.popen(["dbus-daemon", "--session", "--nofork", "--print-address=1"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True)
        env["DBUS_SESSION_BUS_ADDRESS"] = bus.stdout.readline().strip()
        self.bus = Bus(env["DBUS_SESSION_BUS_ADDRESS"])

        as_nobody = (["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
                     if os.geteuid() == 0 else [])
        sway_env = {**env, "WLR_BACKENDS": "headless", "WLR_LIBINPUT_NO_DEVICES": "1",
                    "WLR_RENDERER": "pixman", "WLR_HEADLESS_OUTPUTS": "1"}
        with (self.root / "sway.log").open("w") as log:
            sway = self.pids.popen([*as_nobody, "sway", "-c", str(self.root / "sway.conf")],
                                   env=sway_env, stdout=log, stderr=subprocess.STDOUT)
        socket = wait_for(lambda: next((p for p in self.run_dir.glob("wayland-*")
                                        if not p.name.endswith(".lock")), None)
                          or sway.poll() is not None, what="sway's Wayland socket")
        assert sway.poll() is None, (self.root / "sway.log").read_text()
        env["WAYLAND_DISPLAY"] = socket.name
        self.env = env

        self.waybar_log = self.root / "waybar.log"
        with self.waybar_log.open("w") as log:
            self.waybar = self.pids.popen(
                ["waybar", "-c", str(self.root / "waybar.json"), "-s",
                 str(self.root / "waybar.css")], env=env, stdout=log, stderr=subprocess.STDOUT)
        wait_for(lambda: self.bus.owner(WATCHER) or self.waybar.poll() is not None,
                 what="waybar's StatusNotifierWatcher")
        assert self.waybar.poll() is None, self.waybar_log.read_text()
        wait_for(lambda: self.shot().crop((0, 0, SCREEN[0], BAR)).getcolors(1),
                 what="waybar's bar drawn")  # one colour: the bar, empty

        self._start_pointer()
        return self

    def _start_pointer(self) -> None:
        build = self.root / "vptr-build"
        build.mkdir()
        for kind, out in (("client-header", "vp-client.h"), ("private-code", "vp-proto.c")):
            subprocess.run(["wayland-scanner", kind, str(HERE / "vp.xml"), str(build / out)],
                           check=True)
        subprocess.run(["gcc", f"-I{build}", "-o", str(build / "vptr"), str(HERE / "vptr.c"),
                        str(build / "vp-proto.c"), "-lwayland-client"], check=True)
        self.vptr = self.pids.popen([str(build / "vptr")], env=self.env, stdin=subprocess.PIPE,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True, bufsize=1)
        threading.Thread(target=self._read_acks, daemon=True).start()
        line = self._acks.get(timeout=10)
        assert "virtual pointer ready" in line, line

    def _read_acks(self) -> None:
        assert self.vptr.stderr is not None
        for line in self.vptr.stderr:
            self._acks.put(line)
        self._acks.put("(the virtual pointer exited)")

    def pointer(self, command: str) -> None:
        """One line to the virtual pointer, once the compositor has had it."""
        assert self.vptr.stdin is not None
        self.vptr.stdin.write(command + "\n")
        self.vptr.stdin.flush()
        answer = self._acks.get(timeout=5)
        assert answer.startswith("ok "), answer

    def move(self, x: int, y: int) -> None:
        self.pointer(f"move {x} {y} {SCREEN[0]} {SCREEN[1]}")

    def click(self, x: int, y: int, button: int = LEFT) -> None:
        self.move(x, y)
        self.pointer(f"press {button}")
        self.pointer(f"release {button}")

    def shot(self):
        from PIL import Image

        done = subprocess.run(["grim", "-"], env=self.env, capture_output=True, timeout=10)
        assert done.returncode == 0, done.stderr
        return Image.open(io.BytesIO(done.stdout)).convert("RGB")

    def icon(self) -> tuple[int, int]:
        """The middle of what the bar shows: the tray's only icon."""
        bar = self.shot().crop((0, 0, SCREEN[0], BAR))
        pixels = [(x, y) for y in range(BAR) for x in range(SCREEN[0])
                  if bar.getpixel((x, y)) != BAR_BACKGROUND]
        assert pixels, "nothing drawn in the bar"
        xs, ys = [x for x, _ in pixels], [y for _, y in pixels]
        return (min(xs) + max(xs)) // 2, (min(ys) + max(ys)) // 2

    def log(self) -> str:
        return self.waybar_log.read_text(errors="replace")

    def disconnect(self) -> None:
        """The tests' own connection closed, before the bus goes (else its reader ends
        on EOF, said on stderr whenever its future is collected)."""
        if self.bus is not None:
            self.bus.close()
            self.bus = None

    def close(self) -> None:
        self.disconnect()
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass(frozen=True)
class RowMetrics:
    """Where a host draws a menu's rows: the first row's middle below the menu's top,
    a row's height, a separator's."""

    first: int
    row: int
    separator: int


# waybar's GTK menu, as measured with DejaVu Sans 13 px.
WAYBAR_ROWS = RowMetrics(first=16, row=25, separator=1)


def row_y(top: int, menu: Row, target: Row, metrics: RowMetrics = WAYBAR_ROWS) -> int:
    """The y of `target`'s middle in a menu (or submenu) `menu` drawn from `top`."""
    y = top + metrics.first
    for row in menu.visible():
        if row.id == target.id:
            return y
        y += metrics.separator if row.separator else metrics.row
    raise LookupError(f"row {target.label!r} is not in {menu.labels()}")
