"""The app's own log file: rotated at a size, and saying once, in one line, when it
cannot be written.

logging's stock handlers print a "--- Logging error ---" traceback for every
record they fail to write: on a full disk that is a screenful of stderr a second
from a daemon that is otherwise fine. This one reports the first failure as one
line and stays quiet until a write succeeds again; the next failure after that
is reported again.

The rotation is done here on logging.FileHandler rather than with
logging.handlers, which also loads sockets and pickle: a daemon that waits should
hold no more memory than it uses.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys

from sloth_tray.text import printable


class QuietRotatingFileHandler(logging.FileHandler):
    """A size-rotated log (file, file.1 … file.N) whose write failures are one
    stderr line per outage."""

    def __init__(self, filename: os.PathLike[str] | str, *, max_bytes: int, backups: int,
                 encoding: str = "utf-8", errors: str | None = None) -> None:
        # delay: the file is opened by the first record, so failing to open it is a
        # write failure like any other, not an exception out of the constructor.
        super().__init__(filename, encoding=encoding, delay=True, errors=errors)
        self.max_bytes = max_bytes
        self.backups = backups
        self.failing = False  # an outage has been reported and has not ended
        self._failed_now = False

    def emit(self, record: logging.LogRecord) -> None:
        """FileHandler's emit, with the record formatted once: it is measured for the
        rotation and then written."""
        self._failed_now = False
        try:
            line = self.format(record) + self.terminator
            if self.stream is None:
                self.stream = self._open()
            if self._full_with(line):
                self._rotate()
                self.stream = self._open()
            self.stream.write(line)
            self.flush()
        except RecursionError:  # as logging's own handlers do: not a write failure
            raise
        except Exception:
            self.handleError(record)
        if not self._failed_now:
            self.failing = False  # it wrote: the next failure is news again

    def _full_with(self, line: str) -> bool:
        size = self.stream.tell()
        return size > 0 and size + len(line.encode(self.encoding or "utf-8", "replace")) \
            > self.max_bytes

    def _rotate(self) -> None:
        """file.N-1 -> file.N, …, file -> file.1; the oldest beyond N is dropped."""
        if self.stream is not None:
            self.stream.close()
            self.stream = None  # reopened, empty, by the next record
        for number in range(self.backups - 1, 0, -1):
            older = f"{self.baseFilename}.{number}"
            if os.path.exists(older):
                os.replace(older, f"{self.baseFilename}.{number + 1}")
        os.replace(self.baseFilename, f"{self.baseFilename}.1")

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        self._failed_now = True
        if self.failing:
            return
        self.failing = True
        problem = sys.exc_info()[1]
        reason = getattr(problem, "strerror", None) or problem
        with contextlib.suppress(Exception):  # a stderr that is gone as well: nothing to do
            sys.stderr.write(f"sloth-tray: cannot write the log {self.baseFilename}: {reason}; "
                             "no more about it until it can\n")
            sys.stderr.flush()

    def close(self) -> None:
        # Closing flushes what the full disk refused; that failure was reported already.
        with contextlib.suppress(OSError, ValueError):
            super().close()


class PrintableFormatter(logging.Formatter):
    """Log lines carry job names, results and paths: their control characters are
    escaped, so reading the log in a terminal cannot be driven by a job. A
    traceback after the line keeps its own line breaks."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        return printable(super().formatMessage(record))
