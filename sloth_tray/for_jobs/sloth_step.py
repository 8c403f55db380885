"""Steps that happen once: a job's steps, kept in its queue file, so that a retried,
reclaimed or woken job skips the steps that already happened.

    from sloth_step import step
    receipt = step("pay", pay_invoice, invoice_id)   # on a later run: the same receipt

This file is what a job runs of steps: a step's start and end, and the sentences a
job says. `sloth-tray step` runs through it, the runner reads its notes and its
Python floor, and a job's Python imports it as `sloth_step`: the app puts a folder
holding only pythonpath/sloth_step.py at the end of every job's PYTHONPATH, which
checks the Python and then runs this file as the module `sloth_step`. So it uses
only the standard library, and runs on Python 3.6 and later (PYTHON_FLOOR): no
`from __future__ import annotations` (3.7's), so an annotation 3.6 cannot evaluate
(`str | None`, `list[str]`) is written as a string. tests/daemon/test_steps.py and
tests/test_step_module.py hold it to that.

A step is (job, name, occurrence): the same name called again in one run is its
next occurrence. Only the run holding the job's lease may record: every write
carries the run's token and owner in its WHERE clause, as heartbeats do, so a run
that is over (its lease lost, its job taken back) records nothing.

A step's states: running -> done (recorded, never run again unless forgotten) or
failed (never cached: runs again). A step still running when its run ends was cut
short: `cut`. A cut step runs again on the next run, unless it was started with
`ask`: then a person says whether it happened or not (`sloth-tray retry`).

The queue's side of steps (the table, a run's end, a person's word, what `show`
reads) is the app's store/steps.py: a job never runs it.
"""

import json
import os
import re
import signal
import sqlite3
import sys
import time

from .step_record import _HELD, _db_sentence, _held_run, _lock, _not_held, _row, _say
from .step_record import BUSY_TIMEOUT as BUSY_TIMEOUT
from .step_record import DOORBELL_ENV as DOORBELL_ENV
from .step_record import JOB_ENV as JOB_ENV
from .step_record import KEY_ENV as KEY_ENV
from .step_record import NAME_MAX as NAME_MAX
from .step_record import OUTPUT_CAP as OUTPUT_CAP
from .step_record import OWNER_ENV as OWNER_ENV
from .step_record import QUEUE_ENV as QUEUE_ENV
from .step_record import STATES as STATES
from .step_record import TOKEN_ENV as TOKEN_ENV
from .step_record import Decision as Decision
from .step_record import Run as Run
from .step_record import StepError as StepError
from .step_record import StepRefused as StepRefused
from .step_record import StepUnsure as StepUnsure
from .step_record import begin as begin
from .step_record import connection as connection
from .step_record import durably as durably
from .step_record import end as end
from .step_record import finish as finish
from .step_record import name_problem as name_problem
from .step_record import next_try as next_try
from .step_record import ring as ring
from .step_record import size_text as size_text
from .step_record import start as start
from .step_record import when_text as when_text
from .step_results import RESULT_DEPTH as RESULT_DEPTH
from .step_results import result_problem as result_problem
from .step_tries import BACKOFF_DEFAULT as BACKOFF_DEFAULT
from .step_tries import BACKOFF_MAX as BACKOFF_MAX
from .step_tries import GRACE as GRACE
from .step_tries import RETRIES_MAX as RETRIES_MAX
from .step_tries import TIMED_OUT as TIMED_OUT
from .step_tries import TIMEOUT_MAX as TIMEOUT_MAX
from .step_tries import StepTimedOut as StepTimedOut
from .step_tries import _tried
from .step_tries import backoff_delay as backoff_delay
from .step_tries import tries_problem as tries_problem
from .step_tries import try_failed_line as try_failed_line

# The exceptions a job sees are sloth_step's, whichever part defines them: a traceback's
# last line, which the runner shows as why the job failed, names sloth_step.StepRefused.
for _exception in (StepError, StepRefused, StepUnsure, StepTimedOut):
    _exception.__module__ = __name__
