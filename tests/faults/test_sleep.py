"""Fault 2: a laptop that sleeps mid-job, simulated by freezing the daemon and its
job with SIGSTOP for longer than the lease, then thawing them with SIGCONT.

Invariant: the job's side effect happens exactly once, its history has no
`reclaimed` but a `renewed`, it ends done after one attempt.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from faultkit import jobs_with_history, new_tag, reap, start_daemon, sweep
from helpers.processes import wait_for

from sloth_tray.paths import locate
from sloth_tray.store.queue import State

# 1 s leases: a busy neighbour would make them lapse (tests/conftest.py)
pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc"),
              pytest.mark.short_lease]

TRIALS = 12
AT_ONCE = 4  # trials run side by side, each with a daemon and a home of its own
SEED = 7
LEASE = 1.0


def one_trial(number: int, seed: int, root, pids, tag: str) -> dict:
    rng = random.Random(seed)
    home = locate(root / f"home{number}").ensure()
    effects, go = root / f"effects{number}", root / f"go{number}"
    daemon = start_daemon(pids, home, tag, root / f"daemon{number}.log", "--lease", f"{LEASE:g}")
    try:
        staging = root / f"nap{number}.sh"
        staging.write_text(f'echo "$SLOTH_JOB_ID $SLOTH_ATTEMPT $$" >> {effects}\n'
                           f"while [ ! -e {go} ]; do sleep 0.05; done\necho finished\n")
        os.rename(staging, home.jobs / "nap.sh")
        line = wait_for(lambda: effects.exists() and effects.read_text().strip(),
                        what="the job to start")
        job_id, child = line.split()[0], int(line.split()[2])
        wait_for(lambda: job_id in (jobs := jobs_with_history(home.db))
                 and "started" in jobs[job_id][1], what="the attempt to be recorded")
        # The scenario: a random point in the heartbeat cycle (one beat every lease/3)...
        time.sleep(rng.uniform(0.0, LEASE / 3))
        frozen = [(os.kill, daemon.pid), (os.killpg, child)]
        rng.shuffle(frozen)
        for send, pid in frozen:
            send(pid, signal.SIGSTOP)
        stopped_for = rng.uniform(1.5, 2.0)
        try:
            # ...then the lid is closed: this real time passing, longer than the 1 s
            # lease, with both frozen, IS the fault under test (not a wait for something).
            time.sleep(stopped_for)
        finally:
            rng.shuffle(frozen)
            for send, pid in frozen:
                send(pid, signal.SIGCONT)
        thawed = time.time()
        # Awake again: its next heartbeat renews the lease. (Waited for on the lease
        # itself, the `renewed` event checked after: a freeze that landed inside a
        # heartbeat's write once renewed the lease without the event.)
        wait_for(lambda: jobs_with_history(home.db)[job_id][0].lease_until > thawed + LEASE / 2,
                 what="the thawed daemon to renew the lease")
        go.touch()
        wait_for(lambda: jobs_with_history(home.db)[job_id][0].state == State.DONE,
                 what="the job to finish")
        job, kinds = jobs_with_history(home.db)[job_id]
        daemon.send_signal(signal.SIGTERM)
        assert reap(pids, daemon) == 0
        return {"trial": number, "effects": effects.read_text().count(job_id),
                "kinds": kinds, "state": job.state, "attempts": job.attempts,
                "result": job.result, "stopped_for": stopped_for}
    finally:
        if daemon.poll() is None:
            daemon.kill()


def test_sigstop_past_the_lease_then_sigcont_runs_each_job_exactly_once(tmp_path, pids):
    rng = random.Random(SEED)
    tag = new_tag()
    try:
        with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
            futures = [pool.submit(one_trial, n, rng.randrange(2**32), tmp_path, pids, tag)
                       for n in range(TRIALS)]
            trials = [future.result() for future in futures]
    finally:
        sweep(tag)
    bad = [t for t in trials
           if t["effects"] != 1 or "reclaimed" in t["kinds"] or t["state"] != State.DONE
           or t["attempts"] != 1 or t["kinds"].count("completed") != 1
           or t["result"] != "finished" or "renewed" not in t["kinds"]]
    assert not bad, bad
    shortest = min(t["stopped_for"] for t in trials)
    longest = max(t["stopped_for"] for t in trials)
    print(f"\nSIGSTOP/SIGCONT past the lease: {TRIALS} trials (lease {LEASE:g} s, frozen "
          f"{shortest:.1f}-{longest:.1f} s), {TRIALS} renewed, 0 reclaimed, "
          f"0 side effects doubled, {TRIALS} done after 1 attempt")
