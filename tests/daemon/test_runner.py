"""One claimed job, run for real: child processes, logs, heartbeats, timeouts."""

from __future__ import annotations

import os
import resource
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.processes import alive, state, wait_for

from sloth_tray.daemon import capture, procs
from sloth_tray.daemon import runner as runner_module
from sloth_tray.daemon.capture import LastLine
from sloth_tray.daemon.engine import Engine
from sloth_tray.daemon.outcome import Effect, record
from sloth_tray.daemon.runner import Runner
from sloth_tray.errors import DatabaseProblem
from sloth_tray.store.queue import Queue, Reason, State

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")


def script(home, name: str, text: str, mode: int = 0o600) -> Path:
    path = home.spool / name
    path.write_text(text)
    path.chmod(mode)
    return path


def run_and_record(runner: Runner, job):
    """What the engine does with one job: run it, then record how it ended."""
    return record(runner.queue, runner.owner, job, runner.run(job))


def run_in_thread(runner: Runner, job) -> tuple[threading.Thread, list]:
    """run_and_record on a thread of its own, started: the thread, and the list its one
    Recorded lands in."""
    results: list = []
    thread = threading.Thread(target=lambda: results.append(run_and_record(runner, job)))
    thread.start()
    return thread, results


def start(queue: Queue, path: Path, owner: str = "me", **push):
    job_id = queue.push(path.stem, script=str(path), **push)
    job = queue.claim(owner)
    assert job.id == job_id
    return job


def test_exit_0_completes_with_the_last_stdout_line_and_logs_both_streams(home):
    queue = Queue(home.db)
    path = script(home, "tidy.sh", 'echo "moving"\necho oops >&2\necho "tidy: moved 4 files"\n'
                                   'echo\n')
    job = start(queue, path)
    result = run_and_record(Runner(queue, home, "me"), job)
    assert (result.effect, result.detail) == (Effect.DONE, "tidy: moved 4 files")
    assert queue.get(job.id).result == "tidy: moved 4 files"
    log = (home.logs / f"tidy-{job.id}" / "1.log").read_text()  # found by the job's name
    assert "moving" in log and "oops" in log
    assert [e.kind for e in queue.history(job.id)] == ["pushed", "claimed", "started", "completed"]


def test_the_child_gets_its_environment_home_dir_and_no_stdin(home, tmp_path):
    queue = Queue(home.db)
    out = tmp_path / "env.txt"
    path = script(home, "env.py", "import os, sys\n"
                  f"open({str(out)!r}, 'w').write(repr((os.environ['SLOTH_JOB_ID'], "
                  "os.environ['SLOTH_JOB_NAME'], os.environ['SLOTH_ATTEMPT'], "
                  "os.environ['SLOTH_HOME'], os.getcwd(), sys.stdin.read(), "
                  "os.getpgid(0) == os.getpid())))\n")
    job = start(queue, path)
    assert run_and_record(Runner(queue, home, "me"), job).effect == Effect.DONE
    assert eval(out.read_text()) == (job.id, "env", "1", str(home.root), str(Path.home()), "",
                                     True)


def test_a_failure_names_its_exit_status_then_the_last_stderr_line_else_stdout(home):
    queue = Queue(home.db)
    runner = Runner(queue, home, "me")
    cases = {
        "err.sh": ('echo out; echo "disk check: 82% full" >&2; exit 3',
                   "exit status 3: disk check: 82% full"),
        "out.sh": ("echo 'only stdout'; exit 2", "exit status 2: only stdout"),
        "silent.sh": ("exit 7", "exit status 7"),
        "killed.sh": ("kill -9 $$", "killed by SIGKILL"),
        "said.sh": ("echo 'going down' >&2; kill -TERM $$", "killed by SIGTERM: going down"),
    }
    for name, (text, error) in cases.items():
        job = start(queue, script(home, name, text))
        result = run_and_record(runner, job)
        assert (result.effect, result.detail) == (Effect.RETRYING, error), name
        assert queue.get(job.id).last_error == error


@pytest.mark.parametrize("name, text, error", [
    ("report.xyz", "whatever", "don't know how to run report.xyz: add a #! line or name it "
                               ".py or .sh"),
    ("noshebang", "echo hi", "don't know how to run noshebang: add a #! line"),
    ("garbage.bin", "\x00\x01\x02\xff" * 10, "don't know how to run garbage.bin"),
    ("missing.sh", "#!/usr/bin/no-such-interpreter\necho hi",
     "/usr/bin/no-such-interpreter was not found"),
])
def test_unrunnable_scripts_fail_at_once_with_a_sentence(home, name, text, error):
    queue = Queue(home.db)
    job = start(queue, script(home, name, text))
    result = run_and_record(Runner(queue, home, "me"), job)
    assert result.effect == Effect.FAILED  # for good: retrying cannot help
    assert error in result.detail
    assert queue.get(job.id).state == State.FAILED


