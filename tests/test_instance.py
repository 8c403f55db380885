"""Whether an app holds a home, as `status`, `list`, `show` and the MCP tools ask it:
the lock file looked at, never taken. Real processes take the lock (InstanceLock, as
the app does) and are killed -9; a pid given to another process is played by this
test's own process, named in a file it did not take the lock for."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers.processes import wait_for

from sloth_tray import instance
from sloth_tray.daemon.lock import InstanceLock

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")

HOLD = ("import sys\nfrom sloth_tray.daemon.lock import InstanceLock\n"
        "InstanceLock(__import__('pathlib').Path(sys.argv[1])).acquire()\n"
        "print('held', flush=True)\nsys.stdin.read()\n")


@pytest.fixture
def lock(tmp_path):
    return tmp_path / "sloth-tray.lock"


def holding(pids, lock) -> subprocess.Popen:
    """Another process that takes the lock as the app does, and keeps it until killed."""
    proc = pids.popen([sys.executable, "-c", HOLD, str(lock)], stdin=subprocess.PIPE,
                      stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "held\n"
    return proc


def test_a_running_holder_is_known_by_its_pid_and_start_time_alone(pids, lock, monkeypatch):
    proc = holding(pids, lock)
    assert lock.read_text().split() == [str(proc.pid), instance.start_time(proc.pid)]

    def kernel_table(info):  # the look that costs an RCU grace period: not needed here
        raise AssertionError("/proc/locks was read")

    monkeypatch.setattr(instance, "_in_linux_locks", kernel_table)
    assert instance.held(lock) is True
    assert instance.pid_in(lock) == proc.pid


def test_a_holder_killed_9_leaves_its_pid_behind_and_holds_nothing(pids, lock):
    proc = holding(pids, lock)
    proc.kill()
    proc.wait(timeout=10)
    assert lock.read_text().split()[0] == str(proc.pid)  # the crash emptied nothing
    assert instance.held(lock) is False


def test_a_pid_given_since_to_another_process_holds_nothing(lock):
    # This process runs, under the pid in the file, but started at another time.
    lock.write_text(f"{os.getpid()}\n1\n")
    assert instance.held(lock) is False


def test_a_quit_empties_the_file_and_an_empty_file_holds_nothing(lock, monkeypatch):
    InstanceLock(lock).acquire().release()
    assert lock.read_bytes() == b""
    monkeypatch.setattr(instance, "_in_linux_locks",
                        lambda info: pytest.fail("/proc/locks was read"))
    assert instance.held(lock) is False


@pytest.mark.parametrize("text", ["{pid}\n", "not a pid\n"], ids=["older version", "garbage"])
def test_a_file_that_says_no_start_time_is_looked_up_in_the_kernel(pids, lock, text):
    proc = holding(pids, lock)
    lock.write_text(text.format(pid=proc.pid))  # no start time: the file cannot tell
    assert instance.held(lock) is True
    proc.kill()
    proc.wait(timeout=10)
    wait_for(lambda: instance.held(lock) is False, what="the kernel to drop the dead's lock")


@pytest.mark.parametrize("text", ["\u00b2\n", "\u0661\u0662\n"],
                         ids=["superscript", "arabic-indic"])
def test_a_file_of_digits_that_are_not_ascii_holds_nothing_and_raises_nothing(lock, text):
    lock.write_text(text, encoding="utf-8")  # digits to str.isdigit, not to a pid
    assert instance.held(lock) is False
    assert instance.pid_in(lock) is None
