"""The queue, the spool and crash recovery, model-checked.

A Hypothesis state machine drives a real Queue on a real home folder through
random drops (some refused, some with a bad header, some recurring), crashes in
the middle of a drop, claims, heartbeats, completions, failures, cancels,
retries, run-nows, prunes (some interrupted halfway), clock jumps forward and
back, and restarts, while a small model says what each job should be. After every
step the queue's rows, the spool, the jobs folder and recovered/ must match the
model, and the promises hold: no job completes twice, no committed drop is lost, a
drop never pushed becomes exactly one job at the next start, a finished or pruned
job never comes back, attempts count claims, a refusal never runs, no waiting job
waits longer than its delay, backoff or period on the current clock.

A recurring job's due times are not computed here: the model takes them from the
queue once it has checked them against the user's rules for a series:
- a run that ends (done, or failed for good) is followed by one next run, once;
- that next run is due one period after the run started (a late start stands for
  the periods it missed), or, when the run was made due early by hand (run-now,
  or a retry that started the series again), at the time it was scheduled for;
- run-now and retry never move the series' waiting run; retrying a run that was
  followed already runs it once more, with no next run; retrying the run that
  ended the series (cancelled while waiting) runs it now and schedules the next
  one a period later;
- a series never has two of its scheduled runs waiting at once;
- a clock set back by more than a second: each waiting job's wait counts from now.

A second, smaller machine (test_step_model.py) checks steps that happen once, by
their user's rules, on a queue file written by runs as a job writes it (sloth_step).

A failure prints the shortest sequence of steps found and a
@reproduce_failure blob; `--hypothesis-seed=N` replays a whole run.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from helpers.clock import FakeClock
from helpers.examples import examples
from helpers.scratch import scratch_folder
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from modelkit import LEASE, RETRIABLE, START

from sloth_tray.errors import SlothError
from sloth_tray.jobs.header import BadJobFile
from sloth_tray.paths import Home, locate
from sloth_tray.store import spool
from sloth_tray.store.queue import (
    PERMANENT,
    Job,
    Queue,
    Reason,
    Refused,
    State,
)

MAX_ATTEMPTS = 3
BACKOFF_CAP = 3600.0
# How far the clock may be set back at a time: a second to a year.
CLOCK_BACK = [1, 2, 30, 3600, 86400, 365 * 86400]
# A clock set back by this much or less re-anchors nothing.
REANCHOR_SLACK = 1.0

# What a script's `# sloth:` line says, and the options it parses to (None: a bad header).
HEADERS: dict[str, tuple[str, dict[str, Any] | None]] = {
    "plain": ("", {}),
    "once": ("# sloth: max_attempts=1", {"max_attempts": 1}),
    "lease": ("# sloth: lease=5", {"lease": 5.0}),
    "delay": ("# sloth: delay=20", {"delay": 20.0}),
    "every": ("# sloth: every=30s", {"every": 30.0}),
    "every_lease": ("# sloth: every=45s lease=5 max_attempts=2",
                    {"every": 45.0, "lease": 5.0, "max_attempts": 2}),
    "bad": ("# sloth: timeout=soon", None),
}
KINDS = [*HEADERS, "refused"]  # refused: the drop is a symbolic link
# Drops, with recurring ones twice as likely: a series needs several steps to show much.
DROPPED = [*KINDS, "every", "every_lease"]
SYMLINK_REFUSAL = "refused: it is a symbolic link; drop the script itself"
FAIL_REASONS = [reason for reason in Reason if reason != Reason.REFUSED]


class Killed(BaseException):
    """The process dies here: nothing after this line of it runs."""


def script_text(kind: str, number: int) -> str:
    return f"#!/bin/sh\n{HEADERS[kind][0]}\necho drop {number}\n"


@dataclass
class Ended:
    """A run of a series that ended, as its next run must follow it: its id, the time
    it was scheduled for (S), when its last attempt was claimed (T), when it ended (E),
    the series' period (P), and whether the clock was set back while it ran (then S
    and T are times of the old clock)."""

    run: str
    scheduled: float | None
    claimed: float | None
    ended: float
    period: float
    clock_went_back: bool


@dataclass
class Row:
    """What the model expects of one job row."""

    id: str | None  # None: a recurring job's next run, until the queue's id is learned
    seq: int  # insertion order (the queue's rowid order)
    script: str
    options: dict[str, Any]
    state: State
    max_attempts: int
    not_before: float
    updated_at: float
    attempts: int = 0
    owner: str | None = None
    lease_until: float | None = None
    reason: Reason | None = None
    followed: bool = False  # its series' next run was queued when it ended
    claimed_at: float | None = None  # when its last attempt was claimed
    clock_went_back: bool = False  # set back while it ran (not waiting: not re-anchored)
    # The longest wait its last change may give it, and what gave it.
    allowance: tuple[float, str] = (0.0, "its push")
    reanchors: int = 0  # `reanchored` events its history holds
    follows: Ended | None = None  # a next run not yet read back from the queue
    # What a retry must have done to its schedule: "restart" (the series starts
    # again), "extra" (a run that was followed already: its `scheduled` is the
    # queue's to keep), or None.
    retried_as: str | None = None
    lane: str = "main"  # every job here is dropped straight into the jobs folder

    @property
    def lease(self) -> float:
        return float(self.options.get("lease") or LEASE)

    @property
    def period(self) -> float:
        return float(self.options.get("every") or 0)


@dataclass
class Folder:
    """spool/<id>/: its script's name and whether the `.queued` marker is there."""

    name: str
    marker: bool


@dataclass
class Staging:
    """spool/.add-<id>/: an add's copy, before it moves to spool/<id>/."""

    name: str
    committed: bool  # its push committed (then its `.queued` marker is in here too)
    stale: bool  # left long ago by an add that died


@dataclass
class Model:
    rows: list[Row] = field(default_factory=list)
    seq: int = 0
    folders: dict[str, Folder] = field(default_factory=dict)
    staging: dict[str, Staging] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)  # script path -> its header kind
    inbox: dict[str, str] = field(default_factory=dict)  # jobs folder name -> kind
    recovered: set[str] = field(default_factory=set)
    pushed: set[str] = field(default_factory=set)  # drops whose push committed
    never_pushed: set[str] = field(default_factory=set)  # in the spool, push never happened
    pruned: set[str] = field(default_factory=set)
    retired: set[str] = field(default_factory=set)  # scripts of pruned jobs no row shares
    ended: set[str] = field(default_factory=set)  # done or cancelled (and not retried)
    completions: dict[str, int] = field(default_factory=dict)  # id -> successful complete()s
    script_completions: dict[str, int] = field(default_factory=dict)  # one-off scripts
    series: set[str] = field(default_factory=set)  # scripts that ever recurred
    removed: set[str] = field(default_factory=set)  # scripts deleted on purpose

    def ids(self) -> list[str]:
        return [r.id for r in self.rows if r.id is not None]

    def insert(self, **values: Any) -> Row:
        self.seq += 1
        row = Row(seq=self.seq, **values)
        self.rows.append(row)
        return row

    def in_use(self, folder_id: str, spool_dir: Path) -> bool:
        prefix = str(spool_dir / folder_id) + os.sep
        return any(r.script.startswith(prefix) for r in self.rows)


