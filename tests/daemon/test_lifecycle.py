"""Every command crossed with a restart: prune, cancel, retry and quit, then start again.

Each test drives the real `sloth-tray` command in child processes, as a user's
shell would, and checks what a later start does with what the earlier one left.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys

import pytest
from helpers.processes import add_script as add
from helpers.processes import alive, start_daemon, wait_for
from helpers.processes import run_sloth as sloth

from sloth_tray.store.queue import Queue, State

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")


def drop(home, name: str, text: str) -> None:
    """Into the jobs folder, as a file manager would: written aside, renamed in."""
    aside = home.root.parent / f".{name}"
    aside.write_text(text)
    os.replace(aside, home.jobs / name)


def jobs(home) -> list[dict]:
    return json.loads(sloth(home, "list", "--json", "--limit", "0").stdout)


def restart(pids, home) -> str:
    """A start (reconcile, the jobs folder, every due job) until the queue is
    settled, then a quit; returns what it said on stderr."""
    daemon = start_daemon(pids, home)
    try:
        wait_for(lambda: settled(home), what="the daemon to settle")
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=20) == 0
    return daemon.stderr.read()


def settled(home) -> bool:
    """Nothing is running, nothing is due now, nothing waits in the jobs folder, and no
    drop is half taken (in the spool, not yet queued: it has no `.queued` marker).
    Looked at in the order a drop moves through them, so that none slips between."""
    if any(home.jobs.iterdir()):
        return False
    if any(not folder.name.startswith(".") and not (folder / ".queued").exists()
           for folder in home.spool.iterdir()):
        return False
    status = json.loads(sloth(home, "status", "--json").stdout)
    return not status["running"] and not status["due_now"]


@pytest.mark.slow
def test_prune_then_restart_never_runs_a_finished_job_again(home, tmp_path, pids):
    runs = tmp_path / "runs"
    done = add(home, "once.sh", f"echo ran >> {runs}")
    sloth(home, "work", "--once")
    cancelled = add(home, "never.sh", f"echo never >> {runs}", "--delay", "1h")
    sloth(home, "cancel", cancelled)
    sloth(home, "prune", "--older-than", "0s")
    drop(home, "fresh.sh", f"echo fresh >> {runs}")

    restart(pids, home)
    restart(pids, home)

    assert runs.read_text().splitlines() == ["ran", "fresh"]
    assert [job["name"] for job in jobs(home)] == ["fresh"]
    assert not (home.spool / done).exists() and not (home.spool / cancelled).exists()
    assert not home.job_logs(done).exists()


def test_prune_then_restart_keeps_a_recurring_series_single_and_its_script(home, tmp_path,
                                                                         pids):
    runs = tmp_path / "runs"
    add(home, "tick.sh", f"# sloth: every=1h\necho tick >> {runs}")
    for _ in range(3):
        restart(pids, home)
        sloth(home, "prune", "--older-than", "0s")
    series = [job for job in jobs(home) if job["state"] == "pending"]
    assert len(series) == 1, jobs(home)
    assert os.path.isfile(series[0]["script"]), "the next run's script was pruned with the first"
    assert runs.read_text().splitlines() == ["tick"]


def test_a_prune_cut_short_leaves_folders_that_a_restart_sets_aside_unrun(home, tmp_path,
                                                                         pids):
    runs = tmp_path / "runs"
    job_id = add(home, "once.sh", f"echo ran >> {runs}")
    sloth(home, "work", "--once")
    with Queue(home.db) as queue:  # the rows went, then the process died
        queue.prune(before=queue.clock() + 1)
    assert (home.spool / job_id).is_dir()

    restart(pids, home)

    assert runs.read_text().splitlines() == ["ran"]
    assert jobs(home) == []
    assert (home.root / "recovered" / job_id / "once.sh").is_file()
    assert "none of them was run" in (home.logs / "sloth-tray.log").read_text()


def test_a_drop_that_never_reached_the_queue_is_still_queued_at_the_next_start(home, tmp_path,
                                                                              pids):
    runs = tmp_path / "runs"
    folder = home.spool / "0123456789ab"  # a crash between the move and the push
    folder.mkdir()
    (folder / "late.sh").write_text(f"echo late >> {runs}")
    restart(pids, home)
    assert runs.read_text().splitlines() == ["late"]
    assert [job["state"] for job in jobs(home)] == ["done"]


def test_a_job_cancelled_while_the_daemon_was_dead_has_its_processes_stopped(home, tmp_path,
                                                                              pids):
    pid_file = tmp_path / "pids"
    job_id = add(home, "stubborn.sh",
                 f"setsid sh -c 'echo $$ >> {pid_file}; exec sleep 300' & \n"
                 f"echo $$ >> {pid_file}; sleep 300")
    daemon = start_daemon(pids, home)
    wait_for(lambda: pid_file.exists() and len(pid_file.read_text().split()) == 2,
             what="the job and its stray to start")
    strays = [pids.add(int(pid)) for pid in pid_file.read_text().split()]
    daemon.kill()
    daemon.wait(timeout=10)
    assert sloth(home, "cancel", job_id).stdout.startswith("cancelled")
    assert all(alive(pid) for pid in strays)

    start_daemon(pids, home)

    wait_for(lambda: not any(alive(pid) for pid in strays), timeout=10,
             what="the cancelled job's processes to be stopped at start-up")
    assert jobs(home)[0]["state"] == "cancelled"


def test_sighup_quits_like_sigterm_releasing_the_lease_and_stopping_the_job(home, tmp_path,
                                                                            pids):
    started = tmp_path / "started"
    job_id = add(home, "long.sh", f"echo $$ > {started}; sleep 300")
    daemon = start_daemon(pids, home)
    child = pids.add(int(wait_for(lambda: started.exists() and started.read_text().strip(),
                                  what="the job to start")))
    daemon.send_signal(signal.SIGHUP)
    assert daemon.wait(timeout=20) == 0
    with Queue(home.db) as queue:
        job = queue.get(job_id)
        kinds = [event.kind for event in queue.history(job_id)]
    assert (job.state, job.attempts, kinds[-1]) == (State.PENDING, 0, "released")
    assert not alive(child)


def test_after_a_retry_each_run_writes_a_log_of_its_own(home):
    job_id = add(home, "flaky.sh", "# sloth: max_attempts=1\necho \"run of attempt "
                                   "$SLOTH_ATTEMPT\"; exit 3")
    sloth(home, "work", "--once")
    sloth(home, "retry", job_id)
    sloth(home, "work", "--once")
    logs = sorted(p.name for p in home.job_logs(job_id).iterdir())
    assert logs == ["1.log", "2.log"]
    for log in logs:
        assert (home.job_logs(job_id) / log).read_text() == "run of attempt 1\n"


def test_a_refused_drop_is_never_run_by_retry_retry_all_or_the_tray(home, tmp_path, pids):
    ran = tmp_path / "ran"
    target = tmp_path / "target.sh"
    target.write_text(f"echo ran >> {ran}")
    (home.jobs / "link.sh").symlink_to(target)
    restart(pids, home)
    [refused] = jobs(home)
    flaky = add(home, "flaky.sh", "# sloth: max_attempts=1\nexit 1")
    sloth(home, "work", "--once")

    one = sloth(home, "retry", refused["id"], check=False)
    every = sloth(home, "retry", "--all-failed")
    sloth(home, "work", "--once")

    assert not ran.exists()
    assert one.returncode == 1
    assert "refused" in one.stderr and one.stderr.count("\n") == 1
    assert "skipped 1 refused job" in every.stdout and f"retried   flaky ({flaky})" in every.stdout
    assert (jobs(home)[-1]["state"], jobs(home)[-1]["reason"]) == ("failed", "refused")
    listed = json.loads(sloth(home, "list", "--json", "--reason", "refused").stdout)
    assert [job["id"] for job in listed] == [refused["id"]]
    assert sloth(home, "cancel", refused["id"]).returncode == 0  # removable, still


def test_retry_reads_the_header_again_bad_stays_failed_fixed_runs_with_its_options(home, pids):
    drop(home, "typo.sh", "# sloth: timeout=soon\nsleep 30")
    restart(pids, home)
    [job] = jobs(home)

    again = sloth(home, "retry", job["id"], check=False)
    assert again.returncode == 1 and "bad value 'soon' for timeout" in again.stderr
    assert (jobs(home)[0]["state"], jobs(home)[0]["reason"]) == ("failed", "bad_header")

    script = job["script"]
    with open(script, "w") as file:  # fixed where the job's copy lives
        file.write("# sloth: timeout=1\nsleep 30\n")
    sloth(home, "retry", job["id"])
    assert jobs(home)[0]["options"] == {"timeout": 1.0}
    sloth(home, "work", "--once")
    assert jobs(home)[0]["last_error"] == "timed out after 1s"


def test_ctrl_c_on_an_add_waiting_for_a_locked_queue_exits_and_queues_nothing(home, tmp_path,
                                                                             pids):
    ran = tmp_path / "ran"
    script = tmp_path / "late.sh"
    script.write_text(f"echo ran >> {ran}")
    sloth(home, "status")
    blocker = sqlite3.connect(home.db, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # the queue is locked by another program
        adding = pids.popen([sys.executable, "-m", "sloth_tray", "add", str(script),
                             "--home", str(home.root)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: any(home.spool.iterdir()), what="add to copy the script and wait")
        adding.send_signal(signal.SIGINT)
        adding.wait(timeout=10)  # before: it hung here for good
        assert adding.returncode != 0
        assert adding.stdout.read() == ""
        assert "Traceback" not in adding.stderr.read()
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    restart(pids, home)
    assert jobs(home) == [] and not ran.exists()


def test_run_now_then_restart_runs_the_job_once_and_a_series_keeps_its_clock(home, tmp_path,
                                                                               pids):
    runs = tmp_path / "runs"
    once = add(home, "later.sh", f"echo once >> {runs}", "--delay", "1h")
    series = tmp_path / "hourly.sh"
    series.write_text(f"# sloth: every=1h\necho hourly >> {runs}\n")
    first = sloth(home, "add", str(series), "--delay", "1h").stdout.strip()
    sloth(home, "run-now", once, first)  # with the daemon down: due now, kept in the file
    restart(pids, home)
    # A second start finds nothing more to do: `work --once` makes the app's start and
    # a full pass of its loop, then returns, saying a line for each job it ran.
    assert sloth(home, "work", "--once").stdout == ""
    assert sorted(runs.read_text().split()) == ["hourly", "once"]
    by_name: dict[str, list[dict]] = {}
    for job in jobs(home):
        by_name.setdefault(job["name"], []).append(job)
    assert [j["state"] for j in by_name["later"]] == ["done"]
    states = sorted(j["state"] for j in by_name["hourly"])
    assert states == ["done", "pending"]  # one run, one next run: not a burst, not lost
    (following,) = [j for j in by_name["hourly"] if j["state"] == "pending"]
    (ran,) = [j for j in by_name["hourly"] if j["state"] == "done"]
    assert following["not_before"] >= ran["updated_at"] + 3600 - 60
