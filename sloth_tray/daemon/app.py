"""The daemon assembled: instance lock, queue, engine, watchers, logging, signals.

The CLI's `run` and `work` and the tray start from here, so each gets the same
crash recovery and the same clean quit.

The system bus is joined only once a require= job is due.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from sloth_tray.config import KEYS, Settings
from sloth_tray.daemon import memory, stopsignals
from sloth_tray.daemon.engine import Engine, default_owner
from sloth_tray.daemon.inbox import Inbox, start_inbox
from sloth_tray.daemon.lock import InstanceLock
from sloth_tray.daemon.logfile import PrintableFormatter, QuietRotatingFileHandler
from sloth_tray.daemon.runner import Runner
from sloth_tray.daemon.stopsignals import StopSignals
from sloth_tray.daemon.watch import (
    GONE,
    IN_ATTRIB,
    IN_ONLYDIR,
    PathWatch,
    make_observer,
    make_path_watch,
    watch_doorbell,
)
from sloth_tray.desktop import freedesktop
from sloth_tray.desktop.probes import fall_back
from sloth_tray.errors import SlothError
from sloth_tray.fileid import FileId
from sloth_tray.jobs.conditions import CONDITIONS, Conditions
from sloth_tray.paths import Home
from sloth_tray.store.queue import Queue
from sloth_tray.store.schema import verify

if TYPE_CHECKING:
    from sloth_tray.desktop.system import PowerSource

log = logging.getLogger("sloth_tray")


APP_LOG_BYTES = 1024 * 1024
APP_LOG_BACKUPS = 3


def setup_logging(home: Home, *, to_stderr: bool) -> None:
    """The app's own log: logs/sloth-tray.log, rotated; and stderr when asked."""
    formatter = PrintableFormatter("%(asctime)s %(levelname)s %(message)s")
    # A full disk is one line on stderr, not a traceback per record.
    handlers: list[logging.Handler] = [QuietRotatingFileHandler(
        home.logs / "sloth-tray.log", max_bytes=APP_LOG_BYTES, backups=APP_LOG_BACKUPS,
        encoding="utf-8", errors="backslashreplace")]  # file names need not be UTF-8
    if to_stderr:
        handlers.append(logging.StreamHandler(sys.stderr))
    for handler in handlers:
        handler.setFormatter(formatter)
        log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    # The format shows none of what logging gathers for every record by default
    # (the calling frame, the thread, the process): gathered for a line per drop
    # in a burst, it was a fifth of the inbox's time. (The logging HOWTO's
    # "Optimization" section names these switches; the app owns its process.)
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


