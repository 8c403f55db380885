"""Stop signals that reach us whichever thread the kernel hands them to.

A signal sent to a process goes to any of its threads that does not block it.
Python runs its handlers on the main thread only, the next time that thread
runs Python code; a main thread blocked in a C call (joining a thread, waiting
on an X connection) never does, and the signal is as good as lost. So the C
handler's wake-up byte (`signal.set_wakeup_fd`) is read by a thread of ours,
blocked on a pipe, which calls `stop` straight away. Nothing polls.

GLib and asyncio loops do the same on their own; use this where neither runs.

Which signal stopped the app is kept (`note`, `stopped_by`): after Ctrl-C it exits 130.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable

# Each ends the app cleanly (a running job stopped, its lease given back).
# SIGHUP: the terminal that started it was closed.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP")
                     if hasattr(signal, name))


# The first stop signal any StopSignals acted on in this process: Ctrl-C (SIGINT) ends
# the command with 130, as a shell reports a program the signal stopped; SIGTERM with 0.
received: list[int] = []


def note(signum: int) -> None:
    """Remember a stop signal that ended the app (a loop that catches them itself
    says so here), for the exit status (`stopped_by`)."""
    if not received:
        received.append(signum)


def stopped_by() -> int | None:
    """The stop signal that ended the app, or None."""
    return received[0] if received else None


def forget() -> None:
    """Before a run: no signal has ended it yet."""
    received.clear()


class HeldWhileStarting:
    """From before the app takes its lock until its loop catches stop signals itself:
    a stop signal is noted, and the loop, once it runs, stops at once (it asks
    `stopped_by`). `status` says the app runs from the moment it holds its lock;
    left at their defaults, SIGTERM and SIGHUP would end it there mid-start (a
    queue half recovered, a lock file left to be told stale) and SIGINT would
    raise wherever the start happened to be.

    Entering it forgets any earlier run's signal. Off the main thread (an app
    started by a test) Python cannot set handlers; it holds nothing then."""

    def __init__(self, signals: tuple[int, ...] = STOP_SIGNALS) -> None:
        self.signals = signals
        self._previous: dict[int, object] = {}

    def __enter__(self) -> HeldWhileStarting:
        forget()
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, _note_handler) for sig in self.signals}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}


class StopSignals:
    """While entered (on the main thread), a stop signal calls `stop` on a thread
    of its own. Restores the previous handlers on exit. The first signal is
    noted (`stopped_by`)."""

    def __init__(self, stop: Callable[[], None],
                 signals: tuple[int, ...] = STOP_SIGNALS) -> None:
        self.stop = stop
        self.signals = signals
        self._previous: dict[int, object] = {}
        self._previous_fd = -1
        self._thread: threading.Thread | None = None

    def __enter__(self) -> StopSignals:
        if os.name != "posix":
            # Windows takes only a socket as the wake-up fd; its console signals
            # reach Python's handler on the main thread anyway.
            self._previous = {sig: signal.signal(sig, lambda signum, _: self._act(signum))
                              for sig in self.signals}
            return self
        read_end, self._write_end = os.pipe()
        os.set_blocking(self._write_end, False)  # the C handler must never block
        # The wake-up fd before the handlers: a signal in between is not lost.
        try:
            self._previous_fd = signal.set_wakeup_fd(self._write_end,
                                                     warn_on_full_buffer=False)
        except ValueError:  # not on the main thread
            os.close(read_end)
            os.close(self._write_end)
            raise
        self._thread = threading.Thread(target=self._listen, args=(read_end,),
                                        name="stop-signals", daemon=True)
        self._thread.start()
        # A Python handler must be set for the C handler to write the byte; the
        # work is done by the listener, so the handler itself does nothing.
        self._previous = {sig: signal.signal(sig, _noted) for sig in self.signals}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        if self._thread is None:
            return
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._write_end)  # the listener reads end-of-file and returns
        self._thread.join()

    def _listen(self, read_end: int) -> None:
        try:
            while bytes_read := os.read(read_end, 64):
                for byte in bytes_read:
                    if byte in self.signals:
                        self._act(byte)
                        break
        finally:
            os.close(read_end)

    def _act(self, signum: int) -> None:
        note(signum)
        self.stop()


def _noted(signum: int, frame: object) -> None:
    """The listener thread acts on it (see StopSignals)."""


def _note_handler(signum: int, frame: object) -> None:
    """While starting: kept for the loop to act on (see HeldWhileStarting)."""
    note(signum)
