"""The queue's database file: its schema and migrations, the checks that refuse a
file that is not ours or is damaged without ever writing to it, and `connect`, the
one way the file is opened, by the queue and by `status` alike. The only writes
here are the schema's own (a new file's, a migration's); every write of jobs is
queue.py's.

`connect` makes a new file 0600 (or vets an existing one), identifies it in one read,
switches it to WAL waiting out another opener's lock, and migrates it under
`BEGIN IMMEDIATE`; on a read-only file system it only opens to read (never makes,
switches or migrates). SQLite's errors become one sentence (`translated_errors`).
"""

import os
import sqlite3
import time

from sloth_tray import safety
from sloth_tray.errors import DatabaseProblem
from sloth_tray.paths import DB_SIDES
from sloth_tray.store import lanes

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    Place = str | os.PathLike[str]  # a Path, or text (a look imports no pathlib: paths.py)

# Marks the file as ours (PRAGMA application_id): "SLTH".
APPLICATION_ID = 0x534C5448

# What every version of the `recur` trigger does (they differ in when it fires):
# queue the next run of an every= series, due one period after this run was
# scheduled; runs missed while the machine slept or the app was off coalesce into
# one run, due at once.
_QUEUE_NEXT_EVERY_RUN = "INSERT INTO jobs(id, name, state, max_attempts, not_before, script, " \
    """options,
                             created_at, updated_at, history)
            SELECT lower(hex(randomblob(6))), NEW.name, 'pending', NEW.max_attempts, due,
                   NEW.script, json_set(NEW.options, '$.scheduled', due),
                   NEW.updated_at, NEW.updated_at,
                   json_array(json_array(NEW.updated_at, 'pushed', 'the next run after '
                                         || NEW.id))
            FROM (SELECT max(json_extract(NEW.options, '$.scheduled')
                             + json_extract(NEW.options, '$.every'), NEW.updated_at) AS due)"""
_EVERY_RUN_TRIGGER_BODY = f"""BEGIN
            {_QUEUE_NEXT_EVERY_RUN};
        END"""

# `recur` since calendars are followed in Python: an every= run without at= or cron=
# ends (done, or failed for good).
_CALENDARLESS_EVERY_RUN_ENDS = """CREATE TRIGGER recur AFTER UPDATE OF state ON jobs
            WHEN OLD.state = 'running' AND NEW.state IN ('done', 'failed')
             AND json_extract(NEW.options, '$.every') > 0
             AND json_type(NEW.options, '$.at') IS NULL
             AND json_type(NEW.options, '$.cron') IS NULL"""

# A waiting job that requires a condition: jobs_due_requiring's clause, which a query
# says word for word to be read on it.
REQUIRING = "state = 'pending' AND json_extract(options, '$.require') IS NOT NULL"
# A run of a series (every=, at= or cron=), and what ties a series' runs together: the
# spooled script they share (a command's, its name). The series' indexes are made on
# these words, and a query says them word for word to be read on one: new words need
# a migration that makes those indexes again.
REPEATS = ("(json_extract(options, '$.every') > 0 OR json_type(options, '$.at') IS NOT NULL "
           "OR json_type(options, '$.cron') IS NOT NULL)")
SERIES_KEY = "coalesce(script, name)"
# A live run of a series (waiting or running): jobs_series_live's clause, said word for
# word by the read of the series (reads.recurring_series).
SERIES_LIVE = f"state IN ('pending', 'running') AND {REPEATS}"

# The schema's version: the number of migrations() (a file's user_version counts those
# applied to it). A number, not len(migrations()): a glance checks a file's version
# without making the migrations' text (tests/store/test_connect.py holds the two
# equal).
SCHEMA_VERSION = 16


