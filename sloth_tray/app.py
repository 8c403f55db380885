"""The daemon assembled: instance lock, queue, engine, watchers, logging, signals.

The CLI's `run` and `work` and the tray start from here, so each gets the same
crash recovery and the same clean quit.
"""

from __future__ import annotations

import logging
import logging.handlers
import signal
import sys
import threading
from collections.abc import Callable

from sloth_tray.config import KEYS, Settings
from sloth_tray.dbfile import verify
from sloth_tray.engine import Engine, default_owner
from sloth_tray.inbox import Inbox, start_inbox
from sloth_tray.lock import InstanceLock
from sloth_tray.paths import Home
from sloth_tray.queue import Queue
from sloth_tray.runner import Runner
from sloth_tray.watch import make_observer, watch_doorbell

log = logging.getLogger("sloth_tray")

APP_LOG_BYTES = 1024 * 1024
APP_LOG_BACKUPS = 3


def setup_logging(home: Home, *, to_stderr: bool) -> None:
    """The app's own log: logs/sloth-tray.log, rotated; and stderr when asked."""
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(message)s")
    handlers: list[logging.Handler] = [logging.handlers.RotatingFileHandler(
        home.logs / "sloth-tray.log", maxBytes=APP_LOG_BYTES, backupCount=APP_LOG_BACKUPS,
        encoding="utf-8", errors="backslashreplace")]  # file names need not be UTF-8
    if to_stderr:
        handlers.append(logging.StreamHandler(sys.stderr))
    for handler in handlers:
        handler.setFormatter(formatter)
        log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


class Daemon:
    """Everything one running sloth-tray holds. Use as a context manager."""

    def __init__(self, home: Home, settings: Settings | None = None, *,
                 watch: bool = True) -> None:
        self.home = home.ensure()
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
        self.inbox_queue: Queue | None = None

    def __enter__(self) -> Daemon:
        self.lock.acquire()  # before touching the queue: recovery is the lock holder's job
        self.first_run = not self.home.db.exists()
        try:
            verify(self.home.db)  # before any write: never start on top of damage
            self.queue = Queue(self.home.db, **self.queue_settings)
            owner = default_owner()
            runner = Runner(self.queue, self.home, owner, log_cap=self.settings["log_cap"],
                            default_timeout=self.settings["timeout"])
            self.engine = Engine(self.queue, self.home, owner=owner, runner=runner)
            self.engine.recover()
            if self.watch:
                self.observer = make_observer()
                watch_doorbell(self.observer, self.home.doorbell, self.engine.wake)
                self.observer.start()
                # The inbox's own connection: it writes from watchdog's thread.
                self.inbox_queue = Queue(self.home.db, **self.queue_settings)
                self.inbox = start_inbox(self.home, self.inbox_queue, self.observer,
                                         self.engine.wake)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.observer is not None:
            self.observer.stop()
            self.observer.join()
        if self.inbox is not None:
            self.inbox.stop()
        if self.inbox_queue is not None:
            self.inbox_queue.close()
        if self.queue is not None:
            self.queue.close()
        self.lock.release()

    def run_until_stopped(self, *, drain: bool = False,
                          on_signal: Callable[[], None] | None = None) -> None:
        """Run the engine on a thread of its own; SIGTERM or SIGINT stops it cleanly."""
        engine = self.engine
        stop = on_signal or engine.stop
        previous = {sig: signal.signal(sig, lambda *_: stop())
                    for sig in (signal.SIGTERM, signal.SIGINT)}
        errors: list[BaseException] = []

        def loop() -> None:
            try:
                engine.run(drain=drain)
            except BaseException as exc:  # handed to the main thread below
                errors.append(exc)

        thread = threading.Thread(target=loop, name="engine")
        thread.start()
        try:
            thread.join()  # signal handlers still run while the main thread waits here
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if errors:
            raise errors[0]
