"""Lanes on a real daemon: each lane one job at a time, lanes side by side, a lane's
pause across a restart, a quit that gives every lane's job back, and an idle app with
three lanes that costs nothing. Timings come from the jobs' own clocks."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from helpers.processes import run_sloth, start_daemon, wait_for

from sloth_tray.store.queue import Queue, State

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")


def queued(home, name: str, text: str, lane: str) -> str:
    """A job pushed into `lane` as the command line queues one, and the doorbell rung."""
    script = home.spool / f"{name}.sh"
    script.write_text(text)
    with Queue(home.db) as queue:
        job_id = queue.push(name, script=str(script), lane=lane)
    home.ring_doorbell()
    return job_id


def timed(effects: Path, lane: str, hold: str) -> str:
    """A job that writes when it starts and when it ends (its own clock), and runs until
    `hold` exists."""
    return (f'echo "start {lane} $(date +%s.%N) $SLOTH_JOB_ID" >> {effects}\n'
            f"while [ ! -e {hold} ]; do sleep 0.02; done\n"
            f'echo "end {lane} $(date +%s.%N) $SLOTH_JOB_ID" >> {effects}\n')


def spans(effects: Path) -> dict[str, tuple[str, float, float]]:
    """job id -> (lane, started, ended), from the jobs' own lines."""
    seen: dict[str, dict] = {}
    for line in effects.read_text().splitlines():
        what, lane, at, job_id = line.split()
        seen.setdefault(job_id, {"lane": lane})[what] = float(at)
    return {job_id: (s["lane"], s["start"], s["end"]) for job_id, s in seen.items()
            if "end" in s}


def states(home) -> dict[str, State]:
    with Queue(home.db) as queue:
        return {job.id: job.state for job in queue.jobs(limit=None)}


def test_two_lanes_run_side_by_side_and_one_lane_never_runs_two_at_once(home, tmp_path, pids):
    effects, hold = tmp_path / "effects", tmp_path / "hold"
    start_daemon(pids, home)
    ids = [queued(home, f"{lane}{i}", timed(effects, lane, hold), lane)
           for i in range(3) for lane in ("main", "net")]
    # Both lanes start at once: the first of each is running together.
    wait_for(lambda: effects.exists() and
             {line.split()[1] for line in effects.read_text().splitlines()} == {"main", "net"},
             what="a job of each lane to start")
    with Queue(home.db) as queue:
        running = queue.jobs(State.RUNNING)
    assert sorted(job.lane for job in running) == ["main", "net"]
    hold.touch()
    wait_for(lambda: all(states(home)[job_id] == State.DONE for job_id in ids),
             what="all six jobs to end")
    by_lane: dict[str, list[tuple[float, float]]] = {}
    for lane, started, ended in spans(effects).values():
        by_lane.setdefault(lane, []).append((started, ended))
    assert sorted(by_lane) == ["main", "net"] and all(len(v) == 3 for v in by_lane.values())
    for lane, runs in by_lane.items():
        runs.sort()
        for (_, first_end), (second_start, _) in zip(runs, runs[1:], strict=False):
            assert second_start >= first_end, f"two jobs of lane {lane} ran at once"
    (main_start, main_end), (net_start, net_end) = by_lane["main"][0], by_lane["net"][0]
    assert main_start < net_end and net_start < main_end, "the lanes did not run side by side"


@pytest.mark.parametrize("typed", [False, True], ids=["set before the start",
                                                      "typed while the app runs"])
