"""Lane folders, for real: folders made, moved in, renamed, removed and opened to
others inside the jobs folder, under a real watchdog observer and a real daemon."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.processes import wait_for

from sloth_tray.daemon import lanefolders
from sloth_tray.daemon.inbox import Inbox
from sloth_tray.daemon.watch import make_observer
from sloth_tray.store.queue import Queue, State

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="inotify and /proc")

ROOT = os.geteuid() == 0
NOBODY = 65534  # a user and a group that are not the test's (root only can give them)
# What a lane folder's watches must never ask inotify for: each would wake the app
# for every write, every chmod or every file taken.
IN_ACCESS, IN_MODIFY, IN_ATTRIB, IN_DELETE, IN_CREATE = 0x1, 0x2, 0x4, 0x200, 0x100


@pytest.fixture
def queue(home):
    q = Queue(home.db)
    yield q
    q.close()


class Watching:
    """An Inbox behind a real observer, as the daemon starts it (short waits)."""

    def __init__(self, home, queue, *, settle: float = 0.1, quiet: float = 0.2) -> None:
        self.observer = make_observer()
        self.observer.start()
        self.inbox = Inbox(home, queue, lambda lane: None, settle=settle, quiet=quiet)
        self.inbox.start(self.observer)

    def stop(self) -> None:
        self.observer.stop()
        self.observer.join()
        self.inbox.stop()


@pytest.fixture
def watching(home, queue, caplog, monkeypatch):
    """Starts the inbox when called (what is in the jobs folder before is the start-up
    scan's); stopped at teardown. The app's log lines land in caplog."""
    caplog.set_level("INFO", logger="sloth_tray")
    # caplog listens at the root: an app log set up earlier in this process stops them there
    monkeypatch.setattr(logging.getLogger("sloth_tray"), "propagate", True)
    started: list[Watching] = []

    def start(**kwargs) -> Watching:
        started.append(Watching(home, queue, **kwargs))
        return started[-1]

    try:
        yield start
    finally:
        for each in started:
            each.stop()


def write(folder: Path, name: str, text: str = "echo hi\n") -> Path:
    """A drop written in place."""
    path = folder / name
    path.write_text(text)
    return path


def move_in(folder: Path, name: str, outside: Path, text: str = "echo hi\n") -> None:
    """A drop written elsewhere, then renamed in."""
    draft = write(outside, name, text)
    os.rename(draft, folder / name)


def folder_with(outside: Path, name: str, *files: str, mode: int = 0o700) -> Path:
    """A folder made outside the jobs folder, with `files` in it, ready to move in."""
    folder = outside / name
    folder.mkdir()
    for file in files:
        write(folder, file)
    os.chmod(folder, mode)
    return folder


def lanes_by_name(queue: Queue) -> dict[str, str]:
    return {job.name: job.lane for job in queue.jobs(limit=None)}


def said(caplog, text: str, level: str | None = None) -> int:
    """How many log lines hold `text` (at `level`, when given)."""
    return sum(text in record.getMessage() for record in caplog.records
               if level is None or record.levelname == level)


def taken(queue: Queue, name: str):
    """A wait: the job of that name, once there is one."""
    return lambda: next((job for job in queue.jobs(limit=None) if job.name == name), None)


# -- drops -------------------------------------------------------------------------


def test_drops_into_a_lane_folder_run_in_it_and_drops_into_the_jobs_folder_in_main(
        home, queue, watching, tmp_path):
    (home.jobs / "net").mkdir()
    write(home.jobs / "net", "early.sh")  # there before the start: the start-up scan's
    watching()
    assert wait_for(taken(queue, "early"), what="the early drop").lane == "net"
    assert "net" in queue.lanes()
    write(home.jobs / "net", "late.sh")  # written in place: taken after its close
    move_in(home.jobs, "plain.sh", tmp_path)
    late = wait_for(taken(queue, "late"), what="the drop written into the lane folder")
    plain = wait_for(taken(queue, "plain"), what="the drop into the jobs folder")
    assert (late.lane, late.state, plain.lane) == ("net", State.PENDING, "main")
    assert late.script == str(home.spool / late.id / "late.sh")
    assert list((home.jobs / "net").iterdir()) == []


def test_a_lane_folder_made_while_the_app_runs_takes_a_renamed_in_drop_at_once(
        home, queue, watching, tmp_path):
    watching(settle=60, quiet=60)  # a settle wait would time the test out
    (home.jobs / "net").mkdir()
    wait_for(lambda: "net" in queue.lanes(), timeout=5, what="the new lane to be noted")
    move_in(home.jobs / "net", "now.sh", tmp_path)
    assert wait_for(taken(queue, "now"), timeout=5, what="the renamed-in drop").lane == "net"


def test_a_lane_folder_moved_in_with_files_in_it_has_them_taken(home, queue, watching,
                                                                  tmp_path):
    watching()
    staging = folder_with(tmp_path, "web", "one.sh", "two.sh")
    os.rename(staging, home.jobs / "web")
    wait_for(lambda: len(queue.jobs()) == 2, what="the two files moved in with the folder")
    assert lanes_by_name(queue) == {"one": "web", "two": "web"}
    assert "web" in queue.lanes()


# -- folders that are no lanes -------------------------------------------------------


def test_dotfolders_deeper_folders_and_names_no_lane_can_have_are_left_alone(
        home, queue, watching, caplog, tmp_path):
    long_name = "x" * 101
    for name in (".hidden", "main", long_name):
        (home.jobs / name).mkdir()
        write(home.jobs / name, "x.sh")
    watching()
    (home.jobs / "net").mkdir()
    wait_for(lambda: "net" in queue.lanes(), what="the lane net")
    staging = folder_with(tmp_path, "sub", "deep.sh")
    os.rename(staging, home.jobs / "net" / "sub")  # moved in with a file: a deeper folder
    move_in(home.jobs / "net", "sync.sh", tmp_path)
    wait_for(taken(queue, "sync"), what="a drop into the lane folder")
    wait_for(lambda: said(caplog, "is a folder inside a lane folder, not a lane"),
             what="the deeper folder to be told")
    assert lanes_by_name(queue) == {"sync": "net"}
    assert queue.lanes() == ["main", "net"]
    for name in (".hidden", "main", long_name):
        assert (home.jobs / name / "x.sh").exists()
    assert (home.jobs / "net" / "sub" / "deep.sh").exists()
    main_folder = home.jobs / "main"
    assert said(caplog, f"the folder {main_folder} is not used as a lane: lane main is the "
                        "jobs folder itself; drop into it directly", "WARNING") == 1
    assert said(caplog, "is not used as a lane: a lane's name is at most 100 characters",
                "WARNING") == 1
    assert said(caplog, ".hidden") == 0
    assert said(caplog, f"{home.jobs / 'net' / 'sub'} is a folder inside a lane folder") == 1


def test_what_the_log_said_of_folders_is_remembered_for_the_newest_only(
        home, queue, watching, caplog, monkeypatch):
    """Said once each, a folder inside a lane folder was remembered for good, removed or
    not: 20,000 made and removed held 3.5 MB for the app's life."""
    monkeypatch.setattr(lanefolders, "TOLD", 20)
    lane_folders = watching().inbox.lane_folders
    (home.jobs / "net").mkdir()
    wait_for(lambda: "net" in queue.lanes(), what="the lane net")
    for number in range(60):
        (home.jobs / "net" / f"sub{number}").mkdir()
    wait_for(lambda: said(caplog, f"{home.jobs / 'net' / 'sub59'} is a folder inside"),
             what="the last deeper folder to be told")
    assert len(lane_folders._told) <= 20


# -- safety ----------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["symlink", "world-writable", "group-writable",
                                  "another user's"])
