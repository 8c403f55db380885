"""Steps that happen once, model-checked.

A second, smaller machine: one queue file, a few jobs without scripts, and the runs that
claim them writing their steps through sloth_step on a connection of their own, as a job
does. The model is the user's rules for steps:
- a step is (job, name, occurrence): the same name called again in one run is its next
  occurrence;
- a step recorded done never runs again in a later run of its job unless a person forgets
  it (retry --from NAME: NAME and every step first started after it; --fresh: all);
- a failed step is never cached: it runs again next run;
- a step still running when its run ends (a crash: the lease runs out and a claim takes the
  job back; a quit; a failure, a timeout or a completion; a cancel) was cut short: it runs
  again next run, unless it asked (--ask): then the job fails for step_unsure (unless a
  person cancelled it), and the step never runs again without a person's word (retry:
  it runs again; retry --step-done NAME: it happened, it never runs; a --step-done
  naming no step cut short is refused and changes nothing);
- only the run holding the job's lease records anything: a stale run (its job ended, taken
  back or pruned since) or a stranger (a wrong token or owner) is refused and changes no
  row;
- a job's steps go with it when it is pruned;
- a step that waits (a sleep, an ask) ends its run: the job waits pending, holding no
  lease and no process, its attempt not counted, due at the wake time (an ask: its
  timeout, or at once once answered); a sleep never ends early, whoever runs the job
  before its time; an ask never goes past its question without an answer (a person's,
  or its default once its timeout passed); past its timeout with no default the job
  fails (unanswered), and a retry asks again.

Beside the spool's machine (test_spool_model.py), whose rules have no preconditions
either. A failure prints the shortest sequence of steps found and a @reproduce_failure
blob; `--hypothesis-seed=N` replays a whole run.
"""

from __future__ import annotations

import shutil
import sqlite3
from dataclasses import dataclass, field
from typing import Any

import pytest
from helpers.clock import FakeClock
from helpers.examples import examples
from helpers.scratch import scratch_folder
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from modelkit import LEASE, RETRIABLE, START

from sloth_tray.for_jobs import sloth_step
from sloth_tray.store import reads, steps
from sloth_tray.store.queue import (
    PERMANENT,
    Job,
    NotCutShort,
    Queue,
    Reason,
    State,
    UnknownStep,
)

STEP_NAMES = ["a", "b", "c"]
WAIT_NAMES = {"sleep": "nap", "ask": "q"}  # each name one kind of wait
ASK_CHOICES = ["yes", "no"]
STEP_OWNERS = ["owner-a", "owner-b"]  # one owner may claim again, with a new token
STEP_JOBS = 3  # jobs alive at once, at most
STEP_ATTEMPTS = 3
STEP_BACKOFF_CAP = 4.0  # seconds: a few seconds of clock make any backed-off job due
STEP_FAILS = [Reason.EXIT_CODE, Reason.TIMED_OUT, Reason.KILLED, Reason.COULD_NOT_START]

Key = tuple[str, int]  # a step of one job: (name, occurrence)
# What a script does: steps called in turn, (name, --ask, how it ends: done, failed, or
# open: the script is inside it when the next rule comes).
STEP_CALLS = st.lists(st.tuples(st.sampled_from(STEP_NAMES), st.booleans(),
                                st.sampled_from(["done", "done", "failed", "open"])),
                      min_size=1, max_size=4)


@dataclass
class StepSeen:
    """What the user expects of one step of a job."""

    state: str  # running, done, failed, cut
    ask: bool  # it asked (--ask) when it last started
    first: int  # when it first started, among all steps (retry --from forgets from there)
    waits: bool = False  # cut short while asking: only a person's word lets it run again
    kind: str = "shell"  # or a wait: sleep, ask (then state is waiting, done or unanswered)
    wake_at: float | None = None  # a sleep's end, an ask's timeout
    default: str | None = None
    answer: str | None = None


@dataclass
class RunSeen:
    """A run of a job, as its process knows it: its environment's token and owner."""

    job: str
    token: str
    owner: str
    spawned: bool  # its pid was written (else a reclaim finds it never started)
    calls: dict[str, int] = field(default_factory=dict)  # name -> occurrences it took
    open: set[Key] = field(default_factory=set)  # begun to run, not finished by it
    over: bool = False  # its run ended: it is stale from then on
    waited: Key | None = None  # the wait it recorded: its run ends there


@dataclass
class JobSeen:
    id: str
    seq: int
    not_before: float
    updated_at: float
    state: State = State.PENDING
    attempts: int = 0
    reason: Reason | None = None
    run: RunSeen | None = None
    lease_until: float | None = None
    steps: dict[Key, StepSeen] = field(default_factory=dict)

    def asks(self) -> bool:
        return any(step.waits for step in self.steps.values())

    def names(self) -> list[str]:
        """Its step names in the order they first started, each once."""
        ordered = sorted(self.steps.items(), key=lambda item: item[1].first)
        return list(dict.fromkeys(name for (name, _), _ in ordered))


