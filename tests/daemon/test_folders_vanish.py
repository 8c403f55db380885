"""The daemon's folders removed, renamed or re-created under it; its start-up messages.

Each test runs a real `sloth-tray run --headless` process with its stderr in a
file, so what a user would read is what is asserted.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.processes import add_script as add
from helpers.processes import alive, wait_for

from sloth_tray.paths import locate
from sloth_tray.store.queue import Queue, State

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="uses inotify and /proc")

IN_CREATE = 0x100


class Daemon:
    """A running `sloth-tray run --headless`, its stderr kept in a file."""

    def __init__(self, pids, home, stderr: Path, *extra: str) -> None:
        self.home = home
        self.stderr_path = stderr
        with open(stderr, "w") as err:
            self.proc = pids.popen([sys.executable, "-m", "sloth_tray", "run", "--headless",
                                    "--home", str(home.root), *extra],
                                   stdout=subprocess.DEVNULL, stderr=err)
        wait_for(lambda: self.said("drop scripts into") or self.proc.poll() is not None,
                 what="the daemon to be up")
        assert self.proc.poll() is None, self.stderr()

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def said(self, text: str) -> bool:
        return text in self.stderr()


def log_text(home) -> str:
    return (home.logs / "sloth-tray.log").read_text()


def drop(folder: Path, name: str, marker: Path) -> None:
    (folder / name).write_text(f"touch {marker}\n")


def watched_for_creation(pid: int, folder: Path) -> bool:
    """Whether `pid` holds an inotify watch for new entries in `folder` (from /proc)."""
    inode = os.stat(folder).st_ino
    fd_dir = Path(f"/proc/{pid}/fdinfo")
    for info in fd_dir.iterdir():
        try:
            lines = info.read_text().splitlines()
        except OSError:
            continue  # closed meanwhile
        for line in lines:
            if not line.startswith("inotify wd:"):
                continue
            fields = dict(part.split(":", 1) for part in line.split()[1:])
            if int(fields["ino"], 16) == inode and int(fields["mask"], 16) & IN_CREATE:
                return True
    return False


# -- the jobs folder --------------------------------------------------------------


def test_a_removed_jobs_folder_is_watched_again_when_it_comes_back(home, tmp_path, pids):
    daemon = Daemon(pids, home, tmp_path / "stderr")
    first, second, meanwhile = tmp_path / "first", tmp_path / "second", tmp_path / "meanwhile"
    drop(home.jobs, "first.sh", first)
    wait_for(first.exists, what="the first drop to run")

    shutil.rmtree(home.jobs)
    removed = f"the jobs folder {home.jobs} was removed; waiting for it to come back"
    wait_for(lambda: daemon.said(removed), what="the removal to be logged")
    # The parent is watched for the folder's return, only while it is missing.
    wait_for(lambda: watched_for_creation(daemon.proc.pid, home.root),
             what="the parent to be watched")

    # The folder comes back with a file already in it: only a scan can see that file.
    staging = tmp_path / "staging"
    staging.mkdir(mode=0o700)
    drop(staging, "meanwhile.sh", meanwhile)
    staging.rename(home.jobs)
    wait_for(meanwhile.exists, what="the file dropped while away to run")
    drop(home.jobs, "second.sh", second)
    wait_for(second.exists, what="a drop into the new folder to run")

    assert daemon.stderr().count(removed) == 1
    assert f"the jobs folder {home.jobs} is back; watching it again" in daemon.stderr()
    assert not watched_for_creation(daemon.proc.pid, home.root), \
        "the parent must not stay watched once the folder is back"
    assert daemon.proc.poll() is None
    assert removed in log_text(home)


def test_a_renamed_jobs_folder_is_let_go_and_a_new_one_is_watched(home, tmp_path, pids):
    daemon = Daemon(pids, home, tmp_path / "stderr")
    old, late, new = tmp_path / "old", tmp_path / "late", tmp_path / "new"
    drop(home.jobs, "old.sh", old)
    wait_for(old.exists, what="a first drop to run")

    renamed = home.root / "jobs.old"
    home.jobs.rename(renamed)
    wait_for(lambda: daemon.said(f"the jobs folder {home.jobs} was removed"),
             what="the rename to be noticed")
    home.jobs.mkdir(mode=0o700)
    wait_for(lambda: daemon.said(f"the jobs folder {home.jobs} is back"),
             what="the new folder to be noticed")
    drop(home.jobs, "new.sh", new)
    wait_for(new.exists, what="a drop into the new folder to run")
    drop(renamed, "late.sh", late)  # the folder moved away is no longer the inbox
    drop(home.jobs, "sync.sh", tmp_path / "sync")
    wait_for((tmp_path / "sync").exists, what="a later drop to run")
    assert not late.exists() and (renamed / "late.sh").exists()


def test_a_jobs_folder_swapped_for_another_at_once_is_watched(home, tmp_path, pids):
    daemon = Daemon(pids, home, tmp_path / "stderr")
    ran = tmp_path / "ran"
    replacement = tmp_path / "replacement"
    replacement.mkdir(mode=0o700)
    os.rename(home.jobs, tmp_path / "gone")
    os.rename(replacement, home.jobs)  # no moment without a folder of that name
    # Heard after both renames, it is a swap; heard between them (the daemon looked
    # in the moment the name was free), a removal and a return: either way the new
    # folder is the one watched.
    wait_for(lambda: daemon.said(f"the jobs folder {home.jobs} was replaced by another folder; "
                                 "watching that one")
             or daemon.said(f"the jobs folder {home.jobs} is back; watching it again"),
             what="the swap to be noticed")
    drop(home.jobs, "swapped.sh", ran)
    wait_for(ran.exists, what="a drop into the swapped-in folder to run")


def test_a_jobs_folder_on_a_tmpfs_is_watched_again_after_removal(home, tmp_path, pids):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "mnt"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        jobs = mount / "inbox" / "jobs"
        daemon = Daemon(pids, home, tmp_path / "stderr", "--jobs-dir", str(jobs))
        before, after = tmp_path / "before", tmp_path / "after"
        drop(jobs, "before.sh", before)
        wait_for(before.exists, what="a drop on the tmpfs to run")
        shutil.rmtree(mount / "inbox")  # the folder and its parent, on the other file system
        wait_for(lambda: daemon.said(f"the jobs folder {jobs} was removed"),
                 what="the removal to be noticed")
        jobs.mkdir(parents=True, mode=0o700)
        wait_for(lambda: daemon.said(f"the jobs folder {jobs} is back"),
                 what="the folder's return to be noticed")
        drop(jobs, "after.sh", after)
        wait_for(after.exists, what="a drop into the new folder to run")
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(timeout=20) == 0
    finally:
        for proc in pids.procs:
            proc.kill()
            proc.wait(timeout=10)
        subprocess.run(["umount", str(mount)], check=True)


# -- the queue and the home ------------------------------------------------------------


def deleted_sentence(home) -> str:
    return (f"{home.db} was deleted or moved while sloth-tray was running; stopping. "
            "Start it again to begin a new queue.")


def test_a_deleted_queue_stops_the_daemon_and_its_running_job(home, tmp_path, pids):
    started = tmp_path / "started"
    add(home, "long.sh", f"echo $$ > {started}; sleep 300")
    daemon = Daemon(pids, home, tmp_path / "stderr")
    child = pids.add(int(wait_for(lambda: started.exists() and started.read_text().strip(),
                                  what="the job to start")))
    home.db.unlink()
    assert daemon.proc.wait(timeout=15) == 1
    sentence = deleted_sentence(home)
    assert daemon.stderr().endswith(f"sloth-tray: {sentence}\n")
    assert "Traceback" not in daemon.stderr()
    assert sentence in log_text(home)
    assert not alive(child), "the job must not run on unsupervised"

    # Started again, it begins a new queue and runs what is dropped.
    again = Daemon(pids, home, tmp_path / "stderr-again")
    ran = tmp_path / "ran"
    drop(home.jobs, "fresh.sh", ran)
    wait_for(ran.exists, what="a drop to run on the new queue")
    with Queue(home.db) as queue:
        assert [job.name for job in queue.jobs(limit=None)] == ["fresh"]
    assert again.proc.poll() is None


def test_a_removed_home_stops_the_daemon_and_a_new_one_starts_cleanly(home, tmp_path, pids):
    started = tmp_path / "started"
    add(home, "long.sh", f"echo $$ > {started}; sleep 300")
    daemon = Daemon(pids, home, tmp_path / "stderr")
    child = pids.add(int(wait_for(lambda: started.exists() and started.read_text().strip(),
                                  what="the job to start")))
    shutil.rmtree(home.root)  # nothing can be recorded any more; the job must end all the same
    assert daemon.proc.wait(timeout=15) == 1
    assert daemon.stderr().endswith(f"sloth-tray: {deleted_sentence(home)}\n")
    assert "Traceback" not in daemon.stderr()
    assert not alive(child)

    again = Daemon(pids, home, tmp_path / "stderr-again")
    job_id = add(home, "after.sh", "echo fine")
    with Queue(home.db) as queue:
        wait_for(lambda: queue.get(job_id).state == State.DONE, what="the job to run")
    assert again.proc.poll() is None


def test_a_moved_home_stops_the_daemon(home, tmp_path, pids):
    daemon = Daemon(pids, home, tmp_path / "stderr")
    home.root.rename(tmp_path / "moved")
    assert daemon.proc.wait(timeout=15) == 1
    assert daemon.stderr().endswith(f"sloth-tray: {deleted_sentence(home)}\n")


def test_a_replaced_queue_stops_the_daemon_with_its_own_sentence(home, tmp_path, pids):
    daemon = Daemon(pids, home, tmp_path / "stderr")
    other = locate(tmp_path / "other").ensure()
    add(other, "x.sh", "true")  # a real queue file to put in its place
    os.replace(other.db, home.db)
    assert daemon.proc.wait(timeout=15) == 1
    assert daemon.stderr().endswith(
        f"sloth-tray: {home.db} was replaced while sloth-tray was running; stopping. "
        "Start it again to use the new one.\n")


# -- start-up messages ---------------------------------------------------------------


def test_crash_recovery_is_told_on_stderr_and_in_the_log(home, tmp_path, pids):
    marks = tmp_path / "marks"
    job_id = add(home, "work.sh", f'echo "$SLOTH_ATTEMPT $$" >> {marks}\n'
                                  '[ "$SLOTH_ATTEMPT" = 1 ] && sleep 300\nexit 0\n')
    first = Daemon(pids, home, tmp_path / "stderr-first", "--lease", "60")
    wait_for(lambda: marks.exists() and marks.read_text(), what="the first attempt")
    with Queue(home.db) as queue:
        wait_for(lambda: "started" in [e.kind for e in queue.history(job_id)],
                 what="the attempt to be recorded")
    pids.add(int(marks.read_text().split()[1]))
    first.proc.kill()
    first.proc.wait(timeout=10)
    # A file that reached the spool but was not queued before the kill.
    stranded = home.spool / "0123456789ab"
    stranded.mkdir(mode=0o700)
    (stranded / "stranded.sh").write_text("exit 0\n")

    second = Daemon(pids, home, tmp_path / "stderr-second", "--lease", "60")
    with Queue(home.db) as queue:
        wait_for(lambda: queue.get(job_id).state == State.DONE, what="the job to be rerun")
    told = ["leftover process(es)",
            "taking back 1 job(s) left running by a previous run",
            "queueing stranded.sh: it reached the spool but was not queued before a stop"]
    for text in told:
        assert second.said(text), f"{text!r} not on stderr:\n{second.stderr()}"
        assert text in log_text(home), f"{text!r} not in the log"