class SpoolMachine(RuleBasedStateMachine):
    """A daemon (queue + inbox + worker) that may crash, a CLI, and a user.

    No rule has a precondition: one that finds nothing to do does nothing, so that
    any step can be cut from a failing sequence and it shrinks fast."""

    def __init__(self) -> None:
        super().__init__()
        # Function-scoped fixtures do not reset between examples: each example
        # gets a home of its own.
        self.tmp = scratch_folder("sloth-model-")
        self.home: Home = locate(self.tmp / "home", env={}).ensure()
        self.outside = self.tmp / "outside"
        self.outside.mkdir()
        self.clock = FakeClock(START)
        self.generation = 0
        self.owner = "owner-0"
        self.queue = self._open()
        self.up = True  # the daemon runs (its inbox takes drops, its worker claims)
        self.drops = 0
        self.ids_made = 0
        self.m = Model()

    def teardown(self) -> None:
        self.queue.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _open(self) -> Queue:
        # A crash here is the process's, which loses no write the system holds: no
        # fsync per commit (durability across a power cut is not what is checked).
        return Queue(self.home.db, clock=self.clock, lease_seconds=LEASE,
                     max_attempts=MAX_ATTEMPTS, backoff_cap=BACKOFF_CAP, synchronous="OFF")

    def _new_job_id(self) -> str:
        """Ids in an order other than the drops' (reconcile walks the spool by id), yet
        the same on every replay, so that a failing example shrinks."""
        self.ids_made += 1
        return f"{self.ids_made * 0x9E3779B1 % 2**48:012x}"

    @property
    def now(self) -> float:
        return self.clock.now

    # -- the model's queue ----------------------------------------------------------------

    def _model_push(self, job_id: str, script: Path, kind: str) -> None:
        now = self.now
        parsed = HEADERS[kind][1] if kind != "refused" else None
        if parsed is None:  # refused, or a bad header: born failed, never runs
            reason = Reason.REFUSED if kind == "refused" else Reason.BAD_HEADER
            self.m.insert(id=job_id, script=str(script), options={}, state=State.FAILED,
                          max_attempts=MAX_ATTEMPTS, not_before=now, updated_at=now,
                          reason=reason)
        else:
            options = dict(parsed)
            delay = options.get("delay", 0.0)
            if options.get("every"):
                # A series' first run is due when the drop says: its clock starts there.
                options["scheduled"] = now + delay
                self.m.series.add(str(script))
            self.m.insert(id=job_id, script=str(script), options=options, state=State.PENDING,
                          max_attempts=options.get("max_attempts", MAX_ATTEMPTS),
                          not_before=now + delay, updated_at=now,
                          allowance=(delay, "its delay") if delay else (0.0, "its push"))
        self.m.pushed.add(job_id)
        self.m.never_pushed.discard(job_id)

    def _end_run(self, row: Row, state: State, reason: Reason | None = None) -> None:
        """running -> done or failed: the lease ends; a recurring job's next run is queued
        in the same transaction, once: a retried run that was followed already adds none.
        When the next run is due is the queue's to say; it is read back at once and
        checked against the series' rules (_read_next_run)."""
        row.state, row.owner, row.lease_until, row.updated_at = state, None, None, self.now
        if reason is not None:
            row.reason = reason
        if row.period > 0 and not row.followed:
            row.followed = True
            options = {k: v for k, v in row.options.items() if k != "scheduled"}
            self.m.insert(id=None, script=row.script, options=options, state=State.PENDING,
                          max_attempts=row.max_attempts, not_before=math.nan,
                          updated_at=self.now, allowance=(row.period, "its series' period"),
                          follows=Ended(row.id, row.options.get("scheduled"), row.claimed_at,
                                        self.now, row.period, row.clock_went_back))
            self._learn_new_ids(partial=True)

    def _model_look(self) -> list[Row]:
        """What the queue does when it next looks (a claim, next_wakeup) after the clock
        was set back: each waiting job last changed more than a second in the future
        keeps the wait it had, counted from now, and is never due later than it was (a
        run overdue already keeps its place in line); a series' clock moves with it."""
        now, moved = self.now, []
        for row in self.m.rows:
            if row.state != State.PENDING or row.updated_at - now <= REANCHOR_SLACK:
                continue
            due = min(now + max(row.not_before - row.updated_at, 0.0), row.not_before)
            if "scheduled" in row.options:
                shift = due - row.not_before
                row.options = {**row.options, "scheduled": row.options["scheduled"] + shift}
            row.not_before, row.updated_at = due, now
            row.reanchors += 1
            moved.append(row)
        return moved

    def _model_claim(self) -> Row | None:
        """Which job the queue's claim, made just now, must have handed out. A run
        that fails for good here (its last lease ran out) is followed at once, and its
        next run may be the one claimed: it is read back from the queue as it ends."""
        self._model_look()
        now = self.now

        def due_pending() -> Row | None:
            # One job at a time per lane: while its lane runs one (a lease live or run
            # out), a due job waits.
            busy = {r.lane for r in self.m.rows if r.state == State.RUNNING}
            due = [r for r in self.m.rows if r.state == State.PENDING and r.not_before <= now
                   and r.lane not in busy]
            return min(due, key=lambda r: (r.not_before, r.seq), default=None)

        def expired_lease() -> Row | None:
            gone = [r for r in self.m.rows
                    if r.state == State.RUNNING and r.lease_until is not None
                    and r.lease_until <= now]
            return min(gone, key=lambda r: (r.lease_until, r.seq), default=None)

        while True:
            pending, expired = due_pending(), expired_lease()
            if pending is None and expired is None:
                return None
            if expired is not None and (pending is None
                                        or expired.lease_until <= pending.not_before):
                if expired.attempts >= expired.max_attempts:
                    self._end_run(expired, State.FAILED, Reason.LEASE_EXPIRED)
                    continue
                chosen = expired
            else:
                chosen = pending
            chosen.state, chosen.owner = State.RUNNING, self.owner
            chosen.lease_until = now + chosen.lease
            chosen.attempts += 1
            chosen.updated_at = chosen.claimed_at = now
            return chosen

    def _model_cancel(self, row: Row) -> bool:
        if row.state not in (State.PENDING, State.FAILED, State.RUNNING):
            return False
        row.state, row.owner, row.lease_until, row.updated_at = (
            State.CANCELLED, None, None, self.now)
        self.m.ended.add(row.id)
        return True

    def _model_refuse(self, row: Row, reason: Reason) -> None:
        if row.state in (State.PENDING, State.FAILED):
            row.state, row.reason, row.updated_at = State.FAILED, reason, self.now

    def _script_readable(self, row: Row) -> bool:
        """What spool.retry checks before it reads the header again."""
        folder = Path(row.script).parent.name
        return (folder in self.m.folders and self.m.kinds.get(row.script) != "refused"
                and row.script not in self.m.removed)

    def _model_retry(self, row: Row) -> bool | type[Exception]:
        """spool.retry: True/False, or the exception it must raise."""
        options = max_attempts = None
        if row.reason != Reason.REFUSED and row.state in RETRIABLE \
                and self._script_readable(row):
            parsed = HEADERS[self.m.kinds[row.script]][1]
            if parsed is None:
                self._model_refuse(row, Reason.BAD_HEADER)
                return BadJobFile
            options = dict(parsed)
            if options.get("every"):
                self.m.series.add(row.script)
            max_attempts = options.get("max_attempts")
        if row.reason == Reason.REFUSED:
            return Refused
        if row.state not in RETRIABLE:
            return False
        if row.state == State.DONE:  # a person asked for it to run once more
            self.m.completions[row.id] = 0
            if row.script in self.m.script_completions:
                self.m.script_completions[row.script] -= 1
        row.state, row.not_before, row.attempts, row.reason = State.PENDING, self.now, 0, None
        row.updated_at = self.now
        row.allowance = (0.0, "a retry")
        if options is not None:
            row.options = options
        if max_attempts is not None:
            row.max_attempts = max_attempts
        row.retried_as, row.clock_went_back = None, False
        if row.period > 0:
            # Followed already: one more run by hand, whose clock is the queue's to
            # keep. Never followed (the run that ended the series, or one that just
            # gained every=): the series starts again, its next run a period away.
            row.retried_as = "extra" if row.followed else "restart"
            row.options = {**row.options, "scheduled": (
                row.options.get("scheduled") if row.followed else self.now + row.period)}
        self.m.ended.discard(row.id)
        return True

    def _check_retried(self, rows: list[Row], before: dict[str, tuple]) -> None:
        """After a retry: a retried run is due now; one that starts its series again
        is scheduled a period from now; no other waiting run of any series moved."""
        now = self.now
        for row in rows:
            job = self.queue.get(row.id)
            assert job.not_before == now, (
                f"{row.id} was retried at {now}: it must be due now, it is due at "
                f"{job.not_before}")
            if row.retried_as == "restart":
                assert job.options.get("scheduled") == now + row.period, (
                    f"retrying {row.id}, the run that ended its series, starts the series "
                    f"again: one run now, the next a period ({row.period:g} s) later, so "
                    f"its schedule must say {now + row.period}; it says "
                    f"{job.options.get('scheduled')}")
            elif row.retried_as == "extra":  # an extra run by hand: it queues nothing
                row.options = {k: v for k, v in row.options.items() if k != "scheduled"}
                if "scheduled" in job.options:
                    row.options["scheduled"] = job.options["scheduled"]
            row.retried_as = None
        self._schedules_stayed(before, {r.id for r in rows}, "a retry")

    def _schedules(self) -> dict[str, tuple[float, Any]]:
        """Each waiting run of a series: (due, scheduled)."""
        return {j.id: (j.not_before, j.options.get("scheduled"))
                for j in self.queue.jobs(State.PENDING) if j.options.get("every")}

    def _schedules_stayed(self, before: dict[str, tuple], touched: set[str], what: str) -> None:
        after = self._schedules()
        for job_id, was in before.items():
            if job_id not in touched and job_id in after:
                assert after[job_id] == was, (
                    f"{what} moved the waiting run {job_id} of another series, or of its "
                    f"own: (due, scheduled) was {was}, is {after[job_id]}")

    def _model_prune(self, before: float, *, files: bool) -> list[str]:
        """spool.prune: mark the folders, delete the rows, then (unless cut short) remove
        the folders no remaining row uses."""
        gone = [r for r in self.m.rows
                if r.state in (State.DONE, State.CANCELLED) and r.updated_at < before]
        for r in gone:
            folder = self.m.folders.get(Path(r.script).parent.name)
            if folder is not None:
                folder.marker = True
        self.m.rows = [r for r in self.m.rows if r.seq not in {g.seq for g in gone}]
        for r in gone:
            self.m.pruned.add(r.id)
            self.m.ended.discard(r.id)
            folder = Path(r.script).parent.name
            if not self.m.in_use(folder, self.home.spool):
                self.m.retired.add(r.script)
                if files:
                    self.m.folders.pop(folder, None)
        return [r.id for r in gone]

    # -- learning the ids of recurring runs -----------------------------------------------

    def _learn_new_ids(self, *, partial: bool = False) -> None:
        """Name the model's new recurring runs after the queue's rows, in rowid order,
        and check each against the run it follows (_read_next_run). `partial`: in the
        middle of a claim, which may have ended (and followed) more runs than the model
        has reached yet."""
        unnamed = sorted((r for r in self.m.rows if r.id is None), key=lambda r: r.seq)
        if not unnamed:
            return
        known = set(self.m.ids())
        fresh = [j for j in reversed(self.queue.jobs()) if j.id not in known]
        ended = [r.follows.run for r in unnamed if r.follows is not None]
        assert len(fresh) >= len(unnamed) if partial else len(fresh) == len(unnamed), (
            f"each run of a series that ends is followed by one next run: {ended} ended, "
            f"the queue has {len(fresh)} new run(s): {[j.id for j in fresh]}")
        for row, job in zip(unnamed, fresh[:len(unnamed)], strict=True):
            row.id = job.id
            self._read_next_run(row, job)

    def _read_next_run(self, row: Row, job: Job) -> None:
        """A series' next run, queued as a run ended: it says which run it follows, and
        is due when the series' rules say, on the schedule (its `scheduled`):
        - a run made due early by hand (claimed before its scheduled time S) is
          followed at S: run-now and a restart never move the schedule;
        - any other run, claimed at T, is followed at T + period: never sooner (two
          runs of a series that started on time are a period apart), and no later
          (missed periods are one run, and the series counts on from when it ran);
          a run that took longer than the period is followed by a run due at once
          (due anywhere from T + period to the moment it ended).
        When the clock was set back while the run ran, its S and T are times of the
        old clock, which the rules do not place on the new one: then only the wait,
        counted on the current clock, is checked (no_job_waits_longer_than_it_should)."""
        follows, row.follows = row.follows, None
        if follows is None:
            return
        first = self.queue.history(job.id)[0]
        assert (first.kind, first.detail) == ("pushed", f"the next run after {follows.run}"), (
            f"{job.id} follows {follows.run}: its first event must say so, it is {first}")
        due, scheduled = job.not_before, job.options.get("scheduled")
        assert scheduled == due, (
            f"the next run {job.id} after {follows.run} is due at {due}, so that is its "
            f"scheduled time; its options say {scheduled}")
        S, T, E, P = follows.scheduled, follows.claimed, follows.ended, follows.period
        if S is not None and T is not None and not follows.clock_went_back:
            if T < S:
                assert due == S, (
                    f"{follows.run} was made due early by hand (claimed at {T}, scheduled "
                    f"for {S}); its next run {job.id} must be due at {S}, where the "
                    f"schedule had it, not at {due} ({due - S:+g} s)")
            else:
                assert due >= T + P, (
                    f"{follows.run} started at {T} (scheduled for {S}, ended at {E}); its "
                    f"next run {job.id} is due at {due}, {T + P - due:g} s sooner than a "
                    f"period ({P:g} s) after it started: two runs too close together")
                assert due <= max(T + P, E), (
                    f"{follows.run} started at {T} (scheduled for {S}, ended at {E}); its "
                    f"next run {job.id} must be due a period ({P:g} s) after it started, "
                    f"at {T + P}, not {due - T - P:g} s later")
        row.not_before = due
        if scheduled is not None:
            row.options = {**row.options, "scheduled": scheduled}

    def _pick(self, rows: list[Row], pick: int) -> Row:
        rows = sorted(rows, key=lambda r: r.seq)
        return rows[pick % len(rows)]

    def _running(self) -> list[Row]:
        return [r for r in self.m.rows if r.state == State.RUNNING]

    # -- the daemon's inbox ---------------------------------------------------------------

    def _write_drop(self, kind: str) -> Path:
        self.drops += 1
        name = f"d{self.drops}.sh"
        source = self.home.jobs / name
        if kind == "refused":
            target = self.outside / name
            target.write_text(script_text("plain", self.drops))
            source.symlink_to(target)
        else:
            source.write_text(script_text(kind, self.drops))
        self.m.inbox[name] = kind
        return source

    def _take(self, source: Path) -> None:
        """What the inbox does with a file: place it in the spool, then push it."""
        kind = self.m.inbox.pop(source.name)
        refusal = spool.refusal(os.lstat(source), self.home.jobs)
        assert (refusal is not None) == (kind == "refused"), refusal
        job_id = self._new_job_id()
        target = spool.place(self.home, source, job_id, move=True)
        self.m.kinds[str(target)] = kind
        spool.push(self.queue, target, job_id, refused=refusal)
        self.m.folders[job_id] = Folder(target.name, marker=True)
        self._model_push(job_id, target, kind)

    @rule(kind=st.sampled_from(DROPPED),
          crash=st.sampled_from(["none", "none", "none", "before_push", "twins",
                                 "marker_lost", "marker_failed", "stopped"]))
    def drop(self, kind: str, crash: str) -> None:
        """A file dropped into the jobs folder and taken, or a crash while taking it:
        before_push: placed in the spool, never pushed; twins: linked into the spool,
        the original not yet unlinked; marker_lost: pushed, then killed before the
        `.queued` marker; marker_failed: the marker could not be written (the daemon
        goes on); stopped: the daemon died just before, the file waits for a start.
        A crash leaves the daemon stopped (the CLI still works) until its next step."""
        if crash == "stopped":
            if self.up:
                self._crash()
            self._write_drop(kind)
            return
        if not self.up:
            self._start()
        source = self._write_drop(kind)
        if crash == "none":
            self._take(source)
            return
        job_id = self._new_job_id()
        if crash == "twins":
            folder = self.home.spool / job_id
            folder.mkdir(mode=0o700)
            os.link(source, folder / source.name, follow_symlinks=False)
            target = folder / source.name
        else:
            target = spool.place(self.home, source, job_id, move=True)
            del self.m.inbox[source.name]
        self.m.folders[job_id] = Folder(target.name, marker=False)
        self.m.kinds[str(target)] = kind
        if crash in ("before_push", "twins"):
            self.m.never_pushed.add(job_id)
            self._crash()
            return
        spool.push(self.queue, target, job_id,
                   refused=SYMLINK_REFUSAL if kind == "refused" else None)
        self._model_push(job_id, target, kind)
        (target.parent / spool.QUEUED).unlink()
        if crash == "marker_lost":
            self._crash()

    @rule(kinds=st.lists(st.sampled_from(DROPPED), min_size=2, max_size=4),
          crash=st.sampled_from(["none", "none", "before_commit", "mid_batch",
                                 "markers_lost"]))
    def drop_burst(self, kinds: list[str], crash: str) -> None:
        """Files dropped at once, each placed in the spool, then all pushed in one commit
        (as the inbox pushes a burst); or a crash: before_commit: all placed, none
        pushed; mid_batch: killed as the last one's push is written, before the commit;
        markers_lost: committed, then killed before any `.queued` marker."""
        if not self.up:
            self._start()
        placed: list[tuple[spool.Drop, str]] = []
        for kind in kinds:
            source = self._write_drop(kind)
            del self.m.inbox[source.name]
            refusal = spool.refusal(os.lstat(source), self.home.jobs)
            job_id = self._new_job_id()
            target = spool.place(self.home, source, job_id, move=True)
            self.m.kinds[str(target)] = kind
            self.m.folders[job_id] = Folder(target.name, marker=crash == "none")
            placed.append((spool.Drop(target, job_id, refusal, "main"), kind))
        if crash in ("before_commit", "mid_batch"):
            if crash == "mid_batch":
                real_push, last = self.queue.push, placed[-1][0].job_id

                def killed_at_the_last(name: str, **row: object) -> str:
                    if row["job_id"] == last:
                        raise Killed()
                    return real_push(name, **row)

                with mock.patch.object(self.queue, "push", killed_at_the_last), \
                        pytest.raises(Killed):
                    spool.push_drops(self.queue, [drop for drop, _ in placed])
            self.m.never_pushed.update(drop.job_id for drop, _ in placed)
            self._crash()
            return
        outcomes = spool.push_drops(self.queue, [drop for drop, _ in placed])
        assert outcomes == [drop.job_id for drop, _ in placed]
        for drop, kind in placed:
            self._model_push(drop.job_id, drop.script, kind)
        if crash == "markers_lost":
            for drop, _ in placed:
                (drop.script.parent / spool.QUEUED).unlink()
            self._crash()

    @rule(kind=st.sampled_from(list(HEADERS)),
          crash=st.sampled_from(["none", "none", "before_push", "before_push_long_ago",
                                 "before_rename"]))
    def add(self, kind: str, crash: str) -> None:
        """`sloth-tray add PATH` (it needs no daemon), or one killed midway: before its
        push committed (its staging copy is left behind, lately or long ago), or after,
        before the copy moved into place."""
        self.drops += 1
        source = self.outside / f"a{self.drops}.sh"
        source.write_text(script_text(kind, self.drops))
        if crash == "none" or HEADERS[kind][1] is None:
            with mock.patch.object(spool, "Queue", lambda path: self._open()), \
                    mock.patch.object(spool, "new_job_id", self._new_job_id):
                if HEADERS[kind][1] is None:  # said at once; nothing is queued
                    with pytest.raises(SlothError, match="nothing was queued"):
                        spool.add(self.home, source)
                    return
                job_id = spool.add(self.home, source)
            final = self.home.spool / job_id / source.name
            self.m.kinds[str(final)] = kind
            self.m.folders[job_id] = Folder(source.name, marker=True)
            self._model_push(job_id, final, kind)
            return
        job_id = self._new_job_id()
        staging = self.home.spool / f"{spool.STAGING}{job_id}"
        staging.mkdir(mode=0o700)
        copy = spool._place_in(staging, source, move=False)
        final = self.home.spool / job_id / copy.name
        self.m.kinds[str(final)] = kind
        if crash == "before_rename":
            spool.push(self.queue, copy, job_id, final=final)
            self._model_push(job_id, final, kind)
        elif crash == "before_push_long_ago":
            long_ago = time.time() - 2 * spool.STALE_STAGING
            os.utime(staging, (long_ago, long_ago))
        self.m.staging[job_id] = Staging(copy.name, committed=crash == "before_rename",
                                         stale=crash == "before_push_long_ago")

    # -- the daemon's worker ----------------------------------------------------------------

    def _claim(self) -> Row | None:
        job = self.queue.claim(self.owner)
        expected = self._model_claim()
        if expected is None:
            assert job is None, f"claimed {job.id} ({job.state}) when nothing was due"
        else:
            assert job is not None, f"nothing claimed though {expected.id or 'a run'} was due"
            if expected.id is None:
                expected.id = job.id
            assert job.id == expected.id, f"claimed {job.id}, expected {expected.id}"
        self._learn_new_ids()
        return expected

    @rule(outcome=st.sampled_from(["complete", "complete", "fail", "fail", "release", "running",
                                   "running"]),
          reason=st.sampled_from(FAIL_REASONS))
    def work(self, outcome: str, reason: Reason) -> None:
        """The engine's step: claim a job, run it, record how it ended; or it is still
        running when the next step comes (and may never say: its lease runs out)."""
        if not self.up:
            self._start()
        row = self._claim()
        if row is None or outcome == "running":
            return
        if outcome == "complete":
            self._complete(row, self.owner)
        elif outcome == "fail":
            self._fail(row, self.owner, reason)
        else:
            self._release(row, self.owner)

    def _owner_for(self, row: Row, who: str) -> str:
        """holder: whoever holds the lease, even a daemon that died since (its late
        word counts only while the lease is still its own); dead: the daemon before the
        last start; stranger: a name that never held anything."""
        return {"holder": row.owner or "nobody", "current": self.owner,
                "dead": f"owner-{self.generation - 1}", "stranger": "owner-stranger"}[who]

    @rule(pick=st.integers(0, 255), who=st.sampled_from(["holder", "current", "dead", "stranger"]))
    def heartbeat(self, pick: int, who: str) -> None:
        if not (self.up and self._running()):
            return
        row = self._pick(self._running(), pick)
        owner = self._owner_for(row, who)
        held = row.owner == owner
        assert self.queue.heartbeat(row.id, owner, row.options.get("lease")) == held
        if held:
            row.lease_until = self.now + row.lease

    @rule(pick=st.integers(0, 255), who=st.sampled_from(["holder", "holder", "current", "dead",
                                                        "stranger"]))
    def complete(self, pick: int, who: str) -> None:
        if not (self.up and self._running()):
            return
        row = self._pick(self._running(), pick)
        self._complete(row, self._owner_for(row, who))

    def _complete(self, row: Row, owner: str) -> None:
        held = row.owner == owner
        assert bool(self.queue.complete(row.id, owner, "ok")) == held, (row.id, owner)
        if held:
            self.m.completions[row.id] = self.m.completions.get(row.id, 0) + 1
            if row.script not in self.m.series:
                self.m.script_completions[row.script] = (
                    self.m.script_completions.get(row.script, 0) + 1)
            self.m.ended.add(row.id)
            self._end_run(row, State.DONE)
        self._learn_new_ids()

    @rule(pick=st.integers(0, 255), who=st.sampled_from(["holder", "holder", "dead", "stranger"]),
          reason=st.sampled_from(FAIL_REASONS))
    def fail(self, pick: int, who: str, reason: Reason) -> None:
        if not (self.up and self._running()):
            return
        row = self._pick(self._running(), pick)
        self._fail(row, self._owner_for(row, who), reason)

    def _fail(self, row: Row, owner: str, reason: Reason) -> None:
        result = self.queue.fail(row.id, owner, f"it failed ({reason})", reason)
        if row.owner != owner:
            assert result is None
        elif row.attempts >= row.max_attempts or reason in PERMANENT:
            assert result == State.FAILED.value
            self._end_run(row, State.FAILED, reason)
        else:
            assert result == State.PENDING.value
            row.state, row.owner, row.lease_until, row.updated_at = (
                State.PENDING, None, None, self.now)
            row.reason = reason
            backoff = min(2.0**row.attempts, BACKOFF_CAP)
            row.not_before = self.now + backoff
            row.allowance = (backoff, "its backoff")
        self._learn_new_ids()

    @rule(pick=st.integers(0, 255), who=st.sampled_from(["holder", "dead", "stranger"]))
    def release(self, pick: int, who: str) -> None:
        if not (self.up and self._running()):
            return
        row = self._pick(self._running(), pick)
        self._release(row, self._owner_for(row, who))

    def _release(self, row: Row, owner: str) -> None:
        held = row.owner == owner
        assert bool(self.queue.release(row.id, owner)) == held
        if held:
            row.state, row.owner, row.lease_until = State.PENDING, None, None
            row.not_before = row.updated_at = self.now
            row.attempts = max(row.attempts - 1, 0)
            row.allowance = (0.0, "a release")

    # -- the CLI and the menu (these work while the daemon is stopped, too) ----------------

    @rule(pick=st.integers(0, 255))
    def cancel(self, pick: int) -> None:
        if not self.m.rows:
            return
        row = self._pick(self.m.rows, pick)
        expected = self._model_cancel(row)
        assert self.queue.cancel(row.id) == expected

    @rule(pick=st.integers(0, 255))
    def retry(self, pick: int) -> None:
        if not self.m.rows:
            return
        row = self._pick(self.m.rows, pick)
        before = self._schedules()
        expected = self._model_retry(row)
        if isinstance(expected, bool):
            assert spool.retry(self.queue, row.id) == expected
        else:
            with pytest.raises(expected):
                spool.retry(self.queue, row.id)
        self._check_retried([row] if expected is True else [], before)

    @rule()
    def retry_all_failed(self) -> None:
        before = self._schedules()
        retried, refused = [], 0
        for row in sorted((r for r in self.m.rows if r.state == State.FAILED),
                          key=lambda r: -r.seq):
            if row.reason == Reason.REFUSED:
                refused += 1
                continue
            if row.reason == Reason.STEP_UNSURE:  # a step's question: only its own retry
                continue
            if self._model_retry(row) is True:
                retried.append(row)
        assert spool.retry_all_failed(self.queue) == (len(retried), refused)
        self._check_retried(retried, before)

    @rule(pick=st.integers(0, 255))
    def run_now(self, pick: int) -> None:
        if not self.m.rows:
            return
        row = self._pick(self.m.rows, pick)
        expected = row.state == State.PENDING
        before = self._schedules()
        assert self.queue.run_now(row.id) == expected
        if expected:
            job = self.queue.get(row.id)
            assert job.not_before == self.now, (
                f"run-now on {row.id}: it must be due now ({self.now}), it is due at "
                f"{job.not_before}")
            assert job.options.get("scheduled") == row.options.get("scheduled"), (
                f"run-now on {row.id} moved its series' schedule from "
                f"{row.options.get('scheduled')} to {job.options.get('scheduled')}: its next "
                "run must stay where the schedule has it")
            row.not_before = row.updated_at = self.now
            row.allowance = (0.0, "run-now")
        self._schedules_stayed(before, {row.id}, "run-now")

    @rule(pick=st.integers(0, 255), kind=st.sampled_from(list(HEADERS)))
    def edit_header(self, pick: int, kind: str) -> None:
        """The user rewrites the header of a failed job's spool copy, to retry it."""
        ended = [r for r in self.m.rows
                 if r.state in (State.FAILED, State.CANCELLED) and self._script_readable(r)]
        if not ended:
            return
        row = self._pick(ended, pick)
        self.drops += 1
        Path(row.script).write_text(script_text(kind, self.drops))
        self.m.kinds[row.script] = kind

    @rule(age=st.sampled_from([0.0, 5.0, 60.0, 7 * 86400.0]))
    def prune(self, age: float) -> None:
        before = self.now - age
        expected = self._model_prune(before, files=True)
        assert spool.prune(self.home, self.queue, before) == len(expected)

    @rule(age=st.sampled_from([0.0, 60.0]))
    def prune_interrupted(self, age: float) -> None:
        """`sloth-tray prune` killed the moment the rows went, before the files did."""
        before = self.now - age
        expected = self._model_prune(before, files=False)
        deleted: list[str] = []
        delete_rows = self.queue.prune

        def killed_after(cutoff: float) -> list[tuple[str, str | None]]:
            deleted.extend(i for i, _ in delete_rows(cutoff))
            raise Killed

        with mock.patch.object(self.queue, "prune", killed_after), pytest.raises(Killed):
            spool.prune(self.home, self.queue, before)
        assert sorted(deleted) == sorted(expected)

    @rule(pick=st.integers(0, 255))
    def delete_spool_folder(self, pick: int) -> None:
        """The user deletes a job's spool copy by hand."""
        if not self.m.folders:
            return
        folder_id = sorted(self.m.folders)[pick % len(self.m.folders)]
        folder = self.m.folders.pop(folder_id)
        self.m.never_pushed.discard(folder_id)
        shutil.rmtree(self.home.spool / folder_id)
        self.m.removed.add(str(self.home.spool / folder_id / folder.name))

    @rule(seconds=st.one_of(st.integers(1, 15), st.sampled_from([3600, 86400, 10 * 86400])))
    def advance_clock(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @rule(seconds=st.one_of(st.sampled_from(CLOCK_BACK), st.integers(1, 15)))
    def set_clock_back(self, seconds: int) -> None:
        """The clock is set back (it was wrong, or a sync corrected it), and the queue
        looks at once, as the app does when its timer says the clock was set: each
        waiting job that last changed more than a second "in the future" keeps the
        wait it had, counted from now, and its history says so. Leases are left alone."""
        self.clock.advance(-seconds)
        for row in self._running():
            row.clock_went_back = True
        earlier = {r.id: (r.not_before, r.options.get("scheduled")) for r in self.m.rows}
        moved = self._model_look()
        wakeup = self.queue.next_wakeup()
        for row in moved:
            job = self.queue.get(row.id)
            was_due, was_scheduled = earlier[row.id]
            seen = (job.not_before, job.options.get("scheduled"), job.updated_at)
            want = (row.not_before, row.options.get("scheduled"), row.updated_at)
            assert seen == want, (
                f"the clock went back {seconds} s; {row.id}, due at {was_due} (scheduled "
                f"{was_scheduled}), must keep the wait it had, counted from now: (due, "
                f"scheduled, changed) = {want}; the queue has {seen}")
        # A job behind its lane's running one cannot start before that one's lease ends.
        busy = {r.lane for r in self._running()}
        times = [r.not_before for r in self.m.rows
                 if r.state == State.PENDING and r.lane not in busy]
        times += [r.lease_until for r in self._running()]
        assert wakeup == min(times, default=None), (
            f"next_wakeup() is {wakeup}; the soonest due time or lease end is "
            f"{min(times, default=None)}")

    # -- crashes and starts -----------------------------------------------------------------

    def _crash(self) -> None:
        """The daemon dies: no release, its leases stay as they were. The queue stays
        reachable by the CLI, through a connection of its own."""
        self.queue.close()
        self.queue = self._open()
        self.up = False

    @rule(how=st.sampled_from(["crash", "crash", "quit"]))
    def restart(self, how: str) -> None:
        """The daemon dies (crash: it releases nothing) or quits (a clean quit gives its
        leases back, attempt uncounted), and starts again; or, stopped already, starts."""
        if self.up and how == "quit":
            for row in self._running():
                if row.owner == self.owner:
                    self._release(row, self.owner)
        self._start()

    def _start(self) -> None:
        """What a start does: open the queue, end the leases left running, reconcile the
        spool, then take what waits in the jobs folder. The new owner is a new name."""
        never_pushed = set(self.m.never_pushed)
        self.queue.close()
        self.queue = self._open()
        self.generation += 1
        self.owner = f"owner-{self.generation}"
        assert self.queue.expire_leases() == sum(
            1 for r in self._running() if r.lease_until > self.now)
        for row in self._running():
            row.lease_until = min(row.lease_until, self.now)
        spool.reconcile(self.home, self.queue)
        self._model_reconcile()
        for name in sorted(os.listdir(self.home.jobs)):
            if not name.startswith("."):
                self._take(self.home.jobs / name)
        self.up = True
        for job_id in never_pushed:
            assert self.queue.exists(job_id), f"the drop {job_id} never became a job"
            script = str(self.home.spool / job_id / self.m.folders[job_id].name)
            same = [j.id for j in self.queue.jobs() if j.script == script]
            assert same == [job_id], f"the drop {job_id} became jobs {same}"

    def _model_reconcile(self) -> None:
        """spool.reconcile, by the rules of its docstring."""
        for job_id in sorted(self.m.staging):
            staged = self.m.staging[job_id]
            if job_id in self.m.ids():  # committed: it moves into place
                if job_id not in self.m.folders:
                    del self.m.staging[job_id]
                    self.m.folders[job_id] = Folder(staged.name, marker=staged.committed)
            elif staged.stale:  # an add that died long ago: never queued
                del self.m.staging[job_id]
        once_held = []
        for folder_id in sorted(self.m.folders):
            folder = self.m.folders[folder_id]
            if folder_id in self.m.ids():
                folder.marker = True
            elif folder.marker:
                once_held.append(folder_id)
            else:
                self.m.inbox.pop(folder.name, None)  # a twin left by a crash mid-move
                script = self.home.spool / folder_id / folder.name
                self._model_push(folder_id, script, self.m.kinds[str(script)])
                folder.marker = True
        for folder_id in once_held:
            if not self.m.in_use(folder_id, self.home.spool):
                del self.m.folders[folder_id]
                self.m.recovered.add(folder_id)
        for row in self.m.rows:
            folder = Path(row.script).parent.name
            if row.state == State.PENDING and (folder not in self.m.folders
                                               or row.script in self.m.removed):
                self._model_refuse(row, Reason.SCRIPT_GONE)

    # -- what must hold after every step ----------------------------------------------------

    @invariant()
    def everything_holds(self) -> None:
        """One invariant that runs every check, so that a failing sequence prints one line
        per step; the assertion that fails names the broken promise. The rows and their
        histories are read once, for all of them."""
        jobs = {j.id: j for j in self.queue.jobs()}
        histories = {job_id: self.queue.history(job_id) for job_id in jobs}
        self.rows_match_the_model(jobs)
        self.files_match_the_model()
        self.no_job_completes_twice(histories)
        self.no_committed_drop_is_lost(jobs)
        self.what_ended_stays_ended(jobs)
        self.attempts_count_claims_since_the_last_retry(jobs, histories)
        self.a_running_row_is_leased(jobs)
        self.a_refusal_never_runs(jobs, histories)
        self.a_pending_job_has_its_script(jobs)
        self.status_agrees_with_the_rows(jobs)
        self.a_series_never_has_two_runs_waiting(jobs)
        self.no_job_waits_longer_than_it_should(jobs)
        self.a_reanchored_job_says_so(histories)

    def rows_match_the_model(self, jobs: dict[str, Job]) -> None:
        assert set(jobs) == set(self.m.ids()), (
            f"the queue holds {sorted(set(jobs) - set(self.m.ids()))} that it should not "
            f"and lacks {sorted(set(self.m.ids()) - set(jobs))}")
        for row in self.m.rows:
            job = jobs[row.id]
            seen = (job.state, job.attempts, job.max_attempts, job.not_before, job.lease_owner,
                    job.lease_until, job.reason, job.script, job.options, job.updated_at)
            want = (row.state, row.attempts, row.max_attempts, row.not_before, row.owner,
                    row.lease_until, row.reason, row.script, row.options, row.updated_at)
            assert seen == want, f"{row.id}: the queue has {seen}, the model {want}"

    def files_match_the_model(self) -> None:
        spooled = {p.name: {q.name for q in p.iterdir()} for p in self.home.spool.iterdir()}
        expected = {i: {f.name} | ({spool.QUEUED} if f.marker else set())
                    for i, f in self.m.folders.items()}
        expected |= {f"{spool.STAGING}{i}": {s.name} | ({spool.QUEUED} if s.committed else set())
                     for i, s in self.m.staging.items()}
        assert spooled == expected
        assert set(os.listdir(self.home.jobs)) == set(self.m.inbox)
        recovered = self.home.root / "recovered"
        assert set(os.listdir(recovered) if recovered.exists() else []) == self.m.recovered

    def no_job_completes_twice(self, histories: dict[str, list]) -> None:
        for job_id, history in histories.items():
            kinds = [e.kind for e in history]
            # Once between two retries: a person's retry of a done job runs it again.
            between = " ".join(kinds).split("retried")
            assert all(part.split().count("completed") <= 1 for part in between), (
                f"{job_id} completed twice: {kinds}")
        assert all(n <= 1 for n in self.m.completions.values()), self.m.completions
        # A script that ever recurred has many runs; any other is done at most once.
        twice = {s: n for s, n in self.m.script_completions.items() if n > 1}
        assert not twice, f"one-off scripts completed more than once: {twice}"

    def no_committed_drop_is_lost(self, jobs: dict[str, Job]) -> None:
        for job_id in self.m.pushed - self.m.pruned:
            assert job_id in jobs, f"the drop {job_id} was lost"

    def what_ended_stays_ended(self, jobs: dict[str, Job]) -> None:
        for job_id in self.m.ended:
            state = jobs[job_id].state
            assert state in (State.DONE, State.CANCELLED), f"{job_id} came back as {state}"
        for job_id in self.m.pruned:
            assert job_id not in jobs, f"the pruned job {job_id} came back"
        for job in jobs.values():
            assert job.script not in self.m.retired, (
                f"{job.id} runs {job.script}, whose job was pruned")

    def attempts_count_claims_since_the_last_retry(self, jobs: dict[str, Job],
                                                   histories: dict[str, list]) -> None:
        for job in jobs.values():
            claims = 0
            for event in histories[job.id]:
                if event.kind == "retried":
                    claims = 0
                claims += {"claimed": 1, "released": -1}.get(event.kind, 0)
            assert job.attempts == claims, (job.id, job.attempts, claims)
            assert 0 <= job.attempts <= job.max_attempts, job

    def a_running_row_is_leased(self, jobs: dict[str, Job]) -> None:
        for job in jobs.values():
            if job.state == State.RUNNING:
                assert job.lease_owner and job.lease_until is not None, job

    def a_refusal_never_runs(self, jobs: dict[str, Job], histories: dict[str, list]) -> None:
        for job in jobs.values():
            if job.reason == Reason.REFUSED:
                assert job.state in (State.FAILED, State.CANCELLED), job
                assert "claimed" not in [e.kind for e in histories[job.id]], job.id

    def a_pending_job_has_its_script(self, jobs: dict[str, Job]) -> None:
        for job in jobs.values():
            if job.state != State.PENDING:
                continue
            # A script deleted by hand, or an add's copy not yet in place, is known.
            if job.script not in self.m.removed \
                    and Path(job.script).parent.name not in self.m.staging:
                assert os.path.isfile(job.script), f"{job.id} waits for {job.script}, gone"

    def status_agrees_with_the_rows(self, jobs: dict[str, Job]) -> None:
        counts = {state.value: sum(j.state == state for j in jobs.values()) for state in State}
        due = sum(1 for j in jobs.values()
                  if (j.state == State.PENDING and j.not_before <= self.now)
                  or (j.state == State.RUNNING and j.lease_until <= self.now))
        assert self.queue.status() == counts | {"due_now": due}

    def a_series_never_has_two_runs_waiting(self, jobs: dict[str, Job]) -> None:
        """One script's series has at most one scheduled run waiting or running. A run
        that was followed already and then retried is an extra run by hand: it does
        not count."""
        scheduled: dict[str, list[str]] = {}
        for row in self.m.rows:
            job = jobs[row.id]
            if job.state in (State.PENDING, State.RUNNING) and job.options.get("every") \
                    and not row.followed:
                scheduled.setdefault(job.script, []).append(
                    f"{job.id} ({job.state}, due at {job.not_before})")
        for script, runs in scheduled.items():
            assert len(runs) == 1, f"the series of {script} has {len(runs)} runs waiting: {runs}"

    def no_job_waits_longer_than_it_should(self, jobs: dict[str, Job]) -> None:
        """Measured on the current clock, whatever it did before (the queue looked
        after each time it was set back), a waiting job is due within its delay, its
        backoff, its period, or at once; a clock set back by up to a second may add
        that second."""
        for row in self.m.rows:
            if row.state != State.PENDING:
                continue
            wait = jobs[row.id].not_before - self.now
            longest, what = row.allowance
            assert wait <= longest + REANCHOR_SLACK, (
                f"{row.id} waits {wait:g} s from now; {what} lets it wait {longest:g} s "
                "at most")

    def a_reanchored_job_says_so(self, histories: dict[str, list]) -> None:
        for row in self.m.rows:
            told = sum(e.kind == "reanchored" for e in histories[row.id])
            assert told == row.reanchors, (
                f"{row.id} was moved to count its wait from now {row.reanchors} time(s) "
                f"after the clock was set back; its history says `reanchored` {told} time(s)")


SpoolMachine.TestCase.settings = settings(
    max_examples=examples(150), stateful_step_count=80, deadline=None, database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestSpoolModel = pytest.mark.slow(SpoolMachine.TestCase)


# -- known tricky sequences, replayed step by step ------------------------------------------


def replay(*steps: tuple[str, dict[str, Any]]) -> None:
    """Run these rules in this order on a fresh machine, checking every invariant after
    each, as the state machine does."""
    machine = SpoolMachine()
    try:
        for name, arguments in steps:
            getattr(machine, name)(**arguments)
            machine.everything_holds()
    finally:
        machine.teardown()


def test_a_drop_never_queued_becomes_one_job_at_the_next_start_even_after_a_prune():
    """Placed in the spool, then the daemon died before the push; a prune meanwhile
    leaves its folder alone, the start queues it once, and once done and pruned it
    stays gone across the next start."""
    replay(("drop", {"kind": "plain", "crash": "before_push"}),
           ("prune", {"age": 0.0}),
           ("restart", {"how": "crash"}),
           ("work", {"outcome": "complete", "reason": Reason.EXIT_CODE}),
           ("advance_clock", {"seconds": 1}),
           ("prune", {"age": 0.0}),
           ("restart", {"how": "crash"}))


def test_a_refused_drop_caught_between_link_and_unlink_is_one_refused_job():
    """A symbolic link, linked into the spool but not yet unlinked from the jobs folder
    when the daemon died: the start makes it one refused job (not two), removes the
    twin, never hands it out, and a retry raises Refused."""
    replay(("drop", {"kind": "refused", "crash": "twins"}),
           ("restart", {"how": "crash"}),
           ("work", {"outcome": "complete", "reason": Reason.EXIT_CODE}),
           ("retry", {"pick": 0}))


def test_a_dead_owner_cannot_finish_a_job_the_next_start_took_back():
    """Running when the daemon died; the next start takes it back under a new owner, and
    the old owner's complete and fail change nothing; the new owner's do."""
    replay(("drop", {"kind": "plain", "crash": "none"}),
           ("work", {"outcome": "running", "reason": Reason.EXIT_CODE}),
           ("restart", {"how": "crash"}),
           ("work", {"outcome": "running", "reason": Reason.EXIT_CODE}),
           ("complete", {"pick": 0, "who": "dead"}),
           ("fail", {"pick": 0, "who": "dead", "reason": Reason.KILLED}),
           ("heartbeat", {"pick": 0, "who": "holder"}),
           ("complete", {"pick": 0, "who": "holder"}))


def test_a_job_whose_marker_was_lost_is_never_queued_again_after_an_interrupted_prune():
    """Killed after its push committed, before the `.queued` marker; while stopped it is
    cancelled, and a prune is killed after deleting the row: the next start must set the
    folder aside, not queue the cancelled job again."""
    replay(("drop", {"kind": "plain", "crash": "marker_lost"}),
           ("cancel", {"pick": 0}),
           ("advance_clock", {"seconds": 1}),
           ("prune_interrupted", {"age": 0.0}),
           ("restart", {"how": "crash"}))


def test_a_recurring_jobs_first_run_is_not_queued_again_when_its_marker_could_not_be_written():
    """The marker of a recurring drop could not be written (the daemon goes on); its first
    run is done and pruned, its later run keeps the folder: a start must not queue the
    first run again, beside the series."""
    replay(("drop", {"kind": "every", "crash": "marker_failed"}),
           ("work", {"outcome": "complete", "reason": Reason.EXIT_CODE}),
           ("advance_clock", {"seconds": 1}),
           ("prune", {"age": 0.0}),
           ("restart", {"how": "crash"}))


def test_a_header_fixed_to_recur_is_completed_and_followed_by_its_next_run():
    """A bad header, fixed in the spool copy to say every=, then retried: the run must
    complete and queue the next one (a series needs a `scheduled` time to count from)."""
    replay(("drop", {"kind": "bad", "crash": "none"}),
           ("edit_header", {"pick": 0, "kind": "every"}),
           ("retry", {"pick": 0}),
           ("work", {"outcome": "complete", "reason": Reason.EXIT_CODE}))


def test_a_job_retried_with_a_header_that_now_recurs_can_run_out_its_last_lease():
    """The last lease of such a job runs out: it fails for good and its next run is
    queued, and claims go on handing out the other jobs."""
    replay(("drop", {"kind": "once", "crash": "none"}),
           ("work", {"outcome": "fail", "reason": Reason.EXIT_CODE}),
           ("edit_header", {"pick": 0, "kind": "every_lease"}),
           ("retry", {"pick": 0}),
           ("work", {"outcome": "running", "reason": Reason.EXIT_CODE}),
           ("advance_clock", {"seconds": 15}),
           ("work", {"outcome": "running", "reason": Reason.EXIT_CODE}),
           ("advance_clock", {"seconds": 15}),
           ("drop", {"kind": "plain", "crash": "none"}),
           ("work", {"outcome": "complete", "reason": Reason.EXIT_CODE}),
           ("work", {"outcome": "running", "reason": Reason.EXIT_CODE}),
           ("drop", {"kind": "plain", "crash": "none"}),
           ("work", {"outcome": "complete", "reason": Reason.EXIT_CODE}))


class Steps:
    """A fresh machine driven rule by rule, every invariant checked after each step, as
    replay() does; between steps a test may read the queue (never write it)."""

    def __init__(self) -> None:
        self.machine = SpoolMachine()

    def __call__(self, name: str, **arguments: Any) -> None:
        getattr(self.machine, name)(**arguments)
        self.machine.everything_holds()

    def __enter__(self) -> Steps:
        return self

    def __exit__(self, *exc: object) -> None:
        self.machine.teardown()

    @property
    def queue(self) -> Queue:
        return self.machine.queue

    @property
    def now(self) -> float:
        return self.machine.now

    def pick(self, job_id: str) -> int:
        """The `pick` that names this job in the rules that pick among all rows."""
        return [r.id for r in sorted(self.machine.m.rows, key=lambda r: r.seq)].index(job_id)

    def waiting(self, kind: str) -> list[Job]:
        """The waiting runs of the drops of this kind (by their header)."""
        return [j for j in self.queue.jobs(State.PENDING)
                if self.machine.m.kinds.get(j.script) == kind]


def test_an_every_job_started_three_periods_late_runs_once_then_a_period_later():
    """every=30s, its first run started 90 s late (asleep, paused, behind another job):
    that one run stands for the missed periods; the next is due 30 s after it started,
    not at once."""
    with Steps() as step:
        step("drop", kind="every", crash="none")
        step("advance_clock", seconds=90)
        started = step.now
        step("work", outcome="complete", reason=Reason.EXIT_CODE)
        (following,) = step.waiting("every")
        assert following.not_before == started + 30, (
            f"the next run is due {following.not_before - started:g} s after the late run "
            "started, not a period (30 s)")
        step("work", outcome="running", reason=Reason.EXIT_CODE)
        assert not step.queue.jobs(State.RUNNING), "a second run right after the late one"
        step("advance_clock", seconds=30)
        step("work", outcome="complete", reason=Reason.EXIT_CODE)
        (after,) = step.waiting("every")
        assert after.not_before == started + 60


def test_run_now_on_the_waiting_run_keeps_the_next_run_at_its_scheduled_time():
    """Run now, 5 s after a run of an every=30s series: the hurried run runs at once,
    and the one after it is still due when the schedule had the hurried one."""
    with Steps() as step:
        step("drop", kind="every", crash="none")
        step("work", outcome="complete", reason=Reason.EXIT_CODE)
        (waiting,) = step.waiting("every")
        scheduled = waiting.not_before
        step("advance_clock", seconds=5)
        step("run_now", pick=step.pick(waiting.id))
        step("work", outcome="complete", reason=Reason.EXIT_CODE)
        assert step.queue.get(waiting.id).state == State.DONE
        (following,) = step.waiting("every")
        assert following.not_before == scheduled, (
            f"run-now moved the series: its next run is due at {following.not_before}, "
            f"the schedule said {scheduled}")


def test_retrying_the_cancelled_waiting_run_gives_one_run_now_and_the_next_a_period_later():
    """The waiting run of an every=30s series was cancelled (the series ended); retried
    long after, it runs now, once, and the next run is due a period after the retry."""
    with Steps() as step:
        step("drop", kind="every", crash="none")
        step("work", outcome="complete", reason=Reason.EXIT_CODE)
        (waiting,) = step.waiting("every")
        step("cancel", pick=step.pick(waiting.id))
        step("advance_clock", seconds=86400)
        retried_at = step.now
        step("retry", pick=step.pick(waiting.id))
        step("work", outcome="complete", reason=Reason.EXIT_CODE)
        assert step.queue.get(waiting.id).state == State.DONE
        step("work", outcome="running", reason=Reason.EXIT_CODE)
        assert not step.queue.jobs(State.RUNNING), "two runs in a row after the retry"
        (following,) = step.waiting("every")
        assert following.not_before == retried_at + 30


def test_a_clock_set_back_a_year_reanchors_a_delayed_job_and_the_series_next_run():
    """A delay=20 job and a series' next run (every=30s), both waiting, and the clock is
    set back a year: each keeps the wait it was given, counted from now, and says so."""
    with Steps() as step:
        step("drop", kind="delay", crash="none")
        step("drop", kind="every", crash="none")
        step("work", outcome="complete", reason=Reason.EXIT_CODE)
        step("advance_clock", seconds=5)
        step("set_clock_back", seconds=365 * 86400)
        (delayed,) = step.waiting("delay")
        (following,) = step.waiting("every")
        assert delayed.not_before == step.now + 20, delayed.not_before - step.now
        assert following.not_before == step.now + 30, following.not_before - step.now
        assert following.options["scheduled"] == following.not_before
        for job in (delayed, following):
            assert "reanchored" in [e.kind for e in step.queue.history(job.id)], job.id
        step("advance_clock", seconds=20)
        step("work", outcome="complete", reason=Reason.EXIT_CODE)
        assert step.queue.get(delayed.id).state == State.DONE, "the delayed job ran on time"


def test_a_series_run_overdue_when_the_clock_is_set_back_keeps_its_place_in_line():
    """A series' run ends an hour late, so its next run is overdue as it is queued; the
    clock is then set back 2 s. That run is due already: it stays due when it was (not
    "now"), ahead in line of anything due since, and says it was looked at again."""
    with Steps() as step:
        step("add", kind="every", crash="none")
        step("work", outcome="running", reason=Reason.EXIT_CODE)
        step("advance_clock", seconds=3600)
        step("complete", pick=0, who="holder")
        (following,) = step.waiting("every")
        due = following.not_before
        assert due < step.now, "the next run is overdue as it is queued"
        step("set_clock_back", seconds=2)
        moved = step.queue.get(following.id)
        assert (moved.not_before, moved.options["scheduled"]) == (due, due)
        assert "reanchored" in [e.kind for e in step.queue.history(following.id)]


def test_a_job_queued_after_a_sleep_keeps_its_wait_when_the_clock_is_then_set_back():
    """The laptop sleeps ten days; on waking a delay=20 job is added from the command
    line, and the clock is then set back a day (it was ahead) before the daemon looks:
    the job waits its 20 s from the corrected clock, not a day more."""
    with Steps() as step:
        step("work", outcome="running", reason=Reason.EXIT_CODE)  # the daemon looked
        step("advance_clock", seconds=10 * 86400)
        step("add", kind="delay", crash="none")
        step("set_clock_back", seconds=86400)
        (delayed,) = step.waiting("delay")
        assert delayed.not_before == step.now + 20, (
            f"the job waits {delayed.not_before - step.now:g} s from the corrected clock")
