"""interrupt=yes: a running job whose condition is lost is stopped and put back,
its attempt not counted, and waits until the condition holds again."""

from __future__ import annotations

import sys
import threading

import pytest
from helpers.processes import alive, wait_for

from sloth_tray.daemon.engine import Engine
from sloth_tray.jobs.conditions import Conditions
from sloth_tray.jobs.header import BadJobFile, parse_options
from sloth_tray.paths import locate
from sloth_tray.store.queue import Queue, State

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")


def test_interrupt_is_yes_or_no_and_only_beside_require():
    assert parse_options(b"# sloth: require=ac interrupt=yes") == {"require": "ac",
                                                                  "interrupt": True}
    assert parse_options(b"# sloth: require=ac interrupt=no") == {"require": "ac",
                                                                 "interrupt": False}
    with pytest.raises(BadJobFile, match="interrupt applies only beside require="):
        parse_options(b"# sloth: interrupt=yes")
    with pytest.raises(BadJobFile, match="bad value 'maybe' for interrupt: use yes or no"):
        parse_options(b"# sloth: require=ac interrupt=maybe")


def run_engine(home, conditions):
    queue = Queue(home.db)
    engine = Engine(queue, home, conditions=conditions)
    thread = threading.Thread(target=engine.run, name="engine")
    thread.start()
    return queue, engine, thread


@pytest.mark.parametrize("interrupt", [True, False])
def test_losing_the_condition_stops_and_releases_only_an_interruptible_job(tmp_path, pids,
                                                                          interrupt):
    home = locate(tmp_path / "home").ensure()
    runs = tmp_path / "runs"
    script = home.spool / "backup.sh"
    script.write_text(f"echo $$ >> {runs}\nsleep 30\n")
    conditions = Conditions()
    queue, engine, thread = run_engine(home, conditions)
    try:
        job_id = queue.push("backup", script=str(script),
                            options={"require": "ac", "interrupt": interrupt})
        engine.wake()
        first = pids.add(int(wait_for(lambda: runs.exists() and runs.read_text().split(),
                                      what="the job to start")[0]))
        conditions.set("ac", False)  # unplugged
        if not interrupt:
            assert queue.get(job_id).state == State.RUNNING
            return
        wait_for(lambda: queue.get(job_id).state == State.PENDING, what="the job to go back")
        job = queue.get(job_id)
        assert job.attempts == 0 and queue.history(job_id)[-1].kind == "released"
        assert "AC power" in queue.history(job_id)[-1].detail
        wait_for(lambda: not alive(first), timeout=10, what="the job's process to stop")
        wait_for(lambda: engine.snapshot.waiting and engine.snapshot.waiting[0].waiting_for,
                 what="the engine to show the job waiting for AC power")
        assert len(runs.read_text().split()) == 1, "it ran again while unplugged"
        conditions.set("ac", True)  # plugged in again: it runs again
        wait_for(lambda: len(runs.read_text().split()) == 2, what="the job to start again")
        pids.add(int(runs.read_text().split()[1]))
    finally:
        engine.stop()
        thread.join(timeout=20)
        assert not thread.is_alive()
