"""One daemon per home: an OS file lock, released by the kernel when the process dies."""

from __future__ import annotations

import os
from pathlib import Path

from sloth_tray import instance, safety
from sloth_tray.errors import SlothError

if os.name == "nt":
    import msvcrt

    def _try_lock(fd: int) -> bool:
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

    def _unlock(fd: int) -> None:
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
else:
    import fcntl

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)


class AlreadyRunning(SlothError):
    def __init__(self, pid: int | None) -> None:
        super().__init__(f"sloth-tray is already running (pid {pid})" if pid
                         else "sloth-tray is already running")
        self.pid = pid


class InstanceLock:
    """Held for the life of the daemon (or of `sloth-tray work`). The lock itself is
    what counts; the pid (and start time) written inside, emptied before the lock is
    let go, are for messages and for a look that need not read every lock the kernel
    holds (instance.held)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> InstanceLock:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | safety.NOFOLLOW, 0o600)
        except OSError as exc:
            safety.refuse_if_link(self.path)  # a planted link must not be written through
            raise SlothError(f"cannot open the lock file {self.path}: {exc.strerror}") from None
        try:
            safety.check_opened(self.path, os.fstat(fd))
        except SlothError:
            os.close(fd)
            raise
        if not _try_lock(fd):
            os.close(fd)
            raise AlreadyRunning(holder(self.path))
        os.ftruncate(fd, 0)
        os.pwrite(fd, instance.holder_text(os.getpid()).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            _unlock(self._fd)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> InstanceLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def holder(path: Path) -> int | None:
    """The pid of the process holding the lock, or None when nobody holds it."""
    try:
        fd = os.open(path, os.O_RDWR | safety.NOFOLLOW)
    except OSError:
        return None
    try:
        if _try_lock(fd):
            _unlock(fd)
            return None
        return instance.holder_said(os.pread(fd, 64, 0))[0]
    finally:
        os.close(fd)
