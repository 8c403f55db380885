"""A step's own tries: a failing step tried again in place, in the same run, up to
`retries` more times with a backoff between (`backoff_delay`), each try within the
step's timeout (`_call_within`, a timer signal for a Python step), and the ranges of
all three (`tries_problem`). Part of sloth_step (for_jobs/sloth_step.py): the
standard library only, Python 3.6 and later.
"""

import signal
import threading
import time

from .step_record import StepError, StepRefused, StepUnsure, _say

# A step's own tries: a failing step is tried again in place, in the same run, up to
# `retries` more times, waiting 1, 2, 4... seconds before each, at most `backoff`. The
# ranges are limits.py's RETRIES, BACKOFF and TIMEOUT (which this file cannot import:
# tests/test_limits.py holds them to one statement).
RETRIES_MAX = 100
BACKOFF_MAX = 86400.0  # a day
BACKOFF_DEFAULT = 60.0
TIMEOUT_MAX = 3650 * 86400.0
GRACE = 5.0  # seconds from SIGTERM to SIGKILL for a step past its timeout, as for a job
TIMED_OUT = 124  # a step's status past its timeout, as timeout(1) gives it


def _tried(name, fn, args, kwargs, retries, backoff, timeout, record_try):
    """fn's result from its first try that raises no exception, of 1 + `retries`; the
    last try's exception otherwise. `record_try(n)` records try n (2 on) before it
    starts: False (the run is over) ends the tries with StepRefused."""
    total = 1 + retries
    for tries in range(1, total + 1):
        if tries > 1 and record_try is not None and not record_try(tries):
            raise StepRefused(f'step "{name}" was not tried again: this run is over, so it '
                              "records nothing")
        try:
            return _call_within(fn, args, kwargs, timeout, name)
        except Exception as exc:
            if tries == total or isinstance(exc, (StepRefused, StepUnsure)):
                raise
            delay = backoff_delay(tries, backoff)
            how = (f"ran past its timeout of {timeout:g} s" if isinstance(exc, StepTimedOut)
                   else f"raised {type(exc).__name__}: {exc}")
            _say(try_failed_line(name, tries, total, how, delay))
            time.sleep(delay)
    raise AssertionError("not reached")  # the last try returned or raised


def backoff_delay(retry: int, cap: float) -> float:
    """Seconds to wait before retry number `retry` (1: the second try): 1, 2, 4, 8...,
    at most `cap`."""
    return min(2.0 ** min(retry - 1, 64), cap)


def tries_problem(retries: object, backoff: object, timeout: object) -> "str | None":
    """Why these are not a step's retries (0 to RETRIES_MAX), backoff cap (0 to a day)
    and timeout (more than 0, at most ten years, or None); None when they are. The
    words are limits.py's."""
    if isinstance(retries, bool) or not isinstance(retries, int) \
            or not 0 <= retries <= RETRIES_MAX:
        return (f"bad value {retries!r} for retries: use a whole number between 0 and "
                f"{RETRIES_MAX}")
    if isinstance(backoff, bool) or not isinstance(backoff, (int, float)) \
            or not 0 <= backoff <= BACKOFF_MAX:
        return f"bad value {backoff!r} for backoff: use a number of seconds between 0 and 1d"
    if timeout is not None and (isinstance(timeout, bool)
                                or not isinstance(timeout, (int, float))
                                or not 0 < timeout <= TIMEOUT_MAX):
        return (f"bad value {timeout!r} for timeout: use a number of seconds more than 0 "
                "and at most 3650d")
    return None


def try_failed_line(name: str, tries: int, total: int, how: str, delay: float) -> str:
    """The run's log line for a try that failed and is tried again."""
    return (f'step "{name}" {how} (try {tries} of {total}); trying again in '
            f"{delay:g} s")


class StepTimedOut(StepError):
    """A Python step's function ran past the step's timeout (raised inside it)."""


def _call_within(fn, args, kwargs, timeout: "float | None", name: str):
    """fn(*args, **kwargs), with StepTimedOut raised inside it once `timeout` seconds
    have passed (a timer signal: the main thread only, where Python runs handlers)."""
    if timeout is None:
        return fn(*args, **kwargs)
    if not hasattr(signal, "setitimer") or \
            threading.current_thread() is not threading.main_thread():
        raise ValueError(f'step "{name}" has a timeout, which needs the main thread of a '
                         "POSIX system (a timer signal ends the call)")

    def past(_signum, _frame):
        raise StepTimedOut(f'step "{name}" ran past its timeout of {timeout:g} s')

    previous = signal.signal(signal.SIGALRM, past)
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            return fn(*args, **kwargs)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, previous)