def test_a_paused_lane_stays_paused_across_a_restart_while_others_run(home, tmp_path, pids,
                                                                      typed):
    effects, hold = tmp_path / "effects", tmp_path / "hold"
    hold.touch()
    if not typed:
        with Queue(home.db) as queue:
            queue.set_paused(True, "net")
    daemon = start_daemon(pids, home)
    if typed:  # a lane paused before its first job: its folder made first
        (home.jobs / "net").mkdir(mode=0o700)
        run_sloth(home, "pause", "net")
    held = queued(home, "fetch", timed(effects, "net", hold), "net")
    ran = queued(home, "tidy", timed(effects, "main", hold), "main")
    wait_for(lambda: states(home)[ran] == State.DONE, what="main's job to run")
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(20) == 0
    start_daemon(pids, home)
    also_ran = queued(home, "tidy2", timed(effects, "main", hold), "main")
    wait_for(lambda: states(home)[also_ran] == State.DONE, what="main's next job to run")
    assert states(home)[held] == State.PENDING, "a paused lane started a job"
    with Queue(home.db) as queue:
        assert queue.paused("net") and not queue.paused("main")
    if typed:
        run_sloth(home, "resume", "net")
    else:
        with Queue(home.db) as queue:
            queue.set_paused(False, "net")
        home.ring_doorbell()
    wait_for(lambda: states(home)[held] == State.DONE, what="the resumed lane's job to run")


def test_a_quit_gives_back_every_lanes_running_job_uncounted(home, tmp_path, pids):
    effects, hold = tmp_path / "effects", tmp_path / "hold"
    daemon = start_daemon(pids, home)
    ids = [queued(home, f"long_{lane}", timed(effects, lane, hold), lane)
           for lane in ("main", "net", "mail")]
    wait_for(lambda: all(states(home)[job_id] == State.RUNNING for job_id in ids)
             and effects.exists() and len(effects.read_text().splitlines()) == 3,
             what="the three lanes' jobs to run")
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(20) == 0
    with Queue(home.db) as queue:
        for job_id in ids:
            job = queue.get(job_id)
            assert (job.state, job.attempts) == (State.PENDING, 0), \
                (job, [(e.kind, e.detail) for e in queue.history(job_id)])
            assert [e.kind for e in queue.history(job_id)][-1] == "released"


def per_thread(pid: int) -> dict[str, int]:
    """Each thread's wake-ups so far, by its name and id."""
    found = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as comm:
                name = f"{comm.read().strip()} {tid}"
            with open(f"/proc/{pid}/task/{tid}/status") as status:
                found[name] = sum(int(line.split()[1]) for line in status
                                  if "ctxt_switches" in line)
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile (before the open, or the read)
    return found


def wakeups(pid: int) -> int:
    """Context switches of every thread of the process: each is a wake-up."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as status:
                for line in status:
                    if "ctxt_switches" in line:
                        total += int(line.split()[1])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile (before the open, or the read)
    return total


@pytest.mark.slow
def test_an_idle_app_with_three_lanes_wakes_up_not_once(home, tmp_path, pids):
    """Every lane ran a job and has one due later (an hour off): nothing ticks."""
    effects, hold = tmp_path / "effects", tmp_path / "hold"
    hold.touch()
    for lane in ("net", "mail"):
        (home.jobs / lane).mkdir()
    daemon = start_daemon(pids, home)
    ids = [queued(home, f"once_{lane}", timed(effects, lane, hold), lane)
           for lane in ("main", "net", "mail")]
    wait_for(lambda: all(states(home)[job_id] == State.DONE for job_id in ids),
             what="a job in each lane to run")
    with Queue(home.db) as queue:
        for lane in ("main", "net", "mail"):
            queue.push(f"later_{lane}", script="/bin/true", delay=3600, lane=lane)
    home.ring_doorbell()
    before = quiet(daemon.pid)
    threads = per_thread(daemon.pid)
    time.sleep(WINDOW)  # the measurement's window itself, not a wait for a state
    after = per_thread(daemon.pid)
    assert wakeups(daemon.pid) - before == 0, ("the idle app woke up", {
        name: n - threads.get(name, 0) for name, n in after.items() if n != threads.get(name)})


WINDOW = 3.0  # seconds an idle app is watched for


def quiet(pid: int) -> int:
    """Once the process made no wake-up for a second (it settled after the last
    change), its count."""
    last: int | None = None  # the first look only reads: a second apart, two compare

    def settled() -> bool:
        nonlocal last
        was, last = last, wakeups(pid)
        return was == last

    wait_for(settled, timeout=20, every=1.0, what="the app to go quiet")
    return last
