"""A running job's output: copied into its capped per-run log, its last line kept.

Memory stays flat whatever a job prints: the log stops growing at its cap (the rest
is counted), and only the last line of each stream is kept, for the job's result.

A line of the app's own can end a log (`append_note`: a run a crash cut short).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from sloth_tray import safety

log = logging.getLogger("sloth_tray")

RESULT_LIMIT = 200  # characters of a stream's last line kept
CHUNK = 64 * 1024


class LastLine:
    """The last non-empty line of a stream, kept to `limit` characters, in O(limit) memory."""

    def __init__(self, limit: int = RESULT_LIMIT) -> None:
        self.limit = limit
        self._current = bytearray()
        self._last = b""

    def feed(self, chunk: bytes) -> None:
        # Only the end of a chunk matters: find its last non-blank finished line
        # with C-speed searches instead of splitting every line (a job printing
        # millions of short lines would otherwise be read at a few MB/s).
        chunk = chunk.replace(b"\r", b"\n")
        end = chunk.rfind(b"\n")
        if end == -1:
            self._append(chunk)
            return
        finished, rest = chunk[:end].rstrip(), chunk[end + 1:]
        start = finished.rfind(b"\n") + 1
        if finished[start:].strip():
            if start == 0:  # the line began in an earlier chunk
                self._append(finished)
                self._last = bytes(self._current)
            else:
                self._last = finished[start:start + self.limit * 4]
        elif self._current.strip():
            self._last = bytes(self._current)
        self._current.clear()
        self._append(rest)

    def _append(self, piece: bytes) -> None:
        room = self.limit * 4 - len(self._current)  # bytes: up to 4 per character
        if room > 0:
            self._current += piece[:room]

    def text(self) -> str:
        line = self._current if self._current.strip() else self._last
        return bytes(line).decode("utf-8", "replace").strip()[: self.limit]


class CappedLog:
    """The attempt's log file; past `cap` bytes the rest is counted, not written.

    The file (and its job's folder) is made by the first output: a run that prints
    nothing leaves no file. Making a file is among the dearest things a run does on
    some file systems (0.8 ms of kernel time on the ext4 of a virtual machine, as
    much as the rest of a trivial job's bookkeeping), and an empty log says nothing
    that its absence does not."""

    def __init__(self, path: Path, cap: int) -> None:
        self.path = path
        self.cap = cap
        self.written = 0
        self.dropped = 0
        self.error: str | None = None
        self._lock = threading.Lock()
        self._file: BinaryIO | None = None
        self._closed = False

    def write(self, chunk: bytes) -> None:
        with self._lock:
            room = self.cap - self.written
            keep = chunk[: max(room, 0)]
            self.dropped += len(chunk) - len(keep)
            if keep and self._opened():
                try:
                    self._file.write(keep)
                    self._file.flush()
                except OSError as exc:  # e.g. the disk is full: the job goes on
                    self.error = f"log writing stopped: {exc.strerror}"
                    self._close_file()
            self.written += len(keep)

    def close(self) -> None:
        with self._lock:
            if self.dropped and self._file is not None:
                try:
                    self._file.write(
                        f"\n[sloth-tray: output past {self.cap} bytes was dropped: "
                        f"{self.dropped} bytes]\n".encode())
                except OSError:
                    pass
            self._close_file()

    def _opened(self) -> bool:
        """Whether the file is open for the output, opened now if this is the first."""
        if self._file is None and not self._closed and self.error is None:
            try:
                self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                self._file = open(self.path, "ab")  # noqa: SIM115 (closed in close())
            except OSError as exc:  # e.g. the disk is full: the job goes on
                self.error = f"log writing stopped: {exc.strerror}"
        return self._file is not None

    def _close_file(self) -> None:
        self._closed = True
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None


def _opened_log(path: Path, flags: int) -> int:
    """A run's log opened with `flags`, made (its folder too) if the run printed
    nothing; a link is not followed. Raises OSError."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return os.open(path, flags | os.O_CREAT | safety.NOFOLLOW, 0o600)


def make_log(path: Path) -> bool:
    """A run's log, made empty if the run printed nothing. False when it could not be."""
    try:
        os.close(_opened_log(path, os.O_WRONLY))
    except OSError:
        return False
    return True


def append_note(path: Path, note: str) -> bool:
    """`[sloth-tray: NOTE]` on a line of its own at the end of a run's log, made if
    the run printed nothing (a link is not followed); False when it could not be."""
    try:
        fd = _opened_log(path, os.O_RDWR | os.O_APPEND)
    except OSError:
        return False
    try:
        size = os.fstat(fd).st_size
        new_line = b"" if size == 0 or os.pread(fd, 1, size - 1) == b"\n" else b"\n"
        os.write(fd, new_line + f"[sloth-tray: {note}]\n".encode())
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def pump(stream: BinaryIO, tail: LastLine, into: CappedLog) -> None:
    """Copy a child's pipe into the log, keeping its last line; memory stays flat."""
    with stream:
        while chunk := stream.read1(CHUNK):
            tail.feed(chunk)
            into.write(chunk)


class Watched:
    """One run's part of an OutputWatcher: its pipes, its pidfd, where its output goes,
    and whom to tell of its end. `join` waits for both pipes to close."""

    def __init__(self, child: subprocess.Popen, pidfd: int, out: LastLine, err: LastLine,
                 into: CappedLog, exited: Callable[[], None]) -> None:
        self.child = child
        self.pidfd = pidfd
        assert child.stdout is not None and child.stderr is not None
        # fd -> (the pipe's file, its last line); the pidfd has neither
        self.pipes: dict[int, tuple[BinaryIO, LastLine]] = {
            child.stdout.fileno(): (child.stdout, out), child.stderr.fileno(): (child.stderr, err)}
        self.into = into
        self.exited = exited
        self.told = False  # `exited` was called
        self.closed = threading.Event()  # both pipes read to their end, and closed

    def join(self, timeout: float | None = None) -> None:
        """Until both pipes are closed, or `timeout` seconds (a stray that left with
        them open: the watcher goes on reading them, and the next run is not held)."""
        self.closed.wait(timeout)


class OutputWatcher:
    """Linux: one thread and one epoll for every run of a lane's worker, not one each:
    copies each run's stdout and stderr into its log (keeping each one's last line),
    and tells of its main process's end by its pidfd; a run is over once both pipes
    are closed (strays may hold them after the exit).

    A run is added from the runner's thread (`watch`) straight into the epoll, which
    the kernel allows while the thread waits in it: nothing is handed over. The
    thread waits with no timeout; once closed, it ends when its last run's pipes do.
    """

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._wake = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)  # close() rings it
        self._epoll.register(self._wake, select.EPOLLIN)
        self._lock = threading.Lock()  # guards _runs, _closing, _done and the use of _wake
        self._runs: dict[int, Watched] = {}  # fd (a pipe's or a pidfd) -> its run
        self._closing = False
        self._done = False  # the thread has ended, and closed _wake
        self._thread = threading.Thread(target=self._loop, name="output", daemon=True)
        self._thread.start()

    def watch(self, child: subprocess.Popen, pidfd: int, out: LastLine, err: LastLine,
              into: CappedLog, exited: Callable[[], None]) -> Watched:
        """Watch a run just spawned; `exited` is called once its main process has
        ended and been reaped. Takes the pidfd and the pipes (closed here once done)."""
        watched = Watched(child, pidfd, out, err, into, exited)
        fds = (*watched.pipes, pidfd)
        with self._lock:
            for fd in fds:
                self._runs[fd] = watched
        for fd in fds:
            self._epoll.register(fd, select.EPOLLIN)
        return watched

    def alive(self) -> bool:
        """Its thread still runs (a bug of ours could end it: a run then gets a new one)."""
        return self._thread.is_alive()

    def close(self) -> None:
        """No run comes after this: the thread ends once the pipes it still reads are
        closed (at once, unless a stray holds some open)."""
        with self._lock:
            self._closing = True
            # Under the lock the thread closes it with: the thread may end between the
            # flag and the ring (its last pipes closing just then), and a ring after
            # that would reach whatever file has taken the number since.
            if not self._done:
                os.eventfd_write(self._wake, 1)

    def _loop(self) -> None:
        try:
            while True:
                with self._lock:
                    if self._closing and not self._runs:
                        return
                for fd, _ in self._epoll.poll():
                    if fd == self._wake:
                        with contextlib.suppress(BlockingIOError):
                            os.eventfd_read(fd)
                        continue
                    with self._lock:
                        watched = self._runs.get(fd)
                    if watched is not None:
                        self._ready(watched, fd)
        finally:
            self._epoll.close()
            with self._lock:
                self._done = True
                os.close(self._wake)

    def _ready(self, watched: Watched, fd: int) -> None:
        try:
            if fd == watched.pidfd:
                self._forget(fd)
                os.close(fd)
                self._ended(watched)
            elif chunk := os.read(fd, CHUNK):
                file, tail = watched.pipes[fd]
                tail.feed(chunk)
                watched.into.write(chunk)
            else:
                self._close_pipe(watched, fd)
        except Exception:  # a bug of ours: this run's output is lost, its exit must not be
            log.exception("watching the output of pid %d failed", watched.child.pid)
            self._give_up(watched)

    def _ended(self, watched: Watched) -> None:
        """The main process has ended (its pidfd said): reaped, and its end told."""
        watched.child.wait()  # it has exited: this only reaps it
        watched.told = True
        watched.exited()

    def _close_pipe(self, watched: Watched, fd: int) -> None:
        self._forget(fd)
        file, _ = watched.pipes.pop(fd)
        file.close()
        if not watched.pipes:
            watched.closed.set()

    def _forget(self, fd: int) -> None:
        """Out of the epoll and the map before the fd is closed: its number, reused by
        the next run's pipes, must not name this run."""
        self._epoll.unregister(fd)
        with self._lock:
            del self._runs[fd]

    def _give_up(self, watched: Watched) -> None:
        for fd in [*watched.pipes, watched.pidfd]:
            with self._lock:
                known = self._runs.get(fd) is watched
            if known:
                with contextlib.suppress(OSError, KeyError):
                    self._forget(fd)
        for file, _ in watched.pipes.values():
            with contextlib.suppress(OSError):
                file.close()
        watched.pipes.clear()
        if not watched.told:  # its end is still told, without holding the other runs
            with contextlib.suppress(OSError):
                os.close(watched.pidfd)
            threading.Thread(target=self._ended, args=(watched,), daemon=True).start()
        watched.closed.set()
