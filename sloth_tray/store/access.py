"""What every client of the queue shares, the command line and the MCP server alike:
the queue opened (vetted to write, or only to read, making nothing), a job found by
id, prefix or name, and the sentences that say what to do instead of an action that
does not fit a job's state. Below both clients, so neither imports the other."""

import os

from sloth_tray.errors import SlothError
from sloth_tray.paths import Home, joined
from sloth_tray.store.states import State

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    import sqlite3

    from sloth_tray.paths import Place
    from sloth_tray.store.queue import Job, Queue
    from sloth_tray.store.schema import translated_errors


def sound_home(home: Home) -> Home:
    """The home, vetted (Home.ensure), once its queue file has read back whole and sound
    (schema.verify: about 30 ms per 100,000 jobs, once a process for each state of the
    file): a command must never write on top of a damaged page, nor do half its work
    and then meet one."""
    from sloth_tray.store.schema import verify

    home.ensure()
    verify(home.db)
    return home


def open_queue(home: Home) -> "Queue":
    from sloth_tray.store.queue import Queue  # here: `status` reads without it (reads.py)

    return Queue(sound_home(home).db)


def read_queue(home: Home) -> "Queue | None":
    """The queue, for a command that only reads; None when there is none to read: a
    home or jobs folder that does not exist is not made (Home.readable)."""
    from sloth_tray.store.queue import Queue
    from sloth_tray.store.schema import verify

    if not home.readable():
        return None
    verify(home.db)
    return Queue(home.db)


def queue_to_read(home: Home) -> "Queue":
    """The queue, for a command that reads one job (`show`, `wait`, `log`): where there
    is none, the one sentence that says so (exit 1), and nothing made."""
    queue = read_queue(home)
    if queue is None:
        raise SlothError(home.no_queue)
    return queue


class reading:  # lower case: used as the function it was (`with reading(home) as db`)
    """For a command that only reads (`list`, `show`, `log`), without the Queue and its
    writing code: the file read whole first (schema.verify), as read_queue does, then
    one read transaction on a connection that cannot write (reads.reader), its errors
    one sentence. None where there is no queue to read (Home.readable), nothing made;
    `required`: the sentence that says so instead (exit 1), as queue_to_read.

    A class, not a generator: importing contextlib costs a look half a millisecond."""

    __slots__ = ("home", "required", "db")

    def __init__(self, home: Home, *, required: bool = False) -> None:
        self.home, self.required, self.db = home, required, None

    def __enter__(self) -> "sqlite3.Connection | None":
        from sloth_tray.store import reads
        from sloth_tray.store.schema import verify

        if not self.home.readable():
            if self.required:
                raise SlothError(self.home.no_queue)
            return None
        verify(self.home.db)
        db = reads.reader(self.home.db)
        try:
            with self._errors():
                db.execute("BEGIN")  # every read from the same moment
        except BaseException:
            db.close()
            raise
        self.db = db
        return db

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: object) -> bool:
        db, self.db = self.db, None
        if db is None:
            return False
        try:
            errors = self._errors()
            if exc is not None:  # the body's SQLite error, said as one sentence too
                return errors.__exit__(kind, exc, traceback)
            with errors:
                db.execute("COMMIT")
        finally:
            db.close()
        return False

    def _errors(self) -> "translated_errors":
        from sloth_tray.store import reads
        from sloth_tray.store.schema import translated_errors

        return translated_errors(self.home.db, reads.BUSY_TIMEOUT)


def find_job(queue: "Queue", given: str) -> str:
    """The id of the job `given` names: an id, enough of its start, or a name (its
    newest job); see reads.find_job."""
    from sloth_tray.store import reads

    if len(given) == 12 and queue.exists(given):  # a whole id: nothing else to look at
        return given
    db = reads.reader(queue.path)
    try:
        return reads.find_job(db, given)
    finally:
        db.close()


def run_log(home: Home, job: "Job", run: int) -> "Place":
    """Where run `run` of `job` keeps its log. None there: the run printed nothing,
    unless it started no process at all, which SlothError says, with why."""
    from sloth_tray.store.reasons import started_no_process  # here: `paths` reads no reason

    path = joined(home.job_logs(job.id, job.name), f"{run}.log")
    if not os.path.isfile(path) and run == job.runs and started_no_process(job.reason):
        raise SlothError(f"run {run} of {job.name} ({job.id}) left no log: {job.last_error}")
    return path


def run_now_instead(job: "Job") -> str | None:
    if job.state == State.PENDING:
        return f"is waiting; `sloth-tray run-now {job.id}` starts it now"
    return None


def retry_instead(job: "Job") -> str | None:
    if job.state in (State.FAILED, State.CANCELLED):
        return f"is {job.state.value}; `sloth-tray retry {job.id}` puts it back in line"
    return None
