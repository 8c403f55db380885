from __future__ import annotations

import math
import os
import sys
import threading
import time

import pytest

from sloth_tray.daemon.alarm import BoundedAlarm, TimerfdAlarm, make_alarm
from sloth_tray.daemon.lock import AlreadyRunning, InstanceLock, holder

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd is Linux's")


def ring_later(alarm, seconds: float) -> threading.Thread:
    timer = threading.Timer(seconds, alarm.ring)
    timer.start()
    return timer


@linux
def test_timerfd_alarm_wakes_on_a_ring_with_nothing_scheduled():
    alarm = TimerfdAlarm()
    ring_later(alarm, 0.05)
    started = time.monotonic()
    alarm.wait(None)
    assert time.monotonic() - started < 5
    alarm.close()


@linux
def test_a_ring_after_the_alarm_is_closed_writes_to_no_file_that_took_its_number():
    """A lane's worker closes its alarm as it ends, while another thread may still
    ring it (a nudge, the exit of a run): the number of its pipe may name another
    file by then, which the late ring must leave alone."""
    alarm = TimerfdAlarm()
    number = alarm._wake_w  # the pipe's end a ring writes to
    read_end, write_end = os.pipe()  # made while the alarm holds that number: not it
    os.set_blocking(read_end, False)
    alarm.close()
    os.dup2(write_end, number)  # another file now has that number
    try:
        alarm.ring()
        with pytest.raises(BlockingIOError):
            os.read(read_end, 1)  # nothing was written to it
        alarm.close()  # twice: nothing more is closed
        os.fstat(number)
    finally:
        for fd in (read_end, write_end, number):
            os.close(fd)


@linux
def test_timerfd_alarm_wakes_at_the_wall_clock_deadline_not_before():
    alarm = TimerfdAlarm()
    deadline = time.time() + 0.3
    alarm.wait(deadline)
    assert time.time() >= deadline
    alarm.wait(time.time() - 100)  # a deadline in the past returns at once
    alarm.close()


def waited(alarm, deadline, within: float) -> bool:
    """Whether alarm.wait(deadline), on a thread, returned within `within` seconds."""
    thread = threading.Thread(target=alarm.wait, args=(deadline,), daemon=True)
    thread.start()
    thread.join(within)
    return not thread.is_alive()


@linux
def test_rings_before_the_wait_are_not_lost():
    alarm = TimerfdAlarm()
    try:
        alarm.ring()
        assert waited(alarm, None, 5)  # a lost ring: a wait with no end
    finally:
        alarm.close()


def test_make_alarm_falls_back_to_a_bounded_wait_for_an_injected_clock(clock):
    alarm = make_alarm(clock)
    assert isinstance(alarm, BoundedAlarm)
    if sys.platform.startswith("linux"):
        assert isinstance(make_alarm(), TimerfdAlarm)


def test_bounded_alarm_never_waits_past_its_bound_when_something_is_scheduled(clock):
    alarm = BoundedAlarm(clock, bound=0.2)
    started = time.monotonic()
    alarm.wait(clock() + 3600)  # an hour away, but a suspend could hide that hour
    assert 0.15 < time.monotonic() - started < 5


def test_bounded_alarm_waits_for_a_ring_when_nothing_is_scheduled(clock):
    alarm = BoundedAlarm(clock, bound=0.01)
    ring_later(alarm, 0.2)
    started = time.monotonic()
    alarm.wait(None)
    assert time.monotonic() - started >= 0.15  # the bound applies only to a deadline


def test_one_lock_holder_at_a_time_and_the_pid_is_told(tmp_path):
    path = tmp_path / "sloth-tray.lock"
    assert holder(path) is None
    with InstanceLock(path):
        assert holder(path) is not None
        with pytest.raises(AlreadyRunning, match=r"sloth-tray is already running \(pid \d+\)"):
            InstanceLock(path).acquire()
    assert holder(path) is None
    InstanceLock(path).acquire().release()


@pytest.mark.parametrize("deadline", [math.inf, math.nan, 1e300, 2.0**63])
def test_a_deadline_too_far_or_not_a_number_waits_and_a_ring_still_ends_it(deadline):
    alarm = make_alarm()
    try:
        thread = threading.Thread(target=alarm.wait, args=(deadline,), daemon=True)
        thread.start()
        thread.join(0.3)  # the scenario: it must not end by itself
        assert thread.is_alive(), "a far deadline ended the wait at once"
        alarm.ring()
        thread.join(5)
        assert not thread.is_alive(), "the ring did not end the wait"
    finally:
        alarm.close()


@pytest.mark.parametrize("deadline", [-1e300, -math.inf, 0.0, 1.0])
def test_a_deadline_in_the_past_ends_the_wait_at_once(deadline):
    alarm = make_alarm()
    try:
        assert waited(alarm, deadline, 5)
    finally:
        alarm.close()
