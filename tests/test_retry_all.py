"""What a Retry all retries is one rule (reasons.in_retry_all), and every Retry all
keeps it: `sloth-tray retry --all-failed`, the engine's (spool.retry_all_failed, the
menu's and the left click's), the menu's `Retry all failed` (whether it can be
clicked), and a burst's notification (its `Retry all` button, and what that button
retries). Held together for every Reason: a reason added later is judged here too."""

from __future__ import annotations

import pytest
from helpers.controls import Recorder
from helpers.processes import run_sloth

from sloth_tray.daemon.engine import Engine
from sloth_tray.daemon.snapshot import Snapshot
from sloth_tray.for_jobs import sloth_step
from sloth_tray.paths import locate
from sloth_tray.store import spool
from sloth_tray.store.lanes import MAIN
from sloth_tray.store.queue import Queue
from sloth_tray.store.reasons import Reason, in_retry_all
from sloth_tray.store.states import State
from sloth_tray.tray import announce, presenter

REFUSAL = "refused: it is a symbolic link; drop the script itself"


def failed_for(home, reason: Reason, name: str, lane: str = MAIN) -> str:
    """A job failed for `reason` as the queue fails it, its script in the spool and
    sound: a retry that is tried reaches the queue (the job is due again), so what
    is seen is whether a Retry all tried it, not how the try went."""
    script = home.spool / f"{name}.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    with Queue(home.db) as queue:
        if reason == Reason.REFUSED:  # born failed, as a refused drop is
            job_id = queue.push(name, script=str(script), error=REFUSAL, reason=reason,
                                lane=lane)
        elif reason == Reason.STEP_UNSURE:  # its run ended inside a step that asks
            job_id = queue.push(name, script=str(script), max_attempts=1, lane=lane)
            assert queue.claim("w", token=f"t-{name}").id == job_id
            run = sloth_step.Run(str(home.db), job_id, f"t-{name}", "w")
            sloth_step.begin(queue._db, run, "send", ask=True, kind="shell",
                             now=queue.clock())
            queue.release(job_id, "w")
        else:
            job_id = queue.push(name, script=str(script), max_attempts=1, lane=lane)
            assert queue.claim("w").id == job_id
            assert queue.fail(job_id, "w", f"failed: {reason.value}", reason) == State.FAILED
        job = queue.get(job_id)
    assert (job.state, job.reason) == (State.FAILED, reason)
    return job_id


def two_failed(tmp_path, where: str, reason: Reason,
               lane: str = MAIN) -> tuple[object, list[str]]:
    """A home of its own holding two jobs failed for `reason` (two: a burst)."""
    home = locate(tmp_path / where).ensure()
    return home, [failed_for(home, reason, f"{where}_{n}", lane) for n in (1, 2)]


def states(home, ids: list[str]) -> list[State]:
    with Queue(home.db) as queue:
        return [queue.get(job_id).state for job_id in ids]


@pytest.mark.parametrize("reason", list(Reason))
def test_every_retry_all_retries_the_jobs_the_rule_says(tmp_path, reason):
    retried = in_retry_all(reason)
    after = [State.PENDING] * 2 if retried else [State.FAILED] * 2

    # `sloth-tray retry --all-failed`, the command a user types, on a queue file
    home, ids = two_failed(tmp_path, "cli", reason)
    done = run_sloth(home, "retry", "--all-failed")
    assert states(home, ids) == after, done.stdout
    lines = done.stdout.splitlines()
    if retried:
        assert [line.split()[0] for line in lines] == ["retried", "retried"]
    else:  # never a silent skip: it says how many it left, and that nothing else was
        assert lines[0].startswith("skipped 2 ") and lines[-1] == "nothing else to retry"

    # the engine's Retry all (the menu's item, the left click, a lane's Retry failed)
    home, ids = two_failed(tmp_path, "engine", reason)
    with Queue(home.db) as queue:
        assert spool.retry_all_failed(queue) == (
            2 if retried else 0, 2 if reason == Reason.REFUSED else 0)
    assert states(home, ids) == after

    # the tray, from the snapshot the engine makes of such a queue (in a lane: its own
    # Retry failed is one more Retry all)
    home, ids = two_failed(tmp_path, "tray", reason, lane="net")
    with Queue(home.db) as queue:
        engine = Engine(queue, home)
        engine.run(drain=True)  # nothing is due: one look, published
        snapshot = engine.snapshot
    assert sorted(job.id for job in snapshot.failed_jobs) == sorted(ids)
    items = {item.key: item for item in presenter.menu(snapshot, Recorder(), now=0.0)}
    assert items["retry-all"].enabled is retried
    assert items["retry-all"].default is retried  # the left click: it, or the jobs folder
    assert items["open-jobs"].default is not retried
    lanes = {lane.key: lane for lane in items["lanes"].submenu}
    by_key = {item.key: item for item in lanes["lane:net"].submenu}
    assert by_key["retry-failed"].enabled is retried

    [notice] = announce.Announcer().failures(Snapshot(), snapshot, now=0.0)
    assert sorted(job.id for job in notice.jobs) == sorted(ids)  # one burst of both
    assert (announce.RETRY_ALL in notice.actions) is retried
    # what its button retries (tray.Tray._act)
    assert sorted(job.id for job in announce.retryable(notice.jobs)) == (
        sorted(ids) if retried else [])
