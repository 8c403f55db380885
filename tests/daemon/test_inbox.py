"""The jobs folder, for real: a real watchdog observer, real files, real renames."""

from __future__ import annotations

import os
import random
import stat
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.processes import start_daemon, wait_for

from sloth_tray.daemon.inbox import Inbox, ignored
from sloth_tray.daemon.watch import make_observer
from sloth_tray.errors import SlothError
from sloth_tray.paths import locate
from sloth_tray.store import spool
from sloth_tray.store.queue import Queue, Reason, State

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")


@pytest.fixture
def queue(home):
    q = Queue(home.db)
    yield q
    q.close()


class Running:
    """An Inbox behind a real observer; counts the wakes it gives the engine."""

    def __init__(self, home, queue, settle: float = 0.5) -> None:
        self.wakes = 0
        self.observer = make_observer()
        self.observer.start()
        self.inbox = Inbox(home, queue, self._wake, settle=settle)
        self.inbox.start(self.observer)

    def _wake(self, lane: str) -> None:
        self.wakes += 1

    def stop(self) -> None:
        self.observer.stop()
        self.observer.join()
        self.inbox.stop()


@pytest.fixture
def running(home, queue):
    started: list[Running] = []

    def start(**kwargs) -> Running:
        started.append(Running(home, queue, **kwargs))
        return started[-1]

    yield start
    for each in started:
        each.stop()


def jobs_named(queue: Queue) -> dict[str, list]:
    named: dict[str, list] = {}
    for job in queue.jobs():
        named.setdefault(job.name, []).append(job)
    return named


def drop(home, name: str, text: str = "echo hi\n") -> None:
    with open(home.jobs / name, "w") as file:
        file.write(text)


def test_a_dropped_file_becomes_one_job_and_leaves_the_folder(home, queue, running):
    inbox = running()
    drop(home, "tidy.sh", "#!/bin/sh\necho tidy\n")
    (job,) = wait_for(lambda: queue.jobs(), what="the job")
    assert (job.name, job.state) == ("tidy", State.PENDING)
    assert job.script == str(home.spool / job.id / "tidy.sh")
    assert open(job.script).read() == "#!/bin/sh\necho tidy\n"
    assert list(home.jobs.iterdir()) == []
    wait_for(lambda: inbox.wakes == 1, what="the engine to be woken")


def test_a_slow_writer_is_never_taken_half_written(home, queue, running):
    running(settle=0.2)  # shorter than the writer's pauses: only the close may count
    with open(home.jobs / "slow.sh", "w") as file:
        for part in range(4):
            file.write(f"echo part {part}\n")
            file.flush()
            time.sleep(0.5)  # the scenario: a writer that takes two seconds
            assert queue.jobs() == [], "taken while the writer still had it open"
    (job,) = wait_for(lambda: queue.jobs(), what="the job after the close")
    assert open(job.script).read().count("echo part") == 4


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="closes are told by inotify")
def test_a_drop_written_in_many_pieces_wakes_the_inbox_at_its_close_not_at_each_write(
        home, queue, running, monkeypatch):
    seen: list[str] = []
    hint = Inbox.on_any_event

    def counted(self, event) -> None:
        seen.append(type(event).__name__)
        hint(self, event)

    monkeypatch.setattr(Inbox, "on_any_event", counted)
    running()
    with open(home.jobs / "long.sh", "w") as file:
        for part in range(200):
            file.write(f"echo part {part}\n")
            file.flush()  # a write(2) each: inotify says "modified" for every one
    (job,) = wait_for(lambda: queue.jobs(), what="the job after the close")
    assert open(job.script).read().count("echo part") == 200
    assert "FileModifiedEvent" not in seen and len(seen) < 10, seen


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="closes are told by inotify")
def test_a_file_written_in_place_in_two_goes_is_one_job(home, queue, running):
    """`echo ... > x.sh`, then `echo ... >> x.sh` a moment later: one job, both lines."""
    running()
    drop(home, "two.sh", "echo first\n")
    time.sleep(0.3)  # the scenario: the second command comes 0.3 s after the first
    with open(home.jobs / "two.sh", "a") as file:
        file.write("echo second\n")
    (job,) = wait_for(lambda: queue.jobs(), what="the job")
    wait_for(lambda: not (home.jobs / "two.sh").exists(), what="the file taken")
    assert open(job.script).read() == "echo first\necho second\n"
    assert len(queue.jobs()) == 1