@pytest.mark.short_lease
def test_a_lost_lease_kills_the_child_at_once(home, tmp_path, pids):
    # Beats a second apart: A's lease lapses (and A notes its renewal, maybe after B's
    # claim) only if A's thread is held up for two seconds.
    queue = Queue(home.db, lease_seconds=3.0)
    pidfile = tmp_path / "pid"
    path = script(home, "hang.sh", f"echo $$ > {pidfile}; sleep 300; echo 'side effect'")
    job = start(queue, path, owner="A")
    runner = Runner(queue, home, "A")
    thread, results = run_in_thread(runner, job)
    child = pids.add(int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(),
                                  what="the child to start")))
    # Another worker whose clock says A's lease ran out long ago takes the job over. (A
    # clock only a lease ahead loses to a beat of A's that commits after B read it.)
    later = Queue(home.db, clock=lambda: time.time() + 600, lease_seconds=600)
    assert later.claim("B").lease_owner == "B"
    thread.join(timeout=10)
    assert results and results[0].effect == Effect.LOST
    assert results[0].detail == "another worker holds it now (B)"
    wait_for(lambda: not alive(child), timeout=2, what="the child to die")
    kinds = [e.kind for e in queue.history(job.id)]
    assert kinds[-2:] == ["reclaimed", "claimed"], "A must record nothing after losing"
    assert queue.get(job.id).lease_owner == "B"


def test_a_cancelled_running_job_is_stopped_at_the_next_nudge(home, tmp_path, pids):
    queue = Queue(home.db, lease_seconds=600)  # heartbeats far apart: the nudge must do it
    pidfile = tmp_path / "pid"
    job = start(queue, script(home, "hang.sh", f"echo $$ > {pidfile}; sleep 300"))
    runner = Runner(queue, home, "me")
    thread, results = run_in_thread(runner, job)
    child = pids.add(int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip())))
    assert queue.cancel(job.id)
    runner.nudge()
    thread.join(timeout=10)
    assert results[0].effect == Effect.LOST
    assert results[0].detail == "it was cancelled while it ran"
    wait_for(lambda: not alive(child), timeout=2, what="the child to die")
    assert queue.get(job.id).state == State.CANCELLED


def test_a_cancel_and_its_nudge_just_after_the_start_is_written_stop_the_job(home, tmp_path,
                                                                              pids):
    """The cancel, and the nudge that says so, land between the runner's owner-checked
    `started` (which found the job still ours) and its first wait: the nudge is still
    taken as news, not as one seen already."""
    queue = Queue(home.db, lease_seconds=600)  # heartbeats far apart: the nudge must do it
    pidfile = tmp_path / "pid"
    job = start(queue, script(home, "hang.sh", f"echo $$ > {pidfile}; sleep 300"))
    runner = Runner(queue, home, "me")
    written = queue.started

    def started_then_cancelled(job_id, owner, child):
        ours = written(job_id, owner, child)
        if "pid" in child:  # the child runs: the cancel comes right now
            pids.add(child["pid"])
            assert queue.cancel(job_id)
            runner.nudge()
        return ours

    queue.started = started_then_cancelled
    thread, results = run_in_thread(runner, job)
    thread.join(timeout=10)
    assert results and results[0].effect == Effect.LOST
    assert results[0].detail == "it was cancelled while it ran"
    assert queue.get(job.id).state == State.CANCELLED


def test_a_timeout_kills_a_child_that_ignores_sigterm_and_its_grandchild(home, tmp_path, pids):
    queue = Queue(home.db)
    child_pid, grandchild_pid = tmp_path / "child", tmp_path / "grandchild"
    path = script(home, "stubborn.sh", f"""trap '' TERM
sleep 300 &
echo $! > {grandchild_pid}
echo $$ > {child_pid}
while true; do wait; done
""")
    job = start(queue, path, options={"timeout": 1.0})
    started = time.monotonic()
    result = run_and_record(Runner(queue, home, "me", grace=0.5), job)
    for pidfile in (child_pid, grandchild_pid):
        pids.add(int(pidfile.read_text()))
    assert (result.effect, result.detail) == (Effect.RETRYING, "timed out after 1s")
    assert time.monotonic() - started < 10
    assert not alive(int(child_pid.read_text()))
    wait_for(lambda: not alive(int(grandchild_pid.read_text())), timeout=2,
             what="the grandchild to die")


def sweeps(monkeypatch) -> list:
    """The `since` of each stray sweep the runner makes (the sweep itself still runs)."""
    seen: list = []
    sweep = procs.kill_strays

    def recorded(token, since=None):
        seen.append(since)
        return sweep(token, since=since)

    monkeypatch.setattr(procs, "kill_strays", recorded)
    return seen


