"""Lanes, model-checked: Hypothesis drives one queue file through pushes into lanes,
claims from any lane or one, completions, failures, give-backs, leases that run out,
pauses and resumes of one lane or all, lanes renamed and lanes whose folder went,
and restarts; after every step the queue is held to its user's rules:

- never two running jobs in one lane;
- a paused lane claims nothing (nor does any lane of a paused queue);
- a claim takes a job whenever one is free to run (due, its lane free and not
  paused), and only such a job;
- every job is in exactly one lane, the one it was dropped into (or the new name
  of that lane), and each lane's counts add up to the queue's;
- a pause holds across restarts; resuming one lane of a paused queue leaves the
  others paused; a renamed lane keeps its jobs and its pause.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

import pytest
from helpers.clock import FakeClock
from helpers.examples import examples
from helpers.scratch import scratch_folder
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from sloth_tray.store.queue import Queue
from sloth_tray.store.reasons import Reason
from sloth_tray.store.states import State

START = 1_700_000_000.0
LEASE = 10.0
LANES = ["main", "net", "web", "mail"]
OWNERS = ["app", "other"]


@dataclass
class Seen:
    """A job as its user saw it go in and move."""

    id: str
    lane: str
    state: State
    due: float
    lease_until: float | None = None
    owner: str | None = None


class LaneMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = scratch_folder("sloth-lanes-")
        self.path = self.tmp / "queue.db"
        self.clock = FakeClock(START)
        self.queue = self._open()
        self.jobs: list[Seen] = []
        self.paused_all = False
        self.paused: set[str] = set()  # paused on their own
        self.resumed: set[str] = set()  # resumed on their own while all were paused

    def _open(self) -> Queue:
        return Queue(self.path, clock=self.clock, lease_seconds=LEASE, max_attempts=3,
                     synchronous="OFF")

    def teardown(self) -> None:
        self.queue.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- what the user expects --------------------------------------------------------

    def _lane_paused(self, lane: str) -> bool:
        return lane in self.paused or (self.paused_all and lane not in self.resumed)

    def _free_to_run(self, job: Seen, lane: str | None) -> bool:
        """Whether a claim (of `lane`, or of any) may take this job now."""
        if (lane is not None and job.lane != lane) or self._lane_paused(job.lane):
            return False
        now = self.clock.now
        if job.state == State.RUNNING:  # its holder is gone: its lease ran out
            return job.lease_until is not None and job.lease_until <= now
        busy = any(other.state == State.RUNNING and other.lane == job.lane
                   for other in self.jobs)
        return job.state == State.PENDING and job.due <= now and not busy

    def _running(self) -> list[Seen]:
        return [job for job in self.jobs if job.state == State.RUNNING]

    def _lapsed_at_their_last_attempt(self) -> None:
        """A claim ends for good a job whose lease ran out on its last attempt."""
        for seen in self._running():
            if seen.lease_until is not None and seen.lease_until <= self.clock.now:
                job = self.queue.get(seen.id)
                if job.state == State.FAILED:
                    assert (job.attempts, job.reason) == (3, Reason.LEASE_EXPIRED)
                    seen.state, seen.owner, seen.lease_until = State.FAILED, None, None

    # -- rules --------------------------------------------------------------------------

    @rule(lane=st.sampled_from(LANES), delay=st.sampled_from([0.0, 0.0, 5.0]))
    def push(self, lane: str, delay: float) -> None:
        job_id = self.queue.push(f"job{len(self.jobs)}", script="/bin/true", delay=delay,
                                 lane=lane)
        self.jobs.append(Seen(job_id, lane, State.PENDING, self.clock.now + delay))

    @rule(lane=st.sampled_from([None, None, *LANES]), owner=st.sampled_from(OWNERS))
    def claim(self, lane: str | None, owner: str) -> None:
        free = [job for job in self.jobs if self._free_to_run(job, lane)]
        job = self.queue.claim(owner, lane=lane)
        self._lapsed_at_their_last_attempt()
        if job is None:
            assert not free, f"nothing claimed though {[j.id for j in free]} were free to run"
            return
        seen = next(s for s in self.jobs if s.id == job.id)
        assert seen in free, (f"claimed {job.id} of lane {seen.lane} ({seen.state}), "
                              "which was not free to run")
        assert job.lane == seen.lane
        seen.state, seen.owner, seen.lease_until = State.RUNNING, owner, self.clock.now + LEASE

    @rule(pick=st.integers(0, 50), how=st.sampled_from(["complete", "fail", "release"]))
    def end(self, pick: int, how: str) -> None:
        running = self._running()
        if not running:
            return
        job = running[pick % len(running)]
        if job.lease_until is not None and job.lease_until <= self.clock.now:
            return  # another claim may have taken it back: the holder's word may not count
        if how == "complete":
            assert self.queue.complete(job.id, job.owner) == State.DONE
            job.state = State.DONE
        elif how == "fail":  # tried again after a back-off, or failed for good
            job.state = self.queue.fail(job.id, job.owner, "it failed", Reason.EXIT_CODE)
            assert job.state in (State.PENDING, State.FAILED)
            job.due = self.queue.get(job.id).not_before
            assert job.state == State.FAILED or job.due > self.clock.now
        else:
            assert self.queue.release(job.id, job.owner) == State.PENDING
            job.state, job.due = State.PENDING, min(job.due, self.clock.now)
        job.owner = job.lease_until = None

    @rule(seconds=st.sampled_from([1.0, 6.0, 11.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule(lane=st.sampled_from([None, *LANES]))
    def pause(self, lane: str | None) -> None:
        self.queue.set_paused(True, lane)
        if lane is None:  # every lane, those resumed on their own too
            self.paused_all, self.resumed = True, set()
        else:
            self.paused.add(lane)
            self.resumed.discard(lane)

    @rule(lane=st.sampled_from([None, *LANES]))
    def resume(self, lane: str | None) -> None:
        self.queue.set_paused(False, lane)
        if lane is None:  # every lane, those paused one by one too
            self.paused_all, self.paused, self.resumed = False, set(), set()
            return
        self.paused.discard(lane)
        if self.paused_all:  # that lane alone: the others, and lanes made later, stay paused
            self.resumed.add(lane)

    @rule(old=st.sampled_from(LANES[1:]), new=st.sampled_from(LANES[1:]))
    def rename(self, old: str, new: str) -> None:
        """A lane folder renamed (never main: that is the jobs folder itself)."""
        if old == new:
            return
        new_runs = any(j.lane == new and j.state == State.RUNNING for j in self.jobs)
        self.queue.rename_lane(old, new)
        for job in self.jobs:
            if job.lane == old and not (job.state == State.RUNNING and new_runs):
                job.lane = new
        # The renamed lane's word on the pause goes with it; a pause said of either wins.
        if old in self.paused or new in self.paused:
            self.paused.add(new)
            self.resumed.discard(new)
        elif old in self.resumed:
            self.resumed.add(new)
        self.paused.discard(old)
        self.resumed.discard(old)

    @rule(lane=st.sampled_from(LANES[1:]))
    def folder_removed(self, lane: str) -> None:
        self.queue.forget_lane(lane)

    @rule()
    def restart(self) -> None:
        self.queue.close()
        self.queue = self._open()

    # -- the user's rules, after every step ---------------------------------------------

    @invariant()
    def one_running_job_per_lane(self) -> None:
        with self.queue._autocommit() as db:
            doubled = db.execute("SELECT lane, count(*) FROM jobs WHERE state = 'running' "
                                 "GROUP BY lane HAVING count(*) > 1").fetchall()
        assert not doubled, f"two running jobs in one lane: {doubled}"

    @invariant()
    def every_job_is_in_its_one_lane(self) -> None:
        for seen in self.jobs:
            assert self.queue.get(seen.id).lane == seen.lane
        known = set(self.queue.lanes())
        live = {j.lane for j in self.jobs if j.state in (State.PENDING, State.RUNNING,
                                                          State.FAILED)}
        assert live <= known, f"lanes with jobs not listed: {live - known}"
        summary = self.queue.summary()
        assert list(summary["lanes"]) == self.queue.lanes()
        for state in ("pending", "running", "failed"):  # live jobs: their lanes are known
            per_lane = sum(lane[state] for lane in summary["lanes"].values())
            assert per_lane == summary[state], f"{state}: lanes add up to {per_lane}"
        for state in State:  # the totals: every job the user saw go in, where it is now
            seen = sum(j.state == state for j in self.jobs)
            assert summary[state.value] == seen, f"{state.value}: {summary[state.value]}"
        for state in ("done", "cancelled"):  # a forgotten lane's are in the totals only
            for name, lane in summary["lanes"].items():
                ended = sum(j.state == state for j in self.jobs if j.lane == name)
                assert lane[state] == ended, f"lane {name}: {lane[state]} {state}"

    @invariant()
    def pauses_are_as_the_user_set_them(self) -> None:
        assert self.queue.paused() == self.paused_all
        for lane in [*LANES, "made-later"]:
            assert self.queue.paused(lane) == self._lane_paused(lane), lane
        summary = self.queue.summary()
        for name, lane in summary["lanes"].items():
            assert lane["paused"] == self._lane_paused(name), name
        assert summary["due_now"] == sum(lane["due_now"] for lane in summary["lanes"].values())

    @invariant()
    def each_lane_says_how_many_of_its_jobs_are_due_now(self) -> None:
        """Due now: waiting and due, or running with its lease run out (a claim takes
        it back); none in a paused lane."""
        now = self.clock.now
        for name, lane in self.queue.summary()["lanes"].items():
            due = sum(j.lane == name and (
                (j.state == State.PENDING and j.due <= now)
                or (j.state == State.RUNNING and j.lease_until is not None
                    and j.lease_until <= now)) for j in self.jobs)
            assert lane["due_now"] == (0 if self._lane_paused(name) else due), name


LaneMachine.TestCase.settings = settings(
    max_examples=examples(100), stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestLaneModel = pytest.mark.slow(LaneMachine.TestCase)
