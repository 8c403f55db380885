"""A step's record, the run's side: the run a job's environment names (`Run`), the
holder check in every write it makes, a step's start (`begin`, `start`) and end
(`finish`, `end`) in the job's queue file, the connection to that file, and the
exceptions a step raises. Part of sloth_step (for_jobs/sloth_step.py): the standard
library only, Python 3.6 and later.
"""

import os
import sqlite3
import sys
import threading
import time

# A job's environment names its run (the runner sets these).
from .step_env import DOORBELL_ENV as DOORBELL_ENV
from .step_env import JOB_ENV as JOB_ENV
from .step_env import KEY_ENV as KEY_ENV
from .step_env import OWNER_ENV as OWNER_ENV
from .step_env import QUEUE_ENV as QUEUE_ENV
from .step_env import TOKEN_ENV as TOKEN_ENV

# -- what a step may be called, and how much of its output is kept -----------------------

NAME_MAX = 200  # characters
OUTPUT_CAP = 1024 * 1024  # bytes of a step's stdout (or its result's JSON) kept for replay
BUSY_TIMEOUT = 60.0  # seconds a step waits for the queue file while another writer holds it

STATES = ("running", "done", "failed", "cut", "waiting", "unanswered")


class StepError(Exception):
    """A step could not be recorded or refused to run: the message is one sentence."""


class StepRefused(StepError):
    """The run calling the step no longer holds its job: nothing was run or recorded."""


class StepUnsure(StepError):
    """The step was cut short once and asks a person before it runs again."""


def name_problem(name: object) -> "str | None":
    """Why `name` cannot name a step, or None when it can."""
    if not isinstance(name, str):
        return f"a step's name is text, not {type(name).__name__}"
    if not name.strip():
        return "a step needs a name (it was empty)"
    if len(name) > NAME_MAX:
        return f"a step's name is at most {NAME_MAX} characters (this one has {len(name)})"
    for char in name:
        if ord(char) < 32 or 0x7F <= ord(char) < 0xA0 or char in "\u2028\u2029":
            return f"a step's name has no control characters ({name!r} has {char!r})"
        if 0xD800 <= ord(char) < 0xE000:  # a byte of a command line that is not UTF-8
            return f"a step's name is UTF-8 text ({ascii(name)} is not)"
    return None


def when_text(moment: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(moment))


def size_text(size: int) -> str:
    for unit, length in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= length:
            return f"{size / length:.1f} {unit}".replace(".0 ", " ")
    return f"{size} byte{'' if size == 1 else 's'}"


# -- the holder check: in every write a run makes ------------------------------------------

# The run holds its job: the job is running, leased to this owner, under this run's token.
_HELD = ("EXISTS (SELECT 1 FROM jobs WHERE jobs.id = :job AND jobs.state = 'running' "
         "AND jobs.lease_owner = :owner AND json_extract(jobs.child, '$.token') = :token)")


