"""The queue's side of steps (their table is schema.py's, made by its migrations): what
the Queue does to a job's steps when a run ends, when a person retries it, and when
the app or `show` reads them. A job's own side (a step's start and end, held-checked
by the run's token and owner) is for_jobs/sloth_step.py, which a job's Python runs
and which therefore imports nothing of the app's: nothing here imports it.

A step's states: running -> done (recorded, never run again unless forgotten) or
failed (never cached: runs again). A step still running when its run ends was cut
short: `cut`. A cut step runs again on the next run, unless it was started with
`ask`: then a person says whether it happened (`mark_done`) or not (`run_again`).

Functions of a connection, inside the Queue's transactions. What a waiting job waits
for, as the looks read it, is reads.py's.
"""

import json
import sqlite3
import time

from sloth_tray.errors import SlothError
from sloth_tray.store.reads import NEVER, words_for
from sloth_tray.store.rows import Record


class UnknownStep(SlothError):
    """A step named that the job never started."""


class NotCutShort(UnknownStep):
    """`retry --step-done` naming no step cut short (a done one, or one the job never
    had): a person's word about a step that is not in question, so nothing changes."""


_FIELDS = ("name", "occurrence", "state", "ask", "run", "started_at", "ended_at",
           "exit_code", "output_size", "kind", "marked_at", "wake_at", "question", "choices",
           "default_choice", "answer", "tries", "output")
_COLUMNS = ", ".join(_FIELDS)
_LISTED = ", ".join(field for field in _FIELDS if field != "output")  # all but the output


class Step(Record):
    """One step of a job as the queue reads it: its columns by name (`output` None when
    read without it: `listed`, `progress`). A record, not a named tuple, whose class
    is compiled at import: `show` paid a hundredth of its time for it."""

    FIELDS = _FIELDS
    __match_args__ = FIELDS

    def __init__(self, *values: object) -> None:
        if len(values) == len(_FIELDS) - 1:  # read without its output
            values = (*values, None)
        vars(self).update(zip(_FIELDS, values, strict=True))

    def as_dict(self, *, output: bool = True) -> dict:
        """By column name, as `show --json` and Queue.steps() give it; without `output`
        when it was not read."""
        found = dict(zip(_FIELDS, self._values(), strict=True))
        if not output:
            del found["output"]
        return found


# -- a run that ends -----------------------------------------------------------------

def cut(db: sqlite3.Connection, job: str, now: float) -> int:
    """The job's run ended: a step still running was cut short. Called by the Queue
    inside the transaction that ends the run (its own owner check). How many were."""
    return db.execute("UPDATE steps SET state = 'cut', ended_at = :now "
                      "WHERE job = :job AND state = 'running'",
                      {"job": job, "now": now}).rowcount


def end_run(db: sqlite3.Connection, job: str, now: float) -> str | None:
    """The job's run has ended: its steps still running were cut short (`cut`). The
    sentence for the first cut step that asks before it runs again (step_unsure), if
    there is one waiting for a person's word."""
    cut(db, job, now)
    unsure = first_unsure(db, job)
    return None if unsure is None else unsure_sentence(job, unsure)


def first_unsure(db: sqlite3.Connection, job: str) -> Step | None:
    """The first step cut short that asks before it runs again, if any."""
    # min(rowid), not ORDER BY rowid LIMIT 1: that sorts, in a temporary table SQLite
    # makes for it each time, and every run's end asks.
    found = db.execute(f"SELECT {_COLUMNS} FROM steps WHERE rowid = (SELECT min(rowid) "
                       "FROM steps WHERE job = ? AND state = 'cut' AND ask)", (job,)).fetchone()
    return None if found is None else Step(*found)


def unsure_sentence(job: str, step: Step) -> str:
    """Why the job failed, in the words a job's own step says it in (sloth_step's
    unsure_sentence, which cannot be imported here: tests/daemon/test_steps.py holds
    the two to one sentence)."""
    return (f'step "{step.name}" was cut short at {_when_text(step.ended_at or 0)} (run '
            f"{step.run}), so it may or may not have happened, and it asks before it "
            f"runs again: `sloth-tray retry {job} --step-done {_shell_word(step.name)}` if "
            f"it did, `sloth-tray retry {job}` to run it again")


# -- a run that ends waiting --------------------------------------------------------

def run_wait(db: sqlite3.Connection, job: str, token: str | None) -> Step | None:
    """The step that the run under `token` recorded waiting (or unanswered) in, if it
    did: its run is over, and the job waits (or fails, unanswered)."""
    if not token:
        return None
    found = db.execute(f"SELECT {_COLUMNS} FROM steps WHERE job = ? AND token = ? "
                       "AND state IN ('waiting', 'unanswered') ORDER BY rowid DESC LIMIT 1",
                       (job, token)).fetchone()
    return None if found is None else Step(*found)


def due_at(step: Step, now: float) -> float:
    """When a job waiting in `step` is to run again: a sleep at its wake time, an ask
    at once when answered, else at its timeout (NEVER without one)."""
    if step.kind == "ask" and step.answer is not None:
        return now
    return step.wake_at if step.wake_at is not None else NEVER


