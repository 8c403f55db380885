"""Steps that wait with no process, end to end: `sloth-tray sleep`, `sloth-tray ask`,
sloth_step.sleep/ask under a real daemon (`sloth-tray run --headless`) or `work
--once`, answered with `sloth-tray answer`, across a kill -9 and a restart of the app.

Side effects are lines appended to files: counting them says how often each part of
a job really ran. Every process is known by pid or by the tag in its environment.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.processes import wait_for
from helpers.tagged import carrying
from test_steps import (  # the steps' own helpers: one way to start and read
    add,
    environment,
    lines,
    quit_daemon,
    show,
    sloth,
    start_daemon,
    work,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")
SLOTH = str(Path(sys.executable).with_name("sloth-tray"))


def job_processes(job_id: str) -> list[int]:
    """The processes of a job's runs (they carry its id; the daemon does not)."""
    return carrying(f"SLOTH_JOB_ID={job_id}")


def lease(home, job_id: str) -> tuple[str, str | None]:
    with sqlite3.connect(home.db) as db:
        return db.execute("SELECT state, lease_owner FROM jobs WHERE id = ?",
                          (job_id,)).fetchone()


def test_a_sleep_ends_the_run_holds_nothing_and_the_daemon_wakes_it_once(home, tmp_path,
                                                                          pids, tag):
    effects = tmp_path / "effects"
    job_id = add(home, "digest.sh", f"""#!/bin/sh
sloth-tray step fetch -- sh -c 'echo fetched >> {effects}'
echo before >> {effects}
sloth-tray sleep 6s
echo after >> {effects}
echo digested
""", tag=tag)
    log = tmp_path / "daemon.log"
    daemon = start_daemon(pids, home, log, env=environment(tag))
    try:
        # Recorded, then the run ended by the app: only then is it pending.
        waiting = wait_for(lambda: (lambda job: job["state"] == "pending"
                                    and job["waiting_for"] is not None and job)(
            show(home, job_id)), timeout=20, what="the job to sleep")
        assert waiting["state"] == "pending" and waiting["attempts"] == 0
        assert waiting["waiting_for"]["kind"] == "time"
        assert lease(home, job_id) == ("pending", None)
        # No process of the job is left: the step's and the script's are gone.
        wait_for(lambda: not job_processes(job_id), timeout=10, what="the job's processes")
        status = sloth(home, "status").stdout
        assert f"digest ({job_id}) — sleeping until " in status, status
        assert "sleeping until" in sloth(home, "list").stdout
        # It never ends early: it is done no sooner than its wake time (below).
        wait_for(lambda: show(home, job_id)["state"] == "done", timeout=20,
                 what="the daemon to wake the job")
        done = show(home, job_id)
        assert time.time() >= waiting["waiting_for"]["until"]
    finally:
        quit_daemon(daemon, log)
    assert lines(effects) == ["fetched", "before", "before", "after"]  # fetch once
    assert done["result"] == "digested" and done["runs"] == 2
    kinds = [event["kind"] for event in done["history"]]
    assert kinds.count("waiting") == 1 and "failed" not in kinds and "backoff" not in kinds
    assert done["waiting_for"] is None


def test_a_python_sleep_across_a_kill_9_and_a_restart_resumes_once_at_its_time(
        home, tmp_path, pids, tag):
    effects = tmp_path / "effects"
    job_id = add(home, "feed.py", f"""#!{sys.executable}
import sloth_step
sloth_step.step("fetch", lambda: open({str(effects)!r}, "a").write("fetched\\n"))
sloth_step.sleep(6)
open({str(effects)!r}, "a").write("posted\\n")
print("posted")
""", tag=tag)
    log = tmp_path / "daemon.log"
    daemon = start_daemon(pids, home, log, env=environment(tag))
    # Asleep: its wait recorded and its run ended by the app.
    wait_for(lambda: (lambda job: job["state"] == "pending" and job["waiting_for"])(
        show(home, job_id)), timeout=20, what="the job to sleep")
    until = show(home, job_id)["waiting_for"]["until"]
    daemon.kill()  # kill -9 of the app while the job sleeps
    daemon.wait(timeout=10)
    assert show(home, job_id)["state"] == "pending"
    log2 = tmp_path / "daemon2.log"
    daemon = start_daemon(pids, home, log2, env=environment(tag))  # the restart
    try:
        # Not run at the start (it is not due): two runs in all, the second at its time.
        wait_for(lambda: show(home, job_id)["state"] == "done", timeout=20,
                 what="the job to wake after the restart")
        assert time.time() >= until
    finally:
        quit_daemon(daemon, log2)
    assert lines(effects) == ["fetched", "posted"]
    assert show(home, job_id)["runs"] == 2


