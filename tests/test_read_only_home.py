"""A home on a read-only file system (a backup mounted read-only, a live system): the
commands that only read work there, and those that write say in one sentence that the
file system is read-only, not that the folder's mode is wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mount")


def sloth(home, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sloth_tray", *argv, "--home", str(home)],
                          capture_output=True, text=True, timeout=60)


def mount(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *argv], capture_output=True, text=True, timeout=30)


@pytest.fixture(params=["closed cleanly", "left by a crash"])
def read_only_home(request, tmp_path):
    """A home with one job run (and one left pending), its file system then remounted
    read-only: after a clean close (no -wal), or with the -wal a process left that
    died with the queue open (what it wrote is only there)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    done = mount("-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(disk))
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {(done.stderr or done.stdout).strip()}")
    try:
        home = disk / "home"
        script = tmp_path / "greet.sh"
        script.write_text("echo hello from greet\n")
        assert sloth(home, "add", str(script)).returncode == 0
        assert sloth(home, "work", "--once").returncode == 0
        if request.param == "left by a crash":  # a push whose commit is only in the -wal
            subprocess.run([sys.executable, "-c", "import os, sys\n"
                            "from sloth_tray.store.queue import Queue\n"
                            "Queue(sys.argv[1]).push('later_one')\nos._exit(0)\n",
                            str(home / "queue.db")], check=True, timeout=60)
            assert (home / "queue.db-wal").exists()
        else:
            script.write_text("echo not yet\n")
            assert sloth(home, "add", str(script), "--name", "later_one",
                         "--delay", "1h").returncode == 0
        done = mount("-o", "remount,ro", str(disk))
        if done.returncode != 0:
            pytest.skip(f"cannot remount read-only: {(done.stderr or done.stdout).strip()}")
        yield home
    finally:
        if subprocess.run(["umount", str(disk)], capture_output=True, timeout=30).returncode:
            subprocess.run(["umount", "-l", str(disk)], capture_output=True, timeout=30)


def test_the_commands_that_only_read_work_on_a_read_only_home(read_only_home):
    home = read_only_home
    status = sloth(home, "status", "--json")
    assert status.returncode == 0, status.stderr
    counts = json.loads(status.stdout)
    assert (counts["done"], counts["pending"], counts["app_running"]) == (1, 1, False)
    for argv in (["status"], ["list"], ["list", "--json"], ["show", "greet"], ["paths"],
                 ["config"], ["log", "greet"], ["show", "later_one", "--json"]):
        done = sloth(home, *argv)
        assert (done.returncode, done.stderr) == (0, ""), argv
    assert "greet" in sloth(home, "list").stdout and "later_one" in sloth(home, "list").stdout
    assert sloth(home, "log", "greet").stdout == "hello from greet\n"


@pytest.mark.parametrize("argv", [["pause"], ["run", "--headless"], ["prune"]])
def test_a_command_that_writes_says_the_file_system_is_read_only(read_only_home, argv):
    done = sloth(read_only_home, *argv)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert "read-only file system" in done.stderr, done.stderr
    assert "mode 0700" not in done.stderr