def test_an_unsafe_lane_folder_is_not_used_and_the_log_says_why(
        home, queue, watching, caplog, tmp_path, case):
    if case in ("group-writable", "another user's") and not ROOT:
        pytest.skip("only root can give a folder to another group or user")
    watching()
    lane = home.jobs / "net"
    if case == "symlink":
        real = folder_with(tmp_path, "real", "x.sh")
        lane.symlink_to(real)
        files = real
        why = f"the lane folder {lane} is a symbolic link (to {real}); sloth-tray will not " \
              "follow it or take jobs from it"
    else:
        staging = folder_with(tmp_path, "net", "x.sh", mode=0o700)
        if case == "world-writable":
            os.chmod(staging, 0o777)
            problem = "is writable by others (mode 0777)"
        elif case == "group-writable":
            os.chown(staging, -1, NOBODY)
            os.chmod(staging, 0o770)
            problem = "is writable by its group"
        else:
            os.chown(staging, NOBODY, NOBODY)
            problem = "is owned by user"
        os.rename(staging, lane)
        files = lane
        why = f"the lane folder {lane} {problem}"
    wait_for(lambda: said(caplog, why, "WARNING"), what="the refusal in the log")
    move_in(home.jobs, "sync.sh", tmp_path)
    wait_for(taken(queue, "sync"), what="a later drop into the jobs folder")
    assert lanes_by_name(queue) == {"sync": "main"}, "a file of the unsafe folder was taken"
    assert (files / "x.sh").exists()
    assert "net" not in queue.lanes()
    assert said(caplog, why) == 1