def migrations() -> tuple[tuple[str, ...], ...]:
    """Each entry moves the schema one version forward; user_version = entries applied.
    Statements are kept apart (not one script) so a migration runs inside our own
    BEGIN IMMEDIATE: executescript() would commit behind our back. Their text is
    shipped and never changes: a file they migrated must match a new one."""
    return (
        (
            """CREATE TABLE jobs (
            id           TEXT PRIMARY KEY,
            name         TEXT NOT NULL,
            state        TEXT NOT NULL,
            attempts     INTEGER NOT NULL DEFAULT 0,
            max_attempts INTEGER NOT NULL,
            not_before   REAL NOT NULL,
            lease_owner  TEXT,
            lease_until  REAL,
            last_error   TEXT,
            result       TEXT,
            script       TEXT,
            options      TEXT NOT NULL DEFAULT '{}',
            child        TEXT,
            -- The job's events, oldest first: a JSON array of [at, kind, detail].
            -- Kept in the row so each transition and its event are one write.
            history      TEXT NOT NULL DEFAULT '[]',
            created_at   REAL NOT NULL,
            updated_at   REAL NOT NULL
        )""",
            # Partial indexes hold only the few rows that are waiting, leased or
            # failed, however many finished ones pile up; each costs a write only
            # when a job enters or leaves that state. (No index on state itself:
            # the planner would prefer it to these, and every write would pay.)
            "CREATE INDEX jobs_due ON jobs(not_before) WHERE state = 'pending'",
            "CREATE INDEX jobs_leased ON jobs(lease_until) WHERE state = 'running'",
            "CREATE INDEX jobs_failed ON jobs(updated_at) WHERE state = 'failed'",
            # Done and cancelled jobs pile up: status() reads their numbers from
            # counts kept by triggers instead of counting a million rows. The
            # other states are few and counted on their partial indexes; the
            # WHEN clauses keep claim's writes free of trigger work.
            "CREATE TABLE counts (state TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID",
            "INSERT INTO counts(state, n) VALUES ('done', 0), ('cancelled', 0)",
            """CREATE TRIGGER count_insert AFTER INSERT ON jobs
            WHEN NEW.state IN ('done', 'cancelled') BEGIN
            UPDATE counts SET n = n + 1 WHERE state = NEW.state;
        END""",
            """CREATE TRIGGER count_delete AFTER DELETE ON jobs
            WHEN OLD.state IN ('done', 'cancelled') BEGIN
            UPDATE counts SET n = n - 1 WHERE state = OLD.state;
        END""",
            """CREATE TRIGGER count_update AFTER UPDATE OF state ON jobs
            WHEN OLD.state IS NOT NEW.state
             AND (OLD.state IN ('done', 'cancelled') OR NEW.state IN ('done', 'cancelled'))
            BEGIN
            UPDATE counts SET n = n - 1 WHERE state = OLD.state;
            UPDATE counts SET n = n + 1 WHERE state = NEW.state;
        END""",
            # A recurring job (options.every) is followed by its next run in the
            # very statement that ends it, done or failed for good: a crash can
            # never end a series.
            """CREATE TRIGGER recur AFTER UPDATE OF state ON jobs
            WHEN OLD.state = 'running' AND NEW.state IN ('done', 'failed')
             AND json_extract(NEW.options, '$.every') > 0
            """ + _EVERY_RUN_TRIGGER_BODY,
        ),
        (
            # Why a job failed, as a word the tray, retry-all and scripts can test
            # (queue.Reason); last_error keeps the sentence for people.
            "ALTER TABLE jobs ADD COLUMN reason TEXT",
            # Every run of a job, across retries: names its log file, so the logs of
            # two runs never mix even when a retry starts attempts at 1 again.
            "ALTER TABLE jobs ADD COLUMN runs INTEGER NOT NULL DEFAULT 0",
            """UPDATE jobs SET runs = (SELECT count(*) FROM json_each(jobs.history)
                                   WHERE json_extract(value, '$[1]') = 'claimed')""",
            # Refusals were only prose before: find them by it.
            "UPDATE jobs SET reason = 'refused' WHERE state = 'failed' "
            "AND last_error LIKE 'refused:%'",
        ),
        (
            # Switches of the whole queue, a row each (`paused`: start no new job). In
            # the file, not in the daemon's memory: a pause outlives a restart, and
            # the command line sets and reads the very same one.
            "CREATE TABLE flags (name TEXT PRIMARY KEY, value NOT NULL) WITHOUT ROWID",
        ),
        (
            # Calendar jobs (options.at, options.cron) are followed by their next run in
            # Python (store/calendar.follow_series_run), in the transaction that ends the
            # run: SQL cannot find the next weekday 09:00 across a clock change. The
            # trigger keeps every= as it was and leaves calendar jobs alone. The new
            # schema number also keeps an older sloth-tray, which would end such a
            # series without a word, from opening this queue.
            "DROP TRIGGER recur",
            _CALENDARLESS_EVERY_RUN_ENDS + """
            """ + _EVERY_RUN_TRIGGER_BODY,
        ),
        (
            # A run of a series is followed once. A failed run has its next run queued
            # already; retried, it must not queue another when it ends, or the series
            # runs twice a period from then on. `followed` says it was: set by the
            # trigger for every=, by store/calendar.follow_series_run for calendars.
            "ALTER TABLE jobs ADD COLUMN followed INTEGER NOT NULL DEFAULT 0",
            # Runs followed before this version: each next run names its run in its
            # first event. Read once, in one pass over the table.
            """CREATE TEMP TABLE was_followed AS
            SELECT substr(json_extract(history, '$[0][2]'), 20) AS id FROM jobs
            WHERE json_extract(history, '$[0][2]') LIKE 'the next run after %'""",
            "UPDATE jobs SET followed = 1 WHERE id IN (SELECT id FROM temp.was_followed)",
            "DROP TABLE temp.was_followed",
            "DROP TRIGGER recur",
            _CALENDARLESS_EVERY_RUN_ENDS + """
             AND NOT NEW.followed
            BEGIN
            """ + _QUEUE_NEXT_EVERY_RUN + """;
            UPDATE jobs SET followed = 1 WHERE id = NEW.id;
            END""",
        ),
        (
            # Every series is followed in Python (store/calendar.follow_series_run, by the
            # rules of series.py), in the transaction that ends the run: the next run of an
            # every= series counts from when this one started, which SQL has no word for,
            # and a run made due by hand leaves the schedule where it was. The new schema
            # number keeps an older sloth-tray, whose trigger doubled late runs, off this file.
            "DROP TRIGGER recur",
        ),
        # A job's steps (store/steps.py; a job's own writes: for_jobs/sloth_step.py): what
        # a retried, reclaimed or woken job skips because it happened already.
        (
            """CREATE TABLE steps (
        job         TEXT NOT NULL,
        name        TEXT NOT NULL,
        occurrence  INTEGER NOT NULL,
        state       TEXT NOT NULL,              -- running, done, failed, cut
        ask         INTEGER NOT NULL DEFAULT 0, -- cut short, it waits for a person's word
        run         INTEGER NOT NULL,           -- the job's run (jobs.runs) that last ran it
        token       TEXT NOT NULL,              -- that run's token
        seen_by     TEXT,                       -- the last run that reached it: counts
                                                -- a run's calls of one name
        started_at  REAL NOT NULL,
        ended_at    REAL,
        exit_code   INTEGER,
        output      BLOB,                       -- stdout kept (shell), the result's JSON (Python)
        output_size INTEGER,                    -- bytes written in all: more than kept if cut
        kind        TEXT NOT NULL DEFAULT 'shell',
        marked_at   REAL,                       -- when a person marked it done
        PRIMARY KEY (job, name, occurrence)
    )""",
            # A job's steps go with it, whoever deletes it (prune): a step never outlives
            # its job.
            """CREATE TRIGGER steps_go_with_their_job AFTER DELETE ON jobs BEGIN
        DELETE FROM steps WHERE job = OLD.id;
    END""",
        ),
        # Lanes (store/lanes.py): each job in one, each lane one job at a time.
        lanes.SCHEMA,
        (
            # A caller's own name for a job (`add --key`, an agent's add_job): adding the
            # same key again finds the job that has it and adds nothing. Unique in the
            # index, not by a look before the insert: two callers racing make one job.
            # Partial: the many jobs without a key cost the index nothing.
            "ALTER TABLE jobs ADD COLUMN key TEXT",
            "CREATE UNIQUE INDEX jobs_key ON jobs(key) WHERE key IS NOT NULL",
            # Who added the job: `dropped` (the jobs folder), `shell` (`sloth-tray add`),
            # or an agent's name as its MCP client gave it. NULL: before this version.
            "ALTER TABLE jobs ADD COLUMN source TEXT",
        ),
        (
            # The series paused on their own (store/schedules.py), by key: held across
            # restarts as every pause is. A row per series, not a flag on its runs: the
            # next run, queued as the last one ends, is held as well. Written here, not
            # in schedules.py, which reads through reads.py (and so this module).
            "CREATE TABLE paused_series (series TEXT PRIMARY KEY) WITHOUT ROWID",
        ),
        # Steps that wait and steps that retry (store/steps.py): a sleep's wake time, an
        # ask's question and answer, a step's try. The job waits pending, its not_before
        # the step's wake time (`wake_at`: a sleep's end, an ask's timeout) or NEVER (an
        # ask with no timeout): holding no lease and no process, due only when it is to run.
        (
            "ALTER TABLE steps ADD COLUMN wake_at REAL",  # a sleep's end, an ask's timeout
            "ALTER TABLE steps ADD COLUMN question TEXT",
            "ALTER TABLE steps ADD COLUMN choices TEXT",  # an ask's choices, a JSON list
            "ALTER TABLE steps ADD COLUMN default_choice TEXT",
            "ALTER TABLE steps ADD COLUMN answer TEXT",
            "ALTER TABLE steps ADD COLUMN answered_at REAL",
            "ALTER TABLE steps ADD COLUMN tries INTEGER",  # the try a step with retries is on
        ),
        (
            # The looks the daemon makes before each sleep, on partial indexes of their
            # own: whether a waiting job changed after now (a clock set back,
            # calendar.any_ahead), and whether a due job waits on an unmet condition
            # (queries.waits_on). On jobs_due they read every waiting job, in each pass:
            # a burst of n drops cost n squared.
            "CREATE INDEX jobs_due_changed ON jobs(updated_at) WHERE state = 'pending'",
            f"CREATE INDEX jobs_due_requiring ON jobs(not_before) WHERE {REQUIRING}",
        ),
        # The live jobs' index on two words where it had three (store/lanes.py, LIVE): the
        # same rows, and a job's every change of state keeps it for less. The new schema
        # number keeps an older sloth-tray, whose statements name the index by its old
        # condition, off this file.
        lanes.LIVE_INDEX,
        (
            # Done and cancelled in all are the sums of lane_counts (a row per lane and
            # state, kept by triggers the same way): the totals table kept apart cost each
            # job's end two statements more and a page more to write and sync.
            "DROP TRIGGER count_insert",
            "DROP TRIGGER count_delete",
            "DROP TRIGGER count_update",
            "DROP TABLE counts",
        ),
        # A glance at a deep queue (status, the tray's snapshot) reads the waiting jobs on
        # indexes alone: how many of each lane's are due now from the live jobs' index,
        # which gains their due time (store/lanes.py), and the live runs of the series from
        # an index of their own, which the many jobs of no series never enter. Both read
        # each waiting job's row before, and judged its options as JSON: a glance took 10
        # to 16 ms with 10,000 waiting, 88 ms with 100,000 (2.6 and 13 ms on these).
        (*lanes.DUE_IN_LIVE_INDEX,
         f"CREATE INDEX jobs_series_live ON jobs(state) WHERE {SERIES_LIVE}"),
        # The runs of each series, by the series, done ones too: the schedules (`sloth-tray
        # schedules`, the tray's menu at every snapshot) read the runs of the series that go
        # on, where they read every job the queue ever kept (17 ms a snapshot with 100,000
        # done jobs, and none of them in a series).
        (f"CREATE INDEX jobs_series_runs ON jobs({SERIES_KEY}) WHERE {REPEATS}",),
    )