def ring(doorbell: "str | os.PathLike") -> None:
    """Touch the app's doorbell, the file a running daemon watches (made 0600, never
    through a link); quietly nothing where it cannot be written: no daemon listens there.
    The command line rings it too (paths.Home.ring_doorbell)."""
    try:
        fd = os.open(doorbell, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError:
        return
    try:
        os.utime(fd if os.utime in os.supports_fd else doorbell)
    except OSError:
        pass
    finally:
        os.close(fd)


class Run:
    """A job's run as its environment names it: the queue file, the job, the token and
    the owner of its lease."""

    def __init__(self, queue: str, job: str, token: str, owner: str,
                 doorbell: "str | None" = None) -> None:
        self.queue, self.job, self.token, self.owner = queue, job, token, owner
        self.doorbell = doorbell

    def ring(self) -> None:
        """Tell the app a step started or ended (its tray names the running step)."""
        if self.doorbell:
            ring(self.doorbell)

    @classmethod
    def from_environment(cls, environ=None) -> "Run | None":
        """The run this process belongs to; None outside any job (run by hand)."""
        environ = os.environ if environ is None else environ
        token = environ.get(TOKEN_ENV)
        if not token:
            return None
        missing = [name for name in (QUEUE_ENV, JOB_ENV, OWNER_ENV) if not environ.get(name)]
        if missing:
            raise StepError(f"{TOKEN_ENV} is set but {', '.join(missing)} is not: this "
                            "process does not look like a job sloth-tray started, and "
                            "cannot record steps")
        return cls(environ[QUEUE_ENV], environ[JOB_ENV], token, environ[OWNER_ENV],
                   environ.get(DOORBELL_ENV))

    def params(self, **more) -> dict:
        return {"job": self.job, "token": self.token, "owner": self.owner, **more}


class Decision:
    """What `begin` found: run the step (`run`), skip it (`done`: its output is
    `output`), or refuse (`unsure`)."""

    def __init__(self, action: str, occurrence: int, row: "dict | None" = None) -> None:
        self.action, self.occurrence, self.row = action, occurrence, row or {}

    @property
    def output(self) -> bytes:
        return bytes(self.row.get("output") or b"")


# -- the run's side: begin, then finish -------------------------------------------------

def begin(db: sqlite3.Connection, run: Run, name: str, *, ask: bool, kind: str,
          now: float) -> Decision:
    """Take this call's occurrence of `name` and say what to do with it. Writes are
    held-checked: a run that is over gets StepRefused, and nothing changes.

    One BEGIN IMMEDIATE: two calls of one name at once get two occurrences."""
    return immediately(db, lambda: _decide(db, run, name, ask=ask, kind=kind, now=now))


def immediately(db: sqlite3.Connection, decide) -> Decision:
    """`decide()` in one BEGIN IMMEDIATE transaction (the write lock taken first: no
    other call can decide between its read and its write); rolled back if it raises."""
    db.execute("BEGIN IMMEDIATE")
    try:
        decision = decide()
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return decision


def this_call(db: sqlite3.Connection, run: Run, name: str) -> "tuple[int, int]":
    """(the run holding the job, this call's occurrence of `name` in it): the n-th call
    of a name in a run is its n-th occurrence. A run that no longer holds the job gets
    StepRefused."""
    held = _held_run(db, run)
    if held is None:
        raise StepRefused(_not_held(db, run, name))
    occurrence = 1 + db.execute(
        "SELECT count(*) FROM steps WHERE job = :job AND name = :name AND seen_by = :token",
        run.params(name=name)).fetchone()[0]
    return held, occurrence


def _decide(db: sqlite3.Connection, run: Run, name: str, *, ask: bool, kind: str,
            now: float) -> Decision:
    held, occurrence = this_call(db, run, name)
    key = run.params(name=name, occurrence=occurrence, now=now, run=held, ask=int(ask),
                     kind=kind)
    row = _row(db, run.job, name, occurrence)
    if row is None:
        db.execute(
            "INSERT INTO steps(job, name, occurrence, state, ask, run, token, seen_by, "
            "started_at, kind) SELECT :job, :name, :occurrence, 'running', :ask, :run, "
            f":token, :token, :now, :kind WHERE {_HELD}", key)
        return Decision("run", occurrence)
    if row["state"] == "done" or (row["state"] in ("cut", "running") and row["ask"]):
        db.execute("UPDATE steps SET seen_by = :token WHERE job = :job AND name = :name "
                   f"AND occurrence = :occurrence AND {_HELD}", key)
        return Decision("done" if row["state"] == "done" else "unsure", occurrence, row)
    # failed (never cached), or cut short and not asking: it runs again
    db.execute(
        "UPDATE steps SET state = 'running', ask = :ask, run = :run, token = :token, "
        "seen_by = :token, started_at = :now, ended_at = NULL, exit_code = NULL, "
        "output = NULL, output_size = NULL, kind = :kind, marked_at = NULL, tries = NULL "
        f"WHERE job = :job AND name = :name AND occurrence = :occurrence AND {_HELD}", key)
    return Decision("run", occurrence, row)


def _held_run(db: sqlite3.Connection, run: Run) -> "int | None":
    """The job's run number, when `run` holds it."""
    found = db.execute(
        "SELECT runs FROM jobs WHERE id = :job AND state = 'running' "
        "AND lease_owner = :owner AND json_extract(child, '$.token') = :token",
        run.params()).fetchone()
    return None if found is None else found[0]


def _not_held(db: sqlite3.Connection, run: Run, name: str) -> str:
    found = db.execute("SELECT state FROM jobs WHERE id = ?", (run.job,)).fetchone()
    if found is None:
        return (f'step "{name}" was not run: job {run.job} is not in the queue '
                f"{run.queue}")
    return (f'step "{name}" was not run: this run of job {run.job} is over (the job is '
            f"{found[0]} now, and its run belongs to another start), so it records nothing")


def finish(db: sqlite3.Connection, run: Run, name: str, occurrence: int, *, ok: bool,
           exit_code: "int | None", output: "bytes | None", output_size: int,
           now: float) -> bool:
    """Record how the step ended: done (with its output) or failed. False when the run
    no longer holds the job: nothing was recorded."""
    changed = db.execute(
        "UPDATE steps SET state = :state, ended_at = :now, exit_code = :exit_code, "
        "output = :output, output_size = :size WHERE job = :job AND name = :name "
        "AND occurrence = :occurrence AND state = 'running' AND token = :token "
        f"AND {_HELD}",
        run.params(state="done" if ok else "failed", now=now, exit_code=exit_code,
                   output=output if ok else None, size=output_size, name=name,
                   occurrence=occurrence)).rowcount
    return changed == 1


def next_try(db: sqlite3.Connection, run: Run, name: str, occurrence: int,
             tries: int) -> bool:
    """Record that the running step is on try number `tries` (2 on: its first retry),
    as `show` says it. Held-checked: False when the run no longer holds the job (then
    the step is not tried again)."""
    with _lock:
        try:
            changed = db.execute(
                "UPDATE steps SET tries = :tries WHERE job = :job AND name = :name "
                "AND occurrence = :occurrence AND state = 'running' AND token = :token "
                f"AND {_HELD}",
                run.params(tries=tries, name=name, occurrence=occurrence)).rowcount
        except sqlite3.Error as exc:
            raise StepError(_db_sentence(run, exc)) from None
    run.ring()
    return changed == 1


def _row(db: sqlite3.Connection, job: str, name: str, occurrence: int) -> "dict | None":
    cursor = db.execute(f"SELECT {_COLUMNS} FROM steps WHERE job = ? AND name = ? "
                        "AND occurrence = ?", (job, name, occurrence))
    found = cursor.fetchone()
    return None if found is None else _as_dict(found)


_FIELDS = ("name", "occurrence", "state", "ask", "run", "started_at", "ended_at",
           "exit_code", "output_size", "kind", "marked_at", "output", "wake_at",
           "question", "choices", "default_choice", "answer", "tries")
_COLUMNS = ", ".join(_FIELDS)


def _as_dict(row) -> dict:
    """A row of _FIELDS by name."""
    return dict(zip(_FIELDS, row))  # noqa: B905 - zip(strict=) is Python 3.10's; jobs' may be older


# -- a job's side: the connection ----------------------------------------------------

_connections: "dict[tuple[int, str], sqlite3.Connection]" = {}
_lock = threading.Lock()


def connection(queue: str) -> sqlite3.Connection:
    """This process's connection to the queue file (one per process: never across a
    fork). Never creates the file: a job's queue exists while the job runs."""
    key = (os.getpid(), queue)
    db = _connections.get(key)
    if db is None:
        if not os.path.isfile(queue):
            raise StepError(f"cannot record steps: the queue file {queue} does not exist")
        try:
            uri = "file:" + _uri_path(queue) + "?mode=rw"
            db = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT, isolation_level=None,
                                 check_same_thread=False)
        except sqlite3.Error as exc:
            raise StepError(f"cannot record steps in {queue}: {exc}") from None
        _connections[key] = db
    return db


