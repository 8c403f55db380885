"""Durable steps under faults: a real daemon killed -9, frozen past its lease, quit,
or timing a job out while one of its steps runs.

Invariant: a step recorded done never runs again; a step cut short runs again,
unless it asks (`--ask`): then the job stops as `step_unsure`, and runs on only
after a person's word (`retry --step-done NAME`: it happened; `retry`: run it
again). Each step's side effect is a line appended to a file: the count of its
lines is how often it really ran.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from faultkit import cli, kill9, log_text, new_tag, reap, start_daemon, sweep
from helpers.processes import alive, frozen_between_writes, wait_for

from sloth_tray.paths import locate

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")


def add(home, tag: str, name: str, text: str) -> str:
    path = home.root.parent / name
    path.write_text(text)
    done = cli(home, tag, "add", str(path))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def sloth(home, tag: str, *args: str) -> str:
    done = cli(home, tag, *args)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def show(home, tag: str, job_id: str) -> dict:
    return json.loads(sloth(home, tag, "show", job_id, "--json"))


def step(home, tag: str, job_id: str, name: str) -> dict | None:
    return next((s for s in show(home, tag, job_id)["steps"] if s["name"] == name), None)


def states(home, tag: str, job_id: str) -> list[tuple[str, str, int]]:
    return [(s["name"], s["state"], s["run"]) for s in show(home, tag, job_id)["steps"]]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def names(path: Path) -> list[str]:
    """The first word of each side-effect line: which step ran."""
    return [line.split()[0] for line in lines(path)]


def newest_log(home, job_id: str) -> str:
    runs = sorted(home.job_logs(job_id).glob("*.log"), key=lambda p: int(p.stem))
    return runs[-1].read_text(errors="replace")


def three_steps(effects: Path, go: Path, *, ask: bool, header: str = "") -> str:
    """before, middle (waits for `go`; `--ask` when `ask`), after: each appends its name
    (and the middle its shell's pid) to `effects`."""
    flag = " --ask" if ask else ""
    return f"""#!/bin/sh
{header}
sloth-tray step before -- sh -c 'echo before >> {effects}' || exit 9
sloth-tray step middle{flag} -- sh -c 'echo "middle $$" >> {effects}
    while [ ! -e {go} ]; do sleep 0.05; done; echo middle-out' || exit $?
sloth-tray step after -- sh -c 'echo after >> {effects}' || exit 9
"""


def middle_pid(effects: Path, nth: int = 1) -> int:
    return int([line for line in lines(effects) if line.startswith("middle")][nth - 1].split()[1])


def wait_for_middle(home, tag: str, job_id: str, effects: Path, nth: int = 1) -> int:
    """Until the middle step runs (its side effect happened, its start is recorded)."""
    wait_for(lambda: names(effects).count("middle") >= nth, what="the middle step to start")
    wait_for(lambda: (step(home, tag, job_id, "middle") or {}).get("state") == "running",
             what="the middle step's start to be recorded")
    return middle_pid(effects, nth)


@pytest.fixture
def setup(tmp_path, pids):
    """(home, tag, effects, go); the tag's processes swept at the end."""
    home = locate(tmp_path / "home").ensure()
    tag = new_tag()
    try:
        yield home, tag, tmp_path / "effects", tmp_path / "go"
    finally:
        (tmp_path / "go").touch()
        sweep(tag)


def test_kill_9_mid_step_then_restart_runs_only_that_step_again(setup, tmp_path, pids):
    home, tag, effects, go = setup
    job_id = add(home, tag, "pipeline.sh", three_steps(effects, go, ask=False))
    first = start_daemon(pids, home, tag, tmp_path / "d1.log", "--lease", "60")
    orphan = wait_for_middle(home, tag, job_id, effects)
    kill9(pids, first)
    assert alive(orphan), "the step's process outlives a kill -9 of the daemon"

    # The lease has 60 s left, yet the restart takes the job back at once: the orphan
    # is killed (its step cut), and the middle step runs again.
    second = start_daemon(pids, home, tag, tmp_path / "d2.log", "--lease", "60")
    wait_for_middle(home, tag, job_id, effects, nth=2)
    assert not alive(orphan)
    go.touch()
    wait_for(lambda: show(home, tag, job_id)["state"] == "done", what="the job to end")
    second.send_signal(signal.SIGTERM)
    assert reap(pids, second) == 0

    assert names(effects) == ["before", "middle", "middle", "after"]
    job = show(home, tag, job_id)
    kinds = [event["kind"] for event in job["history"]]
    assert "reclaimed" in kinds and job["attempts"] == 2
    assert states(home, tag, job_id) == [("before", "done", 1), ("middle", "done", 2),
                                         ("after", "done", 2)]
    log = newest_log(home, job_id)
    assert "step before skipped (done " in log and "middle-out" in log
    assert "Traceback" not in log_text(tmp_path / "d2.log")


@pytest.mark.short_lease
def test_sigstop_of_the_daemon_past_the_lease_completes_the_step_once(setup, tmp_path, pids):
    home, tag, effects, go = setup
    job_id = add(home, tag, "nap.sh", three_steps(effects, go, ask=True))
    daemon = start_daemon(pids, home, tag, tmp_path / "d.log", "--lease", "1")
    wait_for_middle(home, tag, job_id, effects)
    frozen_between_writes(daemon, home.db)  # the daemon sleeps; the job's processes do not
    try:
        go.touch()  # the step ends while the daemon is frozen...
        wait_for(lambda: (step(home, tag, job_id, "middle") or {}).get("state") == "done",
                 what="the step to be recorded with the daemon frozen")
        wait_for(lambda: names(effects)[-1:] == ["after"], what="the last step")
        time.sleep(1.5)  # ...and stays frozen past the 1 s lease: the scenario itself
    finally:
        os.kill(daemon.pid, signal.SIGCONT)
    wait_for(lambda: show(home, tag, job_id)["state"] == "done", what="the job to end")
    daemon.send_signal(signal.SIGTERM)
    assert reap(pids, daemon) == 0

    job = show(home, tag, job_id)
    assert names(effects) == ["before", "middle", "after"]
    assert job["attempts"] == 1 and "reclaimed" not in [e["kind"] for e in job["history"]]
    assert states(home, tag, job_id) == [("before", "done", 1), ("middle", "done", 1),
                                         ("after", "done", 1)]


def test_an_asking_step_cut_by_kill_9_stops_the_job_until_a_person_says_it_happened(
        setup, tmp_path, pids):
    home, tag, effects, go = setup
    job_id = add(home, tag, "charge.sh", three_steps(effects, go, ask=True))
    first = start_daemon(pids, home, tag, tmp_path / "d1.log", "--lease", "60")
    orphan = wait_for_middle(home, tag, job_id, effects)
    kill9(pids, first)

    second = start_daemon(pids, home, tag, tmp_path / "d2.log", "--lease", "60")
    wait_for(lambda: show(home, tag, job_id)["state"] == "failed", what="the job to stop")
    wait_for(lambda: not alive(orphan), what="the cut step's process to be killed")
    job = show(home, tag, job_id)
    assert job["reason"] == "step_unsure"
    assert 'step "middle" was cut short at ' in job["last_error"]
    assert f"sloth-tray retry {job_id} --step-done middle" in job["last_error"]
    middle = step(home, tag, job_id, "middle")
    assert (middle["state"], middle["ask"]) == ("cut", 1)
    assert time.strftime("%Y-%m-%d %H:%M", time.localtime(middle["ended_at"])) \
        in job["last_error"]
    listed = json.loads(sloth(home, tag, "list", "--reason", "step_unsure", "--json"))
    assert [j["id"] for j in listed] == [job_id]

    sloth(home, tag, "retry", job_id, "--step-done", "middle")
    wait_for(lambda: show(home, tag, job_id)["state"] == "done", what="the job to go on")
    second.send_signal(signal.SIGTERM)
    assert reap(pids, second) == 0
    assert names(effects) == ["before", "middle", "after"]  # middle never ran twice
    assert "step middle skipped (marked done by hand " in newest_log(home, job_id)
    middle = step(home, tag, job_id, "middle")
    assert middle["state"] == "done" and middle["marked_at"] is not None
    kinds = [event["kind"] for event in show(home, tag, job_id)["history"]]
    assert kinds.count("failed") == 1 and kinds.count("retried") == 1


def test_quit_mid_asking_step_stops_the_job_and_a_plain_retry_runs_the_step_again(
        setup, tmp_path, pids):
    home, tag, effects, go = setup
    job_id = add(home, tag, "charge.sh", three_steps(effects, go, ask=True))
    daemon = start_daemon(pids, home, tag, tmp_path / "d1.log")
    child = wait_for_middle(home, tag, job_id, effects)
    daemon.send_signal(signal.SIGTERM)
    assert reap(pids, daemon) == 0
    assert not alive(child)
    job = show(home, tag, job_id)
    assert (job["state"], job["reason"]) == ("failed", "step_unsure")
    assert job["attempts"] == 0  # a quit never counts the attempt
    assert [e["kind"] for e in job["history"]][-2:] == ["started", "failed"]  # not released
    assert "--step-done middle" in job["last_error"]

    sloth(home, tag, "retry", job_id)  # no word about the step: it runs again
    go.touch()
    daemon = start_daemon(pids, home, tag, tmp_path / "d2.log")
    wait_for(lambda: show(home, tag, job_id)["state"] == "done", what="the job to end")
    daemon.send_signal(signal.SIGTERM)
    assert reap(pids, daemon) == 0
    assert names(effects) == ["before", "middle", "middle", "after"]
    assert states(home, tag, job_id) == [("before", "done", 1), ("middle", "done", 2),
                                         ("after", "done", 2)]
    retried = [e["detail"] for e in show(home, tag, job_id)["history"] if e["kind"] == "retried"]
    assert retried == ['was failed; step "middle" to run again']


@pytest.mark.parametrize("ask", [False, True], ids=["plain", "asking"])
def test_a_timeout_mid_step_cuts_it(setup, tmp_path, pids, ask):
    home, tag, effects, go = setup
    job_id = add(home, tag, "slow.sh", three_steps(effects, go, ask=ask,
                                                   header="# sloth: timeout=3 max_attempts=1"))
    daemon = start_daemon(pids, home, tag, tmp_path / "d.log")
    child = wait_for_middle(home, tag, job_id, effects)
    wait_for(lambda: show(home, tag, job_id)["state"] == "failed", what="the timeout")
    daemon.send_signal(signal.SIGTERM)
    assert reap(pids, daemon) == 0
    assert not alive(child)
    job = show(home, tag, job_id)
    assert job["reason"] == ("step_unsure" if ask else "timed_out")
    middle = step(home, tag, job_id, "middle")
    assert (middle["state"], middle["ended_at"] is not None) == ("cut", True)
    assert names(effects) == ["before", "middle"]
    assert "Traceback" not in log_text(tmp_path / "d.log")


def test_cancel_mid_asking_step_cuts_it_without_asking_and_a_retry_runs_it_again(
        setup, tmp_path, pids):
    home, tag, effects, go = setup
    job_id = add(home, tag, "charge.sh", three_steps(effects, go, ask=True))
    daemon = start_daemon(pids, home, tag, tmp_path / "d.log")
    child = wait_for_middle(home, tag, job_id, effects)
    sloth(home, tag, "cancel", job_id)  # the run loses its lease: a person's word
    wait_for(lambda: not alive(child), what="the cancelled run to be stopped")
    job = show(home, tag, job_id)
    assert (job["state"], job["reason"]) == ("cancelled", None)
    assert states(home, tag, job_id) == [("before", "done", 1), ("middle", "cut", 1)]

    sloth(home, tag, "retry", job_id)
    wait_for_middle(home, tag, job_id, effects, nth=2)
    go.touch()
    wait_for(lambda: show(home, tag, job_id)["state"] == "done", what="the job to end")
    daemon.send_signal(signal.SIGTERM)
    assert reap(pids, daemon) == 0
    assert names(effects) == ["before", "middle", "middle", "after"]
