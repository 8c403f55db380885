"""What the tray is shown: an immutable Snapshot of the queue and the engine, and
`read`, which makes one in one read transaction.

The engine publishes one after every change; the tray, its presenter, its surfaces
and the notifications read them. A module of its own, below both: the tray's code
needs these values, never the engine that makes them.

A snapshot is read as of one commit of the queue file (`Queue.read`): its counts
and its lists agree whatever the command line or a lane's worker commits while it
is read. Reading it writes nothing: the re-anchoring look before a sleep
(`Queue.next_wakeup`) is the engine loop's, never the tray's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sloth_tray.jobs.conditions import waiting_for
from sloth_tray.jobs.overdue import OverdueJob
from sloth_tray.store import lanes as store_lanes
from sloth_tray.store.reasons import Reason
from sloth_tray.store.rows import DROPPED, SHELL

if TYPE_CHECKING:
    from sloth_tray.store.queue import Job, Queue
    from sloth_tray.store.steps import Step

SHOWN_FAILED = 50  # failed jobs carried in a snapshot (the tray lists them)
SHOWN_RUNS_PER_SERIES = 10  # of them, the newest failed runs of one series at most
SHOWN_WAITING = 10  # next pending jobs carried in a snapshot
SHOWN_ASKING = 10  # questions carried in a snapshot, oldest first (the tray's rows)

SHOW_RUNNING_AFTER = 0.05  # back to back, a job shorter than this is not shown running
SNAPSHOT_SHARE = 0.02  # back to back, at most this share of the time goes to snapshots


def show_running_after(last_read: float) -> float:
    """Back to back (a job claimed with the outcome of its lane's last), how long it
    runs before it is shown running (a snapshot read): SHOW_RUNNING_AFTER, or longer
    where the last snapshot took long to read. A snapshot counts the waiting jobs (0.6 ms
    with a thousand waiting behind a running job, 3 ms with ten thousand), and a burst
    of tiny jobs would otherwise spend a tenth of its time on them or more: they take
    at most SNAPSHOT_SHARE of it."""
    return max(SHOW_RUNNING_AFTER, last_read / SNAPSHOT_SHARE)


def agent_of(source: str | None) -> str | None:
    """The agent that added a job (its MCP client's name), or None: a drop, `add`."""
    return None if source in (None, DROPPED, SHELL) else source


@dataclass(frozen=True)
class RunningJob:
    id: str
    name: str
    attempt: int
    max_attempts: int
    started_at: float
    step: tuple[int, str] | None = None  # the step it is in: (its place from 1, its name)
    step_asks: bool = False  # that step asks before it runs again (--ask): a quit fails it
    lane: str = "main"  # the lane it runs in (a folder in the jobs folder)
    by: str | None = None  # the agent that added it (agent_of), shown beside its name


@dataclass(frozen=True)
class StepProgress:
    """How far a job with steps got: its steps recorded, those done, and the first
    not done (where it stopped) with that step's state (failed, cut, running)."""

    steps: int
    done: int
    stopped_in: str | None = None  # None: every step recorded is done
    stopped: str | None = None


@dataclass(frozen=True)
class FailedJob:
    id: str
    name: str
    error: str
    at: float  # when it failed: a new failure of the same job is a new event
    refused: bool = False  # a refused drop: never retried, only removed
    series: str = ""  # the series it is a run of (FailedSeries.key); "" if it does not repeat
    reason: Reason | None = None  # why it failed: what its notification offers to do
    script: str | None = None  # its copy in the spool, shown when the script is at fault
    progress: StepProgress | None = None  # how far its steps got; None: it has none
    # The step cut short that asks whether it happened (reason STEP_UNSURE), if known
    unsure_step: str | None = None
    lane: str = "main"
    by: str | None = None  # the agent that added it (agent_of)


@dataclass(frozen=True)
class FailedSeries:
    """A recurring series with failed runs: each run fails on its own, and the
    series goes on, so a series failing daily holds a failed run per day."""

    key: str  # what tells the series apart: its script (one per drop), else its name
    name: str
    failures: int  # its failed runs, all of them (a snapshot carries the newest few)
    since: float  # when the oldest of them failed


@dataclass(frozen=True)
class WaitingJob:
    id: str
    name: str
    due: float
    waiting_for: str | None = None  # an unmet condition it needs ("AC power"), if any
    lane: str = "main"
    by: str | None = None  # the agent that added it (agent_of)
    sleeping_until: float | None = None  # asleep in a step (`sloth-tray sleep`): its wake


@dataclass(frozen=True)
class AskingJob:
    """A job waiting for a person's answer (`sloth-tray ask`): its question, by the
    step that asks it. A job asks one question at a time; its next is another step."""

    id: str
    name: str
    step: str  # the asking step's name and occurrence: which question this is
    occurrence: int
    question: str
    choices: tuple[str, ...]
    asked_at: float
    default: str | None = None  # the answer once `until` has passed
    until: float | None = None  # its timeout: then the default, or failed unanswered
    lane: str = "main"
    by: str | None = None  # the agent that added it (agent_of)

    @property
    def key(self) -> str:
        return question_key(self.id, self.step, self.occurrence)


def question_key(job_id: str, step: str, occurrence: int) -> str:
    """What tells a question apart from every other, the same job's later ones too."""
    return f"{job_id}:{step}:{occurrence}"


@dataclass(frozen=True)
class Lane:
    """One lane as the tray shows it: its job running, if any, and its counts. Every
    lane the queue knows is one (main always); each runs one job at a time."""

    name: str
    running: RunningJob | None = None
    pending: int = 0  # waiting in this lane (due or not)
    due_now: int = 0
    failed: int = 0
    paused: bool = False  # by its own pause or the whole queue's


@dataclass(frozen=True)
class Schedule:
    """One series as the tray's Schedules submenu shows it (store/schedules.read)."""

    key: str  # what ties its runs together: its spooled script, else its name
    name: str
    schedule: str  # as its header wrote it: `every 2m`, `mon-fri@09:00`
    next_id: str | None  # its waiting or running run (Run now, Cancel schedule)
    next: float | None  # when that run is due; None while it runs
    last_id: str | None = None  # its last run that ended (Show last log)
    last_at: float | None = None
    last_ok: bool | None = None  # None: it never ran
    paused: bool = False  # on its own (pause --series)
    overdue: bool = False


@dataclass(frozen=True)
class Snapshot:
    """What the engine looks like right now. Listeners may keep it: it never changes."""

    pending: int = 0
    done: int = 0
    failed_count: int = 0
    due_now: int = 0
    # The first job running: main's, else the first lane's (every one is in `lanes`)
    running: RunningJob | None = None
    # The newest SHOWN_FAILED of failed_count, at most SHOWN_RUNS_PER_SERIES a series
    failed_jobs: tuple[FailedJob, ...] = ()
    failed_series: tuple[FailedSeries, ...] = ()  # the series of the runs in failed_jobs
    # Of failed_count, those whose script is at fault (a bad header, a refused drop):
    # what the failures past failed_jobs are made of. Counted only when failed_jobs
    # cannot carry them all (0 otherwise).
    failed_at_fault: int = 0
    waiting: tuple[WaitingJob, ...] = ()  # the next SHOWN_WAITING of pending
    next_wakeup: float | None = None
    paused: bool = False
    problem: str | None = None  # a sentence for the user: the database is locked, ...
    stopped: bool = False
    overdue: tuple[OverdueJob, ...] = ()  # recurring series with no success for too long
    lanes: tuple[Lane, ...] = ()  # main first, then by name; each with its running job
    schedules: tuple[Schedule, ...] = ()  # every live series, soonest next run first
    # The oldest SHOWN_ASKING of the asking_count jobs waiting for an answer
    asking: tuple[AskingJob, ...] = ()
    asking_count: int = 0

    @property
    def paused_lanes(self) -> tuple[str, ...]:
        """The lanes that start nothing now (by their own pause or the whole queue's)."""
        return tuple(lane.name for lane in self.lanes if lane.paused)


def read(queue: Queue, running: Iterable[RunningJob], unmet: frozenset[str], *,
         problem: str | None = None, stopped: bool = False
         ) -> tuple[Snapshot, float | None]:
    """The queue as of one commit, with the jobs running now (the engine's), each in
    its step; and when a recurring series next becomes overdue (a time for the engine
    to look again). One read transaction; nothing written."""
    with queue.read():
        counts = queue.summary()
        paused = bool(counts["paused"])
        failed_runs = queue.failed_by_series(SHOWN_FAILED, SHOWN_RUNS_PER_SERIES)
        failed = _failed_jobs(queue, [(job, series) for job, series, _, _ in failed_runs])
        at_fault = queue.failed_at_fault() if len(failed) < counts["failed"] else 0
        upcoming = queue.upcoming(SHOWN_WAITING)
        waits = queue.waiting_for([j.id for j in upcoming])
        # A job that asks is shown with its question (asking, below), not as due.
        waiting = tuple(WaitingJob(j.id, j.name, j.not_before,
                                   waiting_for(j.options, unmet), lane=j.lane,
                                   by=agent_of(j.source),
                                   sleeping_until=_wake_time(waits.get(j.id)))
                        for j in upcoming
                        if (waits.get(j.id) or {}).get("kind") != "answer")
        verdict = queue.overdue(paused=paused)
        runs = tuple(_in_its_step(queue, run) for run in in_lane_order(running))
        next_wakeup = queue.next_due(unmet)
        series = _schedules(queue)
        asks = queue.asking()
        asking = tuple(_asking(queue.get(job_id), step) for job_id, step in
                       asks[:SHOWN_ASKING])
    failing_series = {series: FailedSeries(series, j.name, failures, since)
                      for j, series, failures, since in failed_runs if series}
    return Snapshot(
        pending=counts["pending"], done=counts["done"], failed_count=counts["failed"],
        due_now=counts["due_now"], running=runs[0] if runs else None,
        lanes=_lanes(counts["lanes"], runs), failed_jobs=failed, failed_at_fault=at_fault,
        failed_series=tuple(failing_series.values()), waiting=waiting,
        next_wakeup=next_wakeup, paused=paused, problem=problem, stopped=stopped,
        overdue=verdict.overdue, schedules=series, asking=asking, asking_count=len(asks),
    ), verdict.next_change


def _wake_time(wait: dict | None) -> float | None:
    """When a job asleep in a step wakes (None: it is not asleep)."""
    return wait["until"] if wait is not None and wait["kind"] == "time" else None


def _asking(job: Job, step: Step) -> AskingJob:
    choices = json.loads(step.choices) if step.choices else []
    return AskingJob(job.id, job.name, step.name, step.occurrence, step.question or "",
                     tuple(str(choice) for choice in choices), step.started_at,
                     default=step.default_choice, until=step.wake_at, lane=job.lane,
                     by=agent_of(job.source))


def _schedules(queue: Queue) -> tuple[Schedule, ...]:
    """Every live series, as the Schedules submenu shows it."""
    found = []
    for row in queue.schedules():
        last = row["last"] or {}
        found.append(Schedule(
            row["series"], row["name"], row["schedule"], row["next_id"], row["next"],
            last.get("id"), last.get("at"),
            None if not last else last["outcome"] == "ok",
            row["state"] == "paused", row["overdue"]))
    return tuple(found)


def without_queue(running: Iterable[RunningJob], *, paused: bool, problem: str,
                  stopped: bool = False) -> Snapshot:
    """What is known while the queue cannot be read (`problem` says why): the jobs
    running now and the pause as last read."""
    runs = in_lane_order(running)
    return Snapshot(running=runs[0] if runs else None, lanes=_lanes({}, runs),
                    paused=paused, problem=problem, stopped=stopped)


def in_lane_order(running: Iterable[RunningJob]) -> tuple[RunningJob, ...]:
    """The jobs running now, main's first, then by lane."""
    return tuple(sorted(running, key=lambda run: store_lanes.order(run.lane)))


def _in_its_step(queue: Queue, running: RunningJob) -> RunningJob:
    """The step it is in: a step's start or end rings the engine's wake()."""
    step = queue.running_step(running.id)
    return replace(running, step=step[:2] if step else None,
                   step_asks=bool(step and step[2]))


def _lanes(counted: dict[str, dict], runs: tuple[RunningJob, ...]) -> tuple[Lane, ...]:
    """Each lane counted, with its running job; a running job's lane the counts do
    not have (renamed as it ran, or the counts unread) is one too: every running
    job is in the snapshot's lanes."""
    running = {run.lane: run for run in runs}
    known = tuple(Lane(name, running.pop(name, None), lane["pending"], lane["due_now"],
                       lane["failed"], bool(lane["paused"]))
                  for name, lane in counted.items())
    return known + tuple(Lane(name, run) for name, run in running.items())


def _failed_jobs(queue: Queue, runs: list[tuple[Job, str]]) -> tuple[FailedJob, ...]:
    """The failed jobs shown, each with how far its steps got (one read for them
    all) and, failed for a step cut short that asks, that step."""
    progress = queue.step_progress([job.id for job, _ in runs])
    failed = []
    for job, series in runs:
        steps, done, stuck = progress.get(job.id, (0, 0, None))
        failed.append(FailedJob(
            job.id, job.name, job.last_error or "", job.updated_at, lane=job.lane,
            by=agent_of(job.source), refused=job.reason == Reason.REFUSED, series=series,
            reason=job.reason,
            script=job.script,
            progress=StepProgress(steps, done, stuck and stuck.name,
                                  stuck and stuck.state) if steps else None,
            unsure_step=_unsure_step(queue, job.id, stuck)
            if steps and job.reason == Reason.STEP_UNSURE else None))
    return tuple(failed)


def _unsure_step(queue: Queue, job_id: str, stuck: Step | None) -> str | None:
    """The first step cut short that asks (as Queue fails the job for): nearly
    always the first step not done; else, after an earlier step failed and the
    job went on, one more read finds it."""
    if stuck is not None and stuck.state == "cut" and stuck.ask:
        return stuck.name
    return next((step["name"] for step in queue.steps(job_id)
                 if step["state"] == "cut" and step["ask"]), None)