def test_a_sleep_across_a_sigstop_of_the_app_past_the_lease_and_its_time_resumes_once(
        home, tmp_path, pids, tag):
    """The app is frozen (SIGSTOP) while the job sleeps, for longer than a lease and past
    the wake time: the sleeping job held no lease to lose, and on SIGCONT it runs once,
    its done step skipped."""
    import signal

    effects = tmp_path / "effects"
    job_id = add(home, "nap.sh", f"""#!/bin/sh
sloth-tray step fetch -- sh -c 'echo fetched >> {effects}'
sloth-tray sleep 2s
echo posted >> {effects}
""", tag=tag)
    log = tmp_path / "daemon.log"
    daemon = start_daemon(pids, home, log, "--lease", "1", env=environment(tag))
    try:
        wait_for(lambda: show(home, job_id)["waiting_for"] is not None, timeout=20,
                 what="the job to sleep")
        until = show(home, job_id)["waiting_for"]["until"]
        daemon.send_signal(signal.SIGSTOP)
        try:
            # Frozen past its wake time and more than two leases: a condition, not a nap.
            wait_for(lambda: time.time() > until + 2.5, timeout=10, what="the freeze")
            assert show(home, job_id)["state"] == "pending" and not job_processes(job_id)
        finally:
            daemon.send_signal(signal.SIGCONT)
        wait_for(lambda: show(home, job_id)["state"] == "done", timeout=20,
                 what="the job to wake after the freeze")
    finally:
        quit_daemon(daemon, log)
    assert lines(effects) == ["fetched", "posted"]
    job = show(home, job_id)
    assert job["runs"] == 2 and job["attempts"] == 1
    kinds = [event["kind"] for event in job["history"]]
    assert kinds.count("waiting") == 1 and kinds.count("claimed") == 2, kinds
    assert not {"reclaimed", "failed", "backoff"} & set(kinds), kinds


def test_an_app_killed_right_after_the_sleep_was_recorded_leaves_it_waiting(home, tmp_path,
                                                                             pids, tag):
    """The run recorded its wait, and the app went before it ended the run: the next
    start finds the lease and takes it back as the wait it was, not as a lost attempt."""
    from sloth_tray.store.queue import Queue

    job_id = add(home, "nap.sh", "#!/bin/sh\nsloth-tray sleep 1h\necho woke\n", tag=tag)
    queue = Queue(home.db)
    try:
        job = queue.claim("gone:1", token="t" * 32)
        assert job is not None and job.id == job_id
        env = environment(tag) | {"SLOTH_QUEUE": str(home.db), "SLOTH_JOB_ID": job_id,
                                  "SLOTH_RUN_TOKEN": "t" * 32, "SLOTH_LEASE_OWNER": "gone:1"}
        sleeper = pids.popen([SLOTH, "sleep", "1h"], env=env, stderr=subprocess.PIPE)
        wait_for(lambda: queue.waited(job_id, "t" * 32) is not None, what="the wait")
        assert sleeper.poll() is None  # it holds on until the app ends the run
        sleeper.kill()
        sleeper.wait()
        queue.expire_leases()
        assert queue.claim("next:2") is None  # taken back as a wait: not due for an hour
        again = queue.get(job_id)
        assert again.state == "pending" and again.attempts == 0
        assert again.not_before > time.time() + 3000
    finally:
        queue.close()


def test_an_ask_answered_from_the_cli_runs_the_job_on_with_the_answer(home, tmp_path,
                                                                     pids, tag):
    effects = tmp_path / "effects"
    job_id = add(home, "mail.sh", f"""#!/bin/sh
sloth-tray step draft -- sh -c 'echo drafted >> {effects}'
if [ "$(sloth-tray ask "Send the summary to Bob?" --choices yes,no)" = yes ]; then
    echo sent >> {effects}
fi
echo finished
""", tag=tag)
    other = add(home, "other.py", f"""#!{sys.executable}
import sloth_step
print(sloth_step.ask("Pay for the model call?", choices=["go", "stop"]))
""", tag=tag)
    log = tmp_path / "daemon.log"
    daemon = start_daemon(pids, home, log, env=environment(tag))
    try:
        wait_for(lambda: all(show(home, job)["waiting_for"] for job in (job_id, other)),
                 timeout=20, what="both jobs to ask")
        wait_for(lambda: not job_processes(job_id) and not job_processes(other), timeout=10,
                 what="no process left")
        asks = show(home, job_id)["waiting_for"]
        assert asks == {"kind": "answer", "until": None, "question": "Send the summary to Bob?",
                        "choices": ["yes", "no"], "default": None}
        # Not a choice, or a job that asks nothing: one sentence, exit 2, nothing changes.
        wrong = sloth(home, "answer", job_id, "maybe", check=False)
        assert wrong.returncode == 2 and "not an answer" in wrong.stderr
        assert "Traceback" not in wrong.stderr and show(home, job_id)["waiting_for"]
        sloth(home, "answer", job_id, "yes")
        sloth(home, "answer", other, "stop")
        wait_for(lambda: {show(home, job)["state"] for job in (job_id, other)} == {"done"},
                 timeout=20, what="both jobs to run on")
        again = sloth(home, "answer", job_id, "yes", check=False)
        assert again.returncode == 2 and "not asking" in again.stderr
    finally:
        quit_daemon(daemon, log)
    assert lines(effects) == ["drafted", "sent"]
    assert show(home, other)["result"] == "stop"


