"""The jobs folder as an inbox: each whole file dropped in becomes exactly one job.

watchdog events are only hints. A file is taken when it is complete: at once
when it was renamed or moved in (a rename is atomic); when written in place,
QUIET seconds after its writer's last close where the platform says when a
writer closes (Linux inotify: `echo ... > x.sh` and then `echo ... >> x.sh` is
one job, not two), and otherwise once its size and mtime have held still for a
settle time. Taking it moves it into the spool and then pushes it (see spool.py
for why that order survives a crash).

A folder right inside the jobs folder is a lane (store/lanes.py): what is dropped
into it is taken the same way and runs in that lane. Each lane folder is watched
on its own, once vetted as the jobs folder is (the user's, writable by nobody
else, not a link); it is noted, forgotten or renamed in the queue as it is made,
removed or renamed. The lanes' bookkeeping runs on the inbox-settle thread, one
change at a time, in the order the changes were told.
"""

from __future__ import annotations

import heapq
import logging
import os
import stat
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
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

from sloth_tray import safety
from sloth_tray.daemon.watch import FolderChange, KeptFolder, Subfolders
from sloth_tray.errors import SlothError
from sloth_tray.fileid import FileId
from sloth_tray.paths import Home
from sloth_tray.store import lanes, spool
from sloth_tray.store.queue import Queue, new_job_id
from sloth_tray.text import printable

log = logging.getLogger("sloth_tray")

SETTLE = 0.5
# A file written in place is taken this long after its writer's last close: a second
# write (`>>`) a moment later belongs to the same drop. Renamed in, it is taken at once.
QUIET = 1.0
# What the inbox acts on where the platform tells a writer's close (Linux). Not
# "modified": a drop written in a thousand pieces would wake three of watchdog's
# threads and the inbox a thousand times, for a file taken at its close anyway.
# The folder kinds ask inotify for nothing more (the same creates and moves): they
# tell the lane folders made, moved in, renamed and moved out.
CLOSE_TOLD_EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent, FileMovedEvent, FileOpenedEvent, FileClosedEvent, FileClosedNoWriteEvent,
    DirCreatedEvent, DirMovedEvent]
IGNORED_ENDINGS = ("~", ".swp", ".tmp", ".part", ".partial", ".crdownload")
MAX_TRIES = 10  # looks at a lane folder that keeps changing while its watch is set up
NOT_USED = "sloth-tray will not take jobs from it"


def ignored(name: str) -> bool:
    """Dotfiles and the temporary files of editors, downloads and copies (folders too)."""
    return name.startswith(".") or name.lower().endswith(IGNORED_ENDINGS)


def lane_name_problem(name: str) -> str | None:
    """Why a folder of this name in the jobs folder is no lane, in words that follow
    "is not used as a lane: "; None when it is one."""
    if name == lanes.MAIN:
        return "lane main is the jobs folder itself; drop into it directly"
    return lanes.problem(name)


def lane_folder_problem(info: os.stat_result) -> str | None:
    """What keeps a lane folder (its lstat) from being used, as the jobs folder is
    vetted: a link, another user's, writable by others, or shut to its owner (the
    app must list it and move each drop out of it). None when it may be used."""
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    why = safety.problem(info)
    if why:
        return why
    mode = stat.S_IMODE(info.st_mode)
    if safety.POSIX and mode & stat.S_IRWXU != stat.S_IRWXU:
        return f"cannot be read and written by you (mode {mode:04o})"
    return None


def still(path: Path, info: os.stat_result) -> bool:
    """Whether the folder at `path` is still the one `info` (its lstat) describes."""
    try:
        now = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(now.st_mode) and FileId.of(now) == FileId.of(info)


def jobs_going_along(moved: int) -> str:
    """What the log says of the jobs that follow a renamed lane."""
    if moved == 0:
        return ""
    return "; its 1 job goes with it" if moved == 1 else f"; its {moved} jobs go with it"