def wait_words(step: Step) -> str:
    """`sleeping until 14:00`, `asking "Send it?"`: what a waiting job waits for."""
    return words_for(step.kind, step.wake_at, step.question)


def asking(db: sqlite3.Connection) -> list[tuple[str, Step]]:
    """Every pending job waiting for an answer, with its question, oldest first."""
    return [(row[0], Step(*row[1:])) for row in db.execute(
        f"SELECT steps.job, {', '.join('steps.' + f for f in _FIELDS)} FROM steps "
        "JOIN jobs ON jobs.id = steps.job WHERE jobs.state = 'pending' "
        "AND steps.state = 'waiting' AND steps.kind = 'ask' AND steps.answer IS NULL "
        "ORDER BY steps.started_at, steps.rowid")]


class NotAsking(SlothError):
    """An answer to a job that is not asking, or not among its choices."""


def answer(db: sqlite3.Connection, job: str, state: str, choice: str, now: float) -> Step:
    """A person's answer to the question job `job` (in `state`) waits on: recorded, the
    step it answers returned. NotAsking, and nothing changes, when the job asks nothing
    or `choice` is not one of its choices."""
    found = db.execute(
        f"SELECT {_COLUMNS} FROM steps WHERE job = ? AND state = 'waiting' AND kind = 'ask' "
        "AND answer IS NULL ORDER BY rowid DESC LIMIT 1", (job,)).fetchone()
    if found is None or state not in ("pending", "running"):
        raise NotAsking(f"job {job} is not asking anything (it is {state}), so there is "
                        "nothing to answer")
    step = Step(*found)
    choices = json.loads(step.choices or "[]")
    if choice not in choices:
        raise NotAsking(f"{choice!r} is not an answer to {step.question!r}: the choices are "
                        f"{', '.join(choices)}")
    db.execute("UPDATE steps SET answer = :choice, answered_at = :now WHERE job = :job "
               "AND name = :name AND occurrence = :occurrence AND state = 'waiting' "
               "AND answer IS NULL",
               {"choice": choice, "now": now, "job": job, "name": step.name,
                "occurrence": step.occurrence})
    return step


def ask_again(db: sqlite3.Connection, job: str) -> list[str]:
    """A retry of a job whose ask went unanswered: the question is asked anew."""
    again = [row[0] for row in db.execute(
        "SELECT name FROM steps WHERE job = ? AND state = 'unanswered'", (job,))]
    db.execute("DELETE FROM steps WHERE job = ? AND state = 'unanswered'", (job,))
    return again


def unanswered_sentence(job: str, step: Step) -> str:
    """Why the job failed (sloth_step's unanswered_sentence, in the same words)."""
    return (f"nobody answered {step.question!r} by {_when_text(step.wake_at or 0)}, and it "
            f"has no default: `sloth-tray retry {job}` asks again")


# -- a person's word: retry ----------------------------------------------------------

def on_retry(db: sqlite3.Connection, job: str, now: float, step_done: str | None,
             forget_from: str | None, fresh: bool) -> list[str]:
    """What retry does to the job's steps (Queue.retry: `step_done` marked done,
    `forget_from` and those after it forgotten, or all of them when `fresh`; the cut
    steps that asked run again), in words for its history. A step the job does not
    have raises UnknownStep, a `step_done` not cut short NotCutShort, before anything
    changes."""
    said = []
    if step_done is not None:
        refusal = not_cut_sentence(db, job, step_done)
        if refusal:
            raise NotCutShort(refusal)
    if forget_from is not None and forget_from not in names(db, job):
        known = ", ".join(f'"{known}"' for known in names(db, job))
        raise UnknownStep(f'job {job} has no step "{forget_from}" '
                          f"({'its steps: ' + known if known else 'it has no steps'})")
    if step_done is not None and mark_done(db, job, step_done, now):
        said.append(f'step "{step_done}" marked done')
    if fresh:
        forgotten = forget_all(db, job)
        said.append(f"forgot its {forgotten} step{'' if forgotten == 1 else 's'}")
    elif forget_from is not None:
        forgotten = forget_step_and_later(db, job, forget_from)
        said.append(f'forgot step "{forget_from}" and the {forgotten - 1} after it')
    said.extend(f'step "{name}" to run again' for name in run_again(db, job))
    said.extend(f'"{name}" to be asked again' for name in ask_again(db, job))
    return said


def run_again(db: sqlite3.Connection, job: str) -> list[str]:
    """A person's word: the cut steps that asked may run again. Their names."""
    again = [row[0] for row in db.execute(
        "SELECT name FROM steps WHERE job = ? AND state = 'cut' AND ask ORDER BY rowid",
        (job,))]
    db.execute("UPDATE steps SET ask = 0 WHERE job = ? AND state = 'cut' AND ask", (job,))
    return again


