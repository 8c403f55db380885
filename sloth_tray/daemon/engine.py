"""The daemon loop: wait (no polling) -> claim -> run -> repeat, one job at a time per
lane, lanes side by side.

The loop claims a job for each free lane and hands it to a lane's worker thread,
which runs it, records its outcome and claims that lane's next job in one commit,
until its lane has nothing due; then the thread ends. The loop itself is the one
wait: with nothing due, it blocks in its Alarm until something rings it (a new
job, a retry, the CLI's doorbell, pause, quit, a lane's worker ending) or until the
queue's next wake-up time. With nothing running, no other thread of it exists.

After every change it publishes an immutable Snapshot to its listeners, so a UI
never has to touch SQLite: the loop publishes at each look it takes (a wake(), a
drop), the workers around each job (once it is spawned: never on its way there),
and every menu action from the action thread, so a change shows at once even while
a job runs for hours.

The pause lives in the queue's file (Queue.paused), read on every pass of the
loop: the command line's `pause` and a restart see the same one.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sloth_tray import instance
from sloth_tray.daemon import ahead, memory, procs
from sloth_tray.daemon import snapshot as snapshots
from sloth_tray.daemon.ahead import Ahead
from sloth_tray.daemon.alarm import Alarm, make_alarm
from sloth_tray.daemon.capture import append_note
from sloth_tray.daemon.outcome import Attempt, Recorded, could_not_run, record
from sloth_tray.daemon.runner import Prepared, Runner
from sloth_tray.daemon.serial import SerialThread
from sloth_tray.daemon.snapshot import RunningJob, Snapshot, agent_of
from sloth_tray.errors import DatabaseProblem, SlothError
from sloth_tray.jobs.conditions import Conditions, waiting_for
from sloth_tray.paths import Home
from sloth_tray.store import spool
from sloth_tray.store.queue import Job, Queue
from sloth_tray.store.states import State
from sloth_tray.timefmt import clock_time

log = logging.getLogger("sloth_tray")

PROBLEM_RETRY = 30.0  # seconds before trying the database again after an error
RECORD_RETRY = 2.0  # seconds between tries to record an outcome while the db is locked
PROBE_EVERY = 60.0  # at most this often are conditions without a service read (desktop/probes.py)


def default_owner() -> str:
    """host:pid. The host from os.uname where there is one: the socket module would
    be loaded for this alone."""
    if hasattr(os, "uname"):
        host = os.uname().nodename
    else:
        import platform

        host = platform.node()
    return f"{host}:{os.getpid()}"


Listener = Callable[[Snapshot], None]
RecordedListener = Callable[[Job, Recorded], None]


@dataclass
class LaneWork:
    """One lane's worker thread while it runs: its runner (a run and an alarm of its
    own), the job it runs, and the next one, claimed with the last outcome."""

    lane: str
    runner: Runner
    job: Job | None = None
    running: RunningJob | None = None
    claimed: Job | None = None
    # While a run works: the guess at the next claim, its run prepared (daemon/ahead.py);
    # once claimed as guessed, that run, for the next job.
    ahead: Ahead | None = None
    claimed_run: Prepared | None = None
    thread: threading.Thread | None = None


class Engine:
    """Runs the queue's due jobs, one at a time per lane, for one owner."""

    def __init__(
        self,
        queue: Queue,
        home: Home,
        *,
        owner: str | None = None,
        runner: Runner | None = None,
        alarm: Alarm | None = None,
        conditions: Conditions | None = None,
    ) -> None:
        self.queue = queue
        # What require= jobs wait for; a change wakes the loop (no polling).
        self.conditions = conditions
        self.home = home
        self.owner = owner or default_owner()
        # What each lane's runner is made like (Runner.twin): the settings, never a run.
        self.runner = runner or Runner(queue, home, self.owner)
        self.alarm = alarm or make_alarm(queue.clock)
        self._listeners: list[Listener] = []
        self._result_listeners: list[RecordedListener] = []
        self._stopping = False
        self._paused = queue.paused()  # the file's, refreshed at every read of it
        self._pause_seen: bool | None = None  # what the loop last said of the pause
        self._problem: str | None = None
        self._workers: list[LaneWork] = []  # the lanes running a job now
        self._workers_lock = threading.Lock()
        self._worker_problem: DatabaseProblem | None = None  # for drain: the loop raises it
        self._last: Snapshot | None = None
        self._next_overdue: float | None = None  # when a series next becomes overdue
        self._probed_at: float | None = None  # when probed conditions were last read
        self._published_at = float("-inf")  # monotonic time of the last snapshot read
        self._read_took = 0.0  # seconds that read took
        self._publishing = threading.Lock()
        self._actions = SerialThread("actions")
        # When recover() began (the queue's clock): a failure since is this start's news
        self.recovered_at: float | None = None
        if conditions is not None:
            conditions.subscribe(self._conditions_changed)

    # -- the API other threads call -------------------------------------------

    def subscribe(self, listener: Listener) -> None:
        """`listener` is told every new snapshot, and the last one now if there is one:
        the inbox may have started a drop before the tray subscribed, and a publish
        that changes nothing tells no one."""
        with self._publishing:  # as _publish tells: a newer one never lands first
            self._listeners.append(listener)
            if self._last is not None:
                try:
                    listener(self._last)
                except Exception:  # a listener's bug is its own, as in _publish
                    log.exception("snapshot listener failed")

    def on_result(self, listener: RecordedListener) -> None:
        self._result_listeners.append(listener)

    def wake(self) -> None:
        """The queue changed: look again (and let a running job check its lease).

        The loop publishes the new state as it looks, also while jobs run for hours
        (they run on their lanes' workers): the CLI's retry clears the red badge now."""
        for work in self._working():
            work.runner.nudge()
        self.job_added()

    def job_added(self, lane: str | None = None) -> None:
        """A job was queued (a drop): look again. Unlike wake(), the running job's
        lease needs no look: a push never takes a job from its owner, and a burst of
        drops would otherwise cost a heartbeat commit each.

        `lane`: the job's. A lane a worker of ours runs needs no look of the loop: that
        worker claims its next job with the last outcome, and rings the loop as it
        ends (after this job was pushed, so its look finds it). A burst of drops into
        one lane would otherwise cost a pass each, and a pass reads the line of due
        jobs. The loop's look publishes: a publish of its own here would read the
        queue while the loop claims the new job, holding that claim up; without a
        look, the worker's next publish shows the new job."""
        if lane is None or lane not in {work.lane for work in self._working()}:
            self.alarm.ring()

    def claim_with_push(self, lanes: Iterable[str]) -> list[Job]:
        """Inside the commit that queues drops into `lanes` (the inbox's): a due job
        claimed for each of them that no worker of ours runs, so a drop into an idle
        app starts after one commit, not two. Each one's worker starts at once and
        prepares its run while the commit is made (its fsync is the longest wait on
        a drop's way to its start); it spawns once the commit holds its claim, and
        ends without a word if the commit was undone. A claim that fails is undone
        alone, and the loop claims the usual way, which says why."""
        claimed: list[Job] = []
        if self._stopping:
            return claimed
        busy = {work.lane for work in self._working()}
        # The workers prepare once every claim is made: the interpreter is then the
        # worker's while this thread waits for the disk, not this thread's way there.
        claims_made = threading.Event()
        try:
            for lane in dict.fromkeys(lanes):
                if lane in busy:
                    continue
                try:
                    with self.queue.savepoint():
                        job = self.queue.claim(self.owner, self._unmet(), procs.new_token(),
                                               lane=lane)
                except Exception as exc:
                    log.debug("claiming a drop as it was queued failed: %s", exc)
                    continue
                if job is not None:
                    claimed.append(job)
                    self._start_worker(job, claims_made=claims_made)
        finally:
            claims_made.set()
        return claimed

    def _unmet(self) -> frozenset[str]:
        return self.conditions.unmet() if self.conditions is not None else frozenset()

    def _conditions_changed(self, unmet: frozenset[str]) -> None:
        """A condition changed: record it for the command line, and look again (a job
        that waited for it may start now)."""
        log.info("conditions not met now: %s", ", ".join(sorted(unmet)) or "none")
        for work in self._working():
            job = work.job
            if job is not None and job.options.get("interrupt"):
                lost = waiting_for(job.options, unmet)
                if lost:
                    work.runner.interrupt(job, f"interrupted: {lost} was lost; it waits "
                                          "for it again")
        self._act(lambda queue: queue.set_unmet(unmet))

    def pause(self, lane: str | None = None) -> None:
        """Claim nothing new, in this app and every later start, until resume();
        a running job finishes. `lane`: that lane only; none: every lane."""
        if lane is None:
            self._paused = True  # at once, for a menu that toggles twice quickly
        self._act(lambda queue: queue.set_paused(True, lane))

    def resume(self, lane: str | None = None) -> None:
        """`lane`: that lane only; none: every lane, those paused one by one too."""
        if lane is None:
            self._paused = False
        self._act(lambda queue: queue.set_paused(False, lane))

    @property
    def paused(self) -> bool:
        """The pause as last read from the queue (or as just asked for): no SQLite
        on the caller's thread."""
        return self._paused

    def stop(self) -> None:
        """Quit cleanly: every running job is stopped and its lease released."""
        self._stopping = True
        for work in self._working():
            work.runner.stop()
        self.alarm.ring()

    def _working(self) -> list[LaneWork]:
        with self._workers_lock:
            return list(self._workers)

    @property
    def snapshot(self) -> Snapshot:
        return self._last or Snapshot()

    # -- changes asked for by the user (the tray's menu) ------------------------
    #
    # They run on a worker thread of their own, never on the caller's: the UI
    # thread must not wait on SQLite. The worker blocks with no timeout between
    # requests.

    def retry(self, job_id: str, step_done: str | None = None) -> None:
        """Run a failed job again. A step cut short that asked runs again too (the
        menu's `Run "NAME" again`), unless `step_done` names it: then that step is a
        person's word that it happened, marked done first (`Mark "NAME" done`).

        Only a job still failed or cancelled: a menu or a notification read before the
        job ran again must not run it once more when it is done (the command line's
        retry takes done jobs too)."""
        def again(queue: Queue) -> None:
            state = queue.get(job_id).state
            if state not in (State.FAILED, State.CANCELLED):
                log.info("%s is %s now: not retried", job_id, state)
                return
            spool.retry(queue, job_id, **({} if step_done is None else
                                          {"step_done": step_done}))

        self._act(again)

    def retry_all_failed(self, lane: str | None = None) -> None:
        """Every failed job (`lane`: of that lane) runs again, as `retry` would."""
        def retry_all(queue: Queue) -> None:
            retried, refused = spool.retry_all_failed(queue, lane)
            if refused:
                log.info("retried %d failed job(s); skipped %d refused (they never run)",
                         retried, refused)

        self._act(retry_all)

    def answer(self, job_id: str, choice: str, question: str | None = None) -> None:
        """A person's answer to the question job `job_id` asks (Queue.answer, as
        `sloth-tray answer`): it runs again at once. `question` (AskingJob.key): only
        while the job still asks that one; a menu or a notification read before it
        was answered elsewhere must not answer the job's next question unseen."""
        def answer(queue: Queue) -> None:
            if question is not None and question not in {
                    snapshots.question_key(asking, step.name, step.occurrence)
                    for asking, step in queue.asking()}:
                log.info("%s no longer asks that question: not answered", job_id)
                return
            queue.answer(job_id, choice)

        self._act(answer)

    def cancel(self, job_id: str) -> None:
        self._act(lambda queue: queue.cancel(job_id))

    def stop_run(self, job_id: str) -> None:
        """The running job stops now; a repeating job's series goes on (Queue.stop)."""
        def stop(queue: Queue) -> None:
            if not queue.stop(job_id):
                log.info("%s was no longer running when Stop was clicked", job_id)

        self._act(stop)

    def cancel_failed_runs(self, series: str) -> None:
        """Cancel every failed run of a recurring series (FailedSeries.key), in one
        commit: those a snapshot carries and the older ones. The series goes on: its
        waiting run is not a failed one."""
        def cancel_runs(queue: Queue) -> None:
            with queue.batch():
                for job, key, _, _ in queue.failed_by_series():
                    if key == series:
                        queue.cancel(job.id)

        self._act(cancel_runs)

    def run_now(self, job_id: str) -> None:
        self._act(lambda queue: queue.run_now(job_id))

    def pause_series(self, key: str, paused: bool) -> None:
        """Hold one series (Schedule.key), or let it go, kept in the file."""
        self._act(lambda queue: queue.set_series_key_paused(key, paused))

    def _act(self, change: Callable[[Queue], object]) -> None:
        def act() -> None:
            try:
                change(self.queue)
            except SlothError as exc:
                log.warning("%s", exc)
            except Exception:  # a bug of ours: said in the log, the app goes on
                log.exception("a change asked for from the menu failed")
            for work in self._working():
                work.runner.nudge()
            self.alarm.ring()
            self._publish()

        self._actions.submit(act)

    # -- the loop -------------------------------------------------------------

    def recover(self) -> None:
        """At start-up, under the instance lock: no process of this home's runs
        can still be supervised, so every one left is an orphan.

        Kill them all: those of jobs still marked running, and those of jobs
        cancelled (or retried, or pruned) while no daemon was there to stop
        them. Then end the running leases now, so the next claim reclaims
        those jobs (attempt counted, max_attempts honoured) instead of waiting
        the leases out.
        """
        self.recovered_at = self.queue.clock()
        if procs.FINDS_RUNS_BY_ENVIRONMENT:
            runs = procs.kill_runs_of(self.home.root)
            killed = sum(len(found) for found in runs.values())
            # A run found here started, though the app may have died before noting
            # it: its attempt counts when its job is reclaimed.
            self.queue.found_started({token: min(found) for token, found in runs.items()})
        else:
            killed = sum(procs.kill_orphan(job.child)
                         for state in (State.RUNNING, State.CANCELLED, State.PENDING)
                         for job in self.queue.jobs(state) if job.child)
        if killed:
            log.info("stopped %d leftover process(es) of jobs run before a crash", killed)
        self.queue.set_unmet(self._unmet())  # not what an earlier run of the app last saw
        self._note_cut_short_runs()
        expired = self.queue.expire_leases()
        if expired:
            log.info("taking back %d job(s) left running by a previous run", expired)

    def _note_cut_short_runs(self) -> None:
        """End the log of each run a crash cut short with a line that says so: its own
        output stops mid-way, and would leave the reader guessing why."""
        for job in self.queue.jobs(State.RUNNING):
            asks = [step["name"] for step in self.queue.steps(job.id)
                    if step["state"] == "running" and step["ask"]]
            then = (f'fails it: its step "{asks[0]}" was cut short and asks whether it '
                    "happened" if asks else instance.after_a_crash(job.attempts,
                                                                   job.max_attempts))
            append_note(self.home.job_logs(job.id, job.name) / f"{max(job.runs, 1)}.log",
                        f"the app stopped during this run; the start at "
                        f"{clock_time(self.recovered_at)} found it and {then}")

    def run(self, *, drain: bool = False) -> None:
        """Run jobs until stop(); with `drain`, return once nothing is due now, nothing
        runs and no change asked for (a retry from the menu) is still being made."""
        try:
            while not self._stopping:
                try:
                    self._read_pause()  # said in the log as it changes
                    self._probe_if_due()
                    # The claim itself leaves paused lanes (and a paused queue's) alone.
                    started = self._start_due()
                    self._raise_worker_problem()
                    self._problem = None
                    if not started:  # else each worker publishes, its job spawned
                        self._publish()
                    if drain and not started and not self._working():
                        if self._actions.settle():  # a change still being made: look again
                            continue
                        self._raise_worker_problem()  # one that ended meanwhile
                        return
                    self._start_conditions_if_waited_on()
                    if not self._working():  # idle now: what the runs read and freed
                        self.queue.release_memory()  # goes back: the page cache first,
                        memory.give_back()  # then the heap's free pages it leaves
                    self.alarm.wait(self._wake_at())
                except DatabaseProblem as exc:
                    self._report(exc)
                    if drain:
                        raise
                    if self._stopping:
                        return
                    self.alarm.wait(self.queue.clock() + PROBLEM_RETRY)
        finally:
            self._stopping = True
            for work in self._working():
                work.runner.stop()
                if work.thread is not None:
                    work.thread.join()  # each gives its job back as it stops
            self._actions.shutdown()
            self._publish(stopped=True)

    def _raise_worker_problem(self) -> None:
        """A lane's worker met the database's trouble: the loop says it, and waits."""
        problem, self._worker_problem = self._worker_problem, None
        if problem is not None:
            raise problem

    def _start_due(self) -> bool:
        """Claim a due job for every free lane and start each lane's worker; whether
        one started. The claim itself keeps one job per lane (store/lanes.py)."""
        started = False
        while not self._stopping:
            # Never a lane a worker of ours runs: even lapsed (the laptop slept), that
            # lease is its own to renew, and that lane's next job its own to claim, once
            # its job and every process of it are gone.
            job = self.queue.claim(self.owner, self._unmet(), procs.new_token(),
                                   skip_lanes={work.lane for work in self._working()})
            if job is None:
                return started
            self._start_worker(job)
            started = True
        return started

    def _start_worker(self, job: Job, *, claims_made: threading.Event | None = None) -> None:
        """`job`'s lane's worker. `claims_made`: `job` was claimed in a transaction still
        open (claim_with_push), to be committed once this is set; the worker prepares
        the run then, and spawns it once the commit holds its claim."""
        work = LaneWork(job.lane, self.runner.twin())
        work.thread = threading.Thread(target=self._work_lane, args=(work, job, claims_made),
                                       name=f"lane {job.lane}", daemon=True)
        with self._workers_lock:
            self._workers.append(work)
        if self._stopping:  # a quit that came as it was claimed
            work.runner.stop()
        work.thread.start()

    def _work_lane(self, work: LaneWork, job: Job | None,
                   claims_made: threading.Event | None = None) -> None:
        """A lane's worker: run the job, then each next one of its lane claimed with
        the last outcome, until none is due; a quit gives back the one claimed."""
        prepared: Prepared | Attempt | None = None
        try:
            if job is not None and claims_made is not None:
                claims_made.wait()
                prepared = self._prepare(work, job)  # while the claim's commit syncs
                # Asked once that commit is over (the connection is the committer's
                # until then): the claim is there only if it committed.
                if not self.queue.holds_run(job.id, self.owner, job.child["token"]):
                    job = None  # undone with its commit: the claim never was
            following = False  # the lane's first job: none ran right before it
            while job is not None and not self._stopping:
                self._run_one(work, job, prepared, following=following)
                following = True
                job, prepared = work.claimed, work.claimed_run
                work.claimed, work.claimed_run = None, None
            if job is not None:
                self._give_back(job)
        except DatabaseProblem as exc:
            # The runner stopped the child; the job's lease lapses into a reclaim.
            self._worker_problem = exc
        except Exception:  # a bug of ours must not leave the lane's job unsaid
            log.exception("the worker of lane %s failed", work.lane)
        finally:
            work.runner.close()  # its output watcher's thread ends with the worker
            if work.claimed is not None:  # claimed for this worker, which will not run it
                self._give_back(work.claimed)
                work.claimed = None
            with self._workers_lock:
                self._workers.remove(work)
            # The loop looks again (this lane is free) and publishes what it finds: the
            # end of this lane's last job. A publish here would read the same snapshot,
            # and could land after the loop's last one, a stop's, once the loop had
            # stopped without waiting for a worker no longer among its workers.
            self.alarm.ring()

    def _give_back(self, job: Job) -> None:
        """A job claimed with the last outcome that will not run now (a quit)."""
        try:
            self.queue.release(job.id, self.owner)
        except DatabaseProblem as exc:  # its lease lapses; the next start takes it
            log.warning("could not give back %s: %s", job.name, exc)

    def _wake_at(self) -> float | None:
        """The queue's next due time (a paused lane's jobs are not due), or the moment a
        series becomes overdue if that comes first: the new look needs no polling."""
        # Untold, every condition counts as unmet, yet a require= job falling due must
        # still wake the loop: that is when the conditions are first asked for.
        told = self.conditions is None or self.conditions.told
        unmet = self._unmet() if told else frozenset()
        # The leases this app's live workers renew are no time to wake.
        renewed = {job.id for work in self._working()
                   for job in (work.job, work.claimed) if job is not None}
        times = [t for t in (self.queue.next_wakeup(unmet, renewed), self._next_probe(),
                             self._next_overdue)
                 if t is not None]
        return min(times, default=None)

    def _start_conditions_if_waited_on(self) -> None:
        """The first time a due job waits on a condition, begin what tells them (the
        system bus): a queue with no require= job never loads it."""
        if self.conditions is not None and not self.conditions.told \
                and self.queue.waits_on(self.conditions.unmet()):
            self.conditions.start_telling()

    def _probe_if_due(self) -> None:
        """Conditions no service tells of (desktop/probes.py) are read again once a minute
        at most, on passes the loop makes anyway."""
        if self.conditions is None or not self.conditions.probed:
            return
        now = self.queue.clock()
        if self._probed_at is not None and 0 <= now - self._probed_at < PROBE_EVERY:
            return
        self._probed_at = now
        self.conditions.probe()

    def _next_probe(self) -> float | None:
        """While a due job waits on a probed condition, the moment to read it again;
        None otherwise: with nothing waiting, nothing wakes."""
        if self.conditions is None:
            return None
        unmet = self.conditions.probed & self._unmet()
        if not unmet or not self.queue.waits_on(unmet):
            return None
        now = self.queue.clock()
        # min(): after the wall clock went back, the last reading is not in the future
        return min(self._probed_at if self._probed_at is not None else now, now) + PROBE_EVERY

    def _read_pause(self) -> bool:
        """The pause, from the file, once per pass; its changes are said in the log."""
        paused = self._paused = self.queue.paused()
        if paused != self._pause_seen:
            if paused:
                log.info("paused: no job starts until resumed (`sloth-tray resume`, "
                         "or Pause in the menu)")
            elif self._pause_seen is not None:
                log.info("resumed")
            self._pause_seen = paused
        return paused

    def _run_one(self, work: LaneWork, job: Job, prepared: Prepared | Attempt | None = None,
                 *, following: bool = False) -> None:
        """Run one claimed job on its lane's worker and record how it ended;
        `prepared`: its run as Runner.prepare made it already; `following`: it was
        claimed with the outcome of the lane's job before it."""
        work.job = job
        work.running = RunningJob(job.id, job.name, job.attempts, job.max_attempts,
                                  self.queue.clock(), lane=job.lane, by=agent_of(job.source))
        # Shown running once spawned: a snapshot read before would hold the spawn up.
        # Back to back, only once it has run a moment: a burst of tiny jobs would
        # otherwise pay a full snapshot each. A longer one after a slow read only for a
        # job right behind another of its lane: a drop into an idle lane is shown as
        # it starts.
        moment = (snapshots.show_running_after(self._read_took) if following
                  else snapshots.SHOW_RUNNING_AFTER)
        back_to_back = time.monotonic() - self._published_at < moment
        running_for = (moment if back_to_back else 0.0, self._publish)
        if job.options.get("interrupt") and waiting_for(job.options, self._unmet()):
            # Lost between the claim and now: the change's interrupt may have come
            # before this job was running.
            work.runner.interrupt(job, "interrupted: what it requires was lost as it "
                                  "started")
        try:
            attempt = work.runner.run(job, running_for=running_for, prepared=prepared,
                                      meanwhile=lambda: self._guess_next(work))
        except DatabaseProblem:
            work.running = work.job = None
            raise
        except Exception as exc:  # a bug of ours must not take the daemon down
            attempt = could_not_run(job, exc)
        try:
            result = self._record(work, job, attempt)
        finally:
            work.running = work.job = None
        log.info("%s %s (%s)%s", result.effect, job.name, job.id,
                 f": {result.detail}" if result.detail else "")
        for listener in self._result_listeners:
            try:
                listener(job, result)
            except Exception:  # a listener's failure is its own: the lane goes on
                log.exception("a listener of %s's outcome failed", job.name)
        # No snapshot here: with no next job claimed, the worker ends, and the loop's
        # look that its end rings for publishes; else the next job, claimed with this
        # outcome, is published as it starts: one snapshot between two jobs, not two
        # (a burst of tiny jobs pays for each).

    def _guess_next(self, work: LaneWork) -> None:
        """While the lane's job runs: its next claim guessed, and that run prepared
        (daemon/ahead.py); none while stopping."""
        work.ahead = None if self._stopping else ahead.guess(
            self.queue, work.runner, work.lane, self._unmet())

    def _prepare(self, work: LaneWork, job: Job) -> Prepared | Attempt:
        """Runner.prepare, a bug of ours ending the attempt as in _run_one."""
        try:
            return work.runner.prepare(job)
        except Exception as exc:
            return could_not_run(job, exc)

    def _record(self, work: LaneWork, job: Job, attempt: Attempt) -> Recorded:
        """The attempt is over: its outcome must reach the queue, or the job would
        run again. While the database is locked, wait and try again.

        The lane's next job is claimed in the same commit: back to back, a job costs
        two commits (this one, and the runner's `started`) where it cost four."""
        self._probe_if_due()  # outside the transaction: it may read the machine
        while True:
            try:
                with self.queue.batch():
                    result = record(self.queue, self.owner, job, attempt)
                    self._claim_next(work)
                return result
            except DatabaseProblem as exc:
                work.claimed = None  # rolled back with the outcome
                if self._stopping:
                    raise
                log.warning("could not record the outcome of %s yet: %s", job.name, exc)
                work.runner.alarm.wait(self.queue.clock() + RECORD_RETRY)

    def _claim_next(self, work: LaneWork) -> None:
        """Inside the outcome's transaction: the lane's job to run next, unless
        stopping (the claim leaves a paused lane alone). A claim that fails is undone
        alone (the outcome still commits), and the loop claims again the usual way,
        which reports what is wrong."""
        guessed, work.ahead = work.ahead, None
        work.claimed_run = None
        if self._stopping:
            return
        try:
            with self.queue.savepoint():
                work.claimed = self.queue.claim(
                    self.owner, self._unmet(),
                    guessed.token if guessed is not None else procs.new_token(), lane=work.lane)
        except Exception as exc:  # the loop's own claim says what is wrong
            log.debug("claiming the next job with the outcome failed: %s", exc)
            work.claimed = None
        # The run prepared while the last one ran, if this claim took the job guessed.
        work.claimed_run = ahead.run_for(guessed, work.claimed, self.queue.clock,
                                         work.runner.monotonic)

    def _report(self, exc: SlothError) -> None:
        if str(exc) != self._problem:
            log.error("%s", exc)
        self._problem = str(exc)
        self._publish()

    def _publish(self, *, stopped: bool = False) -> None:
        # One publisher at a time, from reading the queue to telling the
        # listeners: the engine and the action threads both publish, and a
        # snapshot read earlier must never land after a later one (the tray
        # would show the older state until the next change).
        with self._publishing:
            self._published_at = time.monotonic()
            running = [work.running for work in self._working() if work.running is not None]
            try:
                snapshot, self._next_overdue = snapshots.read(
                    self.queue, running, self._unmet(), problem=self._problem,
                    stopped=stopped)
                self._read_took = time.monotonic() - self._published_at
                self._paused = snapshot.paused
            except SlothError as exc:
                snapshot = snapshots.without_queue(running, paused=self._paused,
                                                   problem=str(exc), stopped=stopped)
            if snapshot == self._last:
                return
            self._last = snapshot
            for listener in self._listeners:
                try:
                    listener(snapshot)
                except Exception:  # a listener's bug is its own
                    log.exception("snapshot listener failed")