class Inbox(FileSystemEventHandler):
    def __init__(self, home: Home, queue: Queue, on_push: Callable[[], None], *,
                 settle: float = SETTLE, quiet: float = QUIET,
                 close_events: bool = sys.platform.startswith("linux"),
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.home = home
        # The folder itself, not a symbolic link to it: inotify watches the link
        # otherwise, and drops into the folder it names would never be seen.
        self.folder = home.jobs.resolve()
        self.queue = queue
        self.on_push = on_push
        self.settle = settle
        self.quiet = quiet
        self.close_events = close_events  # the platform says when a writer closes
        self.monotonic = monotonic
        self._lock = threading.Lock()  # one take at a time
        self._stuck: dict[str, tuple] = {}  # path -> how its last take failed
        self._open: set[str] = set()  # opened and not yet closed (inotify only)
        # path -> (size, mtime_ns, deadline): as it was when armed, and its one deadline
        self._settling: dict[str, tuple[int, int, float]] = {}
        self._due: list[tuple[float, str]] = []  # heap of settle deadlines
        self._lane_work: deque[Callable[[], None]] = deque()  # lane changes, in told order
        self._wake = threading.Condition()
        self._stopping = False
        self._settler = threading.Thread(target=self._settle_loop, name="inbox-settle",
                                         daemon=True)
        self._kept: KeptFolder | None = None  # the watch that outlives the folder's removal
        self._lanes: Subfolders | None = None  # the lane folders' watches
        self._told: dict[str, tuple] = {}  # folder -> what the log last said of it

    # -- life -------------------------------------------------------------------

    def start(self, observer: BaseObserver) -> None:
        """Watch the folder, then take what was dropped while the app was off (lane
        folders' drops too), and forget the lanes whose folders went meanwhile."""
        self._settler.start()
        events = CLOSE_TOLD_EVENTS if self.close_events else None
        self._lanes = Subfolders(observer, self, self._lane_folder_changed, events=events)
        self._kept = KeptFolder(observer, self.folder, self, self._folder_changed,
                                events=events)
        self._kept.start()
        self.scan()
        self._lane_task(self._forget_lanes_without_folders)

    def stop(self) -> None:
        if self._kept is not None:
            self._kept.stop()
        if self._lanes is not None:
            self._lanes.stop()
        with self._wake:
            self._stopping = True
            self._wake.notify()

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
        # Its lane folders went with it, watched still where they went: let go of them.
        self._lane_task(self._let_go_of_every_lane)
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

    # -- watchdog's thread: events are hints ---------------------------------------

    def on_any_event(self, event: FileSystemEvent) -> None:
        try:  # an exception here would kill watchdog's dispatch thread
            self._hint(event)
        except Exception:
            log.exception("the jobs folder watcher stumbled on %s", event)

    def _hint(self, event: FileSystemEvent) -> None:
        if event.is_directory:
            self._folder_hint(event)
            return
        if isinstance(event, FileMovedEvent):
            self._open.discard(event.src_path)
            if self._lane_at(os.path.dirname(event.dest_path)) is not None:
                self._consider(event.dest_path, settle=False)  # a rename is atomic
            return
        path = event.src_path
        if self._lane_at(os.path.dirname(path)) is None:
            return
        if not self.close_events:
            self._consider(path, settle=True)
        elif isinstance(event, FileOpenedEvent):
            self._open.add(path)  # a writer (or a reader) has it open: wait for the close
        elif isinstance(event, FileClosedEvent):
            self._open.discard(path)
            self._consider(path, settle=True, wait=self.quiet)  # another write may follow
        elif isinstance(event, FileClosedNoWriteEvent):
            self._open.discard(path)
        elif isinstance(event, FileCreatedEvent | FileModifiedEvent):
            if path not in self._open:  # a hard link or a rename in: no close will come
                self._consider(path, settle=True)

    def _folder_hint(self, event: FileSystemEvent) -> None:
        """A folder made, moved or deleted in the jobs folder or in a lane folder."""
        if isinstance(event, DirMovedEvent):
            old, new = self._lane_named(event.src_path), self._lane_named(event.dest_path)
            if old is not None and new is not None:
                self._lane_task(self._lane_renamed, old, new)
                return
            places = (event.src_path, event.dest_path)  # one of them "" when moved out or in
        elif isinstance(event, DirCreatedEvent | DirDeletedEvent):
            places = (event.src_path,)
        else:
            return  # modified: nothing a lane needs
        for place in places:
            if place:
                self._folder_found(place)

    def _folder_found(self, path: str) -> None:
        """Something happened to a folder (or a link to one) at `path`: right in the
        jobs folder, it is a lane's; deeper, it is none."""
        name = self._lane_named(path)
        if name is not None:
            self._lane_task(self._settle_lane, name)
        elif self._lane_at(os.path.dirname(path)) is not None:
            self._lane_task(self._tell_deeper, path)

    def _lane_named(self, path: str) -> str | None:
        """The name of the entry at `path` when it is right in the jobs folder."""
        parent, name = os.path.split(path)
        return name if path and parent == str(self.folder) else None

    def _lane_at(self, folder: str) -> str | None:
        """The lane whose drops land in `folder` (main for the jobs folder), or None
        when `folder` is no lane folder in use."""
        if folder == str(self.folder):
            return lanes.MAIN
        if self._lanes is not None and self._lanes.identity(folder) is not None:
            return os.path.basename(folder)
        return None

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
            self._folder_found(path)  # a lane folder (a link to one is refused there)
            return
        if settle and stat.S_ISREG(info.st_mode):
            self._arm(path, info, wait)
        else:
            self._take(path)

    def _arm(self, path: str, info: os.stat_result, wait: float | None = None) -> None:
        """Look at the file again in `wait` (the settle time) seconds; an earlier
        deadline of the same file no longer counts."""
        deadline = self.monotonic() + (self.settle if wait is None else wait)
        with self._wake:
            self._settling[path] = (info.st_size, info.st_mtime_ns, deadline)
            heapq.heappush(self._due, (deadline, path))
            self._wake.notify()

    def _lane_task(self, work: Callable[..., None], *args: str) -> None:
        """Have the settle thread do `work(*args)` next, after the lane changes told
        before it: one thread changes the lanes' watches, in the order told."""
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
                while not self._stopping and not self._lane_work and (
                        not self._due or self._due[0][0] > self.monotonic()):
                    self._wake.wait(self._due[0][0] - self.monotonic() if self._due else None)
                if self._stopping:
                    return None
                if self._lane_work:
                    return self._lane_work.popleft()
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
        if (info.st_size, info.st_mtime_ns) == seen[:2] and path not in self._open:
            self._take(path)
        else:
            self._arm(path, info)  # still changing: give it another settle time

    # -- lanes (on the settle thread) ----------------------------------------------------

    @property
    def _watches(self) -> Subfolders:
        """The lane folders' watches (there once the inbox has started)."""
        assert self._lanes is not None
        return self._lanes

    def _lane_folder_changed(self, folder: Path) -> None:
        """A lane folder was deleted, or a folder not used changed its mode or owner
        (the PathWatch thread tells)."""
        self._lane_task(self._settle_lane, folder.name)

    def _settle_lane(self, name: str) -> None:
        """Bring the watch of the entry `name` in the jobs folder in line with what is
        there now: a folder fit to be a lane is watched, noted and scanned; anything
        else is let go of, and a folder that cannot be a lane is said once why."""
        if ignored(name):
            return
        path = self.folder / name
        for _ in range(MAX_TRIES):
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                info = None
            if info is None or not (stat.S_ISDIR(info.st_mode) or os.path.isdir(path)):
                self._let_go(path, gone=True)  # nothing there, or a file: a drop, not a lane
                return
            why = self._lane_refusal(name, path, info)
            if why is not None:
                self._let_go(path, gone=False)
                if lane_name_problem(name) is None and not stat.S_ISLNK(info.st_mode):
                    self._watches.hold(path)  # looked at again once its mode or owner changes
                self._say_once(path, info, why)
                return
            if self._watches.identity(str(path)) == FileId.of(info):
                return  # in use already: nothing changed
            try:
                watching = self._watch_lane(path, info)
            except OSError as exc:
                self._let_go(path, gone=False)
                log.warning("cannot watch the lane folder %s (%s); %s", path, exc.strerror,
                            NOT_USED)
                return
            if watching:
                self._told.pop(str(path), None)
                self.queue.note_lane(name)
                log.info("drops into %s go to lane %s", path, name)
                self._scan_folder(path)  # what was in it before its watch began
                return
        log.warning("the lane folder %s kept changing while it was being watched; %s",
                    path, NOT_USED)

    def _lane_refusal(self, name: str, path: Path, info: os.stat_result) -> str | None:
        """Why the folder at `path` is not used as a lane, in one sentence; None when
        it is fit to be one."""
        why = lane_name_problem(name)
        if why is not None:
            return f"the folder {printable(path)} is not used as a lane: {why}"
        why = lane_folder_problem(info)
        if why is None:
            return None
        if stat.S_ISLNK(info.st_mode):
            return (f"the lane folder {path} is a symbolic link (to {safety.link_target(path)}); "
                    f"sloth-tray will not follow it or take jobs from it")
        return f"the lane folder {path} {why}; {NOT_USED} until that is put right"

    def _watch_lane(self, path: Path, info: os.stat_result) -> bool:
        """Watch the vetted folder at `path`; False when it changed meanwhile (it is
        looked at again). OSError when that very folder cannot be watched."""
        try:
            self._watches.watch(path, FileId.of(info))
        except OSError:
            if still(path, info):
                raise  # not a race: the folder cannot be watched (no watches left, say)
            return False
        return still(path, info)

    def _let_go(self, path: Path, *, gone: bool) -> None:
        """The entry at `path` is no lane folder in use (any more): unwatched, and its
        lane forgotten (the queue keeps it while it has jobs)."""
        if gone:
            self._told.pop(str(path), None)
            if str(path) in self._watches.watched():  # (its identity is gone with it)
                log.info("the lane folder %s is gone; lane %s stays listed only while it "
                         "has jobs", path, path.name)
        self._watches.drop(path)
        if lane_name_problem(path.name) is None:
            self.queue.forget_lane(path.name)

    def _say_once(self, path: Path, info: os.stat_result, sentence: str) -> None:
        """Log why a folder is not used, once for as long as that stays so."""
        said = (FileId.of(info), sentence)
        if self._told.get(str(path)) != said:
            self._told[str(path)] = said
            log.warning("%s", sentence)

    def _lane_renamed(self, old: str, new: str) -> None:
        """The folder `old` in the jobs folder was renamed `new`. A lane in use that
        can go by its new name keeps its jobs and its pause under that name."""
        old_path = self.folder / old
        if (self._watches.identity(str(old_path)) is None or ignored(new)
                or lane_name_problem(new) is not None):
            # No lane before, or none after: as if one folder went and another came.
            self._settle_lane(old)
            self._settle_lane(new)
            return
        self._watches.drop(old_path)
        moved = self.queue.rename_lane(old, new)
        log.info("lane %s renamed to %s%s", old, new, jobs_going_along(moved))
        self._settle_lane(new)
        self._settle_lane(old)  # a folder made under the old name meanwhile: a lane of its own

    def _let_go_of_every_lane(self) -> None:
        """The jobs folder went, or was replaced: its lane folders are not where they
        were watched."""
        for path in self._watches.watched():
            self._watches.drop(Path(path))
            self.queue.forget_lane(os.path.basename(path))
        for path in self._watches.held():
            self._watches.drop(Path(path))
        self._told.clear()

    def _forget_lanes_without_folders(self) -> None:
        """At start-up, after the scan: a lane whose folder went while the app was off
        is forgotten (the queue keeps it while it has jobs)."""
        in_use = {os.path.basename(path) for path in self._watches.watched()}
        for name in self.queue.lanes():
            if name != lanes.MAIN and name not in in_use:
                self.queue.forget_lane(name)

    def _tell_deeper(self, path: str) -> None:
        """A folder in a lane folder is no lane: said once, and its files left alone."""
        if path in self._told or not os.path.isdir(path):
            return
        self._told[path] = ("deeper",)
        log.info("%s is a folder inside a lane folder, not a lane; its files are left "
                 "alone", printable(path))

    # -- taking -------------------------------------------------------------------------

    def _take(self, path: str) -> None:
        with self._lock:
            lane = self._lane_to_take_from(os.path.dirname(path))
            if lane is None:
                return
            placed = self._place(path, lane)
            if placed is None:
                return
            source, (target, job_id, info) = Path(path), placed
            refusal = spool.refusal(info, self.folder)
            try:
                spool.push(self.queue, target, job_id, refused=refusal, lane=lane)
            except SlothError as exc:
                # The queue is locked or unwell: give the file back to the inbox
                # and try again after a settle time, rather than strand it.
                log.warning("could not queue %s yet: %s", source.name, exc)
                spool.unplace(target, source)
                self._arm(path, os.lstat(source))
                return
            with self._wake:
                self._settling.pop(path, None)
        log.info("queued %s as %s%s%s", source.name, job_id,
                 "" if lane == lanes.MAIN else f" in lane {lane}",
                 f" ({refusal})" if refusal else "")
        self.on_push()

    def _lane_to_take_from(self, folder: str) -> str | None:
        """The lane of a drop in `folder`, or None when nothing is to be taken from it:
        a lane folder is taken from only while it is the very folder vetted when its
        watch began (not, say, a link renamed over it since), and still fit to use."""
        lane = self._lane_at(folder)
        if lane is None or lane == lanes.MAIN:
            return lane
        try:
            info = os.lstat(folder)
        except FileNotFoundError:
            info = None
        if info is None or FileId.of(info) != self._watches.identity(folder) \
                or lane_folder_problem(info) is not None:
            self._lane_task(self._settle_lane, lane)  # says why, and stops watching it
            return None
        return lane

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
                on_push: Callable[[], None]) -> Inbox:
    """Reconcile the spool, then watch the jobs folder and its lane folders and scan
    them."""
    spool.reconcile(home, queue)
    inbox = Inbox(home, queue, on_push)
    inbox.start(observer)
    return inbox
