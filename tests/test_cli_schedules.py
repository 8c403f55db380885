"""Jobs that repeat, at the command line: `list` folds a series' done runs, bulk
actions by name, a cancel that ends a series says so, and a series' own pause."""

from __future__ import annotations

import json

from helpers.processes import run_sloth as sloth
from helpers.queues import run_once

from sloth_tray.store.queue import Queue

SCRIPT = "/spool/0123456789ab/true.sh"


def series_with_runs(home, done: int, failed: int = 0) -> Queue:
    """A series `true` (every=1h) that ran `done` times ok, then failed `failed` times."""
    queue = Queue(home.db, max_attempts=1)
    queue.push("true", script=SCRIPT, options={"every": 3600.0})
    for n in range(done + failed):
        if n:
            queue.run_now(queue.jobs("pending")[0].id)
        if n < done:
            run_once(queue)
        else:
            job = queue.claim("w")
            queue.fail(job.id, "w", "exit status 3")
    return queue


def test_list_folds_a_series_done_runs_into_its_newest(home):
    with series_with_runs(home, done=14, failed=2) as queue:
        queue.push("alone", options={})
        newest_done = queue.jobs("done")[0].id
    shown = sloth(home, "list").stdout.splitlines()
    assert len(shown) == 1 + 1 + 1 + 2 + 1  # header, waiting, newest done, failed, alone
    [folded] = [line for line in shown if newest_done[:6] in line]
    assert "+13 earlier runs" in folded
    assert sum(" failed " in line for line in shown) == 2
    assert len(sloth(home, "list", "--all-runs").stdout.splitlines()) == 1 + 1 + 14 + 2 + 1
    rows = json.loads(sloth(home, "list", "--json").stdout)
    assert [row["earlier_runs"] for row in rows if row["id"] == newest_done] == [13]
    assert len(rows) == 5
    everything = json.loads(sloth(home, "list", "--json", "--all-runs").stdout)
    assert len(everything) == 18 and "earlier_runs" not in everything[0]
    # --state done: the fold still holds, --limit counts the rows shown
    assert len(json.loads(sloth(home, "list", "--json", "--state", "done").stdout)) == 1
    assert len(json.loads(sloth(home, "list", "--json", "--limit", "2").stdout)) == 2


def test_bulk_actions_by_name_and_the_nearest_name(home):
    with series_with_runs(home, done=2, failed=8):
        pass
    typo = sloth(home, "cancel", "--name", "ture", check=False)
    assert typo.returncode == 1 and "did you mean true?" in typo.stderr
    assert sloth(home, "run-now", "--name", "true").stdout.strip() == \
        "made due now 1 job named true"
    retried = sloth(home, "retry", "--name", "true").stdout
    assert "retried 8 jobs named true" in retried
    cancelled = sloth(home, "cancel", "--name", "true").stdout
    assert "cancelled 9 jobs named true" in cancelled  # the 8 retried and the waiting run
    assert "that ended the series true (every 1h): `sloth-tray retry" in cancelled
    with Queue(home.db) as queue:
        assert queue.jobs("pending") == [] and len(queue.jobs("cancelled")) == 9
    assert "nothing to cancel" in sloth(home, "cancel", "--name", "true").stdout
    mixed = sloth(home, "cancel", "--name", "true", "abc", check=False)
    assert mixed.returncode == 2 and "one of them" in mixed.stderr


def test_cancel_of_a_series_run_says_it_ended_the_series(home):
    with Queue(home.db) as queue:
        job_id = queue.push("feed", script=SCRIPT, options={"at": "mon 09:00"})
    said = sloth(home, "cancel", job_id).stdout
    assert f"that ended the series feed (mon@09:00): `sloth-tray retry {job_id}` starts it again" \
        in said


def test_a_series_paused_on_its_own_stays_paused_across_a_restart(home):
    with series_with_runs(home, done=1) as queue:
        queue.push("other", options={})
    assert "paused the series true" in sloth(home, "pause", "--series", "true").stdout
    # The queue's file opened again, as a later start opens it: the series claims nothing
    with Queue(home.db) as queue:
        queue.run_now(queue.jobs_named("true", ["pending"])[0].id)
        other = queue.claim("w")
        assert other.name == "other"
        queue.complete(other.id, "w")
        assert queue.claim("w") is None  # the series' due run is held
    rows = json.loads(sloth(home, "schedules", "--json").stdout)
    assert rows[0]["state"] == "paused" and rows[0]["waiting_for"] == "this schedule's pause"
    typo = sloth(home, "pause", "--series", "treu", check=False)
    assert typo.returncode == 2 and "did you mean true?" in typo.stderr
    assert "resumed the series true" in sloth(home, "resume", "--series", "true").stdout
    with Queue(home.db) as queue:
        assert queue.claim("w").name == "true"
