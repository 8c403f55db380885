"""A drop into an idle app is claimed in the commit that queues it: one commit between
the drop and its start, not two. A real Daemon (its inbox, its engine) whose loop never
runs, so only that commit can start the job."""

from __future__ import annotations

import os
import sys
import threading

import pytest
from helpers.processes import wait_for

from sloth_tray.daemon import runner
from sloth_tray.daemon.app import Daemon
from sloth_tray.errors import SlothError
from sloth_tray.store.queue import Queue, State

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")


def rename_in(home, name: str, text: str) -> None:
    staged = home.root / f".{name}.draft"
    staged.write_text(f"#!/bin/sh\n{text}")
    os.rename(staged, home.jobs / name)


def ended(daemon: Daemon, name: str):
    """The job named `name` once it has ended and its lane's worker is gone."""
    jobs = [job for job in daemon.queue.jobs() if job.name == name]
    if jobs and jobs[0].state in (State.DONE, State.FAILED) and not daemon.engine._working():
        return jobs[0]
    return None


def test_a_drop_into_an_idle_app_starts_with_no_pass_of_the_loop(home, tmp_path):
    marks = tmp_path / "marks"
    with Daemon(home) as daemon:  # the engine's loop is never run here
        rename_in(home, "hello.sh", f"echo ran >> {marks}\n")
        job = wait_for(lambda: ended(daemon, "hello"), what="the drop to run")
        history = [event.kind for event in daemon.queue.history(job.id)]
    assert job.state == State.DONE and marks.read_text() == "ran\n"
    assert history.count("claimed") == 1 and job.attempts == 1, history


def test_a_drop_into_a_paused_app_is_queued_by_its_push_and_not_claimed(home, tmp_path):
    marks = tmp_path / "marks"
    with Daemon(home) as daemon:
        daemon.queue.set_paused(True)
        rename_in(home, "held.sh", f"echo ran >> {marks}\n")
        # The claim would have been made in the commit that queued it: once the job is
        # there, that commit is whole.
        (job,) = wait_for(lambda: daemon.queue.jobs(), what="the drop to be queued")
        history = [event.kind for event in daemon.queue.history(job.id)]
    assert job.state == State.PENDING and "claimed" not in history, history
    assert not marks.exists()


def test_a_claim_made_with_a_push_whose_commit_fails_is_undone_with_it(
        home, tmp_path, monkeypatch):
    marks = tmp_path / "marks"
    with Daemon(home) as daemon:
        real = daemon.engine.claim_with_push
        failed: list[bool] = []

        def claimed_then_the_commit_fails(lanes):
            claimed = real(lanes)
            if not failed:
                failed.append(True)
                assert claimed, "the drop was claimed inside the push's commit"
                raise SlothError("the queue is locked by another program")
            return claimed

        monkeypatch.setattr(daemon.engine, "claim_with_push", claimed_then_the_commit_fails)
        rename_in(home, "once.sh", f"echo ran >> {marks}\n")
        # Given back to the jobs folder, then taken again after a settle time.
        job = wait_for(lambda: ended(daemon, "once"), timeout=20, what="the drop to run")
        history = [event.kind for event in daemon.queue.history(job.id)]
    assert failed and job.state == State.DONE and marks.read_text() == "ran\n"
    assert history.count("claimed") == 1 and job.attempts == 1, history


def test_a_drop_is_prepared_while_its_claim_commits_and_spawned_only_after(
        home, tmp_path, monkeypatch):
    """The worker of a drop claimed with its push starts at once and prepares the run
    during that commit (its fsync is the longest wait on the way), but spawns nothing
    until the commit holds its claim: held open here until the worker asks."""
    marks = tmp_path / "marks"
    asked = threading.Event()
    spawned_while_open: list[object] = []
    real_holds, real_popen = Queue.holds_run, runner.subprocess.Popen

    def holds_run(queue, *args):
        asked.set()
        return real_holds(queue, *args)

    monkeypatch.setattr(Queue, "holds_run", holds_run)
    with Daemon(home) as daemon:
        real_claim = daemon.engine.claim_with_push
        open_commit = threading.Event()

        def popen(*args, **kwargs):
            if open_commit.is_set():
                spawned_while_open.append(args)
            return real_popen(*args, **kwargs)

        def claimed_then_held(lanes):
            claimed = real_claim(lanes)
            open_commit.set()
            try:
                assert asked.wait(10), "the worker never asked whether its claim holds"
            finally:
                open_commit.clear()
            return claimed

        monkeypatch.setattr(runner.subprocess, "Popen", popen)
        monkeypatch.setattr(daemon.engine, "claim_with_push", claimed_then_held)
        rename_in(home, "held.sh", f"echo ran >> {marks}\n")
        job = wait_for(lambda: ended(daemon, "held"), what="the drop to run")
        history = [event.kind for event in daemon.queue.history(job.id)]
    assert asked.is_set() and spawned_while_open == []
    assert job.state == State.DONE and marks.read_text() == "ran\n"
    assert history.count("claimed") == 1 and job.attempts == 1, history