class Daemon:
    """Everything one running sloth-tray holds. Use as a context manager."""

    def __init__(self, home: Home, settings: Settings | None = None, *,
                 watch: bool = True, log_to_stderr: bool | None = None) -> None:
        """`log_to_stderr`: None leaves logging as the caller set it; otherwise the
        app's log file (and stderr when True) is set up as soon as the lock is
        held, so that what crash recovery does is told too."""
        self.home = home.ensure()
        self.log_to_stderr = log_to_stderr
        self.fatal: str | None = None  # why the daemon stopped itself, for the user
        self.home_watch: PathWatch | None = None
        self._db_identity: FileId | None = None
        self._fatal_lock = threading.Lock()
        self.settings = settings or Settings(values={k: v.default for k, v in KEYS.items()})
        self.lock = InstanceLock(home.lock)
        self.watch = watch
        self.queue_settings = {"lease_seconds": self.settings["lease"],
                               "max_attempts": self.settings["max_attempts"]}
        self.queue: Queue | None = None
        self.engine: Engine | None = None
        self.observer = None
        self.first_run = False
        self.inbox: Inbox | None = None
        # What require= jobs wait for; told once a due job first waits on it.
        self.conditions = Conditions(self._tell_conditions if watch else None)
        self.power: PowerSource | None = None
        self._starting = stopsignals.HeldWhileStarting()

    def __enter__(self) -> Daemon:
        memory.one_arena()  # before any thread of ours starts
        self._starting.__enter__()  # before the lock, from which `status` says it runs
        try:
            self.lock.acquire()  # before touching the queue: recovery is the lock holder's job
        except BaseException:
            self._starting.__exit__()
            raise
        if self.log_to_stderr is not None:
            setup_logging(self.home, to_stderr=self.log_to_stderr)
        self.first_run = not self.home.db.exists()
        try:
            verify(self.home.db)  # before any write: never start on top of damage
            self.queue = Queue(self.home.db, **self.queue_settings)
            owner = default_owner()
            runner = Runner(self.queue, self.home, owner, log_cap=self.settings["log_cap"],
                            default_timeout=self.settings["timeout"])
            self.engine = Engine(self.queue, self.home, owner=owner, runner=runner,
                                 conditions=self.conditions)
            self._watch_the_queue_file()
            self.engine.recover()
            # The doorbell even for `work --once`: a step that records a wait rings it,
            # and its run is ended at once.
            self.observer = make_observer()
            watch_doorbell(self.observer, self.home.doorbell, self.engine.wake)
            self.observer.start()
            if self.watch:
                # The engine's own connection: the inbox's pushes and the engine's
                # writes take turns on the queue's lock, which hands over at once;
                # two connections met in SQLite's busy handler, which sleeps 1, 2,
                # 5... ms between tries.
                self.inbox = start_inbox(self.home, self.queue, self.observer,
                                         self.engine.job_added, claims=self.engine)
        except BaseException:
            if self._db_identity is not None:
                self._check_the_queue_file()  # the cause, when the home went during start-up
            self.__exit__()
            if self.fatal:
                raise SlothError(self.fatal) from None
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.power is not None:
            self.power.stop()
        if self.home_watch is not None:
            self.home_watch.close()
        if self.inbox is not None:
            self.inbox.stop()  # first: it may be re-watching its folder through the observer
        if self.observer is not None and self.observer.is_alive():
            self.observer.stop()
            self.observer.join()
        if self.queue is not None:
            self.queue.close()
        self.lock.release()
        self._starting.__exit__()

    def _tell_conditions(self) -> None:
        """On the engine's thread, the first time a due job waits on a condition: the
        system bus on Linux (its thread, asyncio and the D-Bus library are loaded only
        now); elsewhere no service tells of changes (yet), so the machine is read."""
        if freedesktop():
            try:
                from sloth_tray.desktop.system import start_power_source

                self.power = start_power_source(self.conditions)
                return
            except Exception as exc:  # conditions left unknown would hold jobs for good
                log.warning("cannot follow the system bus (%s)", exc)
        log.info("no service here tells what require= waits for: %s",
                 fall_back(self.conditions, CONDITIONS))

    def _watch_the_queue_file(self) -> None:
        """Stop, saying why, when queue.db is deleted, moved or replaced (or the home
        with it) while the app runs. Running on would keep a queue nobody else
        sees, while the CLI writes a new one that nothing runs; and after the
        home is removed, its new lock file would let a second daemon start.

        The kernel tells (no polling): an unlink of the open file changes its
        link count (IN_ATTRIB); a move of it or of the home is a self event.
        """
        self._db_identity = FileId.at(self.home.db)
        self.home_watch = make_path_watch(lambda *_: self._check_the_queue_file())
        if self.home_watch is None:
            return
        try:
            self.home_watch.watch(self.home.root, GONE | IN_ONLYDIR)
            self.home_watch.watch(self.home.db, GONE | IN_ATTRIB)
        except OSError as exc:
            log.warning("cannot watch %s for its removal (%s)", exc.filename, exc.strerror)
        self._check_the_queue_file()  # in case it went before the watch began

    def _check_the_queue_file(self) -> None:
        """On the PathWatch thread: is home/queue.db still the file we opened?"""
        now = FileId.at(self.home.db)
        with self._fatal_lock:
            if now == self._db_identity or self.fatal is not None:
                return
            self.fatal = self._vanished_sentence(now)
        log.error("%s", self.fatal)
        self.engine.stop()  # a running job is ended too, even if nothing can be recorded

    def _vanished_sentence(self, now: FileId | None) -> str:
        if now is None:
            return (f"{self.home.db} was deleted or moved while sloth-tray was running; "
                    "stopping. Start it again to begin a new queue.")
        return (f"{self.home.db} was replaced while sloth-tray was running; "
                "stopping. Start it again to use the new one.")

    @property
    def interrupted(self) -> bool:
        """Whether Ctrl-C (SIGINT) stopped it: its command exits 130 then, as a shell
        reports a program the signal ended (SIGTERM and SIGHUP: 0, a clean stop)."""
        return stopsignals.stopped_by() == signal.SIGINT

    def run_until_stopped(self, *, drain: bool = False,
                          on_signal: Callable[[], None] | None = None) -> None:
        """Run the engine on a thread of its own; a stop signal stops it cleanly."""
        engine = self.engine
        errors: list[BaseException] = []

        def loop() -> None:
            try:
                engine.run(drain=drain)
            except BaseException as exc:  # handed to the main thread below
                errors.append(exc)

        stop = on_signal or engine.stop
        with StopSignals(stop):
            if stopsignals.stopped_by() is not None:  # one came while it was starting
                stop()
            thread = threading.Thread(target=loop, name="engine")
            thread.start()
            thread.join()
        if errors and self.fatal:
            # What the vanished file made fail on the way out: the sentence says it all.
            log.debug("while stopping: %s", errors[0])
        elif errors:
            raise errors[0]
