"""The pause is the queue's, not one process's: the command line sets it, every
daemon obeys it from its first pass, and it outlives a restart.

Real `sloth-tray` processes on a real home, as a user's shell would run them.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from helpers.processes import add_script, start_daemon, wait_for
from helpers.processes import run_sloth as sloth

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /bin/sh")

PAUSED_LINE = "paused: no job starts until resumed"


def add(home, name: str, marker) -> str:
    return add_script(home, name, f"echo ran >> {marker}\n")


def state(home, job_id: str) -> str:
    return json.loads(sloth(home, "show", job_id, "--json").stdout)["state"]


def status(home) -> dict:
    return json.loads(sloth(home, "status", "--json").stdout)


def times_said_paused(home) -> int:
    log = home.logs / "sloth-tray.log"
    return log.read_text().count(PAUSED_LINE) if log.exists() else 0


def stop(daemon: subprocess.Popen) -> None:
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=20) == 0, daemon.stderr.read()


def test_a_pause_from_the_command_line_holds_a_daemon_started_later_until_resume(
        home, tmp_path, pids):
    marker = tmp_path / "ran"
    assert sloth(home, "pause").stdout.startswith("paused")
    job = add(home, "job.sh", marker)

    once = sloth(home, "work", "--once")
    assert "the queue is paused" in once.stderr
    assert state(home, job) == "pending"
    said = times_said_paused(home)

    daemon = start_daemon(pids, home)
    try:
        # The first pass of its loop read the pause, and so claimed nothing.
        wait_for(lambda: times_said_paused(home) == said + 1,
                 what="the daemon to say it is paused")
        assert state(home, job) == "pending" and not marker.exists()
        shown = status(home)
        assert (shown["paused"], shown["due_now"], shown["pending"]) == (True, 0, 1)

        assert sloth(home, "resume").stdout.startswith("resumed: 1 job due now")
        wait_for(lambda: state(home, job) == "done", what="the job to run after resume")
        assert marker.read_text() == "ran\n"
        assert status(home)["paused"] is False
    finally:
        stop(daemon)


def test_a_pause_outlives_a_restart_of_the_daemon(home, tmp_path, pids):
    marker = tmp_path / "ran"
    daemon = start_daemon(pids, home)
    try:
        first = add(home, "first.sh", marker)
        wait_for(lambda: state(home, first) == "done", what="the first job to run")
        sloth(home, "pause")  # its doorbell reaches the running daemon
        wait_for(lambda: times_said_paused(home) == 1, what="the running daemon to pause")
    finally:
        stop(daemon)

    second = add(home, "second.sh", marker)
    daemon = start_daemon(pids, home)
    try:
        wait_for(lambda: times_said_paused(home) == 2, what="the new daemon to start paused")
        assert state(home, second) == "pending"
        assert marker.read_text() == "ran\n"
        sloth(home, "resume")
        wait_for(lambda: state(home, second) == "done", what="the second job after resume")
        assert marker.read_text() == "ran\nran\n"
    finally:
        stop(daemon)


def test_list_and_show_say_a_due_job_waits_for_the_pause_not_that_it_is_due_now(home, tmp_path):
    job_id = add(home, "held.sh", tmp_path / "ran")
    assert "due now" in sloth(home, "list").stdout
    sloth(home, "pause")
    listed = sloth(home, "list").stdout.splitlines()[1]
    assert "due (paused)" in listed and "due now" not in listed
    assert "pending (due (paused))" in sloth(home, "show", job_id).stdout
    sloth(home, "resume")
    assert "due now" in sloth(home, "list").stdout
