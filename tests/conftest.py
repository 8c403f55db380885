from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import settings

from sloth_tray.daemon.snapshot import (
    FailedJob,
    FailedSeries,
    RunningJob,
    Schedule,
    Snapshot,
    WaitingJob,
)
from sloth_tray.paths import locate
from sloth_tray.store.queue import Queue
from sloth_tray.store.states import Reason

# -- how the suite runs: two workers side by side (pytest-xdist, `-n 2 --dist loadgroup`) --

# Hypothesis: `ci` (CI sets CI=true) tries as many examples as each test asks for; `dev`
# a fifth of them, for a quicker run at a desk. A test that asks for a count of its own
# asks through examples(), so that it follows the profile. No deadline in either: on a
# busy machine a slow example is the machine's doing, not the code's.
settings.register_profile("ci", max_examples=100, deadline=None)  # Hypothesis' own count
settings.register_profile("dev", max_examples=20, deadline=None)
settings.load_profile("dev" if os.environ.get("CI", "").lower() in ("", "0", "false") else "ci")


def examples(on_ci: int) -> int:
    """How many examples a test that tries `on_ci` of them on CI tries under the loaded
    profile (`ci`: that many; `dev`: a fifth)."""
    return max(1, on_ci * settings.default.max_examples // 100)


# What must not share the machine runs in one xdist group, one test after another: each
# real desktop host's module (two different hosts may run side by side), and the tests
# whose 1 s leases a busy neighbour could make lapse (marked `short_lease`). A module
# whose tests share a module-scoped fixture (a daemon, a bus, a tmpfs) is a group too:
# set up once, on one worker.
DESKTOP_GROUPS = {"test_gnome.py": "gnome-shell", "test_kde.py": "plasma",
                  "test_waybar.py": "waybar"}  # the others: xfce4-panel and trayer on Xvfb
X11_PANELS = "xfce4-panel-and-trayer"
SHORT_LEASES = "short-leases"


def shares_a_module_fixture(item) -> bool:
    return any(fixture.scope == "module"
               for fixtures in item._fixtureinfo.name2fixturedefs.values()
               for fixture in fixtures)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups off the items
def pytest_collection_modifyitems(config, items):
    """Marks by folder (`desktop`, `faults`), the xdist groups above, and the long tests
    that run alone first: one left for the end would keep the run waiting on it."""
    tests = Path(__file__).parent
    for item in items:
        path = Path(item.path)
        group = None
        if path.parent == tests / "desktop":
            item.add_marker(pytest.mark.desktop)
            group = DESKTOP_GROUPS.get(path.name, X11_PANELS)
        elif path.parent == tests / "faults":
            item.add_marker(pytest.mark.faults)
        if item.get_closest_marker("short_lease"):
            group = SHORT_LEASES
        elif group is None and shares_a_module_fixture(item):
            group = str(path.relative_to(tests))
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    first = [item for item in items
             if item.get_closest_marker("slow") and not item.get_closest_marker("xdist_group")]
    taken = set(map(id, first))
    items[:] = first + [item for item in items if id(item) not in taken]


UNGROUPED = pytest.StashKey[str]()


def pytest_collection_finish(session):
    """On a worker of `--dist loadgroup`, xdist tells the groups by a suffix of the node
    id (`...@gnome-shell`). A test it could not give one would be dealt out alone, a
    host's tests side by side: each such test fails instead, saying why."""
    if "PYTEST_XDIST_WORKER" not in os.environ or not session.config.getvalue("loadgroup"):
        return
    for item in session.items:
        if item.get_closest_marker("xdist_group") and \
                item.nodeid.rfind("@") < item.nodeid.rfind("]"):
            item.stash[UNGROUPED] = (
                "pytest-xdist could not put this test in its xdist group (--dist "
                "loadgroup): this pytest and pytest-xdist do not work together (see the "
                "pins in pyproject.toml)")


def pytest_runtest_setup(item):
    if UNGROUPED in item.stash:
        pytest.fail(item.stash[UNGROUPED], pytrace=False)


class FakeClock:
    """Wall time that only moves when a test says so."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path_factory, monkeypatch):
    """No test reads this machine's config.toml or its SLOTH_TRAY_* variables
    (child processes inherit the same environment)."""
    config = tmp_path_factory.mktemp("config") / "config.toml"
    monkeypatch.setenv("SLOTH_TRAY_CONFIG", str(config))
    for name in ("SLOTH_TRAY_HOME", "SLOTH_TRAY_JOBS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


# Calendar tests read times in Europe/Berlin, which moves its clocks on 2026-03-29
# (02:00 -> 03:00) and 2026-10-25 (03:00 -> 02:00).
BERLIN = ZoneInfo("Europe/Berlin")


def berlin(year, month, day, hour, minute, fold=0) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=BERLIN, fold=fold).timestamp()


@pytest.fixture
def berlin_queue(tmp_path):
    """A queue in Berlin time whose clock (`queue.clock_`) starts on Monday 2026-03-02 08:00."""
    clock = FakeClock(berlin(2026, 3, 2, 8, 0))
    q = Queue(tmp_path / "queue.db", clock=clock, tz=BERLIN, max_attempts=2)
    q.clock_ = clock
    yield q
    q.close()


def run_once(queue: Queue) -> str | None:
    """Claim the job due now and complete it: its id, or None when nothing was due."""
    job = queue.claim("w")
    if job is None:
        return None
    assert queue.complete(job.id, "w", "ok")
    return job.id


@pytest.fixture
def queue(tmp_path, clock):
    q = Queue(tmp_path / "queue.db", clock=clock, lease_seconds=10, max_attempts=3,
              backoff_cap=6)
    yield q
    q.close()


@pytest.fixture
def home(tmp_path):
    """A home made as every command makes it (a module may mean a bare path instead)."""
    return locate(tmp_path / "home").ensure()


def run_sloth(home, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`python -m sloth_tray ARGV --home HOME` in a child process, as a user's shell runs
    it; with `check`, it must succeed."""
    done = subprocess.run([sys.executable, "-m", "sloth_tray", *argv, "--home", str(home.root)],
                          capture_output=True, text=True, timeout=60)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def add_script(home, name: str, text: str, *extra: str) -> str:
    """A script written beside the home and queued with `sloth-tray add`: its job id."""
    path = home.root.parent / name
    path.write_text(text)
    return run_sloth(home, "add", str(path), *extra).stdout.strip()


def queue_file_of_schema(path, version: int, rows: tuple[tuple, ...] = ()) -> None:
    """The queue file an older sloth-tray (schema `version`) left, 0600, holding `rows`:
    (id, name, state, not_before, script, options JSON[, history JSON]) each, for the
    migration tests."""
    import contextlib
    import sqlite3

    from sloth_tray.store.schema import APPLICATION_ID, MIGRATIONS

    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as raw:
        for statements in MIGRATIONS[:version]:
            for statement in statements:
                raw.execute(statement)
        raw.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        raw.execute(f"PRAGMA user_version = {version}")
        for row in rows:
            raw.execute("INSERT INTO jobs(id, name, state, max_attempts, not_before, script, "
                        "options, history, created_at, updated_at) "
                        "VALUES (?, ?, ?, 1, ?, ?, ?, ?, 0, 0)", (*row, "[]")[:7])
    os.chmod(path, 0o600)


def mapped(pid: int, fragment: str) -> bool:
    """Whether the process has a file whose path holds `fragment` mapped (a loaded
    extension module)."""
    with open(f"/proc/{pid}/maps") as maps:
        return fragment in maps.read()


def wait_for(predicate, timeout: float = 15.0, what: str = "the condition",
             every: float = 0.02):
    """Wait until predicate() is truthy, at most `timeout` seconds; returns its value.
    `every`: seconds between looks (longer where a look is itself costly)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def start_daemon(pids, home, *extra: str) -> subprocess.Popen:
    """A real `sloth-tray run --headless` on `home`, once it holds its lock."""
    proc = pids.popen([sys.executable, "-m", "sloth_tray", "run", "--headless",
                       "--home", str(home.root), *extra],
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: home.lock.exists() and home.lock.read_text().strip() == str(proc.pid)
             or proc.poll() is not None, what="the daemon to take its lock")
    assert proc.poll() is None, proc.communicate()
    return proc


# -- the desktop tests' eyes: an X display's pixels -------------------------------------


def start_xvfb(pids, size: str) -> str:
    """An Xvfb on a display it picks itself (-displayfd): a lock or socket left in
    /tmp by a server killed earlier never makes it fail. Returns ":N". Stopped at
    teardown with SIGTERM first, so that it removes its lock and socket."""
    read_end, write_end = os.pipe()
    told = os.fdopen(read_end)  # closes read_end, once
    try:
        try:
            server = pids.popen(["Xvfb", "-displayfd", str(write_end), "-screen", "0", size,
                                 "-nolisten", "tcp"], pass_fds=(write_end,),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            pids.gentle.append(server)
        finally:
            os.close(write_end)  # ours, once: the server holds its own copy
        number = told.readline().strip()
    finally:
        told.close()
    assert number.isdigit(), "Xvfb did not say which display it took"
    return f":{number}"


def grab(env, box=None):
    """The screen of env["DISPLAY"] (or the `box` of it) as a Pillow image."""
    from PIL import ImageGrab

    image = ImageGrab.grab(xdisplay=env["DISPLAY"])
    return image.crop(box) if box else image


def red_pixels(image) -> int:
    """How many pixels are the red of the failure badge."""
    rgb = image.convert("RGB")
    pixels = rgb.load()
    return sum(1 for x in range(rgb.width) for y in range(rgb.height)
               if (lambda r, g, b: r > 180 and g < 90 and b < 90)(*pixels[x, y]))


# -- a private D-Bus -----------------------------------------------------------------

# Only what a test puts on it: the stock configs would let the bus start
# whatever notification daemon, portal or system service this machine has.
PRIVATE_BUS_CONFIG = """<busconfig>
  <type>{kind}</type>
  <listen>unix:tmpdir=/tmp</listen>
  <auth>EXTERNAL</auth>{extra}
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""


def start_private_bus(pids, folder, kind: str = "session", *, extra: str = "",
                      env: dict[str, str] | None = None) -> str:
    """A dbus-daemon of the test's own (killed by `pids`); its address. `extra`: more
    of its config (a <servicedir>, a <limit>); `env`: the environment of what it starts."""
    config = folder / f"{kind}-bus.conf"
    config.write_text(PRIVATE_BUS_CONFIG.format(kind=kind, extra=extra))
    daemon = pids.popen(["dbus-daemon", f"--config-file={config}", "--nofork",
                         "--print-address=1"], stdout=subprocess.PIPE, text=True, env=env)
    address = daemon.stdout.readline().strip()
    assert address, "dbus-daemon printed no address"
    return address


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# A tray's state with something in every section, as the menu tests show it.
NOW = 1_000_000.0
TIDY = "/spool/s1/tidy.sh"  # a repeating job that failed twice
BUSY = Snapshot(
    pending=1, failed_count=4,
    running=RunningJob("a1", "backup_home", 2, 5, NOW - 42),
    failed_jobs=(FailedJob("f1", "disk_check", "disk 82% full", NOW - 5),
                 FailedJob("r1", "evil_link", "refused: it is a symbolic link", NOW - 1,
                           refused=True, reason=Reason.REFUSED),
                 FailedJob("s2", "tidy", "exit 1", NOW - 60, series=TIDY),
                 FailedJob("s1", "tidy", "exit 1", NOW - 3660, series=TIDY)),
    failed_series=(FailedSeries(TIDY, "tidy", 2, NOW - 3660),),
    waiting=(WaitingJob("w1", "tidy_downloads", NOW + 240),),
    schedules=(Schedule(TIDY, "tidy", "every 1h", "s3", NOW + 600, "s2", NOW - 60, False),),
)


class Recorder:
    """The menu's controls (presenter.Controls), remembering what the menu asked for,
    with what, and on which thread; a control named in `failing` raises."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.threads: set[str] = set()
        self.failing: set[str] = set()

    def __getattr__(self, name: str):
        def control(*args):
            self.threads.add(threading.current_thread().name)
            self.calls.append((name, *args))
            if name in self.failing:
                raise OSError(f"{name} could not open anything")
        return control


def blocks(pid: int, tid: int, sig: int) -> bool:
    """Whether thread `tid` of `pid` blocks `sig` (its SigBlk mask)."""
    with open(f"/proc/{pid}/task/{tid}/status") as status:
        mask = next(line for line in status if line.startswith("SigBlk:")).split()[1]
    return bool(int(mask, 16) >> (sig - 1) & 1)


def to_other_thread(pid: int, sig: int) -> None:
    """Deliver `sig` to the newest thread of `pid` that is not its main thread and does
    not block it: the kernel may hand a signal sent to a process to any such thread
    (never to one that blocks it, as GLib's own threads do: sent there, it would wait
    for good)."""
    import ctypes

    tid = max(int(t) for t in os.listdir(f"/proc/{pid}/task")
              if int(t) != pid and not blocks(pid, int(t), sig))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.tgkill(pid, tid, sig) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill({pid}, {tid}, {sig}) failed")


class Pids:
    """Every process a test started or learned of; all are killed at teardown."""

    def __init__(self) -> None:
        self.pids: list[int] = []
        self.procs: list[subprocess.Popen] = []
        self.gentle: list[subprocess.Popen] = []  # SIGTERM first, then SIGKILL like all

    def add(self, pid: int) -> int:
        self.pids.append(pid)
        return pid

    def popen(self, *args, **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(*args, **kwargs)
        self.procs.append(proc)
        self.pids.append(proc.pid)
        return proc

    def cleanup(self) -> None:
        for proc in self.gentle:  # asked first, so that they tidy up after themselves
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass  # killed below with the rest
        for pid in self.pids:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        for proc in self.procs:
            proc.wait(timeout=10)


@pytest.fixture
def pids():
    tracker = Pids()
    try:
        yield tracker
    finally:
        tracker.cleanup()


def read_exec(value: str) -> list[str]:
    """Undo what a desktop undoes: the string escapes first, then the quoting, then %%."""
    general = {"s": " ", "n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
    text = re.sub(r"\\(.)", lambda m: general.get(m[1], "\\" + m[1]), value)
    args: list[str] = []
    current: str | None = None
    quoted = False
    i = 0
    while i < len(text):
        c = text[i]
        if quoted:
            if c == "\\" and text[i + 1] in '"`$\\':
                current = (current or "") + text[i + 1]
                i += 1
            elif c == '"':
                quoted = False
            else:
                assert c != "\\", f"a lone backslash in a quoted argument: {value!r}"
                current = (current or "") + c
        elif c == " ":
            if current is not None:
                args.append(current)
            current = None
        elif c == '"':
            quoted = True
            current = current or ""
        else:
            assert c not in "\t\n\"'\\><~|&;$*?#()`", f"unquoted reserved {c!r} in {value!r}"
            current = (current or "") + c
        i += 1
    assert not quoted, f"an unclosed quote in {value!r}"
    if current is not None:
        args.append(current)
    for arg in args:
        assert re.fullmatch(r"([^%]|%%)*", arg), f"a field code in {arg!r}"
    return [arg.replace("%%", "%") for arg in args]
