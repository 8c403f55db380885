"""The lease queue: one SQLite file, written here (with a job row's model and its
one INSERT in rows.py, and a series' follow-ups in calendar.py, both called from here),
and read through here (the queries in queries.py, in a connection Queue hands them).

A running job is a lease, not a flag. `claim` hands a job out until
`lease_until`; the owner keeps it alive with `heartbeat`; `complete` and
`fail` only count when they come from the current owner (the owner is in the
WHERE clause). A worker that dies or sleeps simply stops renewing, and the
next `claim` after `lease_until` takes the job back. Nothing needs a reaper.

Each public method is one statement or one short transaction (connection.py); the
claim's statements are built in claims.py. A job's history lives in its own row,
appended by the same UPDATE that changes its state, so a transition and its event
can never part. Wall time comes from the injected `clock`, so tests move time
instead of sleeping.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Collection, Iterable
from datetime import UTC, tzinfo
from typing import Any

from sloth_tray import limits
from sloth_tray.errors import UnknownJob
from sloth_tray.jobs import overdue, schedule, series
from sloth_tray.store import (
    calendar,
    ends,
    lanes,
    leases,
    pushes,
    queries,
    reads,
    rows,
    schedules,
    steps,
    words,
)
from sloth_tray.store.claims import ClaimStatements, claim_statements
from sloth_tray.store.connection import SharedConnection
from sloth_tray.store.ends import LATER_FOR_AT_MOST as LATER_FOR_AT_MOST
from sloth_tray.store.reasons import PERMANENT as PERMANENT
from sloth_tray.store.reasons import Reason
from sloth_tray.store.rows import VALID_ID as VALID_ID
from sloth_tray.store.rows import Event, Job
from sloth_tray.store.rows import new_job_id as new_job_id
from sloth_tray.store.states import State
from sloth_tray.store.steps import NotCutShort as NotCutShort
from sloth_tray.store.steps import UnknownStep as UnknownStep
from sloth_tray.store.words import RETRIABLE as RETRIABLE
from sloth_tray.store.words import Refused as Refused

Clock = Callable[[], float]


class Queue(SharedConnection):
    """A SQLite lease queue. Safe to share between threads; one file, many processes.
    Its transactions are SharedConnection's (store/connection.py)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock = time.time,
        lease_seconds: float = 60.0,
        max_attempts: int = 5,
        backoff_cap: float = 3600.0,
        synchronous: str = "FULL",
        busy_timeout: float = 5.0,
        tz: tzinfo | None = None,
    ) -> None:
        self.clock = clock
        self._tz = tz  # calendar jobs' zone; None: this machine's, read when first needed
        self.lease_seconds = float(limits.LEASE.check(lease_seconds))
        self.max_attempts = int(limits.ATTEMPTS.check(max_attempts))
        self.backoff_cap = float(backoff_cap)
        # (wall, monotonic) at the last look: a wall clock that went back against the
        # monotonic one was set back, and waiting jobs count their waits again.
        self._clock_seen: tuple[float, float] | None = None
        # claim_statements(lane, skip_lanes, unmet) by its arguments (Queue.claim).
        self._claims: dict[tuple[Any, ...], ClaimStatements] = {}
        super().__init__(path, synchronous=synchronous, busy_timeout=busy_timeout)

    # -- writes --------------------------------------------------------------

    def push(
        self,
        name: str,
        *,
        script: str | None = None,
        delay: float = 0.0,
        max_attempts: int | None = None,
        options: dict[str, Any] | None = None,
        job_id: str | None = None,
        error: str | None = None,
        reason: Reason = Reason.REFUSED,
        lane: str = lanes.MAIN,
        key: str | None = None,
        source: str | None = None,
    ) -> str:
        """Add a pending job due `delay` seconds from now; returns its 12-hex id.
        With a `key` some job has already, that job's id, and nothing is added;
        `source`: who adds it (rows.DROPPED, rows.SHELL, an agent's name).

        `job_id` (from new_job_id()) lets a caller name the job's spool folder
        before the job exists, so a crash in between can be reconciled.
        `error` makes the job born failed, for `reason` (a refused drop, a bad
        header): the user sees it with the failures, and it never runs.
        `lane`: the lane it runs in, one job at a time (store/lanes.py).
        """
        row = pushes.checked_row(
            self.clock(), self._local, name=name, script=script, delay=delay,
            max_attempts=self.max_attempts if max_attempts is None else max_attempts,
            options=options, job_id=job_id, error=error, reason=reason, lane=lane, key=key,
            source=source)
        with self._transaction() as db:
            return pushes.add(db, row)

    def claim(self, owner: str, unmet: frozenset[str] = frozenset(),
              token: str | None = None, lane: str | None = None,
              skip_lanes: Collection[str] = ()) -> Job | None:
        """Lease the oldest due job to `owner`, or return None when nothing is due.

        Each lane runs one job at a time: a job whose lane has a job running (its
        lease live or lapsed), or whose lane (or the whole queue) is paused, is not
        due. `lane` claims from that lane only; `skip_lanes` from none of those (the
        lanes the caller's own workers run: their leases are theirs to renew, even
        lapsed, and their next job theirs to claim).

        Due means pending with not_before <= now, or running with an expired
        lease (its worker is gone). An expired lease at max_attempts ends the
        job as failed instead of handing it out again. A pending job that
        requires a condition in `unmet` waits: it is passed over, untouched.
        `token`, when given, is the coming run's token, kept as its `child` from
        the claim on (what `started` would otherwise write before the spawn).
        """
        statements = self._claim_statements(lane, skip_lanes, unmet)
        now = self.clock()
        params = {"owner": owner, "now": now, "lease": self.lease_seconds,
                  "child": json.dumps({"token": token}) if token else None,
                  **statements.params}
        self._mind_the_clock(now)
        self._settle_missed_calendar_runs(now, unmet)
        with self._autocommit() as db:
            lapsed = db.execute(statements.lapsed, params).fetchone()
        if lapsed is None:  # the usual claim: one statement, atomic on its own
            with self._autocommit() as db:
                return next(iter(rows.jobs(db, statements.due, params)), None)
        with self._transaction() as db:
            while True:
                lapsed = db.execute(statements.lapsed, params).fetchone()
                if lapsed is None:  # none (left) to take back first: the usual claim
                    return next(iter(rows.jobs(db, statements.due, params)), None)
                reclaimed = ends.reclaim(db, lapsed[0], now, self._local)
                if reclaimed is not None:
                    return rows.jobs(db, statements.taken_back, {
                        **params, "id": lapsed[0], "reclaimed": reclaimed})[0]
                # else: it was given back, or failed for good; look again

    def next_in_lane(self, lane: str, unmet: frozenset[str] = frozenset()) -> Job | None:
        """The job a claim for `lane` (`unmet` as in claim) would lease now, were the
        lane's running job over: read, and nothing leased (ClaimStatements.ahead). The
        engine prepares its run while the one before runs; a guess, which the claim
        that follows confirms or not."""
        statements = self._claim_statements(lane, (), unmet)
        with self._autocommit() as db:
            return next(iter(rows.jobs(db, statements.ahead,
                                       {"now": self.clock(), **statements.params})), None)

    def _claim_statements(self, lane: str | None, skip_lanes: Collection[str],
                          unmet: frozenset[str]) -> ClaimStatements:
        """claim_statements(lane, skip_lanes, unmet), built once for the same arguments,
        not at every claim."""
        asked = (lane, frozenset(skip_lanes), frozenset(unmet))
        statements = self._claims.get(asked)
        if statements is None:
            if len(self._claims) >= 64:  # lanes and conditions come and go
                self._claims.clear()
            statements = self._claims[asked] = claim_statements(lane, skip_lanes, unmet)
        return statements

    # -- runs that end waiting (store/steps.py: a sleep, an ask) ------------------------

    def waited(self, job_id: str, token: str | None) -> steps.Step | None:
        """The step the run under `token` recorded a wait in, if it did (the runner
        then ends the run: Queue.wait)."""
        with self._autocommit() as db:
            return steps.run_wait(db, job_id, token)

    def wait(self, job_id: str, owner: str, token: str | None) -> State | None:
        """The run ended in a step that waits: the job waits, pending, holding no lease,
        due at the step's wake time (a sleep's end; an ask's timeout, or at once if it
        was answered meanwhile); the attempt does not count. Failed (unanswered), when
        its ask timed out with no default. None when `owner` does not hold the job, or
        its run recorded no wait."""
        with self._transaction() as db:
            return ends.wait(db, job_id, owner, token, self.clock(), self._local)

    def answer(self, job_id: str, choice: str) -> steps.Step:
        """A person's answer to the question job `job_id` asks: the job runs again at
        once (its ask then returns `choice`). steps.NotAsking when it asks nothing, or
        `choice` is not among its choices: then nothing changes."""
        now = self.clock()
        with self._transaction() as db:
            return words.answer(db, job_id, choice, now)

    def asking(self) -> list[tuple[str, steps.Step]]:
        """Every job waiting for an answer, with its question, oldest first."""
        with self._autocommit() as db:
            return steps.asking(db)

    def waiting_for(self, job_ids: list[str]) -> dict[str, dict]:
        """What each of these waiting jobs waits for (reads.waiting_for)."""
        with self._autocommit() as db:
            return reads.waiting_for(db, job_ids)

    def heartbeat(self, job_id: str, owner: str, lease: float | None = None) -> bool:
        """Extend the lease; False means `owner` no longer holds it (stop the work).
        `lease` is the job's own lease length, when it has one (leases.heartbeat)."""
        with self._transaction() as db:
            # The clock is read once the write lock is held: a heartbeat that
            # waited on a busy database must not write a lease already past.
            return leases.heartbeat(db, job_id, owner,
                                    self.clock() + (lease or self.lease_seconds))

    def complete(self, job_id: str, owner: str, result: str = "") -> State | None:
        """Done, when `owner` holds it: the state it left the job in (failed, when the run
        ended in a step that asks: see ends.finish), or None."""
        now = self.clock()
        with self._transaction() as db:
            return ends.finish(db, job_id, now, "done", ("completed", result), self._local,
                               owner=owner, result=result)

    def started(self, job_id: str, owner: str, child: dict[str, Any]) -> bool:
        """Remember the attempt's process; owner-checked like a heartbeat.

        Before the spawn with the run's token only, unless the claim stored it
        already (so a crash right after the spawn still leaves a way to find the
        orphan); then with its pid, which is the `started` event.
        """
        if "pid" not in child:  # the token before a spawn: on disk before the process exists
            with self._autocommit() as db:
                return leases.started(db, job_id, owner, child, self.clock())
        with self._without_own_fsync(), self._autocommit() as db:
            return leases.started(db, job_id, owner, child, self.clock())

    def holds_run(self, job_id: str, owner: str, token: str) -> bool:
        """Whether `owner` holds the running job for the run under `token`. A claim made
        in another thread's transaction is read once that transaction has ended (this
        waits for the connection): there only if it committed."""
        with self._autocommit() as db:
            return leases.holds_run(db, job_id, owner, token)

    def release(self, job_id: str, owner: str, why: str | None = None) -> State | None:
        """Give the lease back (a clean quit, or `why`); the attempt does not count.
        The state it left the job in (pending; failed, when the run was cut short in a
        step that asks: see ends.finish), or None when `owner` did not hold it."""
        with self._transaction() as db:
            return ends.release(db, job_id, owner, why, self.clock(), self._local)

    def later(self, job_id: str, owner: str, detail: str) -> State | None:
        """The script asked to be run again later (exit 75, EX_TEMPFAIL): back off
        as after a failure, but the attempt does not count. After LATER_FOR_AT_MOST
        of nothing but "later" the job fails for good (LATER_TOO_LONG). Returns
        the new state, or None when `owner` does not hold the lease."""
        now = self.clock()
        with self._transaction() as db:
            return ends.later(db, job_id, owner, detail, now, self._local, self.backoff_cap)

    def fail(self, job_id: str, owner: str, error: str,
             reason: Reason = Reason.EXIT_CODE) -> State | None:
        """Record a failed attempt: back off and retry, or give up at max_attempts.

        A PERMANENT reason gives up at once: trying again cannot help (a script
        nothing knows how to run, a bad header). Returns the new state
        ('pending' or 'failed'), or None when `owner` does not hold the lease
        (then nothing changes).
        """
        now = self.clock()
        with self._transaction() as db:
            return ends.fail(db, job_id, owner, error, reason, now, self._local,
                             self.backoff_cap)

    def refuse(self, job_id: str, error: str, reason: Reason = Reason.SCRIPT_GONE) -> bool:
        """A pending or failed job that cannot run as it is (its script vanished,
        its header is still wrong) -> failed, with that sentence."""
        now = self.clock()
        with self._transaction() as db:
            return words.refuse(db, job_id, now, error, reason)

    def note(self, job_id: str, kind: str, detail: str) -> None:
        """Add an event to a job's history (e.g. 'slept': the computer was suspended)."""
        history, params = rows.history((kind, detail))
        with self._autocommit() as db:
            changed = db.execute(f"UPDATE jobs SET {history} WHERE id = :id",
                                 {"id": job_id, "now": self.clock(), **params}).rowcount
        if not changed:
            raise UnknownJob(job_id)

    def found_started(self, runs: dict[str, int]) -> int:
        """The runs a start found processes of ({token: a pid}), each its job's run
        still marked running: noted as started where the app that ran them died
        before noting it, so each reclaim counts the attempt. How many were noted.

        Only for the one process that holds the home's instance lock."""
        if not runs:
            return 0
        now = self.clock()
        with self._transaction() as db:
            return sum(leases.found_started(db, token, pid, now) for token, pid in runs.items())

    def expire_leases(self) -> int:
        """End every running lease now, so the next claims reclaim those jobs.

        Only for the one process that holds the home's instance lock: it
        knows any job still marked running was left by a process that died.
        """
        now = self.clock()
        with self._autocommit() as db:
            return leases.expire_all(db, now)

    def retry(self, job_id: str, *, options: dict[str, Any] | None = None,
              max_attempts: int | None = None, step_done: str | None = None,
              forget_from: str | None = None, fresh: bool = False) -> bool:
        """A done, failed or cancelled job becomes due now, with a fresh set of attempts.

        `options` (and `max_attempts`) replace the job's own when its header was
        read again. A refused job is never revived: it raises Refused.

        Its recorded steps are kept (they are skipped), and a step cut short that
        asked is to run again: that is a person's word. `step_done` marks that step
        done instead; `forget_from` forgets that step and every later one; `fresh`
        forgets them all. A step the job does not have raises UnknownStep; a
        `step_done` that names no step cut short, NotCutShort (nothing changes: the
        word is not about the step that asks, which must not run again on it).

        A run of a series that was followed (its next run was queued when it
        ended) runs once more, and the series is left as it is. A run that never
        was (the series' waiting run, cancelled; a first run born failed) starts
        the series again: one run now, the next at the series' next time.
        """
        now = self.clock()
        with self._transaction() as db:
            return words.retry(db, job_id, now, self._local, options=options,
                               max_attempts=max_attempts, step_done=step_done,
                               forget_from=forget_from, fresh=fresh)

    def run_now(self, job_id: str) -> bool:
        """A pending job becomes due now (the tray's `Run now`)."""
        now = self.clock()
        with self._transaction() as db:
            return words.run_now(db, job_id, now)

    def cancel(self, job_id: str) -> bool:
        """Pending, failed or running -> cancelled.

        Cancelling a running job takes its lease away: the worker's next
        heartbeat returns False and it stops the work.
        """
        now = self.clock()
        with self._transaction() as db:
            return words.cancel(db, job_id, now)

    def stop(self, job_id: str) -> bool:
        """Running -> cancelled: the tray's Stop. The run is given up, not its series:
        a repeating job's next run is queued in the same transaction, as after any run
        that ends (`cancel` of a series' run ends the series). The lease goes with the
        state, so the worker's next heartbeat stops the work. False when the job was
        not running (it ended meanwhile)."""
        now = self.clock()
        with self._transaction() as db:
            return words.stop(db, job_id, now, self._local)

    def prune(self, before: float) -> list[tuple[str, str | None]]:
        """Delete done and cancelled jobs that ended before `before`, with their
        history; returns their (id, script) pairs: their files are the
        caller's to remove (spool.prune), after the rows are gone."""
        with self._autocommit() as db:
            return db.execute(
                "DELETE FROM jobs WHERE state IN ('done', 'cancelled') AND updated_at < ? "
                "RETURNING id, script",
                (before,),
            ).fetchall()

    def prunable_scripts(self, before: float) -> list[str]:
        """The scripts of the jobs prune(before) would delete now."""
        with self._autocommit() as db:
            return queries.prunable_scripts(db, before)

    def folders_in_use(self, folders: list[str], spool: str) -> set[str]:
        """Which of these spool folders still hold some job's script (queries.folders_in_use)."""
        with self._autocommit() as db:
            return queries.folders_in_use(db, folders, spool)

    def exists(self, job_id: str) -> bool:
        with self._autocommit() as db:
            return queries.exists(db, job_id)

    # -- calendar jobs (at=, cron=) ----------------------------------------------

    @property
    def tz(self) -> tzinfo:
        """The zone calendar times are read in: the injected one, else this machine's."""
        if self._tz is None:
            self._tz = schedule.local_zone()
        return self._tz

    def _local(self) -> tzinfo:
        """`tz` as the calendar module asks for it: only when a calendar needs it."""
        return self.tz

    def _settle_missed_calendar_runs(self, now: float,
                                     unmet: frozenset[str] = frozenset()) -> None:
        """Before a claim: when the job next in line is a calendar run whose time was
        missed (the machine slept or was off), apply its catchup= and window=.

        Only the head of the line is looked at, on the partial index: a run is
        judged at the moment it would start, and a claim pays one cheap read.
        """
        waits, waits_params = reads.not_waiting(unmet)  # a waiting run is judged when it may start
        for _ in range(100):  # each pass moves one run away from the head
            with self._autocommit() as db:
                job_id = calendar.missed_head(db, now, waits, waits_params)
            if job_id is None:
                return
            with self._transaction() as db:
                if not calendar.settle_missed_run(db, job_id, now, self._local):
                    return

    # -- a clock set back ----------------------------------------------------------

    def _mind_the_clock(self, now: float) -> None:
        """Before a claim: if the wall clock went back since the last look (against the
        monotonic one; at the first look of this process, against the file), waiting
        jobs count their waits again from the corrected clock. Claims come back to back
        in a burst: they pay this only when the clock moved back; next_wakeup, the
        look before each sleep, always looks at the file."""
        monotonic = time.monotonic()
        seen, self._clock_seen = self._clock_seen, (now, monotonic)
        if seen is not None and now >= seen[0] + (monotonic - seen[1]) - series.CLOCK_SLACK:
            return
        self._reanchor(now)

    def _reanchor(self, now: float) -> int:
        """Every waiting job last changed after `now` (by a clock that was ahead) waits
        what it had left to wait when it changed, counted from now (series.reanchored),
        with a `reanchored` event; the log says so once. Returns how many moved."""
        with self._autocommit() as db:  # most looks find none: no write lock for them
            if not calendar.any_ahead(db, now):
                return 0
        with self._transaction() as db:
            moved = calendar.reanchor(db, now, self._local)
        if moved:
            import logging  # here: a queue opened only to read (`status`) never loads it

            logging.getLogger("sloth_tray").info(
                "the clock was set back: %d waiting job(s) count their wait from the "
                "corrected clock", moved)
        return moved

    # -- reads ---------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        with self._autocommit() as db:
            return queries.get(db, job_id)

    def resolve(self, prefix: str) -> str:
        """The full id of the one job whose id starts with `prefix` (queries.resolve)."""
        with self._autocommit() as db:
            return queries.resolve(db, prefix)

    def shortest_unique_prefix(self, job_id: str, minimum: int = 6) -> str:
        """The shortest prefix (at least `minimum` long) that names only this job."""
        with self._autocommit() as db:
            return queries.shortest_unique_prefix(db, job_id, minimum)

    def jobs(self, state: State | str | None = None, limit: int | None = None,
             reason: Reason | str | None = None, lane: str | None = None) -> list[Job]:
        """Jobs, newest first (queries.jobs)."""
        with self._autocommit() as db:
            return queries.jobs(db, state, limit, reason, lane)

    def failed_by_series(self, limit: int | None = None, per_series: int | None = None
                         ) -> list[tuple[Job, str, int, float]]:
        """Failed jobs, newest first, each with its series (queries.failed_by_series)."""
        with self._autocommit() as db:
            return queries.failed_by_series(db, limit, per_series)

    def failed_at_fault(self) -> int:
        """Failed jobs whose script is at fault (queries.failed_at_fault)."""
        with self._autocommit() as db:
            return queries.failed_at_fault(db)

    def upcoming(self, limit: int) -> list[Job]:
        """Pending jobs, soonest due first."""
        with self._autocommit() as db:
            return queries.upcoming(db, limit)

    def steps(self, job_id: str) -> list[dict[str, Any]]:
        """The job's steps, in the order they first started, without their output (by
        column name: what `show --json` gives)."""
        with self._autocommit() as db:
            return [step.as_dict(output=False) for step in steps.listed(db, job_id)]

    def step(self, job_id: str, name: str, occurrence: int | None = None) -> dict[str, Any]:
        """One recorded step with its output: that occurrence, else its last."""
        with self._autocommit() as db:
            return queries.step(db, job_id, name, occurrence)

    def step_progress(self, job_ids: list[str]
                      ) -> dict[str, tuple[int, int, steps.Step | None]]:
        """How far each job got: (steps, steps done, the first not done), one read."""
        if not job_ids:
            return {}
        with self._autocommit() as db:
            return steps.progress(db, job_ids)

    def running_step(self, job_id: str) -> tuple[int, str, bool] | None:
        """The step a running job is in: (its place among the job's steps, its name,
        whether it asks)."""
        with self._autocommit() as db:
            return steps.running(db, job_id)

    def history(self, job_id: str) -> list[Event]:
        """The job's events, oldest first."""
        with self._autocommit() as db:
            return queries.history(db, job_id)

    def status(self) -> dict[str, int]:
        with self._autocommit() as db:
            return reads.counts(db, self.clock())

    def summary(self) -> dict[str, Any]:
        """status(), and whether the queue is paused (reads.summary)."""
        with self._autocommit() as db:
            return reads.summary(db, self.clock())

    def waits_on(self, unmet: frozenset[str]) -> bool:
        """Whether some due job waits on a condition in `unmet`."""
        with self._autocommit() as db:
            return queries.waits_on(db, self.clock(), unmet)

    def overdue(self, *, paused: bool) -> overdue.Verdict:
        """Which recurring series are overdue now, and when the next one will be. The
        machine's time zone is read only when there is a series to judge."""
        series = self.recurring_series()
        return overdue.find(series, self.clock(), self.tz if series else UTC,
                            paused=paused)

    def recurring_series(self) -> list[overdue.Series]:
        """Each live recurring series, with its last success (reads.recurring_series)."""
        with self._autocommit() as db:
            return [overdue.Series(*row) for row in reads.recurring_series(db)]

    # -- series as schedules (store/schedules.py) -------------------------------

    def schedules(self, lane: str | None = None, ended: bool = False) -> list[dict[str, Any]]:
        """One dict per series, soonest next run first (schedules.read)."""
        with self._autocommit() as db:
            return schedules.read(db, self.clock(), self._tz, lane=lane, ended=ended)

    def jobs_folded(self, state: State | str | None = None, limit: int | None = None,
                    reason: Reason | str | None = None, lane: str | None = None
                    ) -> list[tuple[Job, int]]:
        """As jobs(), a series' done runs folded into its newest (queries.jobs_folded)."""
        with self._autocommit() as db:
            return queries.jobs_folded(db, state, limit, reason, lane)

    def jobs_named(self, name: str, states: Collection[State]) -> list[Job]:
        """The jobs called `name` exactly, in these states, newest first."""
        with self._autocommit() as db:
            return queries.jobs_named(db, name, states)

    def names(self) -> list[str]:
        """Every job name the queue holds (for the nearest name to a typo)."""
        with self._autocommit() as db:
            return queries.names(db)

    def set_series_paused(self, name: str, paused: bool) -> int:
        """Hold every live series called `name` (or let it go): its runs claim nothing
        until resumed, in this and every later start. How many series it names (0:
        none goes on by that name)."""
        with self._transaction() as db:
            return schedules.set_paused_named(db, name, paused)

    def series_paused(self, key: str) -> bool:
        with self._autocommit() as db:
            return key in schedules.paused_keys(db)

    def series_names(self) -> list[str]:
        with self._autocommit() as db:
            return schedules.series_names(db)

    def set_series_key_paused(self, key: str, paused: bool) -> None:
        """The tray's Pause this schedule / Resume: one series, by its key."""
        with self._transaction() as db:
            schedules.set_paused(db, [key], paused)

    # -- the pause -------------------------------------------------------------

    def set_paused(self, paused: bool, lane: str | None = None) -> None:
        """Start no new job (a running one finishes) until set_paused(False). Kept
        in the file: every process and every later start sees the same pause.

        `lane`: that lane only. With none, every lane: a pause holds lanes made later
        too, and a resume resumes every lane, those paused one by one as well."""
        if lane is not None:
            lanes.refuse_a_bad_name(lane)
        with self._transaction() as db:
            lanes.set_pause(db, paused, lane, reads.paused(db))

    def paused(self, lane: str | None = None) -> bool:
        """Whether the whole queue is paused; with `lane`, whether that lane starts
        nothing now (by its own pause, or the whole queue's unless it was resumed on
        its own)."""
        with self._autocommit() as db:
            whole = reads.paused(db)
            return whole if lane is None else lanes.paused(db, lane, whole)

    def paused_lanes(self, on_their_own: bool = False) -> set[str]:
        """The known lanes that start nothing now; `on_their_own`: the lanes paused by
        themselves (the whole queue's pause aside)."""
        with self._autocommit() as db:
            return lanes.paused_lanes(db, reads.paused(db) and not on_their_own)

    # -- lanes -------------------------------------------------------------------

    def lanes(self) -> list[str]:
        """Every lane known: main, those whose folder was seen, those with jobs."""
        with self._autocommit() as db:
            return lanes.known(db)

    def note_lane(self, lane: str) -> None:
        """A lane's folder is there."""
        with self._autocommit() as db:
            lanes.note(db, lane)

    def forget_lane(self, lane: str) -> None:
        """A lane's folder is gone: the lane is shown while it has jobs (they run)."""
        with self._autocommit() as db:
            lanes.forget(db, lane)

    def rename_lane(self, old: str, new: str) -> int:
        """A lane's folder was renamed: its jobs and its pause follow. Returns the
        jobs moved."""
        for name in (old, new):
            lanes.refuse_a_bad_name(name)
        with self._transaction() as db:
            return lanes.rename(db, old, new)

    def lane_counts(self) -> dict[str, dict[str, Any]]:
        """Per lane, as `status --json` has them (reads.summary's "lanes")."""
        with self._autocommit() as db:
            return lanes.counts(db, self.clock(), reads.paused(db),
                                reads.not_held_back(db, reads.unmet(db)))

    def next_wakeup(self, unmet: frozenset[str] = frozenset(),
                    renewed: Collection[str] = ()) -> float | None:
        """The look before the daemon sleeps: `next_due`, after re-anchoring the waits
        (a write) if the clock went back since any earlier look (or while the machine
        slept): no wait is computed from a future time."""
        self._reanchor(self.clock())
        return self.next_due(unmet, renewed)

    def next_due(self, unmet: frozenset[str] = frozenset(),
                 renewed: Collection[str] = ()) -> float | None:
        """The earliest wall time at which claim() could return a job; None if never
        (queries.next_due: which jobs and leases count). Reads only."""
        with self._autocommit() as db:
            return queries.next_due(db, unmet, renewed)

    def set_unmet(self, unmet: Iterable[str]) -> None:
        """Keep the running app's unmet conditions in the file, for `status` and `list`
        (other processes) to tell which jobs wait and why."""
        with self._autocommit() as db:
            db.execute("INSERT INTO flags(name, value) VALUES ('unmet', ?) "
                       "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                       (",".join(sorted(set(unmet))),))

    def unmet(self) -> frozenset[str]:
        """The conditions the running app last said do not hold."""
        with self._autocommit() as db:
            return reads.unmet(db)
