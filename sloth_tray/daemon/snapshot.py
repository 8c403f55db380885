"""What the tray is shown: an immutable Snapshot of the queue and the engine.

The engine publishes one after every change; the tray, its presenter, its surfaces
and the notifications read them. A module of its own, below both: the tray's code
needs these values, never the engine that makes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from sloth_tray.jobs.overdue import OverdueJob
from sloth_tray.store.rows import DROPPED, SHELL
from sloth_tray.store.states import Reason


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
class Snapshot:
    """What the engine looks like right now. Listeners may keep it: it never changes."""

    pending: int = 0
    done: int = 0
    failed_count: int = 0
    due_now: int = 0
    # The first job running: main's, else the first lane's (every one is in `lanes`)
    running: RunningJob | None = None
    # The newest engine.SHOWN_FAILED of failed_count, at most SHOWN_RUNS_PER_SERIES a series
    failed_jobs: tuple[FailedJob, ...] = ()
    failed_series: tuple[FailedSeries, ...] = ()  # the series of the runs in failed_jobs
    waiting: tuple[WaitingJob, ...] = ()  # the next engine.SHOWN_WAITING of pending
    next_wakeup: float | None = None
    paused: bool = False
    problem: str | None = None  # a sentence for the user: the database is locked, ...
    stopped: bool = False
    overdue: tuple[OverdueJob, ...] = ()  # recurring series with no success for too long
    lanes: tuple[Lane, ...] = ()  # main first, then by name; each with its running job

    @property
    def paused_lanes(self) -> tuple[str, ...]:
        """The lanes that start nothing now (by their own pause or the whole queue's)."""
        return tuple(lane.name for lane in self.lanes if lane.paused)