@pytest.mark.parametrize("few", [0, 10**6], ids=["listed", "looked-up-by-pid"])
def test_a_fork_that_outlives_its_parent_is_stopped_when_the_job_ends(
        home, tmp_path, pids, monkeypatch, few):
    """A short run's sweep reads the pids handed out since its spawn: few, so each is
    opened by its number (past FEW_PIDS, /proc is listed). Either way the setsid stray
    goes."""
    monkeypatch.setattr(procs, "FEW_PIDS", few)
    seen = sweeps(monkeypatch)
    queue = Queue(home.db)
    stray = tmp_path / "stray"
    path = script(home, "fork.sh", f"(setsid sleep 300 & echo $! > {stray}) ; echo parent done")
    job = start(queue, path)
    result = run_and_record(Runner(queue, home, "me"), job)
    pids.add(int(stray.read_text()))
    assert (result.effect, result.detail) == (Effect.DONE, "parent done")
    assert seen == [queue.get(job.id).child["pid"]]  # a short run: the pids since its own
    wait_for(lambda: not alive(int(stray.read_text())), timeout=2, what="the stray to die")


@pytest.mark.skipif(not procs.FINDS_RUNS_BY_ENVIRONMENT, reason="finds runs in /proc")
def test_a_stray_swept_while_it_is_still_starting_its_program_is_stopped(pids):
    """A stray forked just before its run ends may still be inside its exec when the
    sweep reads its environment, which then reads empty for a moment (about one sweep
    in ten here, right after the fork). It carries the token all the same: each one of
    a hundred goes."""
    token = "t" * 32
    env = {**os.environ, procs.RUN_TOKEN_ENV: token}
    for _ in range(100):
        run = subprocess.Popen(["sh", "-c", "setsid sleep 300 & echo $! >&2"],
                               stderr=subprocess.PIPE, env=env)
        pids.add(run.pid)
        stray = int(run.stderr.readline())
        pids.add(stray)
        procs.kill_strays(token, since=run.pid)
        run.wait()
        run.stderr.close()
        wait_for(lambda stray=stray: not alive(stray), timeout=5, what="the stray to die")


def test_a_long_runs_stray_is_found_among_every_process(home, tmp_path, pids, monkeypatch):
    """Past SHORT_RUN the pids may have wrapped around: every process is looked at."""
    seen = sweeps(monkeypatch)
    queue = Queue(home.db)
    stray = tmp_path / "stray"
    path = script(home, "fork.sh", f"(setsid sleep 300 & echo $! > {stray}) ; echo parent done")
    job = start(queue, path)
    ticks = iter(range(0, 10**6, 100))  # a monotonic clock on which every look is later
    result = run_and_record(Runner(queue, home, "me", monotonic=lambda: float(next(ticks))),
                            job)
    pids.add(int(stray.read_text()))
    assert result.effect == Effect.DONE
    assert seen == [None]  # every process
    wait_for(lambda: not alive(int(stray.read_text())), timeout=2, what="the stray to die")


@pytest.mark.parametrize(("pid", "first", "last", "since"), [
    (500, 400, 600, True), (399, 400, 600, False), (601, 400, 600, False),
    (32000, 31000, 200, True), (100, 31000, 200, True),  # wrapped at pid_max
    (5000, 31000, 200, False), (400, 400, 400, True),
])
def test_the_pids_handed_out_since_a_spawn_wrap_at_pid_max(pid, first, last, since):
    assert procs.handed_out_since(pid, first, last) is since


def output_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "output"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pidfd watcher is Linux's")
def test_closing_the_output_watcher_after_its_thread_ended_writes_to_no_file():
    """close() rings the watcher's thread through an eventfd that the thread closes as
    it ends; the thread may end just then (its last run's pipes closing), before the
    ring. Here it has ended for sure: the ring must not reach whatever file has since
    taken that number."""
    watcher = capture.OutputWatcher()
    number = watcher._wake
    read_end, write_end = os.pipe()  # made while the watcher holds that number: not it
    os.set_blocking(read_end, False)
    watcher.close()
    wait_for(lambda: not watcher.alive(), what="the watcher's thread to end")
    os.dup2(write_end, number)  # another file now has that number
    try:
        watcher.close()
        with pytest.raises(BlockingIOError):
            os.read(read_end, 8)  # nothing was written to it
    finally:
        for fd in (read_end, write_end, number):
            os.close(fd)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pidfd watcher is Linux's")
