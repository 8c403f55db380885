"""Fault 5: the disk fills up while a job writes its log.

A 2 MiB tmpfs is mounted on HOME/logs (queue.db stays outside it, in the home);
jobs print more than fits. Invariant: the daemon survives, the job's result or
error says its log could not be written, the database is intact, and later jobs
still run. Needs root (mount); skipped with the reason otherwise.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys

import pytest
from faultkit import jobs_with_history, log_text, new_tag, reap, start_daemon, sweep, unfinished
from helpers.processes import Pids, wait_for

from sloth_tray.paths import locate
from sloth_tray.store.queue import State

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mount, /proc")

SIZE = 2 * 1024 * 1024
PRINTS = 4_000_000  # twice what the tmpfs holds; well under the 10 MiB log cap
LOG_PROBLEM = "log writing stopped: No space left on device"
JOBS = 4  # fill_ok, fill_fail, later, after


def mount_small_tmpfs(folder) -> None:
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE},mode=0700", "tmpfs",
                           str(folder)], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs on {folder} (needs root and mount rights): "
                    f"{(done.stderr or done.stdout).strip()}")


def unmount(folder) -> None:
    if subprocess.run(["umount", str(folder)], capture_output=True, timeout=30).returncode:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    root = tmp_path_factory.mktemp("disk-full")
    home = locate(root / "home").ensure()
    mount_small_tmpfs(home.logs)
    tag = new_tag()
    pids = Pids()
    print_lots = f"head -c {PRINTS} /dev/zero | tr '\\0' x; echo\n"

    def run(name: str, text: str) -> str:
        (root / name).write_text(text)
        (root / name).rename(home.jobs / name)
        wait_for(lambda: any(j.name == name[:-3] for j, _ in jobs_with_history(home.db).values())
                 and unfinished(home.db) == 0, timeout=30, what=f"{name} to end")
        return next(j.id for j, _ in jobs_with_history(home.db).values() if j.name == name[:-3])

    try:
        daemon = start_daemon(pids, home, tag, root / "daemon.log")
        seen = {"home": home}
        seen["ok"] = run("fill_ok.sh", f"{print_lots}echo fill done\n")
        seen["fail"] = run("fill_fail.sh", "# sloth: max_attempts=1\n"
                                           f"{print_lots}echo fill failed >&2\nexit 3\n")
        seen["df"] = subprocess.run(["df", "-k", str(home.logs)], capture_output=True,
                                    text=True, timeout=30).stdout
        seen["later"] = run("later.sh", "echo later ok\n")  # the disk is still full
        seen["alive"] = daemon.poll() is None
        (home.job_logs(seen["ok"]) / "1.log").unlink()  # make room again
        seen["after"] = run("after.sh", "echo after the cleanup\n")
        seen["jobs"] = jobs_with_history(home.db)
        daemon.send_signal(signal.SIGTERM)
        seen["exit"] = reap(pids, daemon)
        seen["out"] = log_text(root / "daemon.log")
        with sqlite3.connect(home.db) as db:
            seen["integrity"] = db.execute("PRAGMA integrity_check").fetchall()
        yield seen
    finally:
        sweep(tag)
        pids.cleanup()
        unmount(home.logs)


def test_the_disk_really_filled_up(full):
    used = full["df"].splitlines()[-1].split()
    assert used[3] == "0", full["df"]  # Available
    size = (full["home"].job_logs(full["fail"]) / "1.log").stat().st_size
    assert size < PRINTS


def test_a_failing_job_says_its_log_could_not_be_written(full):
    job, kinds = full["jobs"][full["fail"]]
    assert job.state == State.FAILED
    assert job.last_error == f"exit status 3: fill failed ({LOG_PROBLEM})"


def test_a_job_that_succeeds_says_its_log_could_not_be_written(full):
    job, _ = full["jobs"][full["ok"]]
    assert (job.state, job.result) == (State.DONE, f"fill done ({LOG_PROBLEM})")


def test_the_daemon_survives_and_later_jobs_run(full):
    assert full["alive"] and full["exit"] == 0
    # `later` ran on the full disk: its one line could not be logged either.
    for key, result in (("later", f"later ok ({LOG_PROBLEM})"), ("after", "after the cleanup")):
        job, kinds = full["jobs"][full[key]]
        assert (job.state, job.result) == (State.DONE, result)
    log = full["home"].job_logs(full["after"]) / "1.log"
    assert log.read_text() == "after the cleanup\n"


def test_the_database_is_intact(full):
    assert full["integrity"] == [("ok",)]
    assert len(full["jobs"]) == JOBS
    for job, kinds in full["jobs"].values():
        assert job.state in (State.DONE, State.FAILED)
        assert kinds.count("claimed") == 1 and kinds.count("completed") + kinds.count(
            "failed") == 1, kinds
    print(f"\ndisk full: a {SIZE // 1024 // 1024} MiB tmpfs on logs/, {JOBS} jobs "
          f"(2 printing {PRINTS / 1e6:g} MB each), daemon up, database ok, 0 lost")
