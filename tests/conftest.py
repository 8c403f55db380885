"""How the suite runs (Hypothesis profiles, xdist groups) and the fixtures every folder
uses. What tests share beyond fixtures is in tests/helpers/ (`from helpers.processes
import wait_for`); tests/desktop/ and tests/tray/ have a conftest.py of their own."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from hypothesis import settings

# Before the first import of a helper: their asserts read as a test's do when they fail.
pytest.register_assert_rewrite("helpers")

from helpers.clock import BERLIN, FakeClock, berlin  # noqa: E402
from helpers.processes import Pids, jobs_running_in  # noqa: E402

from sloth_tray.paths import locate  # noqa: E402
from sloth_tray.store.queue import Queue  # noqa: E402

# leaves_no_job_running: how long a job's process killed at teardown may take to go
LEFTOVER_GRACE = 5.0

# -- how the suite runs: three workers side by side (pytest-xdist, `-n 3 --dist loadgroup`) --

# Hypothesis: `ci` (CI sets CI=true) tries as many examples as each test asks for; `dev`
# a fifth of them, for a quicker run at a desk. A test that asks for a count of its own
# asks through examples() (tests/helpers/examples.py), so that it follows the profile.
# No deadline in either: on a busy machine a slow example is the machine's doing, not
# the code's.
settings.register_profile("ci", max_examples=100, deadline=None)  # Hypothesis' own count
settings.register_profile("dev", max_examples=20, deadline=None)
settings.load_profile("dev" if os.environ.get("CI", "").lower() in ("", "0", "false") else "ci")


def pytest_configure(config):
    """The app's own modules in bytecode before any test runs. The tests start the app,
    its commands and its steps as processes, thousands in a run, each loading the
    package afresh; where the environment says not to write bytecode
    (PYTHONDONTWRITEBYTECODE), each of them compiled every module it loads again,
    about 40 ms a process. Once here, by the process that deals the tests out."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        return
    import compileall

    import sloth_tray

    compileall.compile_dir(Path(sloth_tray.__file__).parent, quiet=2)


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


@pytest.fixture(autouse=True)
def leaves_no_job_running(request):
    """A test's jobs end with it: a job's process (or one it started) still running in
    the test's folder once the test's fixtures are torn down fails the test, and is
    killed. Left running, it would outlive the whole suite."""
    watched = "tmp_path" in request.fixturenames and sys.platform.startswith("linux")
    folder = request.getfixturevalue("tmp_path") if watched else None
    yield
    if folder is None:
        return
    deadline = time.monotonic() + LEFTOVER_GRACE  # a kill just sent takes a moment
    while (left := jobs_running_in(folder)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    if left:
        pytest.fail(f"{len(left)} process(es) of this test's jobs outlived it: "
                    + "; ".join(f"{pid} {command}" for pid, command in left.items()),
                    pytrace=False)


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


@pytest.fixture
def berlin_queue(tmp_path):
    """A queue in Berlin time whose clock (`queue.clock_`) starts on Monday 2026-03-02 08:00."""
    clock = FakeClock(berlin(2026, 3, 2, 8, 0))
    q = Queue(tmp_path / "queue.db", clock=clock, tz=BERLIN, max_attempts=2)
    q.clock_ = clock
    yield q
    q.close()


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


@pytest.fixture
def pids():
    tracker = Pids()
    try:
        yield tracker
    finally:
        tracker.cleanup()