def test_a_runners_runs_share_one_output_thread_that_a_pipe_held_open_never_holds_up(
        home, tmp_path, pids):
    """A stray that escaped the run's token (its environment cleared) keeps the first
    run's pipes open: that run ends after the grace, and the next run's output is
    still caught whole, at once, by the same thread, which ends once closed and the
    pipes it still reads are."""
    queue = Queue(home.db)
    before = set(output_threads())
    stray = tmp_path / "stray"
    runner = Runner(queue, home, "me", grace=0.5)
    holding = start(queue, script(home, "holding.sh", "echo first\n"
                                  f"setsid env -i /bin/sleep 300 & echo $! > {stray}\n"
                                  # until it has left the token behind (its exec)
                                  'while [ "$(cat /proc/$!/comm)" != sleep ]; do :; done\n'))
    try:
        assert run_and_record(runner, holding).effect == Effect.DONE
        pids.add(int(stray.read_text()))
        watchers = set(output_threads()) - before
        assert len(watchers) == 1, watchers
        for i in range(3):
            job = start(queue, script(home, f"next{i}.sh", f"echo second {i}\necho err >&2\n"))
            began = time.monotonic()
            assert run_and_record(runner, job).effect == Effect.DONE
            assert time.monotonic() - began < 2 * runner.grace, "held up by the first's pipe"
            assert queue.get(job.id).result == f"second {i}"
            assert (home.job_logs(job.id) / "1.log").read_text() == f"second {i}\nerr\n"
        assert set(output_threads()) - before == watchers, "one thread for every run"
        assert alive(int(stray.read_text()))
        runner.close()
        (watcher,) = watchers
        assert watcher.is_alive(), "it still reads the pipe the stray holds"
        os.kill(int(stray.read_text()), signal.SIGKILL)
        watcher.join(10)
        assert not watcher.is_alive(), "closed, it ends once the last pipe closes"
    finally:
        runner.close()
        queue.close()


def test_200_mb_of_output_is_capped_and_memory_stays_flat(home):
    queue = Queue(home.db)
    path = script(home, "noisy.py", "import sys\nchunk = b'x' * 1023 + b'\\n'\n"
                  "for _ in range(200 * 1024):\n    sys.stdout.buffer.write(chunk)\n"
                  "print('the end')\n")
    job = start(queue, path)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = run_and_record(Runner(queue, home, "me", log_cap=1024 * 1024), job)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert (result.effect, result.detail) == (Effect.DONE, "the end")
    log = home.job_logs(job.id) / "1.log"
    assert 1024 * 1024 < log.stat().st_size < 1024 * 1024 + 200
    total = 200 * 1024 * 1024 + len(b"the end\n")
    assert log.read_bytes().endswith(f"was dropped: {total - 1024 * 1024} bytes]\n".encode())
    assert grown_kib < 20 * 1024, f"the runner's memory grew by {grown_kib} KiB"


def test_a_wall_clock_jump_is_recorded_as_sleep_and_the_lease_renewed(home, tmp_path, clock):
    queue = Queue(home.db, clock=clock, lease_seconds=1.0)
    go, started = tmp_path / "go", tmp_path / "started"
    path = script(home, "nap.sh", f"touch {started}; while [ ! -e {go} ]; do sleep 0.05; done;"
                                  "echo finished")
    job = start(queue, path)
    runner = Runner(queue, home, "me")
    thread, results = run_in_thread(runner, job)
    try:
        wait_for(started.exists, what="the job to start")
        clock.advance(7200)  # the lid was closed for two hours: wall time moved, monotonic not
        wait_for(lambda: "slept" in [e.kind for e in queue.history(job.id)],
                 what="the sleep to be noticed")
    finally:
        go.touch()
        thread.join(timeout=10)
    assert results[0].effect == Effect.DONE
    history = queue.history(job.id)
    kinds = [e.kind for e in history]
    assert kinds.count("completed") == 1 and "reclaimed" not in kinds
    assert "slept about 2h" in next(e.detail for e in history if e.kind == "slept")


def test_a_stop_request_releases_the_lease_without_counting_the_attempt(home, tmp_path, pids):
    queue = Queue(home.db)
    pidfile = tmp_path / "pid"
    job = start(queue, script(home, "hang.sh", f"echo $$ > {pidfile}; sleep 300"))
    runner = Runner(queue, home, "me", grace=1)
    thread, results = run_in_thread(runner, job)
    child = pids.add(int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip())))
    runner.stop()
    thread.join(timeout=10)
    assert results[0].effect == Effect.RELEASED
    assert not alive(child)
    after = queue.get(job.id)
    assert (after.state, after.attempts) == (State.PENDING, 0)


