"""Run ONE claimed job: a child process in its own group, its output in a capped
log, heartbeats while it lives, a timeout, and a kill the moment the lease is lost.

The runner writes only `started` and heartbeats, and returns an Attempt saying
how the run ended; outcome.record writes the ending (complete / fail / release).
Whenever `run` returns or raises, the child's group and every stray carrying
its run token are gone: no path leaves a child unsupervised, so no later
reclaim can overlap it.

The runner never blocks on a timer tick: it waits on one Alarm that the child's
exit, a stop request or a nudge rings, until the next thing it has to do (renew
the lease, or end a timed-out attempt). The Alarm keeps wall-clock time, so the
first heartbeat after a suspend or a SIGSTOP happens at once. (A plain timed
Event.wait was seen to hang far past its timeout after SIGSTOP/SIGCONT here.)

The engine runs one runner per running lane (`Runner.twin`).
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from sloth_tray.daemon import jobenv, procs
from sloth_tray.daemon.alarm import Alarm, make_alarm
from sloth_tray.daemon.capture import CappedLog, LastLine, OutputWatcher, Watched, pump
from sloth_tray.daemon.outcome import Attempt, Ending
from sloth_tray.errors import DatabaseProblem
from sloth_tray.for_jobs import step_env
from sloth_tray.jobs.header import BadJobFile, NotAFile, command_for, read_head
from sloth_tray.paths import Home
from sloth_tray.store.queue import Job, Queue
from sloth_tray.store.reasons import Reason
from sloth_tray.timefmt import format_duration

LOG_CAP = 10 * 1024 * 1024
EX_TEMPFAIL = 75  # sysexits.h: "try again later"; the attempt does not count
SLEEP_THRESHOLD = 5.0  # wall time running this far ahead of monotonic time = a suspend
log = logging.getLogger("sloth_tray")
TAKEN = "the job was cancelled, or another worker holds it now"


# A run shorter than this cannot have seen the pids wrap around twice (where pid_max is
# at least 32,768: procs.kill_strays looks at every process otherwise): its strays are
# among the pids handed out since it was spawned.
SHORT_RUN = 1.0


# What is joined once a run is over: its output is all in (a pipe's reader, or a run's
# part of the output watcher).
Joinable = threading.Thread | Watched

class Runner:
    """Runs claimed jobs for one owner, one at a time."""

    def __init__(
        self,
        queue: Queue,
        home: Home,
        owner: str,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        log_cap: int = LOG_CAP,
        grace: float = 5.0,
        alarm: Alarm | None = None,
        default_timeout: float | None = None,
    ) -> None:
        self.queue = queue
        self.home = home
        self.owner = owner
        self.monotonic = monotonic
        self.log_cap = log_cap
        self.grace = grace
        self.default_timeout = default_timeout
        self.alarm = alarm or make_alarm(queue.clock)
        self._own_alarm = alarm is None  # made here: closed here (a timer and a pipe)
        self._stopping = False
        self._nudges = 0  # the queue changed this often: check the lease before the beat
        self._spawned_at = 0.0  # monotonic time of the current run's spawn
        self._interrupted: tuple[str, int, str] | None = None  # (job id, run, why)
        self._watcher: OutputWatcher | None = None  # Linux: every run's output, one thread

    def twin(self) -> Runner:
        """A runner like this one (its settings), with a run and an alarm of its own:
        the engine runs one per lane that runs a job."""
        return Runner(self.queue, self.home, self.owner, monotonic=self.monotonic,
                      log_cap=self.log_cap, grace=self.grace,
                      default_timeout=self.default_timeout)

    def close(self) -> None:
        """No run comes after this one: the output watcher's thread ends (once the pipes
        a stray may still hold are closed), and the alarm made for this runner is
        closed. Each lane's worker has a runner of its own, for as long as its lane has
        jobs to run: files left open by each would pile up, a worker an idle spell."""
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        if self._own_alarm:
            self.alarm.close()

    # -- called from other threads -----------------------------------------

    def stop(self) -> None:
        """Clean quit: end the running attempt and give its lease back."""
        self._stopping = True
        self.alarm.ring()

    def interrupt(self, job: Job, why: str) -> None:
        """Stop this run of `job` and give it back, uncounted: a condition it
        requires was lost (interrupt=yes). Meant for that very run (its id and run
        number): a run that has ended, or a later one, is never touched by it."""
        self._interrupted = (job.id, job.runs, why)
        self.alarm.ring()

    def nudge(self) -> None:
        """Check the lease now (the queue changed: the job may have been cancelled)."""
        self._nudges += 1  # a count, not a flag: one that lands while read is never lost
        self.alarm.ring()

    # -- the work -------------------------------------------------------------

    def run(self, job: Job, *, running_for: tuple[float, Callable[[], None]] | None = None,
            prepared: Prepared | Attempt | None = None,
            meanwhile: Callable[[], None] | None = None) -> Attempt:
        """Run one claimed job and say how it ended. `running_for` (seconds, call):
        call once the job has run that long (the engine shows it as running then);
        0: as soon as it is spawned. `prepared`: what prepare(job) made of it already.
        `meanwhile`: called once its child is spawned and watched, on this thread,
        while the child works (the engine prepares the lane's next run then); what it
        raises is said in the log, and the run goes on."""
        if prepared is None:
            prepared = self.prepare(job)
        if isinstance(prepared, Attempt):
            return prepared
        run_log = prepared.run_log
        try:
            self._spawned_at = self.monotonic()
            child = subprocess.Popen(
                prepared.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, cwd=prepared.workdir, env=prepared.env,
                **procs.spawn_options())
        except OSError as exc:
            run_log.close()
            return Attempt.failed(Reason.COULD_NOT_START,
                                  spawn_error(prepared.command[0], exc))
        readers: list[Joinable] = []
        try:
            return self._supervise(job, child, run_log, prepared.token, prepared.sleep_watch,
                                   readers, running_for, meanwhile)
        except BaseException:
            # Whatever went wrong (the database, a bug), the child must not run on
            # unsupervised: its lease would expire and a second copy would start.
            self._reap_group(child, readers, prepared.token)
            raise
        finally:
            run_log.close()

    def prepare(self, job: Job) -> Prepared | Attempt:
        """All a claimed job's start needs but the spawn: what to run, where, with which
        environment and log; or the Attempt that ends it before anything starts. It
        writes nothing where the claim gave the run its token (the engine's claims do):
        the engine prepares a drop's run while the commit that claims it is made."""
        sleep_watch = SleepWatch(self.queue.clock, self.monotonic)  # from the claim on
        if not job.script:  # pushed by a program with nothing to run
            return Attempt.failed(Reason.UNRUNNABLE, "the job has no script to run")
        script = Path(job.script)
        try:
            # The file placed in the spool, never a link put in its place since: its
            # target is not what was queued.
            command = command_for(script, read_head(script, follow=False))
        except NotAFile as exc:
            return Attempt.failed(Reason.REFUSED, str(exc))
        except BadJobFile as exc:
            return Attempt.failed(Reason.UNRUNNABLE, str(exc))
        gone = working_folder_gone(job)
        if gone:
            return Attempt.failed(Reason.COULD_NOT_START, gone)
        workdir = Path(job.options.get("cwd") or Path.home())
        # The run's token must be in the queue before the spawn, so that a crash
        # right after it still leaves a way to find the orphan: the engine's claim
        # wrote it already; otherwise it is written here.
        token = (job.child or {}).get("token")
        if not token:
            token = procs.new_token()
            if not self.queue.started(job.id, self.owner, {"token": token}):
                return Attempt(Ending.LEASE_LOST, TAKEN)
        env = jobenv.for_run(os.environ, job_id=job.id, name=job.name, attempt=job.attempts,
                             home=self.home, db=self.queue.path, owner=self.owner,
                             token=token)
        # One log per run, numbered across retries: two runs never share a file. Made by
        # the run's first output: until then, nothing to close.
        run_log = CappedLog(self.home.job_logs(job.id, job.name) / f"{max(job.runs, 1)}.log",
                            self.log_cap)
        return Prepared(command, workdir, env, token, run_log, sleep_watch)

    def _supervise(self, job: Job, child: subprocess.Popen, run_log: CappedLog, token: str,
                   sleep_watch: SleepWatch, readers: list[Joinable],
                   running_for: tuple[float, Callable[[], None]] | None,
                   meanwhile: Callable[[], None] | None = None) -> Attempt:
        """The spawned child until it ends, or the run is cut short: each wake-up looks
        at its end, the requests, the timeout, then (when due) the lease."""
        # Counted before `started`, the owner check that covers every nudge so far: one
        # that lands after it (a cancel just then) is news to the first wait, not lost.
        seen_nudges = self._nudges
        if not self.queue.started(job.id, self.owner, procs.describe(child, token)):
            self._reap_group(child, readers, token)
            return Attempt(Ending.LEASE_LOST, TAKEN)
        out, err = LastLine(), LastLine()
        readers += self._start_watching(child, out, err, run_log)

        lease = job.lease_seconds or self.queue.lease_seconds
        beat_every = lease / 3
        timeout = job.options.get("timeout", self.default_timeout)
        started = self.monotonic()  # the timeout counts time awake, not time asleep
        timeout_at = None if timeout is None else started + timeout
        lease_until = job.lease_until  # as claimed; tracked to notice a lapse
        next_beat = self.queue.clock() + beat_every
        # When to call running_for's call: monotonic, like the timeout.
        show_at, show = (None, None) if running_for is None else \
            (started + running_for[0], running_for[1])
        if show is not None and running_for[0] <= 0:
            show()  # spawned and watched: now, not after a wait that its end may cut
            show_at, show = None, None
        if meanwhile is not None:
            try:
                meanwhile()
            except Exception:  # the work beside the run is never the run's end
                log.exception("while %s ran, the work beside it failed", job.name)
        while child.returncode is None:
            self.alarm.wait(self._deadline(next_beat, show_at, timeout_at))
            # Its own end first, before a stop or a timeout, even if the watcher has not
            # reaped it yet: a job that ran to its end is recorded as it ended, never
            # given back to run a second time. The requests are read before that look,
            # so one that came after the end is always seen with the end.
            stopping, interrupted, now = self._stopping, self._interrupted, self.monotonic()
            if procs.has_ended(child):
                break
            if show is not None and show_at is not None and now >= show_at:
                show_at = None
                show()
            cut = cut_short(job, stopping, interrupted, timeout, now - started)
            if cut is not None:
                self._end(child, readers, token)
                return cut
            nudges = self._nudges
            if nudges == seen_nudges and self.queue.clock() < next_beat:
                continue  # woken early by a ring meant for an earlier run: nothing to do
            seen_nudges = nudges
            waits = self._waits(job, token)  # a step recorded a wait and rang: end it
            if waits is not None:
                self._end(child, readers, token)
                return waits
            lease_until = self._beat(job, lease, lease_until, sleep_watch)
            if lease_until is None:
                self._reap_group(child, readers, token)  # strays that left the group too
                return Attempt(Ending.LEASE_LOST, TAKEN)
            next_beat = self.queue.clock() + beat_every
        self._reap_group(child, readers, token)
        return self._waits(job, token) or ending(child.returncode, out, err, run_log)

    def _waits(self, job: Job, token: str) -> Attempt | None:
        """How the run ends if one of its steps recorded a wait (a sleep, an ask), or an
        ask unanswered past its timeout: waiting (Queue.wait says which)."""
        try:
            step = self.queue.waited(job.id, token)
        except DatabaseProblem as exc:
            log.warning("could not read the steps of %s: %s", job.name, exc)
            return None
        # An unanswered ask too: Queue.wait fails the job for it (reason unanswered).
        return None if step is None else Attempt(Ending.WAITING, token)

    def _deadline(self, next_beat: float, *monotonic: float | None) -> float:
        """The wall time of the next thing to do: the heartbeat (wall time), or the
        soonest of the `monotonic` moments given (the timeout, running_for's call)."""
        now, awake = self.queue.clock(), self.monotonic()
        return min([next_beat, *(now + at - awake for at in monotonic if at is not None)])

    def _beat(self, job: Job, lease: float, lease_until: float | None,
              sleep_watch: SleepWatch) -> float | None:
        """Renew the lease: its new end, or None when the job is no longer ours. A lapse
        or a nap is noted in the job's history."""
        slept = sleep_watch.gap()
        try:
            still_ours = self.queue.heartbeat(job.id, self.owner, lease)
        except DatabaseProblem as exc:
            # Locked for longer than the busy timeout: the work goes on and the
            # next beat tries again. Nobody else can take the job meanwhile,
            # since this process holds the home's instance lock.
            log.warning("could not renew the lease of %s: %s", job.name, exc)
            return lease_until
        if not still_ours:
            return None
        renewed_at = self.queue.clock()  # after any wait for the lock or a freeze
        lapsed = renewed_at - lease_until if lease_until is not None else 0.0
        if slept or lapsed > 0:
            self._note_renewal(job, slept, lapsed)
        return renewed_at + lease

    def _note_renewal(self, job: Job, slept: float, lapsed: float) -> None:
        """The history's note of a nap: worth having, never worth the job."""
        renewed = "nobody took the job meanwhile, so its lease was renewed"
        try:
            if slept:
                self.queue.note(job.id, "slept", f"the computer slept about "
                                f"{format_duration(round(slept))}; {renewed}")
            else:
                self.queue.note(job.id, "renewed",
                                f"the lease had lapsed {format_duration(lapsed)} ago; {renewed}")
        except DatabaseProblem as exc:
            log.warning("could not note the renewal of %s: %s", job.name, exc)

    def _start_watching(self, child: subprocess.Popen, out: LastLine, err: LastLine,
                        run_log: CappedLog) -> list[Joinable]:
        """What copies the child's output and rings when it exits: on Linux this
        runner's output watcher (a pidfd beside the two pipes, one thread for every
        run until close()), else a reader thread per pipe and a waiter. Returns those
        to join once the run is over."""
        try:
            pidfd = os.pidfd_open(child.pid)
        except (AttributeError, OSError):  # not Linux, or a kernel before 5.3
            pidfd = None
        if pidfd is not None:
            if self._watcher is None or not self._watcher.alive():
                self._watcher = OutputWatcher()
            return [self._watcher.watch(child, pidfd, out, err, run_log, self.alarm.ring)]
        readers = [threading.Thread(target=pump, args=(child.stdout, out, run_log), daemon=True),
                   threading.Thread(target=pump, args=(child.stderr, err, run_log), daemon=True)]
        waiter = threading.Thread(target=self._wait_for_exit, args=(child,), daemon=True)
        for thread in (*readers, waiter):
            thread.start()
        return readers

    def _wait_for_exit(self, child: subprocess.Popen) -> None:
        child.wait()  # a blocking waitpid: no polling
        self.alarm.ring()

    def _end(self, child: subprocess.Popen, readers: list[Joinable], token: str) -> None:
        """SIGTERM to the group, a grace period, then SIGKILL."""
        procs.terminate_group(child)
        try:
            child.wait(timeout=self.grace)
        except subprocess.TimeoutExpired:
            pass
        self._reap_group(child, readers, token)

    def _reap_group(self, child: subprocess.Popen, readers: list[Joinable],
                    token: str) -> None:
        """The main process is done: whatever it left behind goes too (like
        systemd's control-group kill), and the output pipes are drained."""
        procs.kill_group(child)
        child.wait()
        # Strays that left the group (Linux). After a short run only the pids handed
        # out since the spawn can be one: a sweep of a few, not of every process.
        short = self.monotonic() - self._spawned_at < SHORT_RUN
        procs.kill_strays(token, since=child.pid if short else None)
        for reader in readers:
            reader.join(timeout=self.grace)


class Prepared(NamedTuple):
    """A claimed job's run, all but spawned (Runner.prepare)."""

    command: list[str]
    workdir: Path
    env: dict[str, str]
    token: str
    run_log: CappedLog
    sleep_watch: SleepWatch


class SleepWatch:
    """Notices a suspend: wall time that ran ahead of monotonic time.

    Linux and macOS stop the monotonic clock while the machine sleeps; the
    wall clock keeps counting. The difference between the two is the nap.
    """

    def __init__(self, wall: Callable[[], float], monotonic: Callable[[], float]) -> None:
        self.wall = wall
        self.monotonic = monotonic
        self._offset = wall() - monotonic()

    def gap(self) -> float:
        """Seconds slept since the last call (0.0 if none)."""
        offset = self.wall() - self.monotonic()
        gap, self._offset = offset - self._offset, offset
        return gap if gap > SLEEP_THRESHOLD else 0.0


def working_folder_gone(job: Job) -> str | None:
    """Why the job cannot start in its working folder (the one `add` gave it, else the
    home folder), in one sentence; None when it can."""
    given = job.options.get("cwd")
    workdir = Path(given) if given else Path.home()
    if not workdir.is_dir():
        if given:
            return (f"cannot start the job: its working folder {workdir} is gone (it was "
                    "there when the job was added)")
        return (f"cannot start the job: its working folder {workdir} (the home folder, "
                "$HOME) does not exist")
    if not os.access(workdir, os.X_OK):
        return f"cannot start the job: its working folder {workdir} cannot be entered"
    return None


def cut_short(job: Job, stopping: bool, interrupted: tuple[str, int, str] | None,
              timeout: float | None, awake: float) -> Attempt | None:
    """How a run still going ends now, if it must: a quit, an interrupt meant for
    this very run (its id and run number), or its timeout (`awake`: seconds run)."""
    if stopping:
        return Attempt(Ending.STOPPED)
    if interrupted is not None and interrupted[:2] == (job.id, job.runs):
        return Attempt(Ending.INTERRUPTED, interrupted[2])
    if timeout is not None and awake >= timeout:
        return Attempt.failed(Reason.TIMED_OUT, f"timed out after {format_duration(timeout)}")
    return None


def ending(returncode: int, out: LastLine, err: LastLine, run_log: CappedLog) -> Attempt:
    """What an ended child's exit status and last lines say of the run."""
    if returncode == 0:
        result = out.text()
        if run_log.error:
            result = f"{result} ({run_log.error})".strip()
        return Attempt(Ending.SUCCEEDED, result, code=0)
    # A skipped step's note on stderr says what happened, never why the job failed.
    said = err.text()
    if returncode == step_env.TOO_OLD_STATUS and step_env.is_too_old(said):
        # Its Python cannot import sloth_step: no retry would find another one.
        return Attempt.failed(Reason.UNRUNNABLE, said.removeprefix("sloth-tray: "), returncode)
    said = (said if not step_env.is_note(said) else "") or out.text()
    if returncode == EX_TEMPFAIL:  # not a failure: the script's own words say why
        return Attempt(Ending.LATER, with_log_error(said or exit_description(EX_TEMPFAIL),
                                                    run_log), code=returncode)
    # The exit status always: a last line alone ("sunny") hides that the job failed.
    error = with_log_error(failure_description(returncode, said), run_log)
    reason = Reason.KILLED if returncode < 0 else Reason.EXIT_CODE
    return Attempt.failed(reason, error, returncode)


def exit_description(returncode: int) -> str:
    """`exit status 3`, `killed by SIGTERM`: how the process ended."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def failure_description(returncode: int, said: str) -> str:
    """`exit status 3: disk full`: how it ended, then the last line it printed (if any)."""
    ended = exit_description(returncode)
    return f"{ended}: {said}" if said else ended


def with_log_error(text: str, run_log: CappedLog) -> str:
    """The run's words, and why its log stopped being written, if it did."""
    return f"{text} ({run_log.error})" if run_log.error else text


def spawn_error(program: str, exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"cannot start the job: {program} was not found (is it installed?)"
    if isinstance(exc, PermissionError):
        return f"cannot start the job: permission denied running {program}"
    if exc.errno == errno.ENOEXEC:
        return f"cannot start the job: {program} is not a program this system can run"
    return f"cannot start the job: {exc.strerror or exc}"