MIN_DATABASE_BYTES = 512  # the smallest page SQLite writes: a real queue is never shorter


def beside(path: "Place", side: str) -> str:
    """The file SQLite keeps beside the queue file: `queue.db-wal` for "-wal"."""
    return os.fspath(path) + side


def _absolute(path: "Place") -> str:
    """`path` from the root, its `..` left for the kernel to follow (a link may stand
    before one), as Path.absolute() leaves them. Not paths.absolute: a `~` here is a
    folder's name, as sqlite3.connect reads it, not the user's home."""
    return os.path.join(os.getcwd(), os.fspath(path))


# What a file: URI may hold as it is (RFC 3986's unreserved characters and the slash);
# every other byte is written %XX, as urllib.parse.quote writes it.
_AS_IT_IS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~/")


def file_uri(path: "Place") -> str:
    """The file: URI SQLite opens the file at `path` by, its options still to come (`?`).
    Written here, not with urllib.parse or pathlib: a look that reads the file whole
    would pay for their imports (a third of what it costs over a bare interpreter:
    paths.py)."""
    place = _absolute(path)
    if os.name == "nt":  # C:\\a\\b as /C:/a/b, SQLite's form for a drive
        place = "/" + place.replace("\\", "/")
    quoted = "".join(chr(byte) if byte in _AS_IT_IS else f"%{byte:02X}"
                     for byte in os.fsencode(place))
    return f"file:{quoted}"


