"""A running job's output: copied into its capped per-run log, its last line kept.

Memory stays flat whatever a job prints: the log stops growing at its cap (the rest
is counted), and only the last line of each stream is kept, for the job's result.

A line of the app's own can end a log (`append_note`: a run a crash cut short).
"""

from __future__ import annotations

import logging
import os
import selectors
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
    """The attempt's log file; past `cap` bytes the rest is counted, not written."""

    def __init__(self, path: Path, cap: int) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path = path
        self.cap = cap
        self.written = 0
        self.dropped = 0
        self.error: str | None = None
        self._lock = threading.Lock()
        self._file: BinaryIO | None = open(path, "ab")  # noqa: SIM115 (closed in close())

    def write(self, chunk: bytes) -> None:
        with self._lock:
            room = self.cap - self.written
            keep = chunk[: max(room, 0)]
            self.dropped += len(chunk) - len(keep)
            if keep and self._file is not None:
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

    def _close_file(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None


def append_note(path: Path, note: str) -> bool:
    """`[sloth-tray: NOTE]` on a line of its own at the end of a run's log that is
    there (a link is not followed, nothing is made); False when it could not be."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | safety.NOFOLLOW)
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


def watch_child(child: subprocess.Popen, pidfd: int, out: LastLine, err: LastLine,
                into: CappedLog, exited: Callable[[], None]) -> None:
    """Linux, one thread a run: copy stdout and stderr into the log (keeping each
    one's last line) and call `exited` when the main process ends, told by its
    pidfd; until both pipes are closed (strays may hold them after the exit)."""
    tails = {child.stdout.fileno(): out, child.stderr.fileno(): err}
    told = False
    try:
        with selectors.DefaultSelector() as selector, child.stdout, child.stderr:
            for fd in (*tails, pidfd):
                selector.register(fd, selectors.EVENT_READ)
            while len(selector.get_map()):
                for key, _ in selector.select():
                    if key.fd == pidfd:
                        selector.unregister(pidfd)
                        child.wait()  # it has exited: this only reaps it
                        told = True
                        exited()
                    elif chunk := os.read(key.fd, CHUNK):
                        tails[key.fd].feed(chunk)
                        into.write(chunk)
                    else:
                        selector.unregister(key.fd)
    except Exception:  # a bug of ours: the output is lost, the exit must not be
        log.exception("watching the output of pid %d failed", child.pid)
    finally:
        os.close(pidfd)
    if not told:
        child.wait()
        exited()