@pytest.mark.parametrize("chunks, expected", [
    ([b"one\ntwo\n\n  \n"], "two"),
    ([b"par", b"tial line"], "partial line"),
    ([b"progress 10%\rprogress 100%\r"], "progress 100%"),
    ([b"x" * 10_000 + b"\n"], "x" * 200),
    ([b"caf\xc3", b"\xa9\n"], "caf\u00e9"),
    ([], ""),
])
def test_last_line_keeps_only_the_last_non_empty_line(chunks, expected):
    tail = LastLine()
    for chunk in chunks:
        tail.feed(chunk)
    assert tail.text() == expected



def test_the_run_token_is_recorded_before_the_spawn(home, tmp_path, monkeypatch):
    # A daemon killed right after spawning must still leave a way to find the orphan.
    queue = Queue(home.db)
    seen = tmp_path / "seen"
    job = start(queue, script(home, "peek.sh", f"echo $SLOTH_RUN_TOKEN > {seen}"))
    recorded = []
    real_popen = runner_module.subprocess.Popen

    def spy(*args, **kwargs):
        recorded.append(queue.get(job.id).child)
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(runner_module.subprocess, "Popen", spy)
    run_and_record(Runner(queue, home, "me"), job)
    assert recorded and recorded[0] == {"token": seen.read_text().strip()}
    assert queue.get(job.id).child["pid"] > 0


def test_a_frozen_bundles_own_environment_does_not_reach_jobs():
    from sloth_tray.daemon.procs import job_environment

    bundle = "/opt/sloth-tray/_internal"
    env = job_environment({
        "LD_LIBRARY_PATH": bundle, "LD_LIBRARY_PATH_ORIG": "/usr/local/lib",
        "GTK_PATH": bundle + "/gtk", "XDG_DATA_DIRS": f"{bundle}/share:/usr/share",
        "_PYI_APPLICATION_HOME_DIR": bundle, "HOME": "/home/ann", "PATH": "/usr/bin",
    }, bundle)
    assert env == {"LD_LIBRARY_PATH": "/usr/local/lib", "XDG_DATA_DIRS": "/usr/share",
                   "HOME": "/home/ann", "PATH": "/usr/bin"}
    assert job_environment({"PATH": "/usr/bin"}, None) == {"PATH": "/usr/bin"}


def test_the_activation_token_the_app_was_started_with_does_not_reach_jobs():
    """A token is good for one window: the app's own start spent it, and a job that
    opens a window later must not present it."""
    from sloth_tray.daemon.procs import job_environment

    assert job_environment({"PATH": "/usr/bin", "XDG_ACTIVATION_TOKEN": "spent",
                            "DESKTOP_STARTUP_ID": "spent"}, None) == {"PATH": "/usr/bin"}


def test_python_jobs_in_a_frozen_app_use_the_systems_python(monkeypatch, tmp_path):
    from sloth_tray.jobs import header

    system = tmp_path / "python3"  # the python3 on PATH, whatever runs these tests
    system.write_text("#!/bin/sh\n")
    system.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    argv = header.command_for(Path("hello.py"), b"print(1)", windows=False)
    assert argv[0] == str(system)


@pytest.mark.short_lease
def test_a_database_locked_past_the_busy_timeout_loses_neither_the_child_nor_the_outcome(
        home, tmp_path):
    queue = Queue(home.db, busy_timeout=0.05, lease_seconds=1.2)
    go, started = tmp_path / "go", tmp_path / "started"
    path = script(home, "patient.sh", f"touch {started}; "
                  f"while [ ! -e {go} ]; do sleep 0.02; done; echo finished")
    job = queue.push(path.stem, script=str(path))
    runner = Runner(queue, home, "me")
    engine = Engine(queue, home, owner="me", runner=runner)
    results = []
    engine.on_result(lambda job, result: results.append(result))
    thread = threading.Thread(target=lambda: engine.run(drain=True))
    thread.start()
    blocker = sqlite3.connect(home.db, isolation_level=None)
    try:
        wait_for(started.exists, what="the job to start")
        blocker.execute("BEGIN IMMEDIATE")  # heartbeats now fail for a while...
        go.touch()  # ...and the job ends while the database is still locked
        time.sleep(1.5)  # the scenario: the lock outlasts several heartbeats and the exit
        assert thread.is_alive(), "the engine gave up while the database was locked"
        blocker.execute("ROLLBACK")
        engine.wake()
        thread.join(timeout=10)
    finally:
        if blocker.in_transaction:
            blocker.execute("ROLLBACK")
        blocker.close()
    assert results[0].effect == Effect.DONE and results[0].detail == "finished"
    job = queue.get(job)
    assert [e.kind for e in queue.history(job.id)].count("completed") == 1


# -- whatever happens, no child is left running unsupervised ---------------------------