def prepare_file(path: "Place") -> None:
    """Create the database file 0600 (SQLite would use the umask), or vet an existing one.

    Never opens an existing file itself: closing any descriptor of a file drops
    every POSIX lock this process holds on it, including those of an SQLite
    connection already open here, and another process could then delete the
    WAL under that connection's feet.
    """
    try:
        # O_EXCL never follows a link, and SQLite makes the -wal and -shm with the
        # database's own mode (0600 here), whatever the umask.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        _vet_existing(path)
        return
    except FileNotFoundError:
        raise DatabaseProblem(
            f"cannot create the queue at {path}: its folder does not exist"
        ) from None
    except PermissionError:
        raise DatabaseProblem(f"cannot create the queue at {path}: permission denied") from None
    os.close(fd)  # the file is new: no connection can hold locks on it yet
    for side in DB_SIDES:  # left by an earlier database of that name
        safety.own_entry(beside(path, side), folder=False)


def _vet_existing(path: "Place") -> None:
    """Refuse a database someone else owns or could write (its jobs run as the user), a
    link to some other file, and one with such a -wal or -shm beside it: SQLite reads
    those as part of the database. Only lstat: nothing is opened (see prepare_file).

    SQLite may take a file too short to hold its header for an empty database
    and write over it; such a file is damaged, and refused."""
    for checked in (path, *(beside(path, side) for side in DB_SIDES)):
        safety.own_entry(checked, folder=False)
    size = os.lstat(path).st_size
    if 0 < size < MIN_DATABASE_BYTES:
        raise DatabaseProblem(
            f"{path} is damaged or is not a sloth-tray queue (it is too short to be an "
            "SQLite file); it was left as it is"
        )