def test_a_file_renamed_in_is_taken_at_once(home, queue, running, tmp_path):
    running(settle=60)  # a settle wait would time the test out: the rename must do it
    outside = tmp_path / "draft.sh"
    outside.write_text("echo drafted\n")
    os.rename(outside, home.jobs / "draft.sh")
    (job,) = wait_for(lambda: queue.jobs(), timeout=10, what="the renamed-in job")
    assert job.name == "draft"


def rename_in(home, tmp_path, name: str, text: str = "echo hi\n") -> None:
    outside = tmp_path / name
    outside.write_text(text)
    os.rename(outside, home.jobs / name)


def pushes_counted(monkeypatch) -> list[list[str]]:
    """The names in each commit of the inbox's pushes, as they happen."""
    batches: list[list[str]] = []
    real = spool.push_drops

    def counted(queue, drops, then=None):
        batches.append([d.script.name for d in drops])
        return real(queue, drops, then)

    monkeypatch.setattr(spool, "push_drops", counted)
    return batches


def held_while_dropped(inbox, home, tmp_path, names: list[tuple[str, str]],
                       monkeypatch) -> None:
    """Drop `first.sh`, then `names` while the inbox is still taking it (held here as
    it places it): they are all ready by its next look."""
    real_place, taking, go = inbox._place, threading.Event(), threading.Event()

    def held(path: str, lane: str):
        if path.endswith("first.sh"):
            taking.set()
            go.wait(30)
        return real_place(path, lane)

    monkeypatch.setattr(inbox, "_place", held)
    try:
        rename_in(home, tmp_path, "first.sh")
        wait_for(taking.is_set, what="the first drop's take to begin")
        for name, text in names:
            rename_in(home, tmp_path, name, text)
        wait_for(lambda: len(inbox._ready) == len(names), what="every drop to be told")
    finally:
        go.set()


def test_drops_ready_at_once_are_queued_in_one_commit_each_its_own_job(
        home, queue, running, tmp_path, monkeypatch):
    inbox = running(settle=60)
    batches = pushes_counted(monkeypatch)
    names = [f"b{i}.sh" for i in range(9)]
    held_while_dropped(inbox.inbox, home, tmp_path, [(name, "echo hi\n") for name in names],
                       monkeypatch)
    wait_for(lambda: len(queue.jobs()) == 10, timeout=10, what="ten jobs")
    assert batches == [["first.sh"], names], "one commit for what was ready together"
    jobs = queue.jobs()
    assert sorted(job.name for job in jobs) == sorted(["first", *(n[:-3] for n in names)])
    assert all(job.state == State.PENDING for job in jobs)
    # Each folder is marked queued once its commit is made, so just after the jobs
    # can be read: waited for, not looked at once.
    wait_for(lambda: all((Path(job.script).parent / spool.QUEUED).exists() for job in jobs),
             what="every spool folder marked queued")
    assert list(home.jobs.iterdir()) == []
    wait_for(lambda: inbox.wakes == 2, what="one wake a commit")


def test_a_bad_drop_in_a_commit_fails_alone(home, queue, running, tmp_path, monkeypatch):
    inbox = running(settle=0.2)
    real_push, refused = queue.push, []

    def locked_once(name: str, **row):
        if name == "unlucky" and not refused:
            refused.append(name)
            raise SlothError("the queue is locked by another program")
        return real_push(name, **row)

    monkeypatch.setattr(queue, "push", locked_once)
    batches = pushes_counted(monkeypatch)
    held_while_dropped(inbox.inbox, home, tmp_path, [
        ("good.sh", "echo good\n"), ("unlucky.sh", "echo again\n"),
        ("bad.sh", "# sloth: timeout=soon\necho bad\n"), ("fine.sh", "echo fine\n")],
        monkeypatch)
    named = wait_for(lambda: len(queue.jobs()) == 5 and jobs_named(queue), timeout=10,
                     what="five jobs, the unlucky one given back and taken again")
    assert refused == ["unlucky"]
    assert batches == [["first.sh"], ["good.sh", "unlucky.sh", "bad.sh", "fine.sh"],
                       ["unlucky.sh"]], "only the unlucky drop is given back, and taken again"
    assert {name: [job.state for job in jobs] for name, jobs in named.items()} == {
        "first": [State.PENDING], "good": [State.PENDING], "unlucky": [State.PENDING],
        "bad": [State.FAILED], "fine": [State.PENDING]}
    (bad,) = named["bad"]
    assert bad.reason == Reason.BAD_HEADER and "bad value 'soon' for timeout" in bad.last_error
    (unlucky,) = named["unlucky"]
    assert open(unlucky.script).read() == "echo again\n"
    assert sorted(folder.name for folder in home.spool.iterdir()) == sorted(
        job.id for job in queue.jobs())


