"""The jobs folder as an inbox: each whole file dropped in becomes exactly one job.

watchdog events are only hints. A file is taken when it is complete: at once
when it was renamed or moved in (a rename is atomic); when written in place,
QUIET seconds after its writer's last close where the platform says when a
writer closes (Linux inotify: `echo ... > x.sh` and then `echo ... >> x.sh` is
one job, not two), and otherwise once its size and mtime have held still for a
settle time. Taking it moves it into the spool and then pushes it (see spool.py
for why that order survives a crash); the drops whole at the same moment (a burst)
are pushed in one commit, on the inbox-settle thread.

A folder right inside the jobs folder is a lane: its drops are taken the same way
and run in that lane. Which folders are lanes, and their watches, is lanefolders.py's
to say; its bookkeeping runs here, on the inbox-settle thread, between the takes.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from watchdog.events import (
    DirCreatedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileClosedNoWriteEvent,
    FileCreatedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileOpenedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers.api import BaseObserver

from sloth_tray.daemon.lanefolders import LaneFolders, ignored
from sloth_tray.daemon.watch import FolderChange, KeptFolder
from sloth_tray.errors import SlothError
from sloth_tray.paths import Home
from sloth_tray.store import lanes, spool
from sloth_tray.store.queue import Job, Queue, new_job_id

log = logging.getLogger("sloth_tray")

SETTLE = 0.5
# A file written in place is taken this long after its writer's last close: a second
# write (`>>`) a moment later belongs to the same drop. Renamed in, it is taken at once.
QUIET = 1.0
# At most this many drops pushed in one commit: a burst is a few commits, and a drop
# that is slow to take holds few others back.
BATCH = 64
STOP_WAIT = 30.0  # seconds stop() waits for a take under way
OPEN_KEPT = 1000  # opens known at most before those whose close went untold are let go
# What the inbox acts on where the platform tells a writer's close (Linux). Not
# "modified": a drop written in a thousand pieces would wake three of watchdog's
# threads and the inbox a thousand times, for a file taken at its close anyway.
# The folder kinds ask inotify for nothing more (the same creates and moves): they
# tell the lane folders made, moved in, renamed and moved out.
CLOSE_TOLD_EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent, FileMovedEvent, FileOpenedEvent, FileClosedEvent, FileClosedNoWriteEvent,
    DirCreatedEvent, DirMovedEvent]


class Claims(Protocol):
    """What claims drops in the very commit that queues them: the engine. Each job it
    claims there starts once that commit is made, and never if it is undone."""

    def claim_with_push(self, lanes: Iterable[str]) -> list[Job]: ...


class Inbox(FileSystemEventHandler):
    def __init__(self, home: Home, queue: Queue, on_push: Callable[[str], None], *,
                 claims: Claims | None = None, settle: float = SETTLE, quiet: float = QUIET,
                 close_events: bool = sys.platform.startswith("linux"),
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.home = home
        # The folder itself, not a symbolic link to it: inotify watches the link
        # otherwise, and drops into the folder it names would never be seen.
        self.folder = home.jobs.resolve()
        self.queue = queue
        self.on_push = on_push
        self.claims = claims  # the engine: claims what is pushed in the push's commit
        self.settle = settle
        self.quiet = quiet
        self.close_events = close_events  # the platform says when a writer closes
        self.monotonic = monotonic
        self._lock = threading.Lock()  # one take at a time
        self._stuck: dict[str, tuple] = {}  # path -> how its last take failed
        # Opened and not yet closed (inotify only): path -> the file's (device, inode)
        # then. Another file at that path later means the one opened went untold (its
        # folder removed with it open): no close is waited for then.
        self._open: dict[str, tuple[int, int]] = {}
        self._held_open: set[str] = set()  # passed over open at its settle: its close counts
        # path -> (size, mtime_ns, deadline): as it was when armed, and its one deadline
        self._settling: dict[str, tuple[int, int, float]] = {}
        self._due: list[tuple[float, str]] = []  # heap of settle deadlines
        self._ready: dict[str, None] = {}  # whole now, to take: in told order, each once
        self._lane_work: deque[Callable[[], None]] = deque()  # lane changes, in told order
        self._wake = threading.Condition()
        self._stopping = False
        self._settler = threading.Thread(target=self._settle_loop, name="inbox-settle",
                                         daemon=True)
        self._kept: KeptFolder | None = None  # the watch that outlives the folder's removal
        self.lane_folders = LaneFolders(self.folder, queue, later=self._lane_task,
                                        scan=self._scan_folder,
                                        unwatched=self._forget_opens_in)

    # -- life -------------------------------------------------------------------

    def start(self, observer: BaseObserver) -> None:
        """Watch the folder, then take what was dropped while the app was off (lane
        folders' drops too), and forget the lanes whose folders went meanwhile."""
        self._settler.start()
        events = CLOSE_TOLD_EVENTS if self.close_events else None
        self.lane_folders.start(observer, self, events=events)
        self._kept = KeptFolder(observer, self.folder, self, self._folder_changed,
                                events=events)
        self._kept.start()
        self.scan()
        self.lane_folders.started()

    def stop(self) -> None:
        if self._kept is not None:
            self._kept.stop()
        self.lane_folders.stop()
        with self._wake:
            self._stopping = True
            self._wake.notify()
        # A take under way ends first: the app closes the queue next. (Its commit waits
        # at most the queue's busy timeout; a thread stuck past this is left to exit.)
        if self._settler.is_alive() and self._settler is not threading.current_thread():
            self._settler.join(STOP_WAIT)

    def scan(self) -> None:
        self._scan_folder(self.folder)

    def _scan_folder(self, folder: Path) -> None:
        try:
            entries = sorted(folder.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return  # gone again: its watch says so
        for entry in entries:
            self._consider(str(entry), settle=True)

    def _folder_changed(self, change: FolderChange) -> None:
        """The folder was removed, renamed or replaced while the app ran (the
        PathWatch thread tells). Files dropped into a new one before its watch
        began raise no event: the scan takes them."""
        self._forget_opens_in(self.folder)
        self.lane_folders.jobs_folder_changed()
        if change is FolderChange.GONE:
            log.warning("the jobs folder %s was removed; waiting for it to come back",
                        self.folder)
            return
        if change is FolderChange.BACK:
            log.info("the jobs folder %s is back; watching it again", self.folder)
        else:
            log.info("the jobs folder %s was replaced by another folder; watching that one",
                     self.folder)
        self.scan()

    def _forget_opens_in(self, folder: Path) -> None:
        """The watch of `folder` has ended: the close of a file in it that is open now is
        told no more, so none is waited for (a new file of that name may even get the
        unlinked one's inode: that check alone would wait on it for good). A scan of the
        folder, or of the one come back, judges its files afresh: a writer that pauses
        past the settle time then, in a folder renamed away and back meanwhile, may see
        its file taken early."""
        inside = str(folder)
        for path in list(self._open):  # a copy: watchdog's thread adds to it meanwhile
            if os.path.dirname(path) == inside:
                self._open.pop(path, None)
                self._held_open.discard(path)

    def _opened(self, path: str) -> None:
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return  # gone already: no close to wait for
        self._open[path] = (info.st_dev, info.st_ino)
        if len(self._open) > OPEN_KEPT:  # opens whose close went untold: let them go
            for known in list(self._open):  # a copy: only this thread adds to it
                self._still_open(known)

    def _still_open(self, path: str, info: os.stat_result | None = None) -> bool:
        """Whether the file at `path` (`info`, its lstat, else read now) is one opened
        and not yet closed. An open of another file there is forgotten."""
        opened = self._open.get(path)
        if opened is None:
            return False
        if info is None:
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                info = None
        if info is not None and opened == (info.st_dev, info.st_ino):
            return True
        self._open.pop(path, None)  # gone, or another file there now: its close untold
        self._held_open.discard(path)
        return False

    # -- watchdog's thread: events are hints ---------------------------------------

    def on_any_event(self, event: FileSystemEvent) -> None:
        try:  # an exception here would kill watchdog's dispatch thread
            self._hint(event)
        except Exception:
            log.exception("the jobs folder watcher stumbled on %s", event)

    def _hint(self, event: FileSystemEvent) -> None:
        if event.is_directory:
            self.lane_folders.folder_event(event)
            return
        if isinstance(event, FileMovedEvent):
            self._open.pop(event.src_path, None)
            if self.lane_folders.lane_at(os.path.dirname(event.dest_path)) is not None:
                self._consider(event.dest_path, settle=False)  # a rename is atomic
            return
        path = event.src_path
        if self.lane_folders.lane_at(os.path.dirname(path)) is None:
            return
        if not self.close_events:
            self._consider(path, settle=True)
        elif isinstance(event, FileOpenedEvent):
            self._opened(path)  # a writer (or a reader) has it open: wait for the close
        elif isinstance(event, FileClosedEvent):
            self._open.pop(path, None)
            self._held_open.discard(path)
            self._consider(path, settle=True, wait=self.quiet)  # another write may follow
        elif isinstance(event, FileClosedNoWriteEvent):
            self._open.pop(path, None)  # then looked at: see _held_still
            if path in self._held_open:  # its settle passed while a reader had it open
                self._held_open.discard(path)
                self._consider(path, settle=True)
        elif isinstance(event, FileCreatedEvent | FileModifiedEvent):
            if not self._still_open(path):  # a hard link or a rename in: no close will come
                self._consider(path, settle=True)

    # -- deciding -----------------------------------------------------------------------

    def _consider(self, path: str, *, settle: bool, wait: float | None = None) -> None:
        name = os.path.basename(path)
        if ignored(name):
            return
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return  # already taken, or gone again
        if stat.S_ISDIR(info.st_mode) or stat.S_ISLNK(info.st_mode) and os.path.isdir(path):
            self.lane_folders.found(path)  # a lane folder (a link to one is refused there)
            return
        if settle and stat.S_ISREG(info.st_mode):
            self._arm(path, info, wait)
        else:
            self._ready_to_take(path)

    def _arm(self, path: str, info: os.stat_result, wait: float | None = None) -> None:
        """Look at the file again in `wait` (the settle time) seconds; an earlier
        deadline of the same file no longer counts."""
        deadline = self.monotonic() + (self.settle if wait is None else wait)
        with self._wake:
            self._settling[path] = (info.st_size, info.st_mtime_ns, deadline)
            heapq.heappush(self._due, (deadline, path))
            self._wake.notify()

    def _ready_to_take(self, path: str) -> None:
        """Have the settle thread take `path` with the others ready by then: a burst of
        drops is pushed in a few commits, not one each (one fsync a commit). It takes
        at once what is there, and while it commits, the next drops gather: nothing
        waits for a batch to fill."""
        with self._wake:
            self._ready[path] = None
            self._wake.notify()

    def _lane_task(self, work: Callable[..., None], *args: str) -> None:
        """Have the settle thread do `work(*args)` next, after the lane changes told
        before it: one thread changes the lanes' watches, in the order told (the
        lane folders' `later`)."""
        with self._wake:
            self._lane_work.append(lambda: work(*args))
            self._wake.notify()

    def _settle_loop(self) -> None:
        """Make each lane change told, and take each settling file once it has held
        still for `settle` seconds.

        Sleeps with no timeout while there is nothing to do: no idle cost.
        """
        while True:
            work = self._next_work()
            if work is None:
                return
            try:  # an exception here would end this thread, and every later take
                work()
            except Exception:
                log.exception("the jobs folder watcher stumbled")

    def _next_work(self) -> Callable[[], None] | None:
        """The next thing to do, once it is time to do it; None when stopping."""
        with self._wake:
            while True:
                while not self._stopping and not self._lane_work and not self._ready and (
                        not self._due or self._due[0][0] > self.monotonic()):
                    self._wake.wait(self._due[0][0] - self.monotonic() if self._due else None)
                if self._stopping:
                    return None
                if self._lane_work:
                    return self._lane_work.popleft()
                if not self._due or self._due[0][0] > self.monotonic():
                    # Every deadline passed has been looked at: what held still since
                    # is in this batch too.
                    paths = list(itertools.islice(self._ready, BATCH))
                    for path in paths:
                        del self._ready[path]
                    return lambda: self._take(paths)
                deadline, path = heapq.heappop(self._due)
                seen = self._settling.get(path)
                if seen is None or seen[2] != deadline:
                    continue  # taken meanwhile, or armed again later: that deadline counts
                del self._settling[path]
                return lambda: self._held_still(path, seen)

    def _held_still(self, path: str, seen: tuple[int, int, float]) -> None:
        """A settle time after `seen`: taken when it has not changed since."""
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return
        if self._still_open(path, info):
            # Its close is told, and considers it again: nothing to poll meanwhile. Noted
            # first and looked at again after, as the close's thread does the other way
            # round: one of the two sees the other.
            self._held_open.add(path)
            if self._still_open(path, info):
                return
            self._held_open.discard(path)  # closed just now
        if (info.st_size, info.st_mtime_ns) == seen[:2]:
            self._ready_to_take(path)
        else:
            self._arm(path, info)  # still changing: give it another settle time

    # -- taking -------------------------------------------------------------------------

    def _take(self, paths: list[str]) -> None:
        """Move each drop into the spool, then push them all in one commit (see
        spool.push_drops for why each is as safe as alone). A drop whose push fails
        fails alone: given back to the jobs folder when the queue said no (locked,
        unwell), to be tried again after a settle time."""
        pushed_lanes: list[str] = []
        with self._lock:
            placed: list[tuple[str, spool.Drop]] = []
            for path in paths:
                lane = self.lane_folders.lane_to_take_from(os.path.dirname(path))
                if lane is None:
                    continue
                spooled = self._place(path, lane)
                if spooled is not None:
                    target, job_id, info = spooled
                    placed.append((path, spool.Drop(target, job_id,
                                                    spool.refusal(info, self.folder), lane)))
            if not placed:
                return
            claim = None
            if self.claims is not None:
                lanes_placed = [drop.lane for _, drop in placed]
                claims = self.claims

                def claim() -> None:  # each started once the commit is made
                    claims.claim_with_push(lanes_placed)
            try:
                outcomes = spool.push_drops(self.queue, [drop for _, drop in placed],
                                            then=claim)
            except SlothError as exc:  # the commit failed: none of them is queued
                outcomes = [exc] * len(placed)
            for (path, drop), outcome in zip(placed, outcomes, strict=True):
                if isinstance(outcome, str):
                    with self._wake:
                        self._settling.pop(path, None)
                    log.info("queued %s as %s%s%s", os.path.basename(path), drop.job_id,
                             "" if drop.lane == lanes.MAIN else f" in lane {drop.lane}",
                             f" ({drop.refused})" if drop.refused else "")
                    if drop.lane not in pushed_lanes:
                        pushed_lanes.append(drop.lane)
                elif isinstance(outcome, SlothError):
                    self._give_back(path, drop, outcome)
                else:  # left in the spool: the next start queues it
                    log.error("could not queue %s", os.path.basename(path),
                              exc_info=outcome)
        for lane in pushed_lanes:  # a lane started above is a worker's: no look
            self.on_push(lane)

    def _give_back(self, path: str, drop: spool.Drop, problem: SlothError) -> None:
        """The queue is locked or unwell: give the file back to the inbox and try
        again after a settle time, rather than strand it."""
        source = Path(path)
        log.warning("could not queue %s yet: %s", source.name, problem)
        try:
            spool.unplace(drop.script, source)
            self._arm(path, os.lstat(source))
        except OSError as exc:  # left in the spool: the next start queues it
            log.warning("could not give %s back to the jobs folder: %s", source.name,
                        exc.strerror)

    def _place(self, path: str, lane: str) -> tuple[Path, str, os.stat_result] | None:
        """Move the drop into the spool: (where it is now, its job id, the lstat of
        what was moved), or None when there is nothing to take now."""
        source = Path(path)
        while True:
            try:
                info = os.lstat(source)
            except FileNotFoundError:
                return None
            if stat.S_ISDIR(info.st_mode):
                return None
            job_id = new_job_id()
            try:
                # Moved only while it is still the entry `info` describes: the
                # refusal is decided from `info`, so that must be what gets queued.
                target = spool.place(self.home, source, job_id, move=True, seen=info,
                                     lane=lane)
            except spool.Replaced:
                continue  # another entry was renamed over it meanwhile: judge that one
            except OSError as exc:
                if isinstance(exc, FileNotFoundError) and not os.path.lexists(source):
                    # Gone since the look (renamed over by a later drop of its name,
                    # which was taken; or removed): nothing left to take or to retry.
                    self._stuck.pop(path, None)
                    return None
                # Once more after a settle time; failing the same way twice, it
                # waits for a change to the file instead of retrying forever.
                failure = (info.st_size, info.st_mtime_ns, info.st_mode, exc.errno)
                if self._stuck.get(path) == failure:
                    log.warning("cannot take %s (%s); it stays in the jobs folder until "
                                "it changes", source.name, exc.strerror)
                    return None
                self._stuck[path] = failure
                log.warning("could not take %s yet (%s); will try again", source.name,
                            exc.strerror)
                self._arm(path, info)
                return None
            self._stuck.pop(path, None)
            return target, job_id, info


def start_inbox(home: Home, queue: Queue, observer: BaseObserver,
                on_push: Callable[[str], None], claims: Claims | None = None) -> Inbox:
    """Reconcile the spool, then watch the jobs folder and its lane folders and scan
    them."""
    spool.reconcile(home, queue)
    inbox = Inbox(home, queue, on_push, claims=claims)
    inbox.start(observer)
    return inbox
