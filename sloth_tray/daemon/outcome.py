"""An attempt's outcome: what the runner saw, and the one place that records it.

Two sides, two names each: the runner returns an Attempt (its Ending and detail);
`record` writes it and returns what it Recorded (its Effect on the job and detail).
The runner only runs: it writes `started` and heartbeats, and returns an
Attempt saying how the run ended. `record` is the only code that turns an
attempt into `complete`, `fail` or `release`, so every ending, including one
caused by a bug of ours, is written the same way, owner-checked, with its
Reason as a column (as pueue keeps a task's status apart from its result).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum

from sloth_tray.errors import UnknownJob
from sloth_tray.store.queue import Job, Queue
from sloth_tray.store.reasons import Reason
from sloth_tray.store.states import State

log = logging.getLogger("sloth_tray")


class Ending(StrEnum):
    """How one run of a job's script ended, as the runner saw it."""

    SUCCEEDED = "succeeded"  # exit 0; detail is the last line of its output
    FAILED = "failed"  # detail says why; reason says what kind of failure
    LATER = "later"  # exit 75 (EX_TEMPFAIL): run it again later; the attempt does not count
    LEASE_LOST = "lease_lost"  # cancelled, or another worker holds it: nothing to record
    STOPPED = "stopped"  # the app is quitting: the lease goes back, the attempt uncounted
    INTERRUPTED = "interrupted"  # a condition it requires was lost: back, uncounted
    WAITING = "waiting"  # a step recorded a wait (sleep, ask): the job waits; detail: token


@dataclass(frozen=True)
class Attempt:
    ending: Ending
    detail: str = ""
    reason: Reason | None = None  # for FAILED
    code: int | None = None  # the exit code (negative: the signal), when it exited

    @classmethod
    def failed(cls, reason: Reason, detail: str, code: int | None = None) -> Attempt:
        return cls(Ending.FAILED, detail, reason, code)


def could_not_run(job: Job, exc: Exception) -> Attempt:
    """A bug of ours on a job's way: said in the app's log, and the attempt failed with
    a sentence, not the daemon taken down."""
    log.exception("running %s (%s) failed", job.name, job.id, exc_info=exc)
    return Attempt.failed(Reason.INTERNAL_ERROR, f"sloth-tray could not run it: {exc}")


class Effect(StrEnum):
    """What recording an attempt did to the job (the runner's side is the Ending)."""

    DONE = "done"  # completed
    RETRYING = "retrying"  # failed; the queue will try again later
    FAILED = "failed"  # failed for good
    LOST = "lost"  # no longer ours (cancelled, taken over, removed): we recorded nothing
    RELEASED = "released"  # stopped for a clean quit; due again at the next start
    LATER = "later"  # the script asked to be run later; due again after a backoff
    WAITING = "waiting"  # a step waits (a sleep, an ask): no lease, no process, no attempt


@dataclass(frozen=True)
class Recorded:
    """What `record` wrote: its effect on the job, and the detail it wrote with it."""

    effect: Effect
    detail: str


def lost(queue: Queue, job: Job) -> Recorded:
    """The job is no longer ours to record: say what became of it, as the queue has it
    now (the user cancelled it, another worker took it over, it was pruned...)."""
    try:
        now = queue.get(job.id)
    except UnknownJob:
        return Recorded(Effect.LOST, "it was removed from the queue while it ran")
    if now.state == State.CANCELLED:
        return Recorded(Effect.LOST, "it was cancelled while it ran")
    if now.state == State.RUNNING and now.lease_owner:
        return Recorded(Effect.LOST, f"another worker holds it now ({now.lease_owner})")
    return Recorded(Effect.LOST, f"it was changed elsewhere while it ran (now {now.state})")


def _said(queue: Queue, job: Job, state: State | None, meant: Recorded) -> Recorded:
    """What a complete or release did: `meant`; failed instead, when the run ended in a
    step that asks whether it happened (step_unsure); lost, when it was not ours."""
    if state is None:
        return lost(queue, job)
    if state == State.FAILED:
        return Recorded(Effect.FAILED, queue.get(job.id).last_error or meant.detail)
    return meant


def record(queue: Queue, owner: str, job: Job, attempt: Attempt) -> Recorded:
    """Write the attempt's outcome, owner-checked: complete, fail or release.

    Raises DatabaseProblem when the queue cannot take it now (the caller
    decides whether to wait and try again).
    """
    if attempt.ending == Ending.SUCCEEDED:
        return _said(queue, job, queue.complete(job.id, owner, attempt.detail),
                     Recorded(Effect.DONE, attempt.detail))
    if attempt.ending == Ending.STOPPED:
        return _said(queue, job, queue.release(job.id, owner),
                     Recorded(Effect.RELEASED, "stopped for quit; due again at the next start"))
    if attempt.ending == Ending.INTERRUPTED:
        return _said(queue, job, queue.release(job.id, owner, attempt.detail),
                     Recorded(Effect.RELEASED, attempt.detail))
    if attempt.ending == Ending.LATER:
        state = queue.later(job.id, owner, attempt.detail)
        if state is None:
            return lost(queue, job)
        if state == State.FAILED:
            return Recorded(Effect.FAILED, queue.get(job.id).last_error or attempt.detail)
        return Recorded(Effect.LATER, attempt.detail)
    if attempt.ending == Ending.WAITING:
        state = queue.wait(job.id, owner, attempt.detail)
        if state is None:
            return lost(queue, job)
        if state == State.FAILED:
            return Recorded(Effect.FAILED, queue.get(job.id).last_error or "")
        history = queue.history(job.id)
        return Recorded(Effect.WAITING, history[-1].detail if history else "waiting")
    if attempt.ending == Ending.LEASE_LOST:
        return lost(queue, job)
    reason = attempt.reason or Reason.INTERNAL_ERROR
    state = queue.fail(job.id, owner, attempt.detail, reason)
    if state is None:
        return lost(queue, job)
    effect = Effect.FAILED if state == State.FAILED else Effect.RETRYING
    return Recorded(effect, attempt.detail)
