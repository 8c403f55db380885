"""The app's own log file, which says once, in one line, when it cannot be written.

logging's stock handlers print a "--- Logging error ---" traceback for every
record they fail to write: on a full disk that is a screenful of stderr a second
from a daemon that is otherwise fine. This one reports the first failure as one
line and stays quiet until a write succeeds again; the next failure after that
is reported again.
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import sys

from sloth_tray.display import printable


class QuietRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A RotatingFileHandler whose write failures are one stderr line per outage."""

    def __init__(self, *args, **kwargs) -> None:
        # delay: the file is opened by the first record, so failing to open it is a
        # write failure like any other, not an exception out of the constructor.
        super().__init__(*args, delay=True, **kwargs)
        self.failing = False  # an outage has been reported and has not ended
        self._failed_now = False

    def emit(self, record: logging.LogRecord) -> None:
        self._failed_now = False
        super().emit(record)  # calls handleError instead of raising
        if not self._failed_now:
            self.failing = False  # it wrote: the next failure is news again

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