def identify(db: sqlite3.Connection, path: "Place") -> int:
    """The file's schema version (0: a new, empty file), after refusing a file written
    by a newer sloth-tray or by another program. Only reads: a file that is not ours
    must come out exactly as it went in."""
    # One statement, so one read of the file: read apart, another process's first
    # migration could commit between the version (0) and the tables (now some), a new
    # file seen as foreign. (One statement where a transaction took five: a glance
    # prepares each.)
    version, app_id, tables = db.execute(
        "SELECT * FROM pragma_user_version, pragma_application_id, "
        "(SELECT count(*) FROM sqlite_master)").fetchone()
    if version > SCHEMA_VERSION:
        raise DatabaseProblem(
            f"{path} was written by a newer sloth-tray (schema {version}, "
            f"this one knows {SCHEMA_VERSION}); upgrade sloth-tray to use it"
        )
    if (version and app_id != APPLICATION_ID) or (not version and tables):
        raise DatabaseProblem(
            f"{path} is an SQLite file of something else, not a sloth-tray "
            "queue; it was left as it is"
        )
    return version


def connect(path: "Place", busy_timeout: float, *, synchronous: str = "FULL",
            query_only: bool = False, check_same_thread: bool = True) -> sqlite3.Connection:
    """A connection to the queue file at the current schema, in autocommit (the caller
    says BEGIN and COMMIT): the file made 0600 or vetted (prepare_file), identified
    before anything is written (a file that is not ours, or is damaged, comes out
    exactly as it went in), switched to WAL and migrated under BEGIN IMMEDIATE.

    query_only: for readers (`status`), whose callers never checked the file whole:
    it is read whole first (verify) if a migration is to write to it, and the
    connection returned cannot write (PRAGMA query_only)."""
    if safety.read_only(os.path.dirname(_absolute(path))):
        return _connect_read_only(path, busy_timeout, check_same_thread)
    prepare_file(path)
    try:
        db = sqlite3.connect(path, isolation_level=None, timeout=busy_timeout,
                             check_same_thread=check_same_thread)
    except sqlite3.Error as exc:
        raise DatabaseProblem(f"cannot open the queue at {path}: {exc}") from None
    try:
        with translated_errors(path, busy_timeout):
            version = identify(db, path)
            if query_only and version < SCHEMA_VERSION:
                verify(path)  # a migration writes: never on top of a damaged page
            _switch_to_wal(db, path, busy_timeout)
            db.execute(f"PRAGMA synchronous = {synchronous}")
            if version < SCHEMA_VERSION:
                _migrate(db)
            if query_only:
                db.execute("PRAGMA query_only = ON")
    except BaseException:
        db.close()
        raise
    return db