class StepMachine(RuleBasedStateMachine):
    """Runs that claim jobs and write steps, crash, quit, fail, complete; a person who
    cancels, stops, retries (plain, --from, --fresh, --step-done) and prunes; stale runs
    and strangers that try to write. No rule has a precondition (see SpoolMachine in
    test_spool_model.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = scratch_folder("sloth-steps-")
        self.path = self.tmp / "queue.db"
        self.clock = FakeClock(START)
        # Durability is not what is checked here: no fsync per commit.
        self.queue = Queue(self.path, clock=self.clock, lease_seconds=LEASE,
                           max_attempts=STEP_ATTEMPTS, backoff_cap=STEP_BACKOFF_CAP,
                           synchronous="OFF")
        # The jobs' side: a connection of their own to the same file, as sloth_step opens it.
        self.db = sqlite3.connect(self.path, isolation_level=None, timeout=5.0)
        self.jobs: list[JobSeen] = []
        self.runs: list[RunSeen] = []
        self.seq = self.tokens = self.started = 0
        # Each step's story, (job, name, occurrence) -> events: ran, done, failed, cut,
        # cut-ask, word (a plain retry), marked (retry --step-done), forgotten, pruned.
        self.story: dict[tuple[str, str, int], list[str]] = {}

    def teardown(self) -> None:
        self.db.close()
        self.queue.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @property
    def now(self) -> float:
        return self.clock.now

    def _tell(self, job: JobSeen, key: Key, event: str) -> None:
        self.story.setdefault((job.id, *key), []).append(event)

    def _table(self) -> tuple[list, list]:
        """Every row of steps and jobs, as a job's connection reads them."""
        return (self.db.execute("SELECT * FROM steps ORDER BY rowid").fetchall(),
                self.db.execute("SELECT * FROM jobs ORDER BY rowid").fetchall())

    def _run(self, job: str, token: str, owner: str) -> sloth_step.Run:
        return sloth_step.Run(str(self.path), job, token, owner)

    def _pick(self, items: list, pick: int):
        return items[pick % len(items)] if items else None

    def _running(self) -> list[JobSeen]:
        return [job for job in self.jobs if job.state == State.RUNNING]

    # -- the model's ends of a run ------------------------------------------------------------

    def _run_ends(self, job: JobSeen) -> None:
        """The job's run is over (whatever ended it): a step still running was cut short;
        one that asked waits for a person's word."""
        assert job.run is not None
        job.run.over = True
        job.run, job.lease_until, job.updated_at = None, None, self.now
        for key, step in job.steps.items():
            if step.state == "running":
                step.state, step.waits = "cut", step.ask
                self._tell(job, key, "cut-ask" if step.ask else "cut")

    def _unsure_fails(self, job: JobSeen) -> None:
        """A step that asked was cut short: the job fails for it, for a person's word."""
        if job.asks():
            job.state, job.reason = State.FAILED, Reason.STEP_UNSURE

    def _model_claim(self, owner: str, token: str, spawned: bool) -> JobSeen | None:
        """The oldest due job: a pending one, or one whose lease ran out (its run is over,
        and it is handed out again only if no step it cut asks and attempts are left)."""
        now = self.now
        while True:
            pending = min((j for j in self.jobs
                           if j.state == State.PENDING and j.not_before <= now),
                          key=lambda j: (j.not_before, j.seq), default=None)
            expired = min((j for j in self.jobs if j.state == State.RUNNING
                           and j.lease_until is not None and j.lease_until <= now),
                          key=lambda j: (j.lease_until, j.seq), default=None)
            if pending is None and expired is None:
                return None
            if expired is not None and (pending is None
                                        or expired.lease_until <= pending.not_before):
                job = expired
                assert job.run is not None
                if job.run.waited is not None:  # recorded its wait, then its app went
                    self._waits(job)
                    continue
                never_started = not job.run.spawned
                self._run_ends(job)
                if never_started:  # given back, its attempt not counted
                    job.state, job.not_before = State.PENDING, now
                    job.attempts = max(job.attempts - 1, 0)
                    self._unsure_fails(job)
                    continue
                if job.attempts >= STEP_ATTEMPTS:
                    job.state, job.reason = State.FAILED, Reason.LEASE_EXPIRED
                    self._unsure_fails(job)
                    continue
                if job.asks():
                    self._unsure_fails(job)
                    continue
            else:
                job = pending
            job.state, job.attempts, job.updated_at = State.RUNNING, job.attempts + 1, now
            job.lease_until = now + LEASE
            job.run = RunSeen(job.id, token, owner, spawned)
            self.runs.append(job.run)
            return job

    # -- the queue's side: jobs come, are claimed, end -------------------------------------------

    @initialize()
    def two_jobs(self) -> None:
        self.push()
        self.push()

    @rule()
    def push(self) -> None:
        if len(self.jobs) >= STEP_JOBS:
            return
        self.seq += 1
        # Each job in a lane of its own: several runs go on at once, side by side, as
        # the runs of a queue's lanes do (one lane runs one job at a time).
        job_id = self.queue.push(f"job{self.seq}", lane=f"lane{self.seq}")
        self.jobs.append(JobSeen(job_id, self.seq, self.now, self.now))

    @rule(owner=st.sampled_from(STEP_OWNERS), spawned=st.sampled_from([True, True, False]))
    def claim(self, owner: str, spawned: bool) -> None:
        self._claim(owner, spawned)

    @rule(owner=st.sampled_from(STEP_OWNERS), spawned=st.sampled_from([True, True, False]),
          calls=STEP_CALLS,
          ends=st.sampled_from(["complete", "fail", "release", "later", "running", "running"]),
          reason=st.sampled_from(STEP_FAILS))
    def work(self, owner: str, spawned: bool, calls: list[tuple[str, bool, str]], ends: str,
             reason: Reason) -> None:
        """The engine's turn: claim a job, its script calls steps, and its run ends (a
        step left open is cut by that end), or it is still running when the next rule
        comes (and may crash: its lease runs out)."""
        job = self._claim(owner, spawned)
        if job is None:
            return
        self._script(job, calls)
        if ends != "running":
            self._record_end(job, ends, reason)

    @rule(owner=st.sampled_from(STEP_OWNERS), spawned=st.sampled_from([True, True, False]))
    def crash(self, owner: str, spawned: bool) -> None:
        """Every running run crashed (mid-step, if it was in one): their leases run out,
        and the next claim takes the oldest back."""
        self.clock.advance(LEASE + 1)
        self._claim(owner, spawned)

    def _claim(self, owner: str, spawned: bool) -> JobSeen | None:
        """A claim gives the run its token; the runner then writes its pid (unless the
        daemon died between the claim and the spawn's note)."""
        self.tokens += 1
        token = f"token-{self.tokens}"
        claimed = self.queue.claim(owner, token=token)
        expected = self._model_claim(owner, token, spawned)
        assert (claimed and claimed.id) == (expected and expected.id), (
            f"claimed {claimed and claimed.id}, the model says {expected and expected.id}")
        if expected is not None and spawned:
            assert self.queue.started(expected.id, owner, {"token": token, "pid": 4_000_000})
        return expected

    @rule(seconds=st.sampled_from([1, 3, LEASE + 1, 100]))
    def advance_clock(self, seconds: float) -> None:
        """LEASE + 1: every run that was not heard from crashed mid-step, as far as the
        queue can tell; the next claim takes its job back."""
        self.clock.advance(seconds)

    @rule(pick=st.integers(0, 255),
          how=st.sampled_from(["complete", "fail", "fail", "release", "later"]),
          reason=st.sampled_from(STEP_FAILS))
    def end_run(self, pick: int, how: str, reason: Reason) -> None:
        """The holder's run ends: it completed, failed (an exit code, a timeout, a kill, a
        script that cannot start), quit (release), or asked to run later (exit 75)."""
        job = self._pick(self._running(), pick)
        if job is not None:
            self._record_end(job, how, reason)

    def _record_end(self, job: JobSeen, how: str, reason: Reason) -> None:
        run = job.run
        assert run is not None
        if how == "complete":
            said = self.queue.complete(job.id, run.owner, "ok")
            self._run_ends(job)
            job.state = State.DONE
            self._unsure_fails(job)
            assert said == job.state, f"complete() says {said}; the model says {job.state}"
        elif how == "fail":
            said = self.queue.fail(job.id, run.owner, "it failed", reason)
            self._run_ends(job)
            if job.attempts >= STEP_ATTEMPTS or reason in PERMANENT:
                job.state, job.reason = State.FAILED, reason
            else:
                job.state, job.reason = State.PENDING, reason
                job.not_before = self.now + min(2.0**job.attempts, STEP_BACKOFF_CAP)
            self._unsure_fails(job)
            assert said == job.state, (
                f"fail() says the job is {said} now; it is {self.queue.get(job.id).state}, "
                f"the model says {job.state}")
        elif how == "later":  # exit 75: the attempt does not count; when is the queue's
            said = self.queue.later(job.id, run.owner, "later, please")
            self._run_ends(job)
            job.state, job.attempts = State.PENDING, max(job.attempts - 1, 0)
            job.not_before = self.queue.get(job.id).not_before
            self._unsure_fails(job)
            assert said == job.state, (
                f"later() says the job is {said} now; it is {self.queue.get(job.id).state}, "
                f"the model says {job.state}")
        else:
            said = self.queue.release(job.id, run.owner)
            self._run_ends(job)
            job.state, job.not_before = State.PENDING, self.now
            job.attempts = max(job.attempts - 1, 0)
            self._unsure_fails(job)
            assert said == job.state, f"release() says {said}; the model says {job.state}"

    @rule(pick=st.integers(0, 255), how=st.sampled_from(["cancel", "stop"]))
    def cancel(self, pick: int, how: str) -> None:
        """A person cancels a job (pending, failed or running), or stops a running one."""
        # A running job mostly: its run ends (a step it is in is cut, and asks nothing).
        job = self._pick(self._running() if pick % 4 else self.jobs, pick // 4)
        if job is None:
            return
        takes = (State.PENDING, State.FAILED, State.RUNNING) if how == "cancel" else (
            State.RUNNING,)
        expected = job.state in takes
        said = self.queue.cancel(job.id) if how == "cancel" else self.queue.stop(job.id)
        assert said == expected, (how, job.id, job.state, said)
        if expected:
            if job.state == State.RUNNING:
                self._run_ends(job)
            job.state, job.updated_at = State.CANCELLED, self.now

    @rule(pick=st.integers(0, 255),
          how=st.sampled_from(["plain", "plain", "step_done", "forget_from", "fresh"]),
          which=st.integers(0, 255))
    def retry(self, pick: int, how: str, which: int) -> None:
        """A person retries a job: plain (a cut step that asked runs again), --step-done
        NAME (it happened), --from NAME (forget it and what started after it), --fresh
        (forget everything). NAME is sometimes a step the job never had."""
        # A job in no state to retry now and then; mostly one that is; often one that
        # waits for this word.
        retriable = [j for j in self.jobs if j.state in RETRIABLE]
        waiting = [j for j in retriable if j.asks()]
        job = self._pick(waiting if waiting and pick % 2 else retriable or self.jobs, pick // 2)
        if job is None:
            return
        names = job.names()
        name = "zz" if which % 8 == 7 or not names else self._pick(names, which)
        arguments: dict[str, Any] = {"step_done": {"step_done": name},
                                     "forget_from": {"forget_from": name},
                                     "fresh": {"fresh": True}}.get(how, {})
        before = self._table()
        if job.state not in RETRIABLE:
            assert self.queue.retry(job.id, **arguments) is False
            assert self._table() == before, "a retry that was refused changed rows"
            return
        if how in ("step_done", "forget_from") and name not in names:
            with pytest.raises(UnknownStep):
                self.queue.retry(job.id, **arguments)
            assert self._table() == before, "a retry naming an unknown step changed rows"
            return
        if how == "step_done" and not any(key[0] == name and step.state == "cut"
                                          for key, step in job.steps.items()):
            # A word about a step not in question: never the word that the one that
            # asks may run again.
            with pytest.raises(NotCutShort):
                self.queue.retry(job.id, **arguments)
            assert self._table() == before, "--step-done of a step not cut short changed rows"
            return
        assert self.queue.retry(job.id, **arguments) is True
        if how == "step_done":
            for key, step in job.steps.items():
                if key[0] == name and step.state == "cut":
                    step.state, step.waits = "done", False
                    self._tell(job, key, "marked")
        elif how == "fresh" or how == "forget_from":
            if how == "fresh":
                forgotten = list(job.steps)
            else:
                start = min(s.first for (n, _), s in job.steps.items() if n == name)
                forgotten = [key for key, s in job.steps.items() if s.first >= start]
            for key in forgotten:
                del job.steps[key]
                self._tell(job, key, "forgotten")
        for key in [key for key, step in job.steps.items() if step.state == "unanswered"]:
            del job.steps[key]  # asked again
            self._tell(job, key, "forgotten")
        for key, step in job.steps.items():  # the retry is the person's word
            if step.waits:
                step.waits = False
                self._tell(job, key, "word")
        job.state, job.not_before, job.attempts, job.reason = State.PENDING, self.now, 0, None
        job.updated_at = self.now

    @rule(age=st.sampled_from([0.0, 2.0, 1000.0]))
    def prune(self, age: float) -> None:
        before = self.now - age
        gone = {job.id for job in self.jobs
                if job.state in (State.DONE, State.CANCELLED) and job.updated_at < before}
        pruned = {job_id for job_id, _ in self.queue.prune(before)}
        assert pruned == gone, f"pruned {sorted(pruned)}, the model says {sorted(gone)}"
        for job in self.jobs:
            if job.id in gone:
                for key in job.steps:
                    self._tell(job, key, "pruned")
        self.jobs = [job for job in self.jobs if job.id not in gone]

    # -- the jobs' side: steps ------------------------------------------------------------------

    def _must_not_run(self, job: JobSeen, key: Key) -> None:
        """begin said "run": by the step's story, it may."""
        story = self.story.get((job.id, *key), [])
        since = story[len(story) - story[::-1].index("forgotten"):] if "forgotten" in story \
            else story
        assert "done" not in since and "marked" not in since, (
            f"step {key} of {job.id} ran again, though it was recorded done and never "
            f"forgotten: its story {story}")
        if "cut-ask" in since:
            after = since[len(since) - since[::-1].index("cut-ask"):]
            assert "word" in after, (
                f"step {key} of {job.id} was cut short while asking and ran again without "
                f"a person's word: its story {story}")

    def _begin(self, job: JobSeen, name: str, ask: bool) -> str:
        """The holder's run calls a step: its next occurrence of `name` runs, is skipped
        (done), or is refused (it waits for a person's word). What begin said."""
        run = job.run
        assert run is not None
        key = (name, run.calls.get(name, 0) + 1)
        decision = sloth_step.begin(self.db, self._run(job.id, run.token, run.owner), name,
                                    ask=ask, kind="shell", now=self.now)
        assert decision.occurrence == key[1], (
            f"call {key[1]} of {name!r} in this run got occurrence {decision.occurrence}")
        run.calls[name] = key[1]
        step = job.steps.get(key)
        if decision.action == "run":
            self._must_not_run(job, key)
        if step is None:
            expected = "run"
            self.started += 1
            step = job.steps[key] = StepSeen("running", ask, self.started)
        elif step.state == "done":
            expected = "done"
        elif step.waits:
            expected = "unsure"
        else:  # failed, or cut short and not waiting: it runs again
            expected = "run"
            step.state, step.ask = "running", ask
        assert decision.action == expected, (
            f"step {key} of {job.id} ({step}): begin said {decision.action!r}, the rules say "
            f"{expected!r}")
        if expected == "run":
            run.open.add(key)
            self._tell(job, key, "ran")
        return decision.action

    def _end_step(self, job: JobSeen, key: Key, ok: bool) -> None:
        """The holder's run says how a step ended. Only a step it is running counts: of
        any other (skipped, or ended already) nothing changes (a done step must not turn
        failed, to run again)."""
        run = job.run
        assert run is not None
        before = self._table()
        recorded = sloth_step.finish(self.db, self._run(job.id, run.token, run.owner), *key,
                                     ok=ok, exit_code=0 if ok else 1, output=b"out",
                                     output_size=3, now=self.now)
        if key not in run.open:
            assert recorded is False, f"finish of {key}, which this run is not running, counted"
            assert self._table() == before, f"finish of {key}, not running, changed rows"
            return
        assert recorded is True, f"the holder's finish of {key} was not recorded"
        run.open.discard(key)
        job.steps[key].state = "done" if ok else "failed"
        self._tell(job, key, "done" if ok else "failed")

    @rule(pick=st.integers(0, 255), calls=STEP_CALLS)
    def script(self, pick: int, calls: list[tuple[str, bool, str]]) -> None:
        job = self._pick(self._running(), pick)
        if job is not None:
            self._script(job, calls)

    def _script(self, job: JobSeen, calls: list[tuple[str, bool, str]]) -> None:
        """The holder's script calls steps in turn (name, --ask, how it ends); one left
        `open` is where the script is when the next rule comes (it may crash there)."""
        for name, ask, ends in calls:
            action = self._begin(job, name, ask)
            if action == "unsure":
                return  # StepUnsure: the script stops there
            if action == "run":
                if ends == "open":
                    return
                assert job.run is not None
                self._end_step(job, (name, job.run.calls[name]), ends == "done")

    @rule(pick=st.integers(0, 255), which=st.integers(0, 255), ok=st.booleans())
    def finish(self, pick: int, which: int, ok: bool) -> None:
        """The holder's run ends a step it left open; now and then, one it did not run or
        ended already."""
        job = self._pick(self._running(), pick)
        if job is None:
            return
        run = job.run
        assert run is not None
        reached = [(name, n) for name, count in sorted(run.calls.items())
                   for n in range(1, count + 1)]
        keys = sorted(run.open) * 3 + [key for key in reached if key not in run.open]
        key = self._pick(keys, which)
        if key is not None:
            self._end_step(job, key, ok)

    def _refused(self, run: sloth_step.Run, name: str, key: Key, call: str, who: str) -> None:
        """A run that does not hold its job calls begin or finish: refused, no row changed."""
        before = self._table()
        if call == "wait":
            try:
                decision = sloth_step.begin_wait(self.db, run, "nap", kind="sleep",
                                                 wake_at=self.now + 5, now=self.now)
            except sloth_step.StepRefused:
                pass
            else:
                raise AssertionError(f"{who}'s sleep was not refused: it said "
                                     f"{decision.action!r}")
        elif call == "begin":
            try:
                decision = sloth_step.begin(self.db, run, name, ask=False, kind="shell",
                                            now=self.now)
            except sloth_step.StepRefused:
                pass
            else:
                raise AssertionError(f"{who}'s begin of {name!r} was not refused: it said "
                                     f"{decision.action!r}")
        else:
            assert sloth_step.finish(self.db, run, *key, ok=True, exit_code=0, output=b"x",
                                     output_size=1, now=self.now) is False, (
                f"{who}'s finish of {key} was recorded")
        assert self._table() == before, f"{who}'s {call} of {key} changed rows"

    @rule(pick=st.integers(0, 255), name=st.sampled_from(STEP_NAMES),
          call=st.sampled_from(["begin", "finish", "wait"]))
    def stale_run(self, pick: int, name: str, call: str) -> None:
        """A run that is over (its job completed, failed, quit, was cancelled, taken back by
        a claim, retried, pruned) calls a step late: its process lived on."""
        over = [r for r in self.runs if r.over]
        # Often one whose step, cut short, a later run of its job is running again now.
        running = {job.id: job.run.open for job in self._running() if job.run is not None}
        again = [r for r in over if r.open & running.get(r.job, set())]
        run = self._pick(again if again and pick % 2 else over, pick // 2)
        if run is None:
            return
        shared = run.open & running.get(run.job, set())
        key = min(shared or run.open) if run.open else (name, 1)
        self._refused(self._run(run.job, run.token, run.owner), name, key, call, "a stale run")

    @rule(pick=st.integers(0, 255), other=st.integers(0, 255), name=st.sampled_from(STEP_NAMES),
          how=st.sampled_from(["owner", "token", "job"]),
          call=st.sampled_from(["begin", "finish", "wait"]))
    def stranger(self, pick: int, other: int, name: str, how: str, call: str) -> None:
        """The holder's run, but with another owner, another token, or another job's id."""
        job = self._pick(self._running(), pick)
        if job is None:
            return
        run = job.run
        assert run is not None
        job_id, token, owner = job.id, run.token, run.owner
        if how == "owner":
            owner = "owner-stranger"
        elif how == "token":
            token = "token-stranger"
        else:
            others = [j for j in self.jobs if j is not job]
            if not others:
                return
            job_id = self._pick(others, other).id
        key = min(run.open) if run.open else (name, 1)
        self._refused(self._run(job_id, token, owner), name, key, call, f"a stranger ({how})")

    @rule(pick=st.integers(0, 255), how=st.sampled_from(["complete", "fail", "release", "later"]))
    def stranger_ends(self, pick: int, how: str) -> None:
        """An owner that does not hold the job (a daemon that died, a stranger) says its
        run ended: refused, and no row changes (no step of the holder's run is cut)."""
        job = self._pick(self._running(), pick)
        if job is None:
            return
        assert job.run is not None
        owner = self._pick([o for o in [*STEP_OWNERS, "owner-stranger"] if o != job.run.owner],
                           pick)
        before = self._table()
        said = {"complete": lambda: self.queue.complete(job.id, owner, "ok"),
                "fail": lambda: self.queue.fail(job.id, owner, "it failed"),
                "release": lambda: self.queue.release(job.id, owner),
                "later": lambda: self.queue.later(job.id, owner, "later")}[how]()
        assert not said, f"{how} by {owner}, who does not hold {job.id}, said {said!r}"
        assert self._table() == before, f"{how} by {owner}, who does not hold {job.id}, wrote"

    # -- the jobs' side: steps that wait --------------------------------------------------------

    @rule(pick=st.integers(0, 255), kind=st.sampled_from(["sleep", "ask"]),
          seconds=st.sampled_from([1.0, 5.0, 100.0, None]),
          default=st.sampled_from([None, "no"]), ends=st.sampled_from(["wait", "wait", "crash"]),
          owner=st.sampled_from(STEP_OWNERS))
    def wait_step(self, pick: int, kind: str, seconds: float | None, default: str | None,
                  ends: str, owner: str) -> None:
        """The holder's script reaches a sleep (`seconds`) or an ask (timeout `seconds`,
        or none): the first time, the wait is recorded and the run ends there (queue.wait;
        or its app dies first: `crash`, and a claim takes it back as the wait it was).
        Later, the wait is over (the script goes on) or it waits again."""
        job = self._pick([j for j in self._running() if j.run is not None and not j.run.open
                          and j.run.waited is None], pick)
        if job is None:  # the engine's turn, as `work`: a job due now runs into the wait
            job = self._claim(owner, True)
        if job is None:
            return
        run = job.run
        assert run is not None
        name, now = WAIT_NAMES[kind], self.now
        seconds = 1.0 if kind == "sleep" and seconds is None else seconds
        key = (name, run.calls.get(name, 0) + 1)
        asks = {"question": "Go?", "choices": ASK_CHOICES, "default": default} \
            if kind == "ask" else {}
        decision = sloth_step.begin_wait(
            self.db, self._run(job.id, run.token, run.owner), name, kind=kind,
            wake_at=None if seconds is None else now + seconds, now=now, **asks)
        assert decision.occurrence == key[1]
        run.calls[name] = key[1]
        step = job.steps.get(key)
        if step is None:
            expected = "wait"
            self.started += 1
            step = job.steps[key] = StepSeen("waiting", False, self.started, kind=kind,
                                             wake_at=None if seconds is None else now + seconds,
                                             default=default if kind == "ask" else None)
        elif step.state in ("done", "unanswered"):
            expected = step.state
        else:
            timed_out = step.wake_at is not None and now >= step.wake_at
            if kind == "sleep":
                expected = "done" if timed_out else "wait"
            elif step.answer is not None or (timed_out and step.default is not None):
                expected, step.answer = "done", step.answer or step.default
            else:
                expected = "unanswered" if timed_out else "wait"
            if expected != "wait":
                step.state = expected
        assert decision.action == expected, (
            f"{kind} {key} of {job.id} ({step}) at {now - START:g}: begin_wait said "
            f"{decision.action!r}, the rules say {expected!r}")
        # The user's rules, on what the script is told, whatever the model says.
        if decision.action == "done" and kind == "sleep":
            assert now >= decision.row["wake_at"], "a sleep ended before its wake time"
        if decision.action == "done" and kind == "ask":
            told = decision.output.decode()
            assert told in ASK_CHOICES and told == step.answer, (
                f"the ask {key} of {job.id} went past its question with {told!r}, answered "
                f"{step.answer!r}")
        if expected == "done":
            return  # the script goes on after the wait
        run.waited = key
        if ends == "crash":
            self.crash(owner, True)
            return
        said = self.queue.wait(job.id, run.owner, run.token)
        self._waits(job)
        assert said == job.state, f"wait() says {said}; the model says {job.state}"

    def _waits(self, job: JobSeen) -> None:
        """The run ended in the wait it recorded: the job waits, pending, due at the wake
        time (at once once answered; never without a timeout), its attempt not counted;
        or it fails, unanswered."""
        assert job.run is not None and job.run.waited is not None
        step = job.steps[job.run.waited]
        self._run_ends(job)
        job.attempts = max(job.attempts - 1, 0)
        if step.state == "unanswered":
            job.state, job.reason = State.FAILED, Reason.UNANSWERED
        else:
            job.state = State.PENDING
            job.not_before = self.now if step.answer is not None else (
                step.wake_at if step.wake_at is not None else reads.NEVER)
        self._unsure_fails(job)
        if job.state == State.PENDING:
            due = self.queue.get(job.id).not_before
            assert due == job.not_before, (
                f"{job.id} waits in {step.kind} until {due - START:g}, the model says "
                f"{job.not_before - START:g}")

    @rule(pick=st.integers(0, 255))
    def run_now(self, pick: int) -> None:
        """A person's Run now: a pending job is due at once, a sleeping one too (it then
        meets its sleep again, which never ends early)."""
        waiting = [j for j in self.jobs if j.state == State.PENDING
                   and any(step.state == "waiting" for step in j.steps.values())]
        job = self._pick(waiting if waiting and pick % 4 else self.jobs, pick // 4)
        if job is None:
            return
        assert self.queue.run_now(job.id) == (job.state == State.PENDING)
        if job.state == State.PENDING:
            job.not_before = job.updated_at = self.now

    @rule(pick=st.integers(0, 255), choice=st.sampled_from(["yes", "no", "yes", "maybe"]))
    def answer(self, pick: int, choice: str) -> None:
        """A person answers a job's question (now and then one that asks nothing, or with
        a word that is not a choice): it runs again at once, if it waits."""
        asking = [j for j in self.jobs if any(
            step.kind == "ask" and step.state == "waiting" for step in j.steps.values())]
        job = self._pick(asking if asking and pick % 4 else self.jobs, pick // 4)
        if job is None:
            return
        asked = [step for step in job.steps.values()
                 if step.kind == "ask" and step.state == "waiting" and step.answer is None]
        before = self._table()
        if not asked or job.state not in (State.PENDING, State.RUNNING) \
                or choice not in ASK_CHOICES:
            with pytest.raises(steps.NotAsking):
                self.queue.answer(job.id, choice)
            assert self._table() == before, "an answer that was refused changed rows"
            return
        self.queue.answer(job.id, choice)
        max(asked, key=lambda step: step.first).answer = choice
        job.updated_at = self.now
        if job.state == State.PENDING:
            job.not_before = self.now

    # -- what must hold after every step ------------------------------------------------------

    @invariant()
    def steps_hold(self) -> None:
        jobs = {job.id: job for job in self.queue.jobs()}
        self.jobs_match_the_model(jobs)
        self.steps_match_the_model()
        self.no_step_outlives_its_job()
        self.a_cut_asking_step_fails_its_job(jobs)
        self.a_running_step_is_its_running_runs()
        self.a_waiting_job_holds_no_lease_and_no_process(jobs)

    def jobs_match_the_model(self, jobs: dict[str, Job]) -> None:
        assert set(jobs) == {job.id for job in self.jobs}
        for job in self.jobs:
            row = jobs[job.id]
            seen = (row.state, row.attempts, row.lease_owner,
                    row.reason if row.state == State.FAILED else None)
            want = (job.state, job.attempts, job.run and job.run.owner,
                    job.reason if job.state == State.FAILED else None)
            assert seen == want, f"{job.id}: the queue has {seen}, the model {want}"

    def steps_match_the_model(self) -> None:
        """Each job's steps, in the order they first started: name, occurrence, state, and
        whether it waits for a person's word."""
        for job in self.jobs:
            seen = [(s.name, s.occurrence, s.state, s.state == "cut" and bool(s.ask))
                    for s in steps.listed(self.db, job.id)]
            want = [(name, n, s.state, s.waits)
                    for (name, n), s in sorted(job.steps.items(), key=lambda kv: kv[1].first)]
            assert seen == want, f"the steps of {job.id}: the queue has {seen}, the model {want}"

    def no_step_outlives_its_job(self) -> None:
        orphans = self.db.execute(
            "SELECT job, name, occurrence FROM steps WHERE job NOT IN (SELECT id FROM jobs)"
        ).fetchall()
        assert not orphans, f"steps without their job: {orphans}"

    def a_cut_asking_step_fails_its_job(self, jobs: dict[str, Job]) -> None:
        """A step cut short while asking holds its job failed (step_unsure) until a person
        says, or cancelled by one."""
        for job in self.jobs:
            if job.asks():
                row = jobs[job.id]
                assert row.state == State.CANCELLED or (
                    row.state == State.FAILED and row.reason == Reason.STEP_UNSURE), (
                    f"{job.id} has a step cut short that asks, yet it is {row.state} "
                    f"({row.reason})")

    def a_waiting_job_holds_no_lease_and_no_process(self, jobs: dict[str, Job]) -> None:
        """A job whose run ended in a wait is pending with no lease and no run of its own,
        and no sooner due than its wait allows."""
        for job in self.jobs:
            row = jobs[job.id]
            waiting = [s for s in job.steps.values() if s.state == "waiting"]
            if row.state != State.PENDING or not waiting:
                continue
            assert row.lease_owner is None and row.lease_until is None and job.run is None, (
                f"{job.id} waits in a step, yet holds a lease ({row.lease_owner})")
            live = [r for r in self.runs if r.job == job.id and not r.over]
            assert not live, f"{job.id} waits in a step, yet a run of it goes on: {live}"

    def a_running_step_is_its_running_runs(self) -> None:
        """A step is running only under the run that holds its job: any run's end cuts."""
        strays = self.db.execute(
            "SELECT steps.job, steps.name, occurrence FROM steps LEFT JOIN jobs "
            "ON jobs.id = steps.job "
            "WHERE steps.state = 'running' AND (jobs.state IS NOT 'running' "
            "OR json_extract(jobs.child, '$.token') IS NOT steps.token)").fetchall()
        assert not strays, f"steps running with no run of theirs: {strays}"


StepMachine.TestCase.settings = settings(
    max_examples=examples(150), stateful_step_count=60, deadline=None, database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestStepModel = pytest.mark.slow(StepMachine.TestCase)


def replay_steps(*steps: tuple[str, dict[str, Any]]) -> None:
    """Run these StepMachine rules in this order, checking every invariant after each."""
    machine = StepMachine()
    try:
        machine.two_jobs()
        for name, arguments in steps:
            getattr(machine, name)(**arguments)
            machine.steps_hold()
    finally:
        machine.teardown()


@pytest.mark.parametrize("ends", ["fail", "later", "release", "complete"])
def test_a_run_that_ends_inside_an_asking_step_leaves_its_job_failed_and_says_so(ends):
    """A run that fails (with attempts left), asks to run later, quits or completes while
    inside a step that asks: the job is failed (step_unsure), and fail() and later() say
    so (they once said `pending`, and the daemon's log `retrying`)."""
    replay_steps(("work", {"owner": "owner-a", "spawned": True, "calls": [("a", True, "open")],
                           "ends": ends, "reason": Reason.EXIT_CODE}))


def test_a_crash_inside_an_asking_step_waits_for_a_persons_word_then_runs_it_once_more():
    """Crashed inside an asking step: the claim that takes the job back fails it instead of
    running it, and the crashed run's late word is refused; a plain retry is the person's
    word: the step runs again, and once done it is skipped."""
    machine = StepMachine()
    work = {"owner": "owner-a", "spawned": True, "reason": Reason.EXIT_CODE}

    def step(rule: str, **arguments: Any) -> None:
        getattr(machine, rule)(**arguments)
        machine.steps_hold()

    try:
        step("push")
        (job,) = machine.jobs
        step("work", calls=[("a", True, "open")], ends="running", **work)
        step("crash", owner="owner-b", spawned=True)
        assert (job.state, job.reason) == (State.FAILED, Reason.STEP_UNSURE)
        step("stale_run", pick=0, name="a", call="finish")
        step("retry", pick=0, how="plain", which=0)
        step("work", calls=[("a", True, "done")], ends="complete", **work)
        step("retry", pick=0, how="plain", which=0)
        step("work", calls=[("a", False, "done")], ends="complete", **work)
        assert machine.story[(job.id, "a", 1)] == ["ran", "cut-ask", "word", "ran", "done"]
    finally:
        machine.teardown()