def test_a_drop_gone_before_its_move_is_promised_no_retry(home, queue, running, monkeypatch,
                                                         caplog):
    """A drop that left the folder between the inbox's look and its move (renamed over
    by a later drop of its name, which was taken; or removed) has nothing left to take:
    the log promised "will try again", and nothing ever followed."""
    caplog.set_level("INFO", logger="sloth_tray")
    real_place = spool.place

    def gone_first(home_, source, *args, **kwargs):
        if source.name == "race.sh":
            os.unlink(source)  # it goes just after the inbox looked at it
        return real_place(home_, source, *args, **kwargs)

    monkeypatch.setattr(spool, "place", gone_first)
    running()
    drop(home, "race.sh")
    drop(home, "after.sh")
    wait_for(lambda: "after" in jobs_named(queue), what="the next drop's job")
    said = [r.getMessage() for r in caplog.records if "race.sh" in r.getMessage()]
    assert said == [], said
    assert "race" not in jobs_named(queue) and os.listdir(home.jobs) == []


def test_stop_returns_once_a_take_under_way_is_over(home, queue, running, monkeypatch):
    """The app closes the queue right after the inbox stops: a take still under way on
    the settle thread would then write through a closed queue."""
    entered, go, real_push = threading.Event(), threading.Event(), spool.push_drops

    def slow_push(*args, **kwargs):
        entered.set()
        go.wait(10)
        return real_push(*args, **kwargs)

    monkeypatch.setattr(spool, "push_drops", slow_push)
    inbox = running()
    drop(home, "late.sh")
    assert entered.wait(10), "the take never began"
    stopper = threading.Thread(target=inbox.inbox.stop)
    stopper.start()
    stopper.join(0.3)
    assert stopper.is_alive(), "stop returned while the take was still under way"
    go.set()
    stopper.join(10)
    assert not stopper.is_alive()
    assert [job.name for job in queue.jobs()] == ["late"]


def test_temp_and_dot_files_are_left_alone(home, queue, running):
    running()
    names = [".hidden.sh", "notes.txt~", "x.swp", "y.tmp", "dl.part", "dl.partial",
             "video.crdownload", "Z.TMP"]
    for name in names:
        drop(home, name)
    (home.jobs / "a-folder").mkdir()
    drop(home, "real.sh")  # events arrive in order: once this is in, the rest were seen
    wait_for(lambda: queue.jobs(), what="the real job")
    assert [job.name for job in queue.jobs()] == ["real"]
    assert sorted(p.name for p in home.jobs.iterdir()) == sorted([*names, "a-folder"])


def test_a_temp_file_renamed_to_its_final_name_is_one_job(home, queue, running):
    running()
    drop(home, "report.sh.part", "echo report\n")
    os.rename(home.jobs / "report.sh.part", home.jobs / "report.sh")
    (job,) = wait_for(lambda: queue.jobs(), what="the job")
    assert job.name == "report"


def test_200_files_dropped_at_once_make_200_jobs(home, queue, running):
    running()
    for i in range(200):
        drop(home, f"job{i:03}.sh")
    wait_for(lambda: len(queue.jobs(limit=None)) == 200, timeout=30, what="200 jobs")
    assert sorted(j.name for j in queue.jobs()) == [f"job{i:03}" for i in range(200)]
    assert list(home.jobs.iterdir()) == []


def test_odd_names_keep_their_names(home, queue, running):
    running()
    names = ["tidy downloads.sh", "caf\u00e9 \u2615.py", "-rf.sh", "--help.sh"]
    for name in names:
        drop(home, name)
    wait_for(lambda: len(queue.jobs()) == 4, what="four jobs")
    assert sorted(j.name for j in queue.jobs()) == sorted(n.rsplit(".", 1)[0] for n in names)
    for job in queue.jobs():
        assert os.path.isfile(job.script)