def mark_done(db: sqlite3.Connection, job: str, name: str, now: float) -> int:
    """A person's word: step `name` happened (every occurrence of it cut short; one that
    failed did not happen). How many were marked; 0 when none was cut short."""
    return db.execute(
        "UPDATE steps SET state = 'done', ask = 0, marked_at = :now, "
        "ended_at = coalesce(ended_at, :now), output = coalesce(output, x''), "
        "output_size = coalesce(output_size, 0) "
        "WHERE job = :job AND name = :name AND state = 'cut'",
        {"job": job, "name": name, "now": now}).rowcount


def not_cut_sentence(db: sqlite3.Connection, job: str, name: str) -> str | None:
    """Why `name` cannot be marked done (it was not cut short: done, failed, or not a
    step of the job), naming the step that asks, if one does; None when it can."""
    steps = listed(db, job)
    mine = [step.state for step in steps if step.name == name]
    if "cut" in mine:
        return None
    if not mine:
        wrong = f'job {job} has no step "{name}"'
    else:
        state = "done" if "done" in mine else mine[-1]
        wrong = f'step "{name}" of job {job} was not cut short (it is {state})'
    asking = first_unsure(db, job)
    cut_short = [step.name for step in steps if step.state == "cut"]
    if asking is not None:
        then = f'the step that asks is "{asking.name}": {_answers(job, asking.name)}'
    elif cut_short:
        then = f'the step cut short is "{cut_short[0]}"'
    else:
        then = "none of its steps was cut short, so there is nothing to mark done"
    return f"{wrong}, and --step-done marks only a step cut short; {then}"


def _answers(job: str, name: str) -> str:
    """The two words a person may give about a step cut short that asks."""
    return (f"`sloth-tray retry {job} --step-done {_shell_word(name)}` if it happened, "
            f"`sloth-tray retry {job}` to run it again")


def forget_step_and_later(db: sqlite3.Connection, job: str, name: str) -> int:
    """Forget step `name` (its first occurrence) and every step started after it: they
    run again. How many were forgotten; 0 when the job has no such step."""
    return db.execute(
        "DELETE FROM steps WHERE job = :job AND rowid >= (SELECT min(rowid) FROM steps "
        "WHERE job = :job AND name = :name)", {"job": job, "name": name}).rowcount


def forget_all(db: sqlite3.Connection, job: str) -> int:
    return db.execute("DELETE FROM steps WHERE job = ?", (job,)).rowcount


# -- what is shown -------------------------------------------------------------------

def names(db: sqlite3.Connection, job: str) -> list[str]:
    """The job's step names, in the order they first started, each once."""
    seen: dict[str, None] = {}
    for (name,) in db.execute("SELECT name FROM steps WHERE job = ? ORDER BY rowid", (job,)):
        seen.setdefault(name)
    return list(seen)


def listed(db: sqlite3.Connection, job: str) -> list[Step]:
    """The job's steps in the order they first started, without their output."""
    return [Step(*row) for row in db.execute(
        f"SELECT {_LISTED} FROM steps WHERE job = ? ORDER BY rowid", (job,))]


def recorded(db: sqlite3.Connection, job: str, name: str,
             occurrence: int | None = None) -> Step | None:
    """One step with its output: the given occurrence, else the last one."""
    found = db.execute(
        f"SELECT {_COLUMNS} FROM steps WHERE job = :job AND name = :name "
        "AND occurrence = coalesce(:occurrence, occurrence) ORDER BY occurrence DESC LIMIT 1",
        {"job": job, "name": name, "occurrence": occurrence}).fetchone()
    return None if found is None else Step(*found)


def progress(db: sqlite3.Connection, jobs: list[str]) -> dict[str, tuple[int, int, Step | None]]:
    """For each job with steps: (steps recorded, steps done, the first step not done:
    where it stopped), in one read."""
    found: dict[str, list[Step]] = {}
    for row in db.execute(
            f"SELECT job, {_LISTED} FROM steps "
            "WHERE job IN (SELECT value FROM json_each(?)) ORDER BY rowid",
            (json.dumps(jobs),)):
        found.setdefault(row[0], []).append(Step(*row[1:]))
    result = {}
    for job, steps in found.items():
        stuck = next((step for step in steps if step.state != "done"), None)
        result[job] = (len(steps), sum(step.state == "done" for step in steps), stuck)
    return result


def running(db: sqlite3.Connection, job: str) -> tuple[int, str, bool] | None:
    """The step the job is in now: (its place among the job's steps, from 1; its name;
    whether it asks before it runs again)."""
    found = db.execute(
        "SELECT (SELECT count(*) FROM steps AS earlier WHERE earlier.job = steps.job "
        "AND earlier.rowid <= steps.rowid), name, ask FROM steps WHERE job = ? "
        "AND state = 'running' ORDER BY rowid DESC LIMIT 1", (job,)).fetchone()
    return None if found is None else (found[0], found[1], bool(found[2]))


def _when_text(moment: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(moment))


def _shell_word(word: str) -> str:
    import shlex  # here: `status` loads this module and never says a step

    return shlex.quote(word)