del _exception

# The oldest Python that runs this file. pythonpath/sloth_step.py, which any Python
# reads, ends an older one's import with TOO_OLD_STATUS (126: as a shell says "cannot
# execute") and a line is_too_old knows: the runner fails the job for good
# (unrunnable), as no retry would find another Python.
PYTHON_FLOOR = (3, 6)
TOO_OLD_STATUS = 126

# A step that waits (kind "sleep" or "ask") is `waiting` from the run that records it
# on: that run ends, and the job waits in the queue with no process for its wake time
# (`wake_at`: a sleep's end, an ask's timeout) or an answer. An ask past its timeout
# with no default is `unanswered`: the job fails (reason `unanswered`).
WAIT_KINDS = ("sleep", "ask")
DEFAULT_CHOICES = ("yes", "no")


def step_key(job: str, name: str, occurrence: int) -> str:
    """SLOTH_STEP_KEY: the same for every run of this step, for APIs that take an
    idempotency key (fixed length, letters and digits only)."""
    import hashlib  # here: OpenSSL costs 5 ms, which a skipped step and the app never pay

    return hashlib.sha256(f"{job}\0{name}\0{occurrence}".encode()).hexdigest()[:32]


# The notes a step writes to the job's stderr when it is skipped, or its output kept
# short: what happened, never why a job failed (the runner passes over them).
_NOTE = re.compile(r"sloth-tray: step .+? (skipped \((done|marked done by hand) "
                   r"\d{4}-\d\d-\d\d |had written \d|wrote \d)")
_TOO_OLD = re.compile(r"sloth-tray: sloth_step needs Python \d+\.\d+ or later, and this "
                      r"job runs Python ")


def is_too_old(line: str) -> bool:
    """Whether this last line of a job's stderr is pythonpath/sloth_step.py's: the
    job's Python is older than PYTHON_FLOOR."""
    return _TOO_OLD.match(line) is not None


def is_note(line: str) -> bool:
    """Whether this line of a job's stderr is a step's note (skipped_line and the notes
    of output kept short), not something the job said."""
    return _NOTE.match(line) is not None


def skipped_line(name: str, row: dict) -> str:
    done = row.get("marked_at") or row.get("ended_at") or 0
    how = "marked done by hand" if row.get("marked_at") else "done"
    return f"step {name} skipped ({how} {when_text(done)}, run {row.get('run')})"


def unsure_sentence(job: str, name: str, row: dict) -> str:
    return (f'step "{name}" was cut short at {when_text(row.get("ended_at") or 0)} (run '
            f"{row.get('run')}), so it may or may not have happened, and it asks before it "
            f"runs again: `sloth-tray retry {job} --step-done {_shell_word(name)}` if it "
            f"did, `sloth-tray retry {job}` to run it again")


def _shell_word(word: str) -> str:
    import shlex

    return shlex.quote(word)


