"""The daemon as a user runs it: a real `sloth-tray run` process, killed, stopped, quit."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.processes import add_script as add
from helpers.processes import alive, start_daemon, to_other_thread, wait_for

from sloth_tray import instance
from sloth_tray.store.queue import Queue, State

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")


def job(home, job_id: str):
    with Queue(home.db) as queue:
        return queue.get(job_id), [e.kind for e in queue.history(job_id)]


def test_kill_9_mid_job_then_restart_reruns_it_and_kills_the_orphan(home, tmp_path, pids):
    marks = tmp_path / "marks"
    job_id = add(home, "work.sh", f"""echo "$SLOTH_ATTEMPT $$" >> {marks}
if [ "$SLOTH_ATTEMPT" = 1 ]; then sleep 300; fi
echo finished
""")
    first = start_daemon(pids, home, "--lease", "60")
    wait_for(lambda: marks.exists() and marks.read_text(), what="the first attempt")
    wait_for(lambda: "started" in job(home, job_id)[1], what="the attempt to be recorded")
    orphan = pids.add(int(marks.read_text().split()[1]))
    first.kill()
    first.wait(timeout=10)
    assert alive(orphan), "the child should outlive a kill -9 of the daemon (own session)"

    # The lease has 60 s left, yet the restarted daemon must not wait for it.
    start_daemon(pids, home, "--lease", "60")
    wait_for(lambda: job(home, job_id)[0].state == State.DONE, what="the job to be rerun")
    done, kinds = job(home, job_id)
    assert done.attempts == 2
    assert kinds == ["pushed", "claimed", "started", "reclaimed", "claimed", "started",
                     "completed"]
    assert not alive(orphan), "the orphan of the first attempt must be killed"


@pytest.mark.short_lease
def test_sigstop_past_the_lease_then_sigcont_finishes_once_without_reclaim(home, tmp_path, pids):
    effects, go = tmp_path / "effects", tmp_path / "go"
    job_id = add(home, "once.sh", f"""echo "side effect $SLOTH_ATTEMPT $$" >> {effects}
