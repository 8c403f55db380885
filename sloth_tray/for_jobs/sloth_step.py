"""Steps that happen once: a job's steps, kept in its queue file, so that a retried,
reclaimed or woken job skips the steps that already happened.

    from sloth_step import step
    receipt = step("pay", pay_invoice, invoice_id)   # on a later run: the same receipt

This module is what a job runs of steps: `step()` and the sentences a job says here,
the rest in its parts beside it, whose names it gives as its own: a step's record
(step_record.py: its start and end, the holder check, the connection), its own tries
(step_tries.py), what a Python step may return (step_results.py), and the steps that
wait (step_waits.py: `sleep`, `sleep_until`, `ask`). `sloth-tray step` runs through
it, the runner reads its notes and its Python floor, and a job's Python imports it
as `sloth_step`: the app puts a folder holding only pythonpath/sloth_step.py at the
end of every job's PYTHONPATH, which checks the Python and then runs this file as
the module `sloth_step`, its parts its submodules. So they use only the standard
library, and run on Python 3.6 and later (PYTHON_FLOOR): no
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

from .step_env import PYTHON_FLOOR as PYTHON_FLOOR
from .step_env import TOO_OLD_STATUS as TOO_OLD_STATUS
from .step_env import is_note as is_note
from .step_env import is_too_old as is_too_old
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
from .step_record import _lock, _say
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
from .step_waits import DEFAULT_CHOICES as DEFAULT_CHOICES
from .step_waits import SLEEP_MAX as SLEEP_MAX
from .step_waits import WAIT_KINDS as WAIT_KINDS
from .step_waits import StepUnanswered as StepUnanswered
from .step_waits import ask as ask
from .step_waits import begin_wait as begin_wait
from .step_waits import choices_problem as choices_problem
from .step_waits import hold as hold
from .step_waits import sleep as sleep
from .step_waits import sleep_until as sleep_until
from .step_waits import unanswered_sentence as unanswered_sentence
from .step_waits import wait_sentence as wait_sentence

# The exceptions a job sees are sloth_step's, whichever part defines them: a traceback's
# last line, which the runner shows as why the job failed, names sloth_step.StepRefused.
for _exception in (StepError, StepRefused, StepUnsure, StepTimedOut, StepUnanswered):
    _exception.__module__ = __name__
del _exception

def step_key(job: str, name: str, occurrence: int) -> str:
    """SLOTH_STEP_KEY: the same for every run of this step, for APIs that take an
    idempotency key (fixed length, letters and digits only)."""
    import hashlib  # here: OpenSSL costs 5 ms, which a skipped step and the app never pay

    return hashlib.sha256(f"{job}\0{name}\0{occurrence}".encode()).hexdigest()[:32]


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
