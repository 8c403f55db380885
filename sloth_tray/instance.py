"""Whether an app holds a home: its instance lock (daemon/lock.py) looked at without
taking it and without writing, for `status`, which must not get in the way of an app
starting at that moment, nor load the daemon's code.

The lock is looked at in /proc/locks on Linux; `list` and `show` ask too. What is
said of a run no app will finish (`after_a_crash`) lives here as well.
"""

from __future__ import annotations

import os
from pathlib import Path

LINUX_LOCKS = "/proc/locks"  # every lock the kernel holds, by device and inode


def held(lock: Path) -> bool:
    """True while a process holds the lock file `lock` (an app or `sloth-tray work`
    runs on its home); False when nobody does, or there is no lock file."""
    try:
        info = os.stat(lock)
    except OSError:
        return False  # no app ever ran here (or the home is gone)
    if os.name == "nt":
        return _locked_on_windows(lock)
    on_linux = _in_linux_locks(info)
    if on_linux is not None:
        return on_linux
    pid = pid_in(lock)  # elsewhere: the pid its holder wrote, still alive
    return pid is not None and _alive(pid)


def pid_in(lock: Path) -> int | None:
    """The pid the holder wrote in the lock file (emptied as it lets go), or None."""
    try:
        with open(lock, "rb") as file:
            text = file.read(32).decode(errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _in_linux_locks(info: os.stat_result) -> bool | None:
    """Whether /proc/locks holds a granted lock on this file; None where it cannot be
    read (not Linux, no /proc). Lines read `1: FLOCK  ADVISORY  WRITE 4242 fe:00:1234 0
    EOF`; a waiter's line has `->` after the number and is not a holder."""
    try:
        with open(LINUX_LOCKS, encoding="ascii", errors="replace") as file:
            lines = file.read().splitlines()
    except OSError:
        return None
    want = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    return any(len(fields) > 5 and fields[1] != "->" and fields[5] == want
               for fields in (line.split() for line in lines))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether it exists (POSIX)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive, but not ours to signal
    except OSError:
        return False
    return True


def _locked_on_windows(lock: Path) -> bool:
    """Windows locks are mandatory: the holder's locked byte cannot be read by anyone
    else. (Nothing is taken: a read, not a lock.)"""
    try:
        with open(lock, "rb") as file:
            file.read(1)
    except PermissionError:
        return True
    except OSError:
        return False
    return False


# -- what is said of a home no app holds ------------------------------------------------

NO_APP = "no app runs this home"
ONCE_STARTED = "once the app starts"


def after_a_crash(attempts: int, max_attempts: int) -> str:
    """What the next start does with a run the app stopped in the middle of (the claim
    reclaims it: store/ends.reclaim): `runs it again (attempt 2 of 5)`."""
    if attempts < max_attempts:
        return f"runs it again (attempt {attempts + 1} of {max_attempts})"
    return f"fails it: that was its last attempt ({attempts} of {max_attempts})"
