"""A lane's next run, prepared while the one before it runs.

Back to back, a lane's worker records an outcome and claims the next job in one
commit, then spawns it. What that spawn needs besides the claim (the script's head
read, the environment built, the log named: Runner.prepare) took a tenth of the
worker's time between two trivial jobs, all of it on their way. So while a run's child
works, the worker guesses the job its end will claim (Queue.next_in_lane: the claim's own
choice, read) and prepares that run as the claim will lease it, its token chosen now.

Only a guess: the prepared run is used when the claim takes that very job as
guessed (the fields a run is prepared from, the token among them) and its working
folder is still there; otherwise the claimed job is prepared as it always was. A guess
leases nothing and writes nothing, so a wrong one costs only its own time, spent while
a child ran.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

from sloth_tray.daemon import procs
from sloth_tray.daemon.runner import Prepared, Runner, SleepWatch, working_folder_gone
from sloth_tray.errors import DatabaseProblem
from sloth_tray.store.queue import Job, Queue
from sloth_tray.store.states import State

log = logging.getLogger("sloth_tray")

# What Runner.prepare reads of a claimed job: a guess that agrees on these is that run.
PREPARED_FROM = ("id", "name", "script", "options", "attempts", "runs", "child")


class Ahead(NamedTuple):
    """A guess at a lane's next claim (`job`, as that claim would lease it), and its run
    prepared (`run`)."""

    job: Job
    run: Prepared

    @property
    def token(self) -> str:
        """The token the next claim is to give its run: the one the guess was made with."""
        return self.run.token


def guess(queue: Queue, runner: Runner, lane: str, unmet: frozenset[str]) -> Ahead | None:
    """The lane's next claim guessed and its run prepared; None when no job is due there
    now, when its run would end before it starts (refused, unrunnable: prepared again
    once claimed, which says why), or when the file is locked for long (the claim then
    prepares the run as before)."""
    try:
        due = queue.next_in_lane(lane, unmet)
    except DatabaseProblem as exc:
        log.debug("guessing the next job of lane %s failed: %s", lane, exc)
        return None
    if due is None:
        return None
    job = as_claimed(due, procs.new_token())
    run = runner.prepare(job)
    return Ahead(job, run) if isinstance(run, Prepared) else None


def as_claimed(job: Job, token: str) -> Job:
    """`job` as a claim under `token` leases it: running, its attempt and its run
    counted, its token kept as its `child` (the lease itself is not guessed)."""
    fields = {name: getattr(job, name) for name in Job.FIELDS}
    return Job(**fields | {"state": State.RUNNING, "attempts": job.attempts + 1,
                           "runs": job.runs + 1, "child": {"token": token}})


def run_for(ahead: Ahead | None, claimed: Job | None, wall: Callable[[], float],
            monotonic: Callable[[], float]) -> Prepared | None:
    """The run prepared ahead, when `claimed` is the job guessed, as guessed, and its
    working folder is still there; None otherwise. Its sleep watch starts now, at the
    claim, as a run prepared then would have it."""
    if ahead is None or claimed is None:
        return None
    if any(getattr(claimed, name) != getattr(ahead.job, name) for name in PREPARED_FROM):
        return None
    if working_folder_gone(claimed):
        return None  # prepared again: it says so in its own words
    return ahead.run._replace(sleep_watch=SleepWatch(wall, monotonic))