def step(name, fn, *args, ask=False, retries=0, backoff=BACKOFF_DEFAULT, timeout=None,
         **kwargs):
    """Call fn(*args, **kwargs) once for this job: its result is recorded as JSON, and
    any later run of the job returns it without calling fn.

    An exception propagates and records no result (the step runs again next time).
    With `retries=N`, an exception is first tried again in place, in this run, up to
    N more times, waiting 1, 2, 4... seconds before each, at most `backoff`; the last
    try's exception propagates. `timeout` (seconds): a call past it gets StepTimedOut
    raised inside it, and that try failed (the main thread only).
    A result JSON would not give back as it is (see result_problem: a tuple, a key
    that is not text, NaN or infinity, a subclass, more than RESULT_DEPTH deep) raises
    TypeError naming the step, and the step is recorded failed: it runs again.
    Outside a job (run by hand) fn is simply called, with its tries and timeout.
    `ask=True`: if a run ends while fn runs (a crash, a quit, a lost lease), the job
    stops and asks you whether it happened, instead of running it again."""
    problem = name_problem(name) or tries_problem(retries, backoff, timeout)
    if problem:
        raise ValueError(problem)
    run = Run.from_environment()
    if run is None:
        return _tried(name, fn, args, kwargs, retries, backoff, timeout, None)
    with _lock:
        db = connection(run.queue)
        decision = start(db, run, name, ask=ask, kind="python")
    if decision.action == "done":
        _say(skipped_line(name, decision.row))
        return json.loads(decision.output.decode("utf-8")) if decision.output else None
    if decision.action == "unsure":
        raise StepUnsure(unsure_sentence(run.job, name, decision.row))
    previous = os.environ.get(KEY_ENV)
    os.environ[KEY_ENV] = step_key(run.job, name, decision.occurrence)
    try:
        result = _tried(name, fn, args, kwargs, retries, backoff, timeout,
                        lambda tries: next_try(db, run, name, decision.occurrence, tries))
    except Exception:
        end(db, run, name, decision.occurrence, ok=False, output=None)
        raise
    finally:
        if previous is None:
            os.environ.pop(KEY_ENV, None)
        else:
            os.environ[KEY_ENV] = previous
    problem, text = result_problem(result), b""
    if problem is None:
        try:
            text = json.dumps(result, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError, RecursionError) as exc:  # past what the walk sees
            problem = f"a {type(result).__name__} that JSON cannot hold ({exc})"
    if problem is not None:  # recorded failed: it returned, so it was not cut short
        end(db, run, name, decision.occurrence, ok=False, output=None)
        raise TypeError(f'step "{name}" returned {problem}; nothing was recorded, so it '
                        "runs again next time") from None
    if len(text) > OUTPUT_CAP:
        end(db, run, name, decision.occurrence, ok=False, output=None)
        raise ValueError(f'step "{name}" returned {size_text(len(text))} of JSON, more than '
                         f"the {size_text(OUTPUT_CAP)} a step keeps; nothing was recorded, "
                         "so it runs again next time")
    if not end(db, run, name, decision.occurrence, ok=True, output=text):
        raise StepRefused(f'step "{name}" ran, but this run of job {run.job} is over, so it '
                          "was not recorded; it runs again with the job")
    return result


# -- steps that wait: a durable sleep, a question for the person at the tray -------------


class StepUnanswered(StepError):
    """An ask's timeout passed with no answer and no default: the job fails."""


def begin_wait(db: sqlite3.Connection, run: Run, name: str, *, kind: str,
               wake_at: "float | None", now: float, question: "str | None" = None,
               choices: "list | None" = None, default: "str | None" = None) -> Decision:
    """Take this call's occurrence of the waiting step `name` and say what to do:
    `done` (its wait is over: a sleep past its wake time, an ask answered or past its
    timeout with a default; the answer is the output), `wait` (recorded waiting by this
    run: the run ends and the job waits with no process) or `unanswered`. A wait already
    recorded keeps its wake time and question: a sleep never ends early, whatever woke
    the job. Held-checked as every write: a run that is over gets StepRefused."""
    db.execute("BEGIN IMMEDIATE")
    try:
        decision = _decide_wait(db, run, name, kind=kind, wake_at=wake_at, now=now,
                                question=question, choices=choices, default=default)
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return decision