def _uri_path(path: str) -> str:
    from urllib.parse import quote

    return quote(os.path.abspath(path))


def durably(db: sqlite3.Connection, write) -> object:
    """`write(db)` committed with an fsync (synchronous=FULL), whatever the connection's
    level: a step's start and end must outlive a power cut."""
    db.execute("PRAGMA synchronous = FULL")
    try:
        return write(db)
    finally:
        db.execute("PRAGMA synchronous = NORMAL")


def _say(text: str) -> None:
    """A line for the run's log (the job's stderr)."""
    try:
        sys.stderr.write(f"sloth-tray: {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


def start(db, run: Run, name: str, *, ask: bool, kind: str) -> Decision:
    """This call's occurrence of the step, and what to do with it (begin), for a job's
    helpers: begin at NORMAL (a skip writes only its count: no fsync), then the start of a
    step that runs made durable before it runs."""
    try:
        db.execute("PRAGMA synchronous = NORMAL")
        decision = begin(db, run, name, ask=ask, kind=kind, now=time.time())
        if decision.action == "run":
            durably(db, lambda db: db.execute(
                "UPDATE steps SET started_at = started_at WHERE job = :job AND name = :name "
                f"AND occurrence = :occurrence AND {_HELD}",
                run.params(name=name, occurrence=decision.occurrence)))
            run.ring()
        return decision
    except sqlite3.Error as exc:
        raise StepError(_db_sentence(run, exc)) from None


def end(db, run: Run, name: str, occurrence: int, *, ok: bool, output: "bytes | None",
        exit_code: "int | None" = None, output_size: "int | None" = None) -> bool:
    """finish, committed with an fsync, for a job's helpers: False when the run is over."""
    size = len(output) if output_size is None and output is not None else (output_size or 0)
    with _lock:
        try:
            recorded = bool(durably(db, lambda db: finish(
                db, run, name, occurrence, ok=ok, exit_code=exit_code, output=output,
                output_size=size, now=time.time())))
        except sqlite3.Error as exc:
            raise StepError(_db_sentence(run, exc)) from None
    run.ring()
    return recorded


def _db_sentence(run: Run, exc: sqlite3.Error) -> str:
    text = str(exc)
    if "locked" in text or "busy" in text:
        return (f"the queue {run.queue} stayed locked by another program for "
                f"{BUSY_TIMEOUT:g} s; the step was not recorded")
    if "no such table" in text:
        return (f"the queue {run.queue} has no steps yet: the sloth-tray that runs this job "
                "is older than this sloth_step")
    return f"cannot record the step in {run.queue}: {text}"