def test_a_name_that_is_not_utf8_still_becomes_a_job(home, queue, running):
    running()
    raw = os.fsencode(home.jobs) + b"/bad\xff\xfename.sh"
    with open(raw, "wb") as file:
        file.write(b"echo odd\n")
    (job,) = wait_for(lambda: queue.jobs(), what="the job")
    assert job.name == "bad\ufffd\ufffdname"
    assert os.path.isfile(job.script)


def test_files_dropped_while_the_app_was_off_are_taken_at_start(home, queue, running):
    for name in ("one.sh", "two.sh"):
        drop(home, name)
    running(settle=0.1)
    wait_for(lambda: len(queue.jobs()) == 2, what="the start-up scan")
    assert list(home.jobs.iterdir()) == []


def test_header_options_are_read_and_a_bad_header_fails_the_job_at_once(home, queue, running,
                                                                        caplog):
    caplog.set_level("INFO", logger="sloth_tray")
    running()
    drop(home, "good.sh", "#!/bin/sh\n# sloth: max_attempts=2 timeout=10m\n# nightly\n"
                          "# sloth: delay=30s every=1h\n")  # one option a line counts too
    drop(home, "bad.sh", "#!/bin/sh\n# sloth: max_attempts=1\n# sloth: retries=3\necho never\n")
    wait_for(lambda: len(queue.jobs()) == 2, what="two jobs")
    named = jobs_named(queue)
    good, bad = named["good"][0], named["bad"][0]
    assert good.max_attempts == 2 and good.options["timeout"] == 600
    assert good.options["every"] == 3600 and good.not_before >= good.created_at + 30
    assert bad.state == State.FAILED
    assert "unknown option 'retries'" in bad.last_error and "bad.sh, line 3" in bad.last_error
    said = wait_for(lambda: [r.getMessage() for r in caplog.records  # said after the push
                             if r.levelname == "WARNING"], what="the app's log to say why")
    assert said == [f"failed bad ({bad.id}): {bad.last_error}"]  # the app's log says why


def test_an_empty_file_becomes_a_failed_job_that_says_so(home, queue, running):
    """`touch jobs/x.sh`: nothing to run is a failure, never a job done."""
    running()
    (home.jobs / "x.sh").touch()
    (job,) = wait_for(lambda: queue.jobs(), what="the job")
    assert (job.state, job.reason) == (State.FAILED, Reason.UNRUNNABLE)
    assert job.last_error.startswith("x.sh is empty: there is nothing to run")


@pytest.mark.parametrize("case", ["symlink", "fifo", "not yours", "open folder"])
def test_refused_drops_become_failed_jobs_that_say_why(home, queue, running, tmp_path, case):
    target = tmp_path / "elsewhere.sh"
    target.write_text("echo elsewhere\n")
    running()
    name = "drop.sh"
    if case == "symlink":
        os.symlink(target, home.jobs / name)
        reason = "refused: it is a symbolic link"
    elif case == "fifo":
        os.mkfifo(home.jobs / name)
        reason = "refused: it is not a regular file"
    elif case == "not yours":
        if os.getuid() != 0:
            pytest.skip("only root can give a file to another user")
        outside = tmp_path / name
        outside.write_text("echo theirs\n")
        os.chown(outside, 65534, 65534)
        os.rename(outside, home.jobs / name)
        reason = "refused: not owned by you"
    else:
        os.chmod(home.jobs, 0o777)
        drop(home, name)
        reason = "refused: the jobs folder is writable by other users"
    (job,) = wait_for(lambda: queue.jobs(), what="the refused job")
    assert (job.state, job.name) == (State.FAILED, "drop")
    assert job.last_error.startswith(reason)
    assert not os.path.lexists(home.jobs / name), "a refused drop must leave the inbox"
    assert target.read_text() == "echo elsewhere\n"
    if case in ("symlink", "fifo"):  # its queued mark is no second name of what it is
        marker = Path(job.script).parent / spool.QUEUED
        wait_for(lambda: os.path.lexists(marker), what="the queued mark")
        info = os.lstat(marker)
        assert stat.S_ISREG(info.st_mode) and info.st_size == 0
        assert info.st_ino != os.lstat(job.script).st_ino


def test_an_error_in_the_handler_does_not_kill_the_watcher(home, queue, running, monkeypatch):
    inbox = running()
    real_take, calls = inbox.inbox._take, []

    def flaky(paths: list[str]) -> None:
        calls.append(paths)
        if len(calls) == 1:
            raise RuntimeError("boom")
        real_take(paths)

    monkeypatch.setattr(inbox.inbox, "_take", flaky)
    drop(home, "first.sh")
    wait_for(lambda: calls, what="the first take")
    drop(home, "second.sh")
    (job,) = wait_for(lambda: queue.jobs(), what="the second job")
    assert job.name == "second"