def _decide_wait(db, run: Run, name: str, *, kind: str, wake_at, now: float, question,
                 choices, default) -> Decision:
    held = _held_run(db, run)
    if held is None:
        raise StepRefused(_not_held(db, run, name))
    occurrence = 1 + db.execute(
        "SELECT count(*) FROM steps WHERE job = :job AND name = :name AND seen_by = :token",
        run.params(name=name)).fetchone()[0]
    key = run.params(name=name, occurrence=occurrence, now=now, run=held, kind=kind,
                     wake_at=wake_at, question=question, default=default,
                     choices=None if choices is None else json.dumps(list(choices)))
    where = f"WHERE job = :job AND name = :name AND occurrence = :occurrence AND {_HELD}"
    row = _row(db, run.job, name, occurrence)
    if row is None or row["state"] in ("running", "failed", "cut") or row["kind"] != kind:
        if row is None:
            db.execute(
                "INSERT INTO steps(job, name, occurrence, state, ask, run, token, seen_by, "
                "started_at, kind, wake_at, question, choices, default_choice) SELECT :job, "
                ":name, :occurrence, 'waiting', 0, :run, :token, :token, :now, :kind, "
                f":wake_at, :question, :choices, :default WHERE {_HELD}", key)
        else:
            db.execute(
                "UPDATE steps SET state = 'waiting', ask = 0, run = :run, token = :token, "
                "seen_by = :token, started_at = :now, ended_at = NULL, exit_code = NULL, "
                "output = NULL, output_size = NULL, kind = :kind, marked_at = NULL, "
                "wake_at = :wake_at, question = :question, choices = :choices, "
                f"default_choice = :default, answer = NULL {where}", key)
        return Decision("wait", occurrence, _row(db, run.job, name, occurrence))
    if row["state"] == "done":
        db.execute(f"UPDATE steps SET seen_by = :token {where}", key)
        return Decision("done", occurrence, row)
    if row["state"] == "unanswered":
        db.execute(f"UPDATE steps SET seen_by = :token, token = :token {where}", key)
        return Decision("unanswered", occurrence, row)
    # waiting: over, or waiting on
    answer = row["answer"]
    timed_out = row["wake_at"] is not None and now >= row["wake_at"]
    if kind == "ask" and answer is None and timed_out:
        answer = row["default_choice"]
        if answer is None:
            db.execute("UPDATE steps SET state = 'unanswered', seen_by = :token, token = "
                       f":token, run = :run, ended_at = :now {where}", key)
            return Decision("unanswered", occurrence, _row(db, run.job, name, occurrence))
    if (kind == "sleep" and timed_out) or (kind == "ask" and answer is not None):
        text = b"" if kind == "sleep" else answer.encode("utf-8")
        db.execute("UPDATE steps SET state = 'done', seen_by = :token, token = :token, "
                   "run = :run, ended_at = :now, answer = :answer, output = :output, "
                   f"output_size = :size, exit_code = 0 {where}",
                   {**key, "answer": None if kind == "sleep" else answer, "output": text,
                    "size": len(text)})
        return Decision("done", occurrence, _row(db, run.job, name, occurrence))
    db.execute(f"UPDATE steps SET seen_by = :token, token = :token, run = :run {where}", key)
    return Decision("wait", occurrence, row)


def wait_sentence(row: dict) -> str:
    """What a waiting step waits for, for the run's log."""
    if row.get("kind") == "sleep":
        return f"sleeping until {when_text(row.get('wake_at') or 0)}; the job runs again then"
    until = (f" (until {when_text(row['wake_at'])})" if row.get("wake_at") is not None
             else "")
    return (f"asking {row.get('question')!r} ({'/'.join(json.loads(row.get('choices') or '[]'))})"
            f"{until}; the job runs again once it is answered")


def unanswered_sentence(job: str, row: dict) -> str:
    return (f"nobody answered {row.get('question')!r} by {when_text(row.get('wake_at') or 0)},"
            f" and it has no default: `sloth-tray retry {job}` asks again")


def _wait(run: Run, name: str, **how) -> Decision:
    with _lock:
        db = connection(run.queue)
        try:
            db.execute("PRAGMA synchronous = FULL")  # a wait recorded outlives a power cut
            try:
                return begin_wait(db, run, name, now=time.time(), **how)
            finally:
                db.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            raise StepError(_db_sentence(run, exc)) from None