STRAY_SCRIPT = ("setsid sh -c 'echo $$ >> {pids}; exec sleep 300' &\n"
                "echo $$ >> {pids}\n"
                "while [ $(wc -l < {pids}) -lt 2 ]; do sleep 0.01; done\n"
                "{then}\n")


def started_processes(pidfile: Path, pids) -> list[int]:
    wait_for(lambda: pidfile.exists() and len(pidfile.read_text().split()) == 2,
             what="the job and its stray to start")
    return [pids.add(int(pid)) for pid in pidfile.read_text().split()]


class QueueThatFailsToRecordTheChild(Queue):
    """The database gives out right after the spawn, when the child is recorded
    (once the child and its stray are up, so that both can be checked)."""

    pidfile: Path

    def started(self, job_id, owner, child):
        if "pid" in child:
            wait_for(lambda: self.pidfile.exists() and len(self.pidfile.read_text().split()) == 2,
                     what="the job and its stray to start")
            raise DatabaseProblem("the queue is locked by another program")
        return super().started(job_id, owner, child)


def test_a_database_error_after_the_spawn_leaves_no_process_behind(home, tmp_path, pids):
    queue = QueueThatFailsToRecordTheChild(home.db)
    queue.pidfile = pidfile = tmp_path / "pids"
    job = start(queue, script(home, "work.sh", STRAY_SCRIPT.format(pids=pidfile,
                                                                   then="sleep 300")))
    with pytest.raises(DatabaseProblem):
        Runner(queue, home, "me").run(job)
    for pid in started_processes(pidfile, pids):  # SIGKILLed: gone in a moment
        wait_for(lambda pid=pid: not alive(pid), timeout=5, what="the run's processes to end")


class QueueThatCannotNote(Queue):
    def note(self, job_id, kind, detail):
        raise DatabaseProblem("the queue is locked by another program")


@pytest.mark.short_lease
def test_a_nap_that_cannot_be_noted_does_not_cost_the_running_job(home, tmp_path):
    wall = {"offset": 0.0}
    queue = QueueThatCannotNote(home.db, clock=lambda: time.time() + wall["offset"],
                                lease_seconds=1.5)
    go, started = tmp_path / "go", tmp_path / "started"
    job = start(queue, script(home, "nap.sh", f"touch {started}\n"
                              f"while [ ! -e {go} ]; do sleep 0.02; done\necho finished"))
    runner = Runner(queue, home, "me")
    thread, results = run_in_thread(runner, job)
    wait_for(started.exists, what="the job to start")
    wall["offset"] = 600.0  # the wall clock jumps ahead of the monotonic one: a nap
    runner.nudge()
    wait_for(lambda: queue.get(job.id).lease_until > time.time() + 600, timeout=10,
             what="the lease to be renewed after the nap")
    go.touch()
    thread.join(timeout=10)
    assert results[0].effect == Effect.DONE and results[0].detail == "finished"


def test_cancelling_a_running_job_stops_the_strays_that_left_its_group(home, tmp_path, pids):
    queue = Queue(home.db, lease_seconds=600)
    pidfile = tmp_path / "pids"
    job = start(queue, script(home, "hang.sh", STRAY_SCRIPT.format(pids=pidfile,
                                                                   then="sleep 300")))
    runner = Runner(queue, home, "me")
    thread = threading.Thread(target=lambda: run_and_record(runner, job))
    thread.start()
    processes = started_processes(pidfile, pids)
    assert queue.cancel(job.id)
    runner.nudge()
    thread.join(timeout=10)
    for pid in processes:
        wait_for(lambda pid=pid: not alive(pid), timeout=5, what="the stray to be stopped")


def test_a_missing_home_folder_is_said_as_such(home, monkeypatch):
    queue = Queue(home.db)
    job = start(queue, script(home, "hello.sh", "echo hi"))
    monkeypatch.setenv("HOME", str(home.root / "no-such-home"))
    result = run_and_record(Runner(queue, home, "me"), job)
    assert result.effect == Effect.FAILED
    assert "working folder" in result.detail and "does not exist" in result.detail
    assert queue.get(job.id).reason == Reason.COULD_NOT_START


def test_a_script_replaced_by_a_link_in_the_spool_is_refused_and_its_target_never_runs(
        home, tmp_path):
    queue = Queue(home.db)
    marker = tmp_path / "target-ran"
    target = tmp_path / "target.sh"
    target.write_text(f"#!/bin/sh\necho ran > {marker}\n")
    path = script(home, "placed.sh", "#!/bin/sh\necho placed\n")
    job = start(queue, path)
    swap = path.with_name(".swap")
    swap.symlink_to(target)
    swap.rename(path)  # the placed script, swapped for a link after it was queued
    result = run_and_record(Runner(queue, home, "me"), job)
    failed = queue.get(job.id)
    assert not marker.exists(), "the link's target ran"
    assert (result.effect, failed.reason) == (Effect.FAILED, Reason.REFUSED)
    assert failed.last_error == (f"refused: its script {path} is now a symbolic link (to "
                                 f"{target}); sloth-tray will not follow it")
    assert not home.job_logs(job.id).exists(), "nothing was started"


