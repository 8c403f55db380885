"""Where a dropped file comes from: another file system, a link, a FIFO, a second name.

A jobs folder may live on another disk than the app's home (a USB stick,
/dev/shm): every drop must still become exactly one job, refusals included,
and a job must be frozen as it was dropped, whatever other names its file has.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
import tempfile
from pathlib import Path

import pytest
from helpers.processes import wait_for

from sloth_tray.daemon.inbox import Inbox
from sloth_tray.daemon.outcome import record
from sloth_tray.daemon.runner import Runner
from sloth_tray.daemon.watch import make_observer
from sloth_tray.paths import Home
from sloth_tray.store import spool
from sloth_tray.store.queue import Queue, Reason, State

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")


def other_filesystem_than(path: Path) -> Path | None:
    """A writable folder on another file system than `path`, or None."""
    for candidate in ("/dev/shm", "/run/user", "/run"):
        try:
            if os.stat(candidate).st_dev != os.stat(path).st_dev and os.access(candidate, os.W_OK):
                return Path(candidate)
        except OSError:
            continue
    return None


@pytest.fixture(params=["same disk", "other disk"])
def home(request, tmp_path):
    """A home in tmp_path; its jobs folder beside it, or on another file system."""
    if request.param == "same disk":
        jobs = tmp_path / "jobs"
        jobs.mkdir(mode=0o700)
        yield Home(root=tmp_path / "home", jobs=jobs).ensure()
        return
    elsewhere = other_filesystem_than(tmp_path)
    if elsewhere is None:
        pytest.skip("no other file system to put the jobs folder on")
    with tempfile.TemporaryDirectory(dir=elsewhere) as jobs:
        os.chmod(jobs, 0o700)
        yield Home(root=tmp_path / "home", jobs=Path(jobs)).ensure()


@pytest.fixture
def inbox(home):
    queue = Queue(home.db, busy_timeout=0.2)
    observer = make_observer()
    observer.start()
    inbox = Inbox(home, queue, lambda lane: None, settle=0.2)
    inbox.start(observer)
    yield inbox
    observer.stop()
    observer.join()
    inbox.stop()
    queue.close()


def test_a_symlink_and_a_fifo_are_refused_wherever_the_folder_lives(home, inbox, tmp_path):
    target = tmp_path / "elsewhere.sh"
    target.write_text("echo not me\n")
    (home.jobs / "link.sh").symlink_to(target)
    os.mkfifo(home.jobs / "pipe.sh")
    jobs = wait_for(lambda: len(inbox.queue.jobs()) == 2 and inbox.queue.jobs(),
                    timeout=10, what="both drops to become refused jobs")
    refused = {job.name: job for job in jobs}
    assert refused["link"].last_error.startswith("refused: it is a symbolic link")
    assert refused["pipe"].last_error == "refused: it is not a regular file"
    assert all((job.state, job.reason) == (State.FAILED, Reason.REFUSED) for job in jobs)
    assert list(home.jobs.iterdir()) == []
    assert target.read_text() == "echo not me\n"  # never read, never moved


def test_a_drop_the_queue_cannot_take_yet_goes_back_to_the_folder(home, inbox, caplog):
    def tries() -> int:
        return sum("could not queue patient.sh yet" in r.getMessage() for r in caplog.records)

    blocker = sqlite3.connect(home.db, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # the queue is locked by another program
        (home.jobs / "patient.sh").write_text("echo waited\n")
        wait_for(lambda: tries() >= 2, timeout=10,
                 what="the drop to be given back to the jobs folder and tried again")
        blocker.execute("ROLLBACK")
    finally:
        if blocker.in_transaction:
            blocker.execute("ROLLBACK")
        blocker.close()
    (job,) = wait_for(lambda: inbox.queue.jobs(), timeout=10, what="the job once unlocked")
    assert open(job.script).read() == "echo waited\n"
    assert list(home.jobs.iterdir()) == []
    assert [folder.name for folder in home.spool.iterdir()] == [job.id]


def test_a_queued_job_is_frozen_even_when_its_file_had_another_name(home, inbox, tmp_path):
    original = home.jobs.parent / f"{home.jobs.name}-original.sh"
    original.write_text("echo as dropped\n")
    try:
        os.link(original, home.jobs / "twin.sh")
        (job,) = wait_for(lambda: inbox.queue.jobs(), timeout=10, what="the job")
        original.write_text("echo changed later\n")  # same inode as the drop was
        assert open(job.script).read() == "echo as dropped\n"
        assert not os.path.samefile(job.script, original)  # a copy of its own
        assert stat.S_IMODE(os.stat(job.script).st_mode) == stat.S_IMODE(
            os.stat(original).st_mode)
    finally:
        original.unlink()


# -- a drop replaced while it is taken ---------------------------------------------------


def swap_in_a_link(path: Path, to: Path) -> None:
    """Rename a symbolic link over `path`, as another program can at any moment."""
    link = path.with_name(f".swap-{path.name}")  # a name the inbox leaves alone
    link.symlink_to(to)
    os.rename(link, path)


@pytest.mark.parametrize("moment", ["before the placing", "at the link"])
def test_a_link_renamed_over_a_drop_while_it_is_taken_is_refused_and_never_run(
        home, tmp_path, monkeypatch, moment):
    """The inbox looked at a regular file; before it reached the spool, a link took its
    place. The job is decided by what was placed: a refused link, whose target never
    runs."""
    marker = tmp_path / "target-ran"
    target = tmp_path / "target.sh"
    target.write_text(f"#!/bin/sh\necho ran > {marker}\n")
    drop = home.jobs / "drop.sh"
    drop.write_text("#!/bin/sh\necho dropped\n")
    swapped: list[str] = []

    def swap_once() -> None:
        if not swapped:
            swapped.append(moment)
            swap_in_a_link(drop, target)

    if moment == "before the placing":
        place = spool.place

        def swapping_place(*args, **kwargs):
            swap_once()
            return place(*args, **kwargs)

        monkeypatch.setattr(spool, "place", swapping_place)
    else:
        link = os.link

        def swapping_link(*args, **kwargs):
            swap_once()
            return link(*args, **kwargs)

        monkeypatch.setattr(os, "link", swapping_link)
    queue = Queue(home.db)
    try:
        Inbox(home, queue, lambda lane: None)._take([str(drop)])  # no watcher: nothing else looks
        assert swapped, "the swap did not happen"
        (job,) = queue.jobs()
        assert (job.state, job.reason) == (State.FAILED, Reason.REFUSED), \
            f"the job is {job.state} ({job.reason}), its script {job.script}"
        assert job.last_error == "refused: it is a symbolic link; drop the script itself"
        assert [folder.name for folder in home.spool.iterdir()] == [job.id]
        assert not os.path.lexists(drop)
        claimed = queue.claim("me")
        if claimed is not None:  # whatever was queued, running it must not reach the target
            record(queue, "me", claimed, Runner(queue, home, "me").run(claimed))
        assert not marker.exists(), "the link's target ran"
    finally:
        queue.close()


def test_add_of_an_empty_script_queues_nothing_and_says_why(tmp_path):
    home = Home(tmp_path / "home", tmp_path / "home" / "jobs").ensure()
    empty = tmp_path / "x.sh"
    empty.write_text("\n")
    with pytest.raises(spool.SlothError, match=r"^x.sh is empty: there is nothing to run; "
                                               "nothing was queued$"):
        spool.add(home, empty)
    with Queue(home.db) as queue:
        assert queue.jobs() == []