def hold(run: Run, sentence: str) -> None:
    """The wait is recorded: say so, tell the app (its doorbell), and wait for it to end
    this run's processes. Never returns: what follows the wait runs in a later run."""
    _say(sentence)
    run.ring()
    while True:
        if hasattr(signal, "pause"):
            signal.pause()
        else:  # Windows: no pause(); the app ends the process
            time.sleep(3600)


def _waited(run: Run, name: str, decision: Decision) -> "str | None":
    """After begin_wait: the answer (or "" for a sleep) when the wait is over; else the
    run ends here (hold), or StepUnanswered."""
    if decision.action == "done":
        return decision.output.decode("utf-8")
    if decision.action == "unanswered":
        sentence = unanswered_sentence(run.job, decision.row)
        hold(run, sentence)  # the app fails the job with it
    hold(run, wait_sentence(decision.row))
    return None  # not reached


def sleep_until(when: float, *, name: str = "sleep") -> None:
    """Sleep until the wall-clock moment `when` (seconds since the epoch), durably: inside
    a job, the wait is recorded and the run ends; the job runs again from the top at
    `when` (or at the next start, once, if the computer was off), its done steps
    skipped, and this call then returns. Outside a job, it simply sleeps."""
    problem = name_problem(name)
    if problem:
        raise ValueError(problem)
    run = Run.from_environment()
    if run is None:
        time.sleep(max(0.0, when - time.time()))
        return
    _waited(run, name, _wait(run, name, kind="sleep", wake_at=float(when)))


def sleep(seconds: float, *, name: str = "sleep") -> None:
    """Sleep `seconds` durably (sleep_until, counted from the first call: a later run of
    the job keeps the wake time the first one recorded)."""
    if seconds < 0:
        raise ValueError(f"cannot sleep {seconds} seconds")
    sleep_until(time.time() + seconds, name=name)


def choices_problem(choices: "list", default: "str | None") -> "str | None":
    if not choices or any(not isinstance(c, str) or not c.strip() for c in choices):
        return "an ask's choices are words, at least one (like yes,no)"
    if len(set(choices)) != len(choices):
        return f"an ask's choices are each given once ({', '.join(choices)})"
    if default is not None and default not in choices:
        return f"the default {default!r} is not one of the choices ({', '.join(choices)})"
    return None


def ask(question: str, choices: "list | tuple" = DEFAULT_CHOICES, *,
        default: "str | None" = None, timeout: "float | None" = None,
        name: "str | None" = None) -> str:
    """Ask the person at the tray `question`, durably: the first call records it and the
    run ends; the job waits, with no process, for an answer (the tray, a notification,
    `sloth-tray answer`), then runs again and this call returns the choice. Past
    `timeout` seconds: `default`, or the job fails (reason `unanswered`). Outside a job
    it asks on the terminal."""
    choices = list(choices)
    problem = choices_problem(choices, default) or (
        "an ask needs a question (it was empty)" if not str(question).strip() else None)
    if problem:
        raise ValueError(problem)
    name = name or f"ask: {question}"[:NAME_MAX]
    run = Run.from_environment()
    if run is None:
        return _ask_here(question, choices, default)
    wake_at = None if timeout is None else time.time() + timeout
    decision = _wait(run, name, kind="ask", wake_at=wake_at, question=question,
                     choices=choices, default=default)
    return _waited(run, name, decision) or ""


def _ask_here(question: str, choices: list, default: "str | None") -> str:
    """Outside a job: ask on the terminal, or take the default where nobody can answer."""
    if sys.stdin is None or not sys.stdin.isatty():
        if default is not None:
            return default
        raise StepError(f"cannot ask {question!r}: no terminal to answer on and no default")
    while True:
        sys.stderr.write(f"{question} [{'/'.join(choices)}] ")
        sys.stderr.flush()
        line = sys.stdin.readline()
        if not line:
            if default is not None:
                return default
            raise StepError(f"{question!r} was not answered")
        answer = line.strip() or (default or "")
        if answer in choices:
            return answer
