"""Fault 1: kill -9 of a real daemon at random moments while jobs are pushed,
dropped, claimed, run and completed; then a last start drains everything.

Invariant: no job lost (every job pushed or dropped exists and ends done),
none completed twice, attempts == claimed - released, and a job's side effect
ran at most once per claim (a killed attempt may or may not have run).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from faultkit import (
    CLI,
    env_with,
    jobs_with_history,
    new_tag,
    reap,
    start_daemon,
    sweep,
    unfinished,
)
from helpers.processes import wait_for

from sloth_tray.paths import locate
from sloth_tray.store.queue import State

# 1 s leases: a busy neighbour would make them lapse (tests/conftest.py)
pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc"),
              pytest.mark.short_lease]

TRIALS = 30
SEED = 20261130
MAX_ATTEMPTS = 100  # far more than 1 claim per trial can use: no job may fail for good


def script(effects, rng: random.Random) -> str:
    # The side effect first, then (sometimes) a short stay, so kills also land mid-run.
    nap = rng.choice(["", "", "sleep 0.02", "sleep 0.05", "sleep 0.1"])
    return (f"# sloth: max_attempts={MAX_ATTEMPTS}\n"
            f'echo "$SLOTH_JOB_ID $SLOTH_ATTEMPT" >> {effects}\n{nap}\necho ok\n')


def check(db, effects, *, final: bool, expected: int | None = None) -> dict[str, int]:
    """The invariant, on the database and the side-effect file as they are now."""
    lines = Counter(line.split()[0] for line in effects.read_text().splitlines()) \
        if effects.exists() else Counter()
    jobs = jobs_with_history(db)
    for job_id, (job, kinds) in jobs.items():
        claimed, released = kinds.count("claimed"), kinds.count("released")
        assert kinds.count("completed") <= 1, f"{job.name} completed twice: {kinds}"
        assert job.attempts == claimed - released, f"{job.name}: {job.attempts} vs {kinds}"
        assert lines[job_id] <= claimed, f"{job.name} ran {lines[job_id]}x, {claimed} claims"
        assert job.state != State.FAILED, f"{job.name} failed: {job.last_error}"
        if final:
            assert job.state == State.DONE and kinds.count("completed") == 1, (job, kinds)
            assert f"{job_id} {job.attempts}" in effects.read_text().splitlines(), \
                f"{job.name}: the completing attempt left no side effect"
    assert set(lines) <= set(jobs), "a side effect of a job the queue does not know"
    if expected is not None:
        assert len(jobs) == expected, f"{expected} jobs pushed, {len(jobs)} in the queue"
    return {"jobs": len(jobs), "reruns": sum(n > 1 for n in lines.values()),
            "reclaimed": sum(kinds.count("reclaimed") for _, kinds in jobs.values())}


def test_kill_9_at_random_moments_loses_nothing_and_completes_nothing_twice(tmp_path, pids):
    rng = random.Random(SEED)
    home = locate(tmp_path / "home").ensure()
    staging = tmp_path / "staging"
    staging.mkdir()
    effects = tmp_path / "effects"
    tag = new_tag()
    added: list[str] = []  # ids printed by `sloth-tray add`
    added_names: list[str] = []
    dropped: list[str] = []  # names of the files dropped into the jobs folder
    phases: Counter[str] = Counter()
    started = time.monotonic()
    try:
        for trial in range(TRIALS):
            # Mostly a daemon that is up; now and then one killed while it starts.
            daemon = start_daemon(pids, home, tag, tmp_path / f"daemon-{trial}.log",
                                  "--lease", "1", up=rng.random() < 0.8)
            # The scenario: the kill comes at a random moment, wherever the daemon is:
            # amid the drops, amid the runs, or late enough for files left by earlier
            # kills to settle (0.5 s) and be taken.
            delay = rng.choice([rng.uniform(0.0, 0.1), rng.uniform(0.0, 0.1),
                                rng.uniform(0.1, 0.35), rng.uniform(0.1, 0.35),
                                rng.uniform(0.1, 0.35), rng.uniform(0.5, 0.8)])
            killer = threading.Timer(delay, daemon.send_signal, args=(signal.SIGKILL,))
            killer.start()
            adders = []
            for i in range(rng.choice([0, 0, 1, 2])):
                source = staging / f"a{trial:02}_{i}.sh"
                source.write_text(script(effects, rng))
                added_names.append(source.stem)
                adders.append(pids.popen(
                    [*CLI, "add", str(source), "--max-attempts", str(MAX_ATTEMPTS),
                     "--home", str(home.root)],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                    env=env_with(tag)))
            for i in range(rng.randint(1, 4)):
                name = f"d{trial:02}_{i}"
                text = script(effects, rng)
                if rng.random() < 0.5:  # written in place: taken on close
                    (home.jobs / f"{name}.sh").write_text(text)
                else:  # renamed in: taken at once
                    (staging / f"{name}.sh").write_text(text)
                    os.rename(staging / f"{name}.sh", home.jobs / f"{name}.sh")
                dropped.append(name)
                # The scenario: drops spread over the window in which the kill lands.
                time.sleep(rng.uniform(0.0, 0.05))
            killer.join()
            assert reap(pids, daemon) == -signal.SIGKILL, "the daemon died on its own"
            for adder in adders:
                out, err = adder.communicate(timeout=60)
                reap(pids, adder)
                assert adder.returncode == 0, err
                added.append(out.strip())

            # Where did the kill land? (Read after the fact, from what it left.)
            jobs = jobs_with_history(home.db)
            spooled = {p.name for p in home.spool.iterdir()}
            # (A kill can count twice: mid-run while some drops were not taken yet.)
            states = {job.state for job, _ in jobs.values()}
            if spooled - set(jobs) or any(home.jobs.glob(f"d{trial:02}_*")):
                phases["push"] += 1  # this trial's drops were not all taken yet
            if State.RUNNING in states:
                phases["claim/run"] += 1
            elif State.PENDING in states:
                phases["waiting"] += 1
            elif not any(home.jobs.iterdir()):
                phases["idle"] += 1
            assert set(added) <= set(jobs), "an added job vanished"
            check(home.db, effects, final=False)

        # The last start drains everything.
        last = start_daemon(pids, home, tag, tmp_path / "daemon-last.log", "--lease", "1")
        expected = len(added) + len(dropped)
        wait_for(lambda: not any(home.jobs.iterdir()) and len(jobs_with_history(home.db))
                 >= expected and unfinished(home.db) == 0, timeout=60,
                 what="the last daemon to drain the queue")
        last.send_signal(signal.SIGTERM)
        assert reap(pids, last) == 0
    finally:
        sweep(tag)

    stats = check(home.db, effects, final=True, expected=expected)
    jobs = jobs_with_history(home.db)
    names = sorted(job.name for job, _ in jobs.values())
    assert names == sorted(dropped + added_names), "a push or a drop was lost or doubled"
    assert set(added) <= set(jobs)
    assert not list(home.spool.glob("*/*.partial"))
    doubled = sum(kinds.count("completed") > 1 for _, kinds in jobs.values())
    lost = expected - sum(job.state == State.DONE for job, _ in jobs.values())
    print(f"\nkill -9: {TRIALS} trials ({phases['push']} mid-push, {phases['claim/run']} "
          f"mid-claim/run, {phases['waiting']} between jobs, {phases['idle']} idle), "
          f"{stats['jobs']} jobs, {lost} lost, {doubled} doubled, {stats['reclaimed']} "
          f"reclaimed, {stats['reruns']} re-run after a kill "
          f"({time.monotonic() - started:.1f} s)")


def test_kill_9_with_two_lanes_running_reclaims_each_job_once_and_leaves_no_orphan(
        tmp_path, pids):
    home = locate(tmp_path / "home").ensure()
    effects, hold, tag = tmp_path / "effects", tmp_path / "hold", new_tag()
    ids, orphans = {}, {}
    try:
        daemon = start_daemon(pids, home, tag, tmp_path / "first.log", "--lease", "1")
        for lane in ("main", "net"):
            source = tmp_path / f"long_{lane}.sh"
            source.write_text(f'echo "$SLOTH_JOB_ID $SLOTH_ATTEMPT start" >> {effects}\n'
                              f"echo $$ > {tmp_path}/pid_{lane}_$SLOTH_ATTEMPT\n"
                              f"while [ ! -e {hold} ]; do sleep 0.02; done\n"
                              f'echo "$SLOTH_JOB_ID $SLOTH_ATTEMPT end" >> {effects}\n')
            added = subprocess.run([*CLI, "add", str(source), "--lane", lane,
                                    "--home", str(home.root)], capture_output=True,
                                   text=True, env=env_with(tag), timeout=60)
            assert added.returncode == 0, added.stderr
            ids[lane] = added.stdout.strip()
        for lane in ids:
            pidfile = tmp_path / f"pid_{lane}_1"
            orphans[lane] = int(wait_for(lambda p=pidfile: p.exists() and p.read_text().strip(),
                                         what=f"lane {lane}'s job to run"))
        daemon.send_signal(signal.SIGKILL)
        assert reap(pids, daemon) == -signal.SIGKILL
        assert all(os.path.exists(f"/proc/{pid}") for pid in orphans.values())

        start_daemon(pids, home, tag, tmp_path / "second.log", "--lease", "1")
        wait_for(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in orphans.values()),
                 what="the killed app's runs to be stopped")
        orphans.clear()  # gone: their pids may be someone else's from now on
        wait_for(lambda: all((tmp_path / f"pid_{lane}_2").exists() for lane in ids),
                 what="each lane's job to run again")
        hold.touch()
        wait_for(lambda: all(jobs_with_history(home.db)[job_id][0].state == State.DONE
                             for job_id in ids.values()), what="both jobs to end")
        lines = effects.read_text().splitlines()
        for lane, job_id in ids.items():
            job, kinds = jobs_with_history(home.db)[job_id]
            assert job.lane == lane
            assert kinds.count("reclaimed") == 1 and kinds.count("completed") == 1, kinds
            assert [line for line in lines if line.startswith(job_id)] == [
                f"{job_id} 1 start", f"{job_id} 2 start", f"{job_id} 2 end"]
    finally:
        hold.touch()
        for pid in orphans.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_run_found_running_after_a_crash_counts_its_attempt_though_started_was_never_noted(
        tmp_path, pids):
    """The app died between a run's spawn and its `started` note: the row holds the
    run's token and no pid. The next start finds the run's process by its token and
    stops it: that run started, so its job is reclaimed with its attempt counted (and
    a history that says so), never given back as a run that "never started"."""
    from sloth_tray.daemon.procs import RUN_TOKEN_ENV
    from sloth_tray.store.queue import Queue

    home = locate(tmp_path / "home").ensure()
    tag, token = new_tag(), "crashed-run-token"
    source = tmp_path / "once.sh"
    source.write_text(f'echo "$SLOTH_ATTEMPT" >> {tmp_path / "effects"}\n')
    added = subprocess.run([*CLI, "add", str(source), "--home", str(home.root)],
                           capture_output=True, text=True, env=env_with(tag), timeout=60)
    assert added.returncode == 0, added.stderr
    job_id = added.stdout.strip()
    with Queue(home.db) as queue:  # claimed as the engine claims, by an app that died
        assert queue.claim("gone:1", token=token).id == job_id
    # Its script's process, spawned before the app died, still there.
    leftover = pids.popen(["sleep", "300"], env={**env_with(tag), RUN_TOKEN_ENV: token,
                                                  "SLOTH_HOME": str(home.root)})
    start_daemon(pids, home, tag, tmp_path / "app.log")
    wait_for(lambda: leftover.poll() is not None, what="the crashed run's process to be stopped")
    wait_for(lambda: jobs_with_history(home.db)[job_id][0].state == State.DONE,
             what="the job to run again and end")
    job, kinds = jobs_with_history(home.db)[job_id]
    assert job.attempts == 2, kinds
    assert kinds[:4] == ["pushed", "claimed", "started", "reclaimed"], kinds
    assert "released" not in kinds, kinds
    assert (tmp_path / "effects").read_text().split() == ["2"]