def test_a_job_pushed_without_a_script_fails_with_a_sentence_saying_so(home):
    queue = Queue(home.db)
    queue.push("note_to_self", script=None)  # a program's push: the API allows it
    job = queue.claim("me")
    result = run_and_record(Runner(queue, home, "me"), job)
    failed = queue.get(job.id)
    assert (result.effect, failed.reason) == (Effect.FAILED, "unrunnable")
    assert failed.last_error == "the job has no script to run"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pidfd watcher is Linux's")
def test_a_job_that_ended_as_the_quit_came_is_recorded_done_not_given_back(
        home, tmp_path, monkeypatch):
    """The quit wakes the runner before the watcher has reaped the child: the job has
    run to its end all the same. Given back, it would run a second time at the next
    start."""
    gate = threading.Event()
    ended = capture.OutputWatcher._ended

    def lagging(watcher, watched) -> None:  # the watcher thread, not yet scheduled
        gate.wait(10)
        ended(watcher, watched)

    monkeypatch.setattr(capture.OutputWatcher, "_ended", lagging)
    queue = Queue(home.db)
    pidfile = tmp_path / "pid"
    job = start(queue, script(home, "quick.sh", f"echo $$ > {pidfile}.new; "
                                                f"mv {pidfile}.new {pidfile}"))
    runner = Runner(queue, home, "me")
    thread, results = run_in_thread(runner, job)
    try:
        pid = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(),
                           what="the job to run"))
        wait_for(lambda: not alive(pid), what="the job to end")  # gone, or a zombie
        runner.stop()
    finally:
        gate.set()
        thread.join(10)
    assert results and results[0].effect == Effect.DONE, results
    assert queue.get(job.id).state == State.DONE


def zombie(pid: int) -> bool:
    """Whether `pid` has ended, not yet reaped: for a child only its caller reaps."""
    return state(pid) == "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pidfd watcher is Linux's")
def test_a_job_the_watcher_is_reaping_as_the_quit_comes_is_recorded_done(
        home, tmp_path, monkeypatch):
    """The job has ended and the watcher is reaping it (inside Popen.wait, which holds
    Popen's waitpid lock) as the quit wakes the runner: Popen.poll answers None while
    that lock is held, yet the job has run to its end. Given back, it would run a
    second time at the next start."""
    looked, reaping = threading.Event(), threading.Event()
    runner = None
    real_poll, ended = subprocess.Popen.poll, capture.OutputWatcher._ended

    def poll(child):
        code = real_poll(child)
        if runner is not None and runner._stopping:
            looked.set()
        return code

    def reaping_slowly(watcher, watched) -> None:
        child = watched.child
        wait_for(lambda: zombie(child.pid), what="the job to end")
        with child._waitpid_lock:  # as Popen.wait holds it while it reaps
            reaping.set()
            looked.wait(10)  # until the runner has looked for the end, or given up
        ended(watcher, watched)

    monkeypatch.setattr(subprocess.Popen, "poll", poll)
    monkeypatch.setattr(capture.OutputWatcher, "_ended", reaping_slowly)
    queue = Queue(home.db)
    job = start(queue, script(home, "quick.sh", "true\n"))
    runner = Runner(queue, home, "me")
    thread, results = run_in_thread(runner, job)
    try:
        wait_for(reaping.is_set, what="the watcher to reap the job")
        runner.stop()
    finally:
        thread.join(20)
        looked.set()
    assert results and results[0].effect == Effect.DONE, results
    assert queue.get(job.id).state == State.DONE


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pidfd watcher is Linux's")
def test_a_quit_that_lands_between_the_check_for_the_end_and_the_stop_records_done(
        home, tmp_path, monkeypatch):
    """A wake-up for another reason finds the job still running; the job ends and the
    quit comes before the runner looks at the quit. The job has run to its end: given
    back, it would run a second time at the next start."""
    gate = threading.Event()
    ended = capture.OutputWatcher._ended
    monkeypatch.setattr(capture.OutputWatcher, "_ended",
                        lambda *args: (gate.wait(10), ended(*args)))
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    queue = Queue(home.db)
    job = start(queue, script(home, "quick.sh", f"read line < {fifo}\n"))
    runner = Runner(queue, home, "me")
    real_poll = subprocess.Popen.poll
    armed, quit_sent = threading.Event(), threading.Event()

    def poll_then_quit(child):
        code = real_poll(child)
        if code is None and armed.is_set() and not quit_sent.is_set():
            with open(fifo, "w") as go:  # the job ends now...
                go.write("go\n")
            wait_for(lambda: not alive(child.pid), what="the job to end")  # a zombie, or reaped
            runner.stop()  # ...and the quit comes right after
            quit_sent.set()
        return code

    monkeypatch.setattr(subprocess.Popen, "poll", poll_then_quit)
    thread, results = run_in_thread(runner, job)
    pid = None
    try:
        pid = wait_for(lambda: (queue.get(job.id).child or {}).get("pid"),
                       what="the job to start")
        armed.set()
        runner.nudge()  # the other reason to wake
        wait_for(quit_sent.is_set, what="the runner to look")
    finally:
        gate.set()
        if pid and not quit_sent.is_set():  # it never got that far: the job must not wait on
            os.kill(pid, signal.SIGKILL)
        thread.join(10)
    assert results and results[0].effect == Effect.DONE, results
    assert queue.get(job.id).state == State.DONE