def test_a_lane_folder_put_right_is_used_at_once(home, queue, watching, caplog, tmp_path):
    watching()
    os.rename(folder_with(tmp_path, "net", "x.sh", mode=0o777), home.jobs / "net")
    wait_for(lambda: said(caplog, "is writable by others (mode 0777)", "WARNING"),
             what="the refusal")
    os.chmod(home.jobs / "net", 0o700)  # told by its mode's change: no rescan, no timer
    assert wait_for(taken(queue, "x"), what="its file, once put right").lane == "net"


def test_a_lane_folder_opened_to_others_while_in_use_is_no_longer_taken_from(
        home, queue, watching, caplog, tmp_path):
    watching()
    lane = home.jobs / "net"
    lane.mkdir()
    wait_for(lambda: "net" in queue.lanes(), what="the lane")
    os.chmod(lane, 0o777)  # no event tells this: the take looks again
    move_in(lane, "late.sh", tmp_path)
    wait_for(lambda: said(caplog, f"the lane folder {lane} is writable by others",
                          "WARNING"), what="the refusal")
    move_in(home.jobs, "sync.sh", tmp_path)
    wait_for(taken(queue, "sync"), what="a later drop")
    assert lanes_by_name(queue) == {"sync": "main"}
    assert (lane / "late.sh").exists()
    assert "net" not in queue.lanes()


# -- folders removed, moved out, renamed ------------------------------------------------


def test_a_removed_lane_folder_is_forgotten_once_it_has_no_jobs(home, queue, watching,
                                                                 tmp_path, caplog):
    watching()
    for name in ("empty", "busy", "away"):
        (home.jobs / name).mkdir()
    move_in(home.jobs / "busy", "waiting.sh", tmp_path)
    job = wait_for(taken(queue, "waiting"), what="the drop into busy")
    wait_for(lambda: {"empty", "away"} <= set(queue.lanes()), what="the lanes")

    (home.jobs / "empty").rmdir()
    (home.jobs / "busy").rmdir()
    os.rename(home.jobs / "away", tmp_path / "away")  # moved out of the jobs folder
    wait_for(lambda: queue.lanes() == ["main", "busy"], what="the lanes gone to be forgotten")
    for name in ("empty", "busy"):  # the log says so, once each
        assert said(caplog, f"the lane folder {home.jobs / name} is gone; lane {name} stays "
                            "listed only while it has jobs") == 1
    assert queue.cancel(job.id)
    assert queue.lanes() == ["main"], "a lane whose folder went ends with its last job"

    move_in(tmp_path / "away", "late.sh", tmp_path)  # the folder moved out is no lane now
    move_in(home.jobs, "sync.sh", tmp_path)
    wait_for(taken(queue, "sync"), what="a later drop")
    assert (tmp_path / "away" / "late.sh").exists()


def settle_wakes(inbox: Inbox) -> int:
    """How often the inbox's settle thread has gone to sleep so far (each time it woke,
    it slept again: its voluntary switches; a busy machine's preemptions not counted)."""
    with open(f"/proc/self/task/{inbox._settler.native_id}/status") as status:
        return sum(int(line.split()[1]) for line in status
                   if line.startswith("voluntary_ctxt"))


