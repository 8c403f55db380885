"""One thread that runs calls in the order they were given, started by the first.

The engine's changes asked for from the menu, the command line or a condition run
here, never on the caller's thread (the UI must not wait on SQLite). Lighter than
concurrent.futures, which a daemon that mostly waits would load for one thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger("sloth_tray")


class SerialThread:
    def __init__(self, name: str) -> None:
        self.name = name
        self._calls: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # told as the last call queued ends
        self._unfinished = 0  # calls queued and not yet ended
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, call: Callable[[], None]) -> bool:
        """Queue `call`; False once shut down (it will never run)."""
        with self._lock:
            if self._closed:
                return False
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._unfinished += 1
            self._calls.put(call)
        return True

    def settle(self) -> bool:
        """Wait until every call queued so far has ended; whether there was one to wait
        for (its changes are then in, to be looked at)."""
        with self._lock:
            waited = self._unfinished > 0
            self._idle.wait_for(lambda: self._unfinished == 0)
        return waited

    def shutdown(self) -> None:
        """Run what was queued, then end the thread; later calls are refused."""
        with self._lock:
            self._closed = True
            thread = self._thread
            if thread is not None:
                self._calls.put(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while (call := self._calls.get()) is not None:
            try:
                call()
            except Exception:  # a bug of ours: said in the log, the worker goes on
                log.exception("%s: a queued call failed", self.name)
            finally:
                with self._lock:
                    self._unfinished -= 1
                    if not self._unfinished:
                        self._idle.notify_all()