def test_reconcile_pushes_a_spooled_file_without_a_job_and_fails_a_job_without_its_file(
        home, queue):
    orphan = home.spool / "0123456789ab"
    orphan.mkdir()
    (orphan / "left.sh").write_text("echo left\n")
    empty = home.spool / "ba9876543210"
    empty.mkdir()
    vanished = queue.push("vanished", script=str(home.spool / "aaaaaaaaaaaa" / "gone.sh"))
    spool.reconcile(home, queue)
    assert queue.get("0123456789ab").name == "left"
    assert not empty.exists()
    gone = queue.get(vanished)
    assert gone.state == State.FAILED and "its script is gone from the spool" in gone.last_error
    spool.reconcile(home, queue)  # twice changes nothing
    assert len(queue.jobs()) == 2


def test_ignored_names():
    assert ignored(".x.sh") and ignored("a~") and ignored("b.SWP") and ignored("c.crdownload")
    assert not ignored("tidy.sh") and not ignored("part.sh")



def test_reconcile_finishes_a_move_cut_short_between_link_and_unlink(home, queue):
    original = home.jobs / "half.sh"
    original.write_text("echo half\n")
    folder = home.spool / "0a0a0a0a0a0a"
    folder.mkdir()
    os.link(original, folder / "half.sh")  # the crash came before the unlink
    spool.reconcile(home, queue)
    assert not original.exists(), "left in the inbox, it would become a second job"
    assert [job.name for job in queue.jobs()] == ["half"]


def test_a_jobs_folder_reached_through_a_symlink_takes_drops(tmp_path):
    real = tmp_path / "real-jobs"
    real.mkdir(mode=0o700)
    (tmp_path / "jobs-link").symlink_to(real)
    home = locate(tmp_path / "home", tmp_path / "jobs-link").ensure()
    queue = Queue(home.db)
    running = Running(home, queue)
    try:
        (real / "via-link.sh").write_text("echo hi\n")
        (job,) = wait_for(lambda: queue.jobs(), timeout=10, what="the drop to be taken")
        assert job.name == "via-link" and list(real.iterdir()) == []
    finally:
        running.stop()
        queue.close()


SWAPS = 100


def test_links_renamed_over_drops_as_a_daemon_takes_them_never_run_their_target(
        home, tmp_path, pids):
    """A real daemon takes drops while another program renames a link over each one
    a moment after it lands: whichever the daemon saw, the link's target never runs."""
    marker = tmp_path / "target-ran"
    target = tmp_path / "target.sh"
    target.write_text(f"#!/bin/sh\necho ran >> {marker}\n")
    start_daemon(pids, home)
    queue = Queue(home.db)
    jitter = random.Random(SWAPS)  # seeded: a failure replays with the same moments
    try:
        for number in range(SWAPS):
            name = home.jobs / f"drop{number}.sh"
            draft, link = tmp_path / name.name, home.jobs / f".link{number}"
            draft.write_text("#!/bin/sh\necho dropped\n")
            link.symlink_to(target)
            os.rename(draft, name)
            moment = time.perf_counter() + jitter.uniform(0, 0.003)
            while time.perf_counter() < moment:  # the scenario: the swap lands at a random
                pass  # moment of the take (a spin: sleep cannot aim within a millisecond)
            os.rename(link, name)
            wait_for(lambda name=name: not os.path.lexists(name), timeout=10,
                     what=f"{name.name} to be taken")
        wait_for(lambda: all((folder / spool.QUEUED).exists() for folder in home.spool.iterdir())
                 and not queue.jobs(State.PENDING) and not queue.jobs(State.RUNNING),
                 timeout=30, what="every drop to be queued and every job to end")
        jobs = queue.jobs(limit=None)
    finally:
        queue.close()
    assert not marker.exists(), f"the link's target ran {len(marker.read_text().split())} times"
    for job in jobs:
        if job.state == State.FAILED:
            assert job.reason == Reason.REFUSED, (job.name, job.last_error)
            assert job.last_error.startswith("refused: it is a symbolic link"), job.last_error
        else:
            assert (job.state, job.result) == (State.DONE, "dropped"), job