def test_an_ask_times_out_to_its_default_or_fails_unanswered(home, tmp_path, tag):
    with_default = add(home, "d.sh", "#!/bin/sh\nsloth-tray ask 'go?' --default no "
                                     "--timeout 1s\n", tag=tag)
    without = add(home, "n.sh", "#!/bin/sh\nsloth-tray ask 'go?' --timeout 1s\n"
                                "echo went\n", tag=tag)
    assert "asking" in work(home, tag)
    time.sleep(1.1)  # the timeout on the wall clock: the next work runs both
    said = work(home, tag)
    assert show(home, with_default)["state"] == "done", said
    assert show(home, with_default)["result"] == "no"
    failed = show(home, without)
    assert failed["state"] == "failed" and failed["reason"] == "unanswered"
    assert "nobody answered 'go?'" in failed["last_error"]
    assert failed["attempts"] == 0


def test_a_job_cancelled_while_it_asks_asks_no_more(home, tmp_path, tag):
    job_id = add(home, "c.sh", "#!/bin/sh\nsloth-tray ask 'really?'\n", tag=tag)
    work(home, tag)
    assert show(home, job_id)["waiting_for"] is not None
    sloth(home, "cancel", job_id)
    assert show(home, job_id)["waiting_for"] is None
    assert "really?" not in sloth(home, "status").stdout
    refused = sloth(home, "answer", job_id, "yes", check=False)
    assert refused.returncode == 2 and "not asking" in refused.stderr


def test_outside_a_job_sleep_sleeps_and_ask_takes_its_default(tmp_path):
    env = environment()
    started = time.monotonic()
    done = subprocess.run([SLOTH, "sleep", "0.3"], env=env, capture_output=True, timeout=10)
    assert done.returncode == 0 and time.monotonic() - started >= 0.3
    asked = subprocess.run([SLOTH, "ask", "go?", "--default", "yes"], env=env,
                           capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=10)
    assert asked.returncode == 0 and asked.stdout == "yes\n"
    bad = subprocess.run([SLOTH, "sleep", "soon"], env=env, capture_output=True, text=True,
                         timeout=10)
    assert bad.returncode == 2 and "is not a duration" in bad.stderr


def test_a_sleep_past_what_a_clock_holds_is_one_sentence_in_a_job_or_out():
    """Ten years at most, as a delay: a wake time no clock can hold, or none at all
    (nan), is refused before anything is recorded or slept."""
    from sloth_tray import limits
    from sloth_tray.for_jobs import sloth_step

    for given in ("99999999999d", "3651d"):
        done = subprocess.run([SLOTH, "sleep", given], env=environment(),
                              capture_output=True, text=True, timeout=10)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1 and "at most" in done.stderr
    for seconds in (float("nan"), float("inf"), 1e300, -1.0):
        with pytest.raises(ValueError):
            sloth_step.sleep(seconds)
    for when in (float("nan"), float("inf"), time.time() + 1e300):
        with pytest.raises(ValueError):
            sloth_step.sleep_until(when)
    assert sloth_step.SLEEP_MAX == limits.DELAY.high  # a sleep is bounded as a delay


def test_a_sleep_called_from_a_run_that_is_over_records_nothing(home, tmp_path, tag):
    job_id = add(home, "late.sh", "#!/bin/sh\ntrue\n", tag=tag)
    env = environment(tag) | {"SLOTH_QUEUE": str(home.db), "SLOTH_JOB_ID": job_id,
                              "SLOTH_RUN_TOKEN": "x" * 32, "SLOTH_LEASE_OWNER": "nobody"}
    done = subprocess.run([SLOTH, "sleep", "1h"], env=env, capture_output=True, text=True,
                          timeout=10, stdin=subprocess.DEVNULL)
    assert done.returncode == 125 and "records nothing" in done.stderr
    with sqlite3.connect(home.db) as db:
        assert db.execute("SELECT count(*) FROM steps").fetchone()[0] == 0


def test_the_trays_waiting_rows_say_a_sleep_and_leave_a_question_to_its_own_section(
        home, tag):
    """A sleeping job is shown sleeping until its wake time, never "due in" it; a job
    that asks (with no timeout: due at no time at all) is not among the waiting ones
    but in Waiting for you."""
    from datetime import datetime

    from sloth_tray.daemon import snapshot
    from sloth_tray.store.queue import Queue
    from sloth_tray.tray import presenter

    sleeper = add(home, "digest.sh", "#!/bin/sh\nsloth-tray sleep 3h\n", tag=tag)
    asker = add(home, "post.sh", "#!/bin/sh\nsloth-tray ask 'Post it?'\n", tag=tag)
    work(home, tag=tag)
    with Queue(home.db) as queue:
        shown, _ = snapshot.read(queue, (), frozenset())
        now = queue.clock()
    [waiting] = shown.waiting
    assert waiting.id == sleeper and waiting.sleeping_until == waiting.due
    assert [job.id for job in shown.asking] == [asker]
    label = presenter.waiting_label(waiting, now)
    # 3 h on: today's time alone, or tomorrow's with its date.
    assert label.startswith("sleeping until ") and "due" not in label
    assert label.endswith(f"{datetime.fromtimestamp(waiting.due):%H:%M}")
