"""When no app runs on a home: `status`, `list` and `show` say so (nothing starts, and a
job still marked running was cut short), and the next start ends that run's log with a
line saying where the app stopped."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from helpers.processes import add_script, alive, start_daemon, wait_for

from sloth_tray.store.queue import Queue, State

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")


def sloth(home, *argv: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "sloth_tray", *argv, "--home", str(home.root)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done


def rows(text: str) -> dict[str, str]:
    """`status`'s table as {key: the rest of its line}."""
    found = {}
    for line in text.splitlines():
        if not line or line.startswith(" ") or line == "lanes":
            continue
        key, _, rest = line.partition("  ")
        found[key] = rest.strip()
    return found


def rows_of(home) -> list[tuple]:
    """Every job's row as the file holds it (read without writing)."""
    import sqlite3

    with sqlite3.connect(f"file:{home.db}?mode=ro", uri=True) as db:
        return db.execute("SELECT * FROM jobs ORDER BY id").fetchall()


def running_slow_backup(home, tmp_path, pids) -> tuple[subprocess.Popen, str, str]:
    """A real daemon running `slow_backup` (which waits for ever), with `check_inbox`
    due behind it: (the daemon, slow_backup's id, check_inbox's id)."""
    marks = tmp_path / "marks"
    slow = add_script(home, "slow_backup.sh", f'echo "copying"\necho $$ >> {marks}\n'
                                              "sleep 300\n")
    inbox = add_script(home, "check_inbox.sh", "echo checked\n")
    daemon = start_daemon(pids, home, "--lease", "60")
    wait_for(lambda: marks.exists() and marks.read_text().strip(), what="slow_backup to start")
    pids.add(int(marks.read_text().split()[0]))  # its process outlives a kill -9 of the app
    with Queue(home.db) as queue:
        wait_for(lambda: "started" in [e.kind for e in queue.history(slow)],
                 what="the run to be recorded")
    return daemon, slow, inbox


def test_status_says_an_app_runs_while_one_holds_the_home(home, tmp_path, pids):
    daemon, slow, _ = running_slow_backup(home, tmp_path, pids)
    status = json.loads(sloth(home, "status", "--json").stdout)
    assert status["app_running"] is True
    said = rows(sloth(home, "status").stdout)
    assert said["app"] == f"running (pid {daemon.pid})"
    assert said["running now"].startswith(f"slow_backup ({slow}), started ")


def test_after_a_kill_9_status_says_no_app_runs_and_the_running_job_was_cut_short(
        home, tmp_path, pids):
    daemon, slow, inbox = running_slow_backup(home, tmp_path, pids)
    daemon.kill()
    daemon.wait(timeout=10)
    before, lock_before = rows_of(home), home.lock.read_bytes()

    status = json.loads(sloth(home, "status", "--json").stdout)
    assert status["app_running"] is False
    assert status["running_job"]["id"] == slow  # still marked running in the file

    said = rows(sloth(home, "status").stdout)
    assert said["app"] == ("not running on this home, so nothing starts "
                           "(`sloth-tray` starts it)"), said
    assert "running now" not in said
    assert said["cut short"].startswith(f"slow_backup ({slow}), started "), said
    assert said["cut short"].endswith("the app stopped while it ran; the next start runs "
                                      "it again (attempt 2 of 5)"), said
    assert said["next"] == f"check_inbox ({inbox}), due now, once the app starts", said
    assert said["due_now"] == "1 (once the app starts)", said

    listed = sloth(home, "list").stdout
    line = next(line for line in listed.splitlines() if line.split()[1] == "slow_backup")
    assert "cut short: no app runs this home" in line, listed
    shown = rows(sloth(home, "show", slow).stdout)
    assert "cut short: no app runs this home" in shown["state"], shown
    assert rows_of(home) == before, "a look must change nothing"
    assert home.lock.read_bytes() == lock_before, "nor touch the lock"


def test_after_a_quit_status_says_no_app_runs_so_nothing_due_starts(home, tmp_path, pids):
    daemon, _, _ = running_slow_backup(home, tmp_path, pids)
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=20) == 0
    status = json.loads(sloth(home, "status", "--json").stdout)
    assert status["app_running"] is False and status["running_job"] is None
    said = rows(sloth(home, "status").stdout)
    assert said["app"].startswith("not running on this home, so nothing starts")
    assert "cut short" not in said and "running now" not in said
    assert said["next"].endswith("), due now, once the app starts"), said
    assert said["due_now"] == "2 (once the app starts)", said


def test_a_run_cut_short_by_a_crash_ends_its_log_with_where_the_app_stopped(home, tmp_path,
                                                                            pids):
    daemon, slow, _ = running_slow_backup(home, tmp_path, pids)
    child = int((tmp_path / "marks").read_text().split()[0])
    log = home.job_logs(slow, "slow_backup") / "1.log"
    # The line is in the log once the app has copied it from the pipe: a kill before
    # that loses it with the pipe, however the log is ended.
    wait_for(lambda: log.exists() and log.read_text() == "copying\n",
             what="the job's line in its log")
    daemon.kill()
    daemon.wait(timeout=10)
    assert log.read_text() == "copying\n"

    start_daemon(pids, home, "--lease", "60")
    wait_for(lambda: (home.job_logs(slow, "slow_backup") / "2.log").exists(),
             what="the job to run again")
    wait_for(lambda: not alive(child), what="the leftover run to be stopped")
    lines = log.read_text().splitlines()
    assert lines[0] == "copying" and len(lines) == 2, lines
    assert lines[1].startswith("[sloth-tray: the app stopped during this run; the start "
                               "at "), lines
    assert lines[1].endswith(" found it and runs it again (attempt 2 of 5)]"), lines
    with Queue(home.db) as queue:
        assert queue.get(slow).state == State.RUNNING


def test_a_silent_run_cut_short_by_a_crash_gets_a_log_that_says_where_the_app_stopped(
        home, tmp_path, pids):
    marks = tmp_path / "marks"
    quiet = add_script(home, "quiet_sync.sh", f"echo $$ >> {marks}\nsleep 300\n")
    daemon = start_daemon(pids, home, "--lease", "60")
    wait_for(lambda: marks.exists() and marks.read_text().strip(), what="quiet_sync to start")
    child = pids.add(int(marks.read_text().split()[0]))
    with Queue(home.db) as queue:
        wait_for(lambda: "started" in [e.kind for e in queue.history(quiet)],
                 what="the run to be recorded")
    log = home.job_logs(quiet, "quiet_sync") / "1.log"
    assert not log.exists()  # it printed nothing
    daemon.kill()
    daemon.wait(timeout=10)

    start_daemon(pids, home, "--lease", "60")
    wait_for(lambda: not alive(child), what="the leftover run to be stopped")
    wait_for(log.exists, what="the note of the run cut short")
    (line,) = log.read_text().splitlines()
    assert line.startswith("[sloth-tray: the app stopped during this run; the start at "), line
