"""A job's key: adding the same key again finds the job that has it and adds nothing,
across processes racing and across restarts (the unique index decides); and a job's
source: who added it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers.processes import run_sloth, wait_for

from sloth_tray.store import spool
from sloth_tray.store.queue import Queue
from sloth_tray.store.rows import DROPPED, KEY_MAX, SHELL


def test_a_key_pushed_twice_is_one_job_whatever_its_state(queue):
    first = queue.push("summarise", key="thread-42", source="Claude Desktop")
    assert queue.push("summarise again", key="thread-42") == first
    queue.cancel(first)
    assert queue.push("summarise", key="thread-42") == first  # cancelled: still the one
    assert [job.id for job in queue.jobs()] == [first]
    job = queue.get(first)
    assert (job.key, job.source, job.name) == ("thread-42", "Claude Desktop", "summarise")
    assert queue.push("other", key="thread-43") != first  # another key, another job
    assert queue.push("no key") != queue.push("no key")  # no key: each push a job


def test_a_key_lives_as_long_as_its_job(queue, clock):
    first = queue.push("once", key="k")
    owner = "test"
    claimed = queue.claim(owner)
    queue.complete(claimed.id, owner)
    clock.advance(10)
    assert [job_id for job_id, _ in queue.prune(before=clock())] == [first]
    assert queue.push("once", key="k") != first  # pruned: the key is free again


def test_a_key_over_its_length_is_refused_in_one_sentence(queue):
    with pytest.raises(Exception, match=f"a key is at most {KEY_MAX} characters"):
        queue.push("x", key="k" * (KEY_MAX + 1))
    assert queue.jobs() == []


def test_a_series_next_run_keeps_its_source_but_not_its_key(queue, clock):
    first = queue.push("hourly", key="h", source="Cursor", options={"every": 3600})
    queue.complete(queue.claim("test").id, "test")
    nxt = [job for job in queue.jobs() if job.id != first][0]
    assert (nxt.key, nxt.source) == (None, "Cursor")


RACER = """
import sys
from pathlib import Path
from sloth_tray.paths import locate
from sloth_tray.store import spool
home = locate(Path(sys.argv[1]))
go = Path(sys.argv[2])
while not go.exists():
    pass
print(spool.add_command(home, ["echo", "hi"], cwd="/", key="race", by="racer"))
"""


def test_two_adders_racing_with_one_key_make_one_job(home, pids):
    go = home.root / "go"
    racers = [pids.popen([sys.executable, "-c", RACER, str(home.root), str(go)],
                         stdout=subprocess.PIPE, text=True) for _ in range(4)]
    go.touch()
    ids = {racer.communicate(timeout=60)[0].strip() for racer in racers}
    assert all(racer.returncode == 0 for racer in racers)
    with Queue(home.db) as queue:
        assert [job.id for job in queue.jobs()] == list(ids)
    staged = [p.name for p in home.spool.iterdir()]
    assert staged == list(ids)  # the losers' copies are gone, not left for start-up


def test_add_with_a_key_again_prints_the_same_id_and_adds_nothing(home, tmp_path):
    script = tmp_path / "summarise.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    first = run_sloth(home, "add", "--key", "thread-42", str(script))
    again = run_sloth(home, "add", "--home", str(home.root), "--key", "thread-42", "--",
                      "echo", "other")
    job_id = first.stdout.strip()
    assert again.stdout.strip() == job_id
    assert again.stderr == (f"sloth-tray: key 'thread-42' is summarise ({job_id})'s, pending: "
                            "nothing was added\n")
    listed = json.loads(run_sloth(home, "list", "--json").stdout)
    assert [(job["id"], job["key"], job["source"]) for job in listed] == \
        [(job_id, "thread-42", SHELL)]
    shown = run_sloth(home, "show", job_id).stdout
    assert "key         thread-42" in shown and "from the shell" in shown
    assert json.loads(run_sloth(home, "show", job_id, "--json").stdout)["key"] == "thread-42"
    assert len(list(home.spool.iterdir())) == 1


def test_add_with_a_key_too_long_is_a_usage_mistake(home):
    done = run_sloth(home, "add", "--key", "k" * 201, "--home", str(home.root), "--", "true",
                     check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().endswith("a key is at most 200 characters (this one has 201)")
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_dropped_job_says_it_was_dropped(home, pids):
    from helpers.processes import start_daemon

    start_daemon(pids, home)
    (home.jobs / "tidy.sh").write_text("#!/bin/sh\ntrue\n")
    job = wait_for(lambda: json.loads(run_sloth(home, "list", "--json").stdout),
                   what="the drop to be queued")[0]
    assert job["source"] == DROPPED and job["key"] is None
    assert "dropped into the jobs folder" in run_sloth(home, "show", job["id"]).stdout


def test_spool_add_returns_already_added_for_a_key_hit(home, tmp_path):
    first = spool.add_command(home, ["true"], cwd=str(tmp_path), key="k")
    again = spool.add_command(home, ["false"], cwd=str(tmp_path), key="k")
    assert not isinstance(first, spool.AlreadyAdded)
    assert isinstance(again, spool.AlreadyAdded) and again == first
