"""The daemon's memory kept small while it waits: one malloc arena for all its threads,
and what a pass of work freed handed back to the system once nothing runs (glibc's
mallopt and malloc_trim; elsewhere both do nothing).

glibc gives each thread that allocates an arena of its own, and an arena keeps what
was freed in it for its thread's next use. The daemon's threads mostly wait, and take
turns on the interpreter's lock when they do not, so one arena costs them nothing;
each arena of its dozen threads held pages for good (measured: 0.6 MiB of an idle
headless app's 23). Memory freed inside the heap (start-up's reads, a run's buffers)
stays resident until malloc_trim gives its pages back: 0.6 MiB more.
"""

from __future__ import annotations

import ctypes
import sys

M_ARENA_MAX = -8  # malloc.h


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.gnu_get_libc_version  # noqa: B018 (glibc's own: musl has mallopt too, a no-op)
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _glibc()


def one_arena() -> None:
    """Every thread started from now on allocates from the process's main arena."""
    if _LIBC is not None:
        _LIBC.mallopt(M_ARENA_MAX, 1)


def give_back() -> None:
    """Hand the free pages of the heap back to the system (a fraction of a
    millisecond; called as the loop goes idle, never on a drop's way to its start)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