def test_a_draft_held_open_is_waited_for_by_its_close_not_looked_at_again_and_again(
        home, watching):
    inbox = watching(settle=0.05, quiet=0.05).inbox
    path = home.jobs / "draft.sh"
    with open(path, "w") as draft:
        draft.write("echo half")
        draft.flush()
        wait_for(lambda: str(path) in inbox._open, what="the inbox to see the draft open")
        before = settle_wakes(inbox)
        time.sleep(20 * 0.05)  # the window measured: twenty settle times
        woken = settle_wakes(inbox) - before
    assert woken <= 2, f"the settle thread woke {woken} times while the draft stayed open"


def test_a_drop_a_reader_holds_open_past_its_quiet_time_is_taken_once_read(
        home, queue, watching):
    quiet = 1.0  # the viewer's open is seen well within it, however busy the machine
    watching(settle=0.05, quiet=quiet)
    path = write(home.jobs, "viewed.sh")
    with open(path) as viewer:  # looked at in a pager while the app waits to take it
        viewer.read()
        time.sleep(2 * quiet)  # past its quiet time, still open
        assert path.exists(), "a drop was taken while it was open"
    wait_for(taken(queue, "viewed"), timeout=5, what="the drop, once the viewer closed it")


def test_a_lane_folder_removed_under_an_open_draft_leaves_no_wait_behind(
        home, queue, watching, tmp_path):
    """A file open for writing in a lane folder that is removed never tells its close
    (the folder's watch went with it). The inbox forgot nothing of it: the same name
    moved in later with the folder was never taken."""
    watching(settle=0.1, quiet=0.1)
    (home.jobs / "net").mkdir()
    wait_for(lambda: "net" in queue.lanes(), what="the lane to be noted")
    with open(home.jobs / "net" / "draft.sh", "w") as draft:
        draft.write("echo half")
        draft.flush()
        shutil.rmtree(home.jobs / "net")  # its writer closes it after, unlinked: untold
    wait_for(lambda: queue.lanes() == ["main"], what="the lane folder to be let go")
    os.rename(folder_with(tmp_path, "net", "draft.sh"), home.jobs / "net")
    job = wait_for(taken(queue, "draft"), timeout=5, what="the draft moved in with its folder")
    assert job.lane == "net"


def test_a_lane_folder_removed_while_its_job_runs_lets_the_job_end_in_its_lane(
        home, queue, watching, tmp_path, caplog):
    watching()
    (home.jobs / "net").mkdir()
    move_in(home.jobs / "net", "sync.sh", tmp_path)
    job = wait_for(taken(queue, "sync"), what="the drop into net")
    assert queue.claim("me", lane="net").id == job.id  # it runs
    (home.jobs / "net").rmdir()
    wait_for(lambda: said(caplog, f"the lane folder {home.jobs / 'net'} is gone"),
             what="the removal to be seen")
    assert queue.lanes() == ["main", "net"], "a lane is listed while it has a job"
    assert queue.complete(job.id, "me")
    assert (queue.get(job.id).state, queue.get(job.id).lane) == (State.DONE, "net")
    assert queue.lanes() == ["main"], "a lane whose folder went ends with its last job"


def test_a_lane_folder_renamed_in_a_running_app_takes_its_jobs_along(home, tmp_path, pids):
    lane, ran = home.jobs / "net", tmp_path / "ran"
    lane.mkdir(mode=0o700)
    for name in ("a.sh", "b.sh"):  # there before the start: taken by its scan
        write(lane, name, f"echo {name} >> {ran}\n")
    daemon = Daemon(pids, home, tmp_path / "stderr")
    with Queue(home.db) as queue:
        wait_for(lambda: [job.state for job in queue.jobs()] == [State.DONE] * 2,
                 what="the two jobs of the lane to run")
        assert set(lanes_by_name(queue).values()) == {"net"}

        os.rename(lane, home.jobs / "web")
        wait_for(lambda: queue.lanes() == ["main", "web"], what="the lane to be renamed")
        assert lanes_by_name(queue) == {"a": "web", "b": "web"}
        move_in(home.jobs / "web", "c.sh", tmp_path, f"echo c >> {ran}\n")
        assert wait_for(taken(queue, "c"), what="a drop into the renamed folder").lane == "web"
        wait_for(lambda: ran.exists() and len(ran.read_text().split()) == 3,
                 what="the third job to run")
    assert "lane net renamed to web; its 2 jobs go with it" in daemon.log()
    assert daemon.proc.poll() is None


