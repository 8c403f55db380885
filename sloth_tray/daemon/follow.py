"""What `sloth-tray wait` and `log -f` block on: a change of the queue file, or of a
log folder, told by the kernel (inotify on Linux: a thread blocked in poll() with no
timeout, so a wait costs nothing while nothing happens); elsewhere a look again
after a back-off.

Only writes wake it: the daemon's commits reach `queue.db-wal` (or `queue.db`), a
run's output its log. A reader's own reads write neither (the `-shm` index is left
out, and so is a close: every connection opens the files for writing), so looking
again never wakes it again.

A commit is seen by readers only once SQLite has also updated the WAL's index (in
`-shm`, through memory: no event), after its frames are written and synced, so a
look right after the event may find the queue as it was: after each change it is
looked at a few more times (SETTLE), then no more until the next. The sync is what
takes time: a millisecond or two on an idle SSD, seconds on a busy or slow disk, so
the looks go on, further apart, for half a minute; a wait for the queue's last job
must not miss its end for want of another change.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from sloth_tray.daemon.watch import IN_CREATE, IN_MOVED_TO, IN_ONLYDIR, make_path_watch
from sloth_tray.paths import Home

IN_MODIFY = 0x2
IN_DELETE = 0x200
WRITES = IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_DELETE
# The looks after a change, in seconds each after the last: at 0.02, 0.12, 0.62, 2.6,
# 7.6 and 22.6 s after it.
SETTLE = (0.02, 0.1, 0.5, 2.0, 5.0, 15.0)
FIRST_LOOK, LAST_LOOK = 0.05, 5.0  # seconds between looks where there is no inotify


class Changes:
    """wait() returns once something watched changed since the last wait() (at once
    when it did meanwhile). Watches the home's queue file from the start; also()
    adds a folder. Use as a context manager."""

    def __init__(self, home: Home) -> None:
        self._queue_files = {home.db.name, home.db.name + "-wal", home.db.name + "-journal"}
        self._changed = threading.Event()
        self._folders: dict[int, Path] = {}
        self._home_wd: int | None = None
        self._delay = FIRST_LOOK
        self._settle: list[float] = []  # the looks still to come after the last change
        self._watch = make_path_watch(self._on_event)
        if self._watch is not None:
            try:
                self._home_wd = self._watch.watch(home.root, WRITES | IN_ONLYDIR)
            except OSError:  # no inotify watch to be had (the limit): look again instead
                self._watch.close()
                self._watch = None

    def __enter__(self) -> Changes:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._watch is not None:
            self._watch.close()

    def also(self, folder: Path) -> None:
        """Wake for writes in `folder` too, once it is there (again: no harm)."""
        if self._watch is None or folder in self._folders.values():
            return
        try:
            self._folders[self._watch.watch(folder, WRITES | IN_ONLYDIR)] = folder
        except OSError:
            # Not there yet. Its parent tells when it is made: a run makes it after
            # the commit of its claim and may write its first lines before the queue
            # changes again (a heartbeat, a lease's third away).
            try:
                self._folders[self._watch.watch(folder.parent, WRITES | IN_ONLYDIR)] = \
                    folder.parent
            except OSError:
                pass  # no parent either: the next commit is looked at, as before

    def wait(self) -> None:
        """Block until a change, or the next of the looks after one (Ctrl-C interrupts
        it, on the main thread)."""
        if self._watch is None:
            time.sleep(self._delay)
            self._delay = min(self._delay * 2, LAST_LOOK)
            return
        if self._settle and not self._changed.wait(self._settle.pop(0)):
            return  # a look in case the last change was not to be seen yet
        self._changed.wait()  # no timeout: nothing happens, nothing wakes
        self._changed.clear()
        self._settle = list(SETTLE)

    def saw_change(self) -> None:
        """The caller found something new: look again soon (where looks back off)."""
        self._delay = FIRST_LOOK

    def _on_event(self, wd: int, mask: int, name: str) -> None:
        if wd == self._home_wd and name not in self._queue_files:
            return  # the lock, the -shm index (a reader's own), anything else in home
        self._changed.set()
