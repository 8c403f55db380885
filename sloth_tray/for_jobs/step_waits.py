"""Steps that wait, with no process: a durable sleep (`sleep`, `sleep_until`) and a
question for the person at the tray (`ask`). The first call records the wait and the
run ends there; the job runs again at the wake time, or once answered, and the call
then returns. Part of sloth_step (for_jobs/sloth_step.py): the standard library only,
Python 3.6 and later.
"""

import json
import signal
import sqlite3
import sys
import time

from .step_record import (
    _HELD,
    NAME_MAX,
    Decision,
    Run,
    StepError,
    _db_sentence,
    _lock,
    _row,
    _say,
    connection,
    immediately,
    name_problem,
    this_call,
    when_text,
)

# A step that waits (kind "sleep" or "ask") is `waiting` from the run that records it
# on: that run ends, and the job waits in the queue with no process for its wake time
# (`wake_at`: a sleep's end, an ask's timeout) or an answer. An ask past its timeout
# with no default is `unanswered`: the job fails (reason `unanswered`).
WAIT_KINDS = ("sleep", "ask")
DEFAULT_CHOICES = ("yes", "no")


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
    return immediately(db, lambda: _decide_wait(
        db, run, name, kind=kind, wake_at=wake_at, now=now, question=question,
        choices=choices, default=default))


def _decide_wait(db, run: Run, name: str, *, kind: str, wake_at, now: float, question,
                 choices, default) -> Decision:
    held, occurrence = this_call(db, run, name)
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


# The longest sleep: limits.py's DELAY (ten years), which this file cannot import; past
# it a wake time outgrows what a clock holds (test_waits holds the two equal).
SLEEP_MAX = 3650 * 86400.0


def wake_problem(when: float, now: float) -> "str | None":
    """Why `when` is no wake time (None: it is one): not a moment at all (nan, inf), or
    further off than SLEEP_MAX."""
    if isinstance(when, bool) or not isinstance(when, (int, float)) or when != when \
            or when in (float("inf"), float("-inf")):
        return f"cannot sleep until {when!r}: give a moment, in seconds since the epoch"
    if when - now > SLEEP_MAX:
        return "a sleep lasts at most 3650d (ten years)"
    return None


def sleep_until(when: float, *, name: str = "sleep") -> None:
    """Sleep until the wall-clock moment `when` (seconds since the epoch), durably: inside
    a job, the wait is recorded and the run ends; the job runs again from the top at
    `when` (or at the next start, once, if the computer was off), its done steps
    skipped, and this call then returns. Outside a job, it simply sleeps."""
    problem = name_problem(name) or wake_problem(when, time.time())
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
    if not seconds >= 0:  # nan is neither
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