def test_a_daemon_notes_lane_folders_at_start_and_refuses_an_open_one(home, tmp_path, pids):
    good = home.jobs / "net"
    good.mkdir(mode=0o700)
    write(good, "good.sh", f"touch {tmp_path / 'good-ran'}\n")
    bad = folder_with(home.jobs, "open", "bad.sh", mode=0o777)
    write(home.jobs, "main.sh", f"touch {tmp_path / 'main-ran'}\n")
    daemon = Daemon(pids, home, tmp_path / "stderr")
    wait_for((tmp_path / "good-ran").exists, what="the lane folder's drop to run")
    wait_for((tmp_path / "main-ran").exists, what="the jobs folder's drop to run")
    with Queue(home.db) as queue:
        assert lanes_by_name(queue) == {"good": "net", "main": "main"}
        assert queue.lanes() == ["main", "net"]
    assert (bad / "bad.sh").exists()
    sentence = (f"the lane folder {bad} is writable by others (mode 0777); sloth-tray will "
                "not take jobs from it until that is put right")
    wait_for(lambda: sentence in daemon.log(), what="the refusal in the app's log")
    assert "WARNING " + sentence in daemon.log()


# -- the jobs folder re-created; what inotify is asked for ------------------------------


def test_lane_folders_of_a_re_created_jobs_folder_are_used(home, queue, watching, tmp_path):
    watching()
    (home.jobs / "old").mkdir()
    wait_for(lambda: "old" in queue.lanes(), what="the lane old")
    shutil.rmtree(home.jobs)
    wait_for(lambda: queue.lanes() == ["main"], what="the lane of the removed folder to go")
    staging = tmp_path / "staging"
    staging.mkdir(mode=0o700)
    folder_with(staging, "web", "inside.sh")
    os.rename(staging, home.jobs)  # back, with a lane folder and a file already in it
    assert wait_for(taken(queue, "inside"), what="the file in the new lane folder").lane \
        == "web"
    move_in(home.jobs / "web", "later.sh", tmp_path)
    assert wait_for(taken(queue, "later"), what="a drop into it afterwards").lane == "web"


def folder_in_the_inode(parent: Path, gone: int) -> Path:
    """A new folder in `parent` with inode number `gone`, as ext4 hands a freed inode to
    the next folder made there: folders are made (and kept, so that each takes the next
    free one) until one has it; skipped on a file system that never gives it."""
    misses = []
    try:
        for attempt in range(100):
            folder = parent / f".again-{attempt}"  # a dotfolder: no lane, whatever happens
            folder.mkdir(mode=0o700)
            if folder.stat().st_ino == gone:
                return folder
            misses.append(folder)
    finally:
        for miss in misses:
            miss.rmdir()
    pytest.skip("this file system never gave a new folder the inode of the one removed")


def test_a_jobs_folder_removed_and_made_again_in_the_same_inode_is_watched_anew(
        home, queue, watching, tmp_path):
    """The folder's removal is told while a new one already stands at its path, with
    the old one's inode number: it is still a new folder, the old one's watch died
    with it, and the new one is watched (and scanned) as any other."""
    kept = watching().inbox._kept
    gone = home.jobs.stat().st_ino
    with kept._lock:  # the watcher is busy: it hears of the removal only afterwards
        shutil.rmtree(home.jobs)
        again = folder_in_the_inode(home.root, gone)
        folder_with(again, "web", "inside.sh")
        os.rename(again, home.jobs)
    assert wait_for(taken(queue, "inside"), what="the file in the new folder's lane").lane \
        == "web"
    move_in(home.jobs, "later.sh", tmp_path)
    wait_for(taken(queue, "later"), what="a drop into the new jobs folder")