# -- a run's environment: what names it, and the app's tools at the end of PATH ---------


def needs_the_command() -> None:
    from sloth_tray.daemon import jobenv

    if jobenv.own_command_folder() is None:
        pytest.skip("no sloth-tray command installed beside this Python (a source tree)")


def test_a_run_is_named_in_its_environment_and_the_apps_tools_come_last(home, tmp_path,
                                                                        monkeypatch):
    from sloth_tray.daemon import jobenv

    needs_the_command()
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("PYTHONPATH", "/mine")
    monkeypatch.setenv("SLOTH_STEP_KEY", "the app's own, never a job's")
    queue = Queue(home.db)
    out = tmp_path / "env.txt"
    names = ("SLOTH_RUN_TOKEN", "SLOTH_LEASE_OWNER", "SLOTH_QUEUE", "SLOTH_DOORBELL", "PATH",
             "PYTHONPATH")
    job = start(queue, script(home, "env.py", "import os\n"
                              f"open({str(out)!r}, 'w').write(repr([os.environ.get(name) "
                              f"for name in {names!r} + ('SLOTH_STEP_KEY',)]))\n"))
    assert run_and_record(Runner(queue, home, "me"), job).effect == Effect.DONE
    token, owner, db, doorbell, path, pythonpath, key = eval(out.read_text())
    assert token == queue.get(job.id).child["token"] and owner == "me" and key is None
    assert db == str(home.db.absolute()) and doorbell == str(home.doorbell.absolute())
    assert path == f"/usr/bin:/bin:{jobenv.own_command_folder()}"
    assert pythonpath == f"/mine:{jobenv.step_module_folder()}"
    assert (Path(jobenv.own_command_folder()) / "sloth-tray").is_file()
    assert (Path(jobenv.step_module_folder()) / "sloth_step.py").is_file()


def test_with_no_path_at_all_a_job_still_finds_the_systems_programs(home, tmp_path,
                                                                    monkeypatch):
    from sloth_tray.daemon import jobenv

    needs_the_command()
    monkeypatch.delenv("PATH")
    queue = Queue(home.db)
    out = tmp_path / "found"
    job = start(queue, script(home, "bare.sh", f'echo "$PATH" > {out}\n'
                                               f"command -v date >> {out}\n"
                                               f"command -v sloth-tray >> {out}\n"))
    assert run_and_record(Runner(queue, home, "me"), job).effect == Effect.DONE, \
        queue.get(job.id).last_error
    path, date, sloth = out.read_text().splitlines()
    assert path == f"{jobenv.DEFAULT_PATH}:{jobenv.own_command_folder()}"
    assert Path(date).name == "date" and Path(sloth).parent == Path(jobenv.own_command_folder())


def test_a_skipped_steps_note_is_never_a_failed_jobs_error(home):
    from sloth_tray.for_jobs import sloth_step

    queue = Queue(home.db)
    note = "sloth-tray: " + sloth_step.skipped_line("fetch", {"ended_at": 1e9, "run": 1})
    job = start(queue, script(home, "quiet.sh", f"echo replayed\necho '{note}' >&2\nexit 3\n"))
    run_and_record(Runner(queue, home, "me"), job)
    assert queue.get(job.id).last_error == "exit status 3: replayed"
    job = start(queue, script(home, "silent.sh", f"echo '{note}' >&2\nexit 3\n"))
    run_and_record(Runner(queue, home, "me"), job)
    assert queue.get(job.id).last_error == "exit status 3"
    job = start(queue, script(home, "says.sh", f"echo '{note}' >&2\necho 'no disk' >&2\n"
                                               "exit 3\n"))
    run_and_record(Runner(queue, home, "me"), job)
    assert queue.get(job.id).last_error == "exit status 3: no disk"