def _connect_read_only(path: "Place", busy_timeout: float,
                       check_same_thread: bool) -> sqlite3.Connection:
    """The queue on a read-only file system: read as it is, never made, switched or
    migrated. With a -wal beside it (left by a process that died), SQLite reads both
    read-only; without one the file is whole, and `immutable` lets SQLite open it
    where it cannot make the -shm. Every write meets "readonly database"."""
    if not os.path.lexists(path):
        raise DatabaseProblem(f"cannot create the queue at {path}: it is on a read-only "
                              "file system")
    _vet_existing(path)
    whole = not os.path.lexists(beside(path, "-wal"))
    uri = file_uri(path) + "?mode=ro" + ("&immutable=1" if whole else "")
    try:
        db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=busy_timeout,
                             check_same_thread=check_same_thread)
    except sqlite3.Error as exc:
        raise DatabaseProblem(f"cannot open the queue at {path}: {exc}") from None
    try:
        with translated_errors(path, busy_timeout):
            if identify(db, path) < SCHEMA_VERSION:
                raise DatabaseProblem(
                    f"{path} was written by an older sloth-tray and is on a read-only file "
                    "system: it cannot be brought up to date there")
            db.execute("PRAGMA query_only = ON")
    except BaseException:
        db.close()
        raise
    return db


def _switch_to_wal(db: sqlite3.Connection, path: "Place", busy_timeout: float) -> None:
    """PRAGMA journal_mode = WAL, waiting as long as any other statement would. SQLite
    answers a switch that meets another connection's lock (a second process opening a
    new file at the same moment) with busy at once, without its busy handler: so the
    wait is done here, up to busy_timeout, as the handler would."""
    deadline = time.monotonic() + busy_timeout
    pause = 0.001
    while True:
        try:
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            break
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
    if mode.lower() != "wal":
        raise DatabaseProblem(f"cannot switch {path} to WAL mode")


def is_busy(exc: sqlite3.OperationalError) -> bool:
    """SQLite's way of saying another connection holds the lock."""
    return "locked" in str(exc) or "busy" in str(exc)


def _migrate(db: sqlite3.Connection) -> None:
    """Bring the file up to SCHEMA_VERSION in one BEGIN IMMEDIATE transaction: all the
    migrations it lacks, or none (on a failure connect closes the connection, and
    closing rolls the transaction back)."""
    db.execute("BEGIN IMMEDIATE")
    # Another process may have migrated while we waited for the lock.
    version = db.execute("PRAGMA user_version").fetchone()[0]
    for statements in migrations()[version:]:
        for statement in statements:
            db.execute(statement)
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    db.execute("COMMIT")


