"""Whether an app holds a home: its instance lock (daemon/lock.py) looked at without
taking it and without writing, for `status`, which must not get in the way of an app
starting at that moment, nor load the daemon's code. `list` and `show` ask too.

The holder writes its pid in the lock file as it takes the lock (with its start time,
on Linux) and empties the file as it lets go. So the file answers first: empty, no app
holds it; naming a process that still runs and started at that very time, that process
holds it. Only a file a crash left behind, or one of an older version, is looked up in
/proc/locks: reading that takes the kernel's write lock on its table of locks, which
waits out an RCU grace period (6 to 28 ms measured, a third of a whole `status`).
What is said of a run no app will finish (`after_a_crash`) lives here as well.
"""

import os

LINUX_LOCKS = "/proc/locks"  # every lock the kernel holds, by device and inode


def held(lock: str | os.PathLike[str]) -> bool:
    """True while a process holds the lock file `lock` (an app or `sloth-tray work`
    runs on its home); False when nobody does, or there is no lock file."""
    try:
        info = os.stat(lock)
    except OSError:
        return False  # no app ever ran here (or the home is gone)
    if os.name == "nt":
        return _locked_on_windows(lock)
    text = _lock_text(lock)
    if text is not None and not text.strip():
        return False  # emptied as its holder let go (or taken a moment ago, not yet said)
    pid, start = holder_said(text or b"")
    if pid is not None and start is not None and start_time(pid) == start:
        return True  # the very process that took it: it holds it until it empties the file
    on_linux = _in_linux_locks(info)
    if on_linux is not None:
        return on_linux
    return pid is not None and _alive(pid)  # elsewhere: the pid its holder wrote, alive


def pid_in(lock: str | os.PathLike[str]) -> int | None:
    """The pid the holder wrote in the lock file (emptied as it lets go), or None."""
    return holder_said(_lock_text(lock) or b"")[0]


def holder_text(pid: int) -> str:
    """What the holder writes in the lock file: its pid, and on Linux its start time
    (a later process given the same pid has another)."""
    start = start_time(pid)
    return f"{pid}\n" if start is None else f"{pid}\n{start}\n"


def _lock_text(lock: str | os.PathLike[str]) -> bytes | None:
    """What the lock file says, or None when it cannot be read."""
    try:
        with open(lock, "rb") as file:
            return file.read(64)
    except OSError:
        return None


def holder_said(text: bytes) -> tuple[int | None, str | None]:
    """(pid, start time) as a lock file's `text` says them; (None, None) when it is
    empty. A file of an older version holds the pid alone."""
    words = [word if word.isascii() and word.isdigit() else None  # not "²" nor "١٢"
             for word in text.decode(errors="replace").split()[:2]]
    pid = int(words[0]) if words and words[0] else None
    start = words[1] if len(words) > 1 else None
    return pid, start


def start_time(pid: int) -> str | None:
    """Linux: when the process started, in clock ticks since boot (field 22 of
    /proc/<pid>/stat), which tells apart two processes given the same pid; None
    elsewhere, or when it does not run."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            stat = file.read()
    except OSError:
        return None
    fields = stat.rsplit(b")", 1)[-1].split()  # the name, in parentheses, may hold ')'
    return fields[19].decode("ascii", "replace") if len(fields) > 19 else None


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


def _locked_on_windows(lock: str | os.PathLike[str]) -> bool:
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