while [ ! -e {go} ]; do sleep 0.05; done
echo finished
""")
    daemon = start_daemon(pids, home, "--lease", "1")
    wait_for(lambda: effects.exists() and effects.read_text(), what="the job to start")
    child = pids.add(int(effects.read_text().split()[-1]))
    os.kill(daemon.pid, signal.SIGSTOP)
    os.killpg(child, signal.SIGSTOP)
    try:
        time.sleep(2.5)  # the scenario itself: the lease (1 s) runs out while all are frozen
    finally:
        os.killpg(child, signal.SIGCONT)
        os.kill(daemon.pid, signal.SIGCONT)
    wait_for(lambda: "renewed" in job(home, job_id)[1],
             what=f"the lapsed lease to be renewed {job(home, job_id)}")
    go.touch()
    wait_for(lambda: job(home, job_id)[0].state == State.DONE, what="the job to finish")
    done, kinds = job(home, job_id)
    assert effects.read_text().count("side effect") == 1
    assert "reclaimed" not in kinds and done.attempts == 1


def test_a_second_daemon_is_refused_and_work_too(home, pids):
    first = start_daemon(pids, home)
    for command in (["run", "--headless"], ["work", "--once"]):
        second = subprocess.run([sys.executable, "-m", "sloth_tray", *command,
                                 "--home", str(home.root)],
                                capture_output=True, text=True, timeout=30)
        assert second.returncode == 1
        assert second.stderr == f"sloth-tray: sloth-tray is already running (pid {first.pid})\n"


def test_quit_mid_job_releases_it_pending_with_attempts_unchanged(home, tmp_path, pids):
    started = tmp_path / "started"
    job_id = add(home, "long.sh", f"echo $$ > {started}; sleep 300")
    daemon = start_daemon(pids, home)
    child = pids.add(int(wait_for(lambda: started.exists() and started.read_text().strip(),
                                  what="the job to start")))
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=20) == 0
    released, kinds = job(home, job_id)
    assert (released.state, released.attempts) == (State.PENDING, 0)
    assert kinds[-1] == "released"
    assert not alive(child)
    assert "Traceback" not in daemon.stderr.read()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_stops_it_whichever_thread_receives_it(home, tmp_path, pids, sig):
    started = tmp_path / "started"
    job_id = add(home, "long.sh", f"echo $$ > {started}; sleep 300")
    daemon = start_daemon(pids, home)
    child = pids.add(int(wait_for(lambda: started.exists() and started.read_text().strip(),
                                  what="the job to start")))
    to_other_thread(daemon.pid, sig)
    assert daemon.wait(timeout=20) == (130 if sig == signal.SIGINT else 0)  # Ctrl-C: 128 + 2
    released, kinds = job(home, job_id)
    assert (released.state, kinds[-1]) == (State.PENDING, "released")
    assert not alive(child)


def test_bad_scripts_fail_with_a_sentence_and_the_next_job_still_runs(home, pids):
    bad = {
        add(home, "report.xyz", "stuff"): "don't know how to run report.xyz",
        add(home, "noshebang", "echo hi"): "add a #! line",
        add(home, "garbage.dat", "\x00\x7fELF\x01\x02"): "don't know how to run garbage.dat",
        add(home, "py9.sh", "#!/usr/bin/python9\n"): "/usr/bin/python9 was not found",
    }
    good = add(home, "fine.sh", "echo all good")
    daemon = start_daemon(pids, home)
    wait_for(lambda: job(home, good)[0].state == State.DONE, what="the good job to run")
    for job_id, sentence in bad.items():
        failed, _ = job(home, job_id)
        assert failed.state == State.FAILED and sentence in failed.last_error
    assert daemon.poll() is None


def test_the_cli_doorbell_wakes_an_idle_daemon_at_once(home, pids):
    daemon = start_daemon(pids, home)
    ran = home.root.parent / "ran"
    job_id = add(home, "hello.sh", f"touch {ran}")
    wait_for(lambda: job(home, job_id)[0].state == State.DONE, timeout=5,
             what="the job to run after the doorbell")
    assert ran.exists() and daemon.poll() is None


def test_a_delayed_job_starts_when_due_and_not_before(home, tmp_path, pids):
    start_daemon(pids, home)
    ran = tmp_path / "ran"
    job_id = add(home, "later.sh", f"date +%s.%N > {ran}", "--delay", "1.5")
    pushed_at = job(home, job_id)[0].created_at
    started = wait_for(lambda: ran.exists() and ran.read_text().strip(), timeout=10,
                       what="the delayed job to run")
    assert float(started) >= pushed_at + 1.5


def test_the_daemon_refuses_to_start_on_a_damaged_database(home):
    damaged = b"SQLite format 3\x00" + b"\xff" * 4000
    home.db.write_bytes(damaged)
    done = subprocess.run([sys.executable, "-m", "sloth_tray", "run", "--headless",
                           "--home", str(home.root)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert done.stderr.startswith("sloth-tray: ") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr
    assert home.db.read_bytes() == damaged


@pytest.mark.slow
def test_a_burst_of_drops_survives_kill_9_at_any_moment_exactly_once(home, pids):
    """Drop files while the daemon is killed at random moments; after a last
    restart every file is exactly one job and none is left in the inbox."""
    rng = random.Random(20261130)
    dropped: list[str] = []
    kills_mid_burst = 0
    for trial in range(20):
        daemon = start_daemon(pids, home)
        killer = threading.Timer(rng.uniform(0.0, 0.08), daemon.kill)
        killer.start()
        for i in range(8):
            with open(home.jobs / f"t{trial:02}-{i}.sh", "w") as file:
                file.write("exit 0\n")
            dropped.append(f"t{trial:02}-{i}")
            time.sleep(0.005)  # the scenario: drops spread over the window of the kill
        killer.join()
        daemon.wait(timeout=10)
        kills_mid_burst += any(home.jobs.iterdir())  # killed before it took them all
    every_drop_is_one_job(pids, home, dropped, kills=20, mid_burst=kills_mid_burst)
    assert not list(home.spool.glob("*/*.partial"))


def every_drop_is_one_job(pids, home, dropped: list[str], *, kills: int,
                          mid_burst: int) -> list[str]:
    """After a last start: each dropped file is one job, its script in place; the
    scripts."""
    start_daemon(pids, home)
    wait_for(lambda: not any(home.jobs.iterdir()), timeout=30, what="the inbox to empty")
    with Queue(home.db) as queue:
        wait_for(lambda: len(queue.jobs(limit=None)) >= len(dropped), what="every job")
        names = sorted(job.name for job in queue.jobs(limit=None))
        scripts = [job.script for job in queue.jobs(limit=None)]
    print(f"{len(dropped)} files, {kills} kills ({mid_burst} mid-burst), {len(names)} jobs")
    assert mid_burst >= 3, f"only {mid_burst} of {kills} kills landed mid-burst"
    assert names == sorted(dropped), "a drop was lost or doubled"
    assert all(os.path.isfile(script) for script in scripts)
    return scripts


@pytest.mark.slow
def test_a_burst_renamed_in_at_once_survives_kill_9_mid_commit_exactly_once(home, pids):
    """Files renamed in together are pushed a batch to a commit; the daemon is killed at
    random moments of that. After a last restart every file is exactly one job."""
    rng = random.Random(20261202)
    dropped: list[str] = []
    kills_mid_burst = 0
    for trial in range(12):
        daemon = start_daemon(pids, home)
        probe = f"probe{trial:02}"
        (home.jobs / f"{probe}.sh").write_text("exit 0\n")
        dropped.append(probe)
        with Queue(home.db) as queue:  # the inbox watches: the burst is renamed in
            wait_for(lambda probe=probe: any(job.name == probe
                                             for job in queue.jobs(limit=None)),
                     what="the probe's job")
        drafts = []
        for i in range(24):
            draft = home.jobs / f".t{trial:02}-{i}.draft"
            draft.write_text("exit 0\n")
            drafts.append(draft)
        killer = threading.Timer(rng.uniform(0.0, 0.04), daemon.kill)
        killer.start()
        for i, draft in enumerate(drafts):
            os.rename(draft, home.jobs / f"t{trial:02}-{i}.sh")
            dropped.append(f"t{trial:02}-{i}")
        killer.join()
        daemon.wait(timeout=10)
        unmarked = [f for f in home.spool.iterdir() if not (f / ".queued").exists()]
        kills_mid_burst += bool(unmarked) or any(
            not name.name.startswith(".") for name in home.jobs.iterdir())
    scripts = every_drop_is_one_job(pids, home, dropped, kills=12, mid_burst=kills_mid_burst)
    assert all((Path(script).parent / ".queued").exists() for script in scripts)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_the_moment_it_holds_its_lock_stops_it_cleanly(home, pids, sig):
    """`status` says the app runs from the moment it holds its lock; a stop sent then,
    while it is still starting (recovery, the folders' watches), is a clean stop too."""
    for _ in range(3):
        daemon = pids.popen([sys.executable, "-m", "sloth_tray", "run", "--headless",
                             "--home", str(home.root)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda daemon=daemon: (instance.pid_in(home.lock) == daemon.pid
                                        or daemon.poll() is not None),
                 what="the daemon to take its lock", every=0.0005)
        daemon.send_signal(sig)
        assert daemon.wait(timeout=20) == (130 if sig == signal.SIGINT else 0)
        assert "Traceback" not in daemon.stderr.read()
        assert instance.pid_in(home.lock) is None


def test_job_after_job_from_idle_leaves_no_file_descriptor_open(home, pids):
    """Each job that starts an idle lane gets a worker with an alarm of its own (a
    timer and a pipe): a day of drops an hour apart must not pile those up until the
    app can open nothing more."""
    daemon = start_daemon(pids, home)

    def open_files() -> int:
        return len(os.listdir(f"/proc/{daemon.pid}/fd"))

    def run_one(number: int) -> None:
        draft = home.jobs / f".job-{number}"
        draft.write_text("#!/bin/sh\ntrue\n")
        draft.rename(home.jobs / f"job-{number}.sh")  # taken at once, as a drop is
        with Queue(home.db) as queue:
            wait_for(lambda: queue.status()["done"] == number, timeout=10,
                     what=f"job {number} to be done")

    run_one(1)
    after_first = open_files()  # its worker's files may still be open: never fewer
    for number in range(2, 8):
        run_one(number)
    wait_for(lambda: open_files() <= after_first, timeout=10,
             what=f"the files open after one job ({after_first}), not "
                  f"{open_files()} after seven")