class translated_errors:  # lower case: called as the function it once was
    """Turn SQLite's exceptions into one sentence that names the file. A class, not a
    generator: the queue enters one around every statement it runs."""

    __slots__ = ("path", "busy_timeout")

    def __init__(self, path: "Place", busy_timeout: float) -> None:
        self.path, self.busy_timeout = path, busy_timeout

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: object) -> bool:
        if not isinstance(exc, sqlite3.DatabaseError) or isinstance(exc, sqlite3.IntegrityError):
            return False  # none, ours already, or the caller's to handle (a duplicate id)
        path, busy_timeout = self.path, self.busy_timeout
        if isinstance(exc, sqlite3.OperationalError):
            if is_busy(exc):
                raise DatabaseProblem(
                    f"the queue {path} is locked by another program "
                    f"(waited {busy_timeout:g} s); try again when it lets go"
                ) from None
            raise DatabaseProblem(f"cannot use the queue {path}: {exc}") from None
        raise DatabaseProblem(
            f"{path} is damaged or is not a sloth-tray queue ({exc}); it was left as it is"
        ) from None


# The queue files this process has read whole and found sound, as they were then:
# device, inode and the time of their last change (any write to the file since, by
# anyone, and it is read whole again).
_SOUND: set[tuple[int, int, int]] = set()


def verify(path: "Place") -> None:
    """Read the whole database once, read-only (PRAGMA quick_check), and refuse it
    if any page is damaged. For start-up, before any connection of this process
    is open: a damaged page that start-up happens not to read must not let the
    daemon start and write on top of it.

    Once a process for each state of the file: one that lives on (the MCP server,
    at each tool call) reads it whole again only once something else wrote to it
    since (another process's checkpoint, damage written in place, a file put in its
    place); the checkpoint its own last connection makes as it closes keeps a sound
    file sound (close). Whole, a file takes about 30 ms per 100,000 jobs. Between,
    the file's changes are in its WAL, written by SQLite; a page damaged with no
    write to the file is met as SQLite reads it, one sentence then too."""
    if not os.path.exists(path) or os.stat(path).st_size == 0:
        return
    _vet_existing(path)
    state = _state_of(path)
    if state in _SOUND:
        return
    try:
        problems = _problems_in(path)
    except sqlite3.OperationalError as exc:
        if is_busy(exc):
            raise DatabaseProblem(f"the queue {path} is locked by another program; "
                                  "try again when it lets go") from None
        raise DatabaseProblem(f"{path} is damaged or is not a sloth-tray queue ({exc}); "
                              "it was left as it is") from None
    except sqlite3.DatabaseError as exc:
        raise DatabaseProblem(f"{path} is damaged or is not a sloth-tray queue ({exc}); "
                              "it was left as it is") from None
    if problems != ["ok"]:
        raise DatabaseProblem(f"{path} is damaged ({problems[0]}); it was left as it is, "
                              "and sloth-tray will not start on top of it")
    if state is not None:  # (gone meanwhile: read whole at its next use)
        _SOUND.add(state)


def close(db: sqlite3.Connection, path: "Place") -> None:
    """Close a connection to the queue file at `path`. The last one to close copies its
    WAL into the file (a checkpoint), which changes the file by SQLite's own hand: one
    this process found sound just before is sound after, and not read whole again."""
    before = _state_of(path)
    db.close()
    if before is not None and before in _SOUND:
        after = _state_of(path)
        if after is not None:
            _SOUND.add(after)


def _state_of(path: "Place") -> tuple[int, int, int] | None:
    """What tells one state of the file from another: its device, its inode and the
    time of its last change; None when it is gone."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_ctime_ns)


def _problems_in(path: "Place") -> list[str]:
    """PRAGMA quick_check's lines for the file (["ok"]: none), read without writing."""
    # immutable: no -wal/-shm is created for a file that has none; with a WAL left
    # by a crash, read-only mode reads it too and still writes nothing.
    flags = "mode=ro" if os.path.exists(beside(path, "-wal")) else "mode=ro&immutable=1"
    db = sqlite3.connect(f"{file_uri(path)}?{flags}", uri=True, timeout=5)
    try:
        return [row[0] for row in db.execute("PRAGMA quick_check")]
    finally:
        db.close()
