"""Sleep until a wall-clock moment, or until rung. Nothing ticks in between.

Python's timed waits run on CLOCK_MONOTONIC, which stops while a Linux or
macOS laptop is suspended: a wait computed before the lid closed would end
late after it opens. Job due times are wall-clock times, so on Linux we arm a
timerfd on CLOCK_REALTIME with an absolute deadline; the kernel fires it as
soon as the machine wakes past that moment. Elsewhere (or with an injected
clock) the timed wait is bounded, so a job that fell due during a sleep still
starts soon after resume.
"""

from __future__ import annotations

import ctypes
import math
import os
import select
import sys
import threading
import time
from collections.abc import Callable

SUSPEND_BOUND = 30.0  # longest timed wait where we cannot see suspends
FARTHEST = 366 * 86400.0  # a deadline further off (or not a number) waits this long


def reachable(deadline: float | None, now: float) -> float | None:
    """A deadline every timer can arm: one past FARTHEST, infinite or NaN is
    brought to FARTHEST from now (the loop wakes, looks again, waits again)."""
    if deadline is None:
        return None
    if math.isnan(deadline) or deadline > now + FARTHEST:
        return now + FARTHEST
    return max(deadline, now)  # the past (even -inf) is now


class Alarm:
    """Interface: `wait(deadline)` blocks until `ring()` or the wall-clock deadline."""

    def wait(self, deadline: float | None) -> None:
        raise NotImplementedError

    def ring(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class BoundedAlarm(Alarm):
    """A timed Event wait, never longer than `bound` when something is scheduled.

    With nothing scheduled (deadline None) it waits for a ring only.
    """

    def __init__(self, clock: Callable[[], float] = time.time,
                 bound: float = SUSPEND_BOUND) -> None:
        self.clock = clock
        self.bound = bound
        self._event = threading.Event()

    def wait(self, deadline: float | None) -> None:
        now = self.clock()
        deadline = reachable(deadline, now)
        timeout = None if deadline is None else min(max(deadline - now, 0), self.bound)
        self._event.wait(timeout)
        self._event.clear()

    def ring(self) -> None:
        self._event.set()


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


CLOCK_REALTIME = 0
TFD_TIMER_ABSTIME = 1
TFD_TIMER_CANCEL_ON_SET = 2  # also wake when someone sets the clock
TFD_NONBLOCK = os.O_NONBLOCK
TFD_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


_timerfd_calls: tuple[Callable[..., int], Callable[..., int]] | None = None


def _timerfd() -> tuple[Callable[..., int], Callable[..., int]]:
    """libc's timerfd_create and timerfd_settime, looked up once. A lane's worker makes
    an alarm of its own for each job it starts from idle, on a drop's way to its start:
    opening libc and finding the two each time was half of making one."""
    global _timerfd_calls
    if _timerfd_calls is None:
        libc = ctypes.CDLL(None, use_errno=True)
        settime = libc.timerfd_settime
        settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec),
                            ctypes.c_void_p]
        _timerfd_calls = (libc.timerfd_create, settime)
    return _timerfd_calls


class TimerfdAlarm(Alarm):
    """Linux: poll() on a CLOCK_REALTIME timerfd and a self-pipe, with no timeout."""

    def __init__(self) -> None:
        create, self._settime = _timerfd()
        fd = create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self._timer = fd
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._poll = select.poll()
        self._poll.register(self._timer, select.POLLIN)
        self._poll.register(self._wake_r, select.POLLIN)
        # A ring from another thread may come as the owner closes the alarm: once
        # closed, its fd numbers may already name another file, which a late ring
        # must never write to (the queue's own file among them).
        self._closing = threading.Lock()
        self._closed = False

    def _arm(self, deadline: float | None) -> None:
        spec = _Itimerspec()
        if deadline is not None:
            # An all-zero it_value would disarm: the earliest real moment is 1 ns.
            fraction, whole = math.modf(max(deadline, 1e-9))
            spec.it_value = _Timespec(int(whole), int(fraction * 1e9))
        flags = TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET if deadline is not None else 0
        if self._settime(self._timer, flags, ctypes.byref(spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    def wait(self, deadline: float | None) -> None:
        self._arm(reachable(deadline, time.time()))
        self._poll.poll()  # no timeout: only the timer or a ring ends this
        self._drain(self._wake_r)
        self._drain(self._timer)

    @staticmethod
    def _drain(fd: int) -> None:
        try:
            while os.read(fd, 64):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:  # ECANCELED: the clock was set; the caller re-reads the time
            pass

    def ring(self) -> None:
        with self._closing:
            if self._closed:
                return  # nobody waits on it any more
            try:
                os.write(self._wake_w, b"!")
            except BlockingIOError:
                pass  # the pipe is full of rings already

    def close(self) -> None:
        """Its files closed; by the thread that waits on it, once it waits no more."""
        with self._closing:
            if self._closed:
                return
            self._closed = True
            for fd in (self._timer, self._wake_r, self._wake_w):
                os.close(fd)


def make_alarm(clock: Callable[[], float] = time.time) -> Alarm:
    """The best alarm for this platform and this clock."""
    if clock is time.time and sys.platform.startswith("linux"):
        try:
            return TimerfdAlarm()
        except (OSError, AttributeError):
            pass
    return BoundedAlarm(clock)