def test_a_lane_folder_removed_and_made_again_in_the_same_inode_is_watched_anew(
        home, queue, watching, tmp_path):
    lanes = watching().inbox.lane_folders._watches
    lane = home.jobs / "web"
    lane.mkdir(mode=0o700)
    wait_for(lambda: "web" in queue.lanes(), what="the lane web")
    gone = lane.stat().st_ino
    with lanes._lock:  # the watcher is busy: it hears of the removal only afterwards
        lane.rmdir()
        os.rename(folder_in_the_inode(home.jobs, gone), lane)
    move_in(lane, "inside.sh", tmp_path)
    assert wait_for(taken(queue, "inside"), what="a drop into the new lane folder").lane \
        == "web"


def inotify_masks(inode: int) -> list[int]:
    """The masks of this process's inotify watches on the inode (from /proc)."""
    masks = []
    for info in Path("/proc/self/fdinfo").iterdir():
        try:
            lines = info.read_text().splitlines()
        except OSError:
            continue  # closed meanwhile
        for line in lines:
            if line.startswith("inotify wd:"):
                fields = dict(part.split(":", 1) for part in line.split()[1:])
                if int(fields["ino"], 16) == inode:
                    masks.append(int(fields["mask"], 16))
    return masks


def test_a_lane_folder_is_watched_for_creates_moves_opens_and_closes_only(
        home, queue, watching):
    watching()
    lane = home.jobs / "net"
    lane.mkdir()
    wait_for(lambda: "net" in queue.lanes(), what="the lane")
    masks = wait_for(lambda: inotify_masks(lane.stat().st_ino), what="its watches")
    assert any(mask & IN_CREATE for mask in masks), masks
    for mask in (*masks, *inotify_masks(home.jobs.stat().st_ino)):
        assert not mask & (IN_ACCESS | IN_MODIFY | IN_ATTRIB | IN_DELETE), hex(mask)


class Daemon:
    """A running `sloth-tray run --headless`, its stderr kept in a file."""

    def __init__(self, pids, home, stderr: Path) -> None:
        self.home = home
        with open(stderr, "w") as err:
            self.proc = pids.popen([sys.executable, "-m", "sloth_tray", "run", "--headless",
                                    "--home", str(home.root)],
                                   stdout=subprocess.DEVNULL, stderr=err)
        wait_for(lambda: "drop scripts into" in stderr.read_text()
                 or self.proc.poll() is not None, what="the daemon to be up")
        assert self.proc.poll() is None, stderr.read_text()

    def log(self) -> str:
        return (self.home.logs / "sloth-tray.log").read_text()


def test_a_lane_drop_cut_short_by_a_crash_is_queued_once_and_in_its_lane_at_the_next_start(
        home):
    """The app died after the drop reached the spool and before its push (with the
    original still in the lane folder, as a crash between the spool's link and the
    unlink leaves it): the next start queues it once, in its lane."""
    from sloth_tray.store import spool
    from sloth_tray.store.rows import new_job_id

    (home.jobs / "net").mkdir()
    drop = home.jobs / "net" / "fetch.sh"
    drop.write_text("echo fetched\n")
    spool.place(home, drop, new_job_id(), move=False, lane="net")  # the twin stays
    with Queue(home.db) as queue:
        spool.reconcile(home, queue)
        (job,) = queue.jobs()
        assert (job.name, job.lane) == ("fetch", "net")
    assert not drop.exists(), "the twin left in the lane folder would be a second job"


def test_a_lane_folder_on_another_file_system_takes_its_drops_into_its_lane(
        home, queue, watching, tmp_path):
    """A tmpfs mounted at jobs/net: each drop is copied across into the spool (no link
    can cross), runs in lane net, and leaves nothing behind in the folder."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    lane = home.jobs / "net"
    lane.mkdir(mode=0o700)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(lane)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        watching()
        wait_for(lambda: "net" in queue.lanes(), what="the lane on the tmpfs")
        drafts = lane / ".drafts"  # written on the tmpfs too, then renamed in: at once
        drafts.mkdir()
        move_in(lane, "fetch.sh", drafts)
        job = wait_for(taken(queue, "fetch"), what="the drop on the tmpfs")
        assert job.lane == "net" and Path(job.script).read_text() == "echo hi\n"
        assert sorted(os.listdir(lane)) == [".drafts"]
    finally:
        subprocess.run(["umount", str(lane)], check=True)
