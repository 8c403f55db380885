"""The lane folders: each folder right inside the jobs folder is a lane (store/lanes.py).

What is dropped into one is taken as the inbox takes any drop (inbox.py), and runs in
that lane. Each lane folder is watched on its own, once vetted as the jobs folder is
(the user's, writable by nobody else, not a link); it is noted, forgotten or renamed
in the queue as it is made, removed or renamed. The bookkeeping runs on the thread
the inbox hands it to (`later`: inbox-settle), one change at a time, in the order the
changes were told; the public methods may be called on any thread, and only hand work
over or look things up.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers.api import BaseObserver

from sloth_tray import safety
from sloth_tray.daemon.watch import Subfolders
from sloth_tray.fileid import FileId
from sloth_tray.store import lanes
from sloth_tray.store.queue import Queue
from sloth_tray.text import printable

log = logging.getLogger("sloth_tray")

IGNORED_ENDINGS = ("~", ".swp", ".tmp", ".part", ".partial", ".crdownload")
MAX_TRIES = 10  # looks at a lane folder that keeps changing while its watch is set up
NOT_USED = "sloth-tray will not take jobs from it"
# Folders whose log line is remembered (said once), the newest: folders made inside lane
# folders come and go, with no word of their going. One forgotten is said again, once.
TOLD = 1000

# later(work, *args): work(*args) done on the lanes' thread, after the work handed over
# before it.
Later = Callable[..., None]


def ignored(name: str) -> bool:
    """Dotfiles and the temporary files of editors, downloads and copies (folders too):
    neither a drop nor a lane."""
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


class LaneFolders:
    """The lane folders in the jobs folder `folder`, their watches and their lanes.

    `later` hands work to the lanes' thread; `scan(folder)` takes what lies in a lane
    folder already, once its watch has begun; `unwatched(folder)` is told each lane
    folder whose watch has ended (what its files do is told no more).
    """

    def __init__(self, folder: Path, queue: Queue, *, later: Later,
                 scan: Callable[[Path], None], unwatched: Callable[[Path], None]) -> None:
        self.folder = folder
        self.queue = queue
        self._later = later
        self._scan = scan
        self._unwatched = unwatched
        self._subfolders: Subfolders | None = None  # the lane folders' watches
        self._told: dict[str, tuple] = {}  # folder -> what the log last said of it

    # -- any thread ---------------------------------------------------------------------

    def start(self, observer: BaseObserver, handler: FileSystemEventHandler, *,
              events: list[type[FileSystemEvent]] | None) -> None:
        """Be ready to watch lane folders: their drops are told to `handler`, with the
        kinds of event `events` (None: all)."""
        self._subfolders = Subfolders(observer, handler, self._folder_changed, events=events)

    def stop(self) -> None:
        if self._subfolders is not None:
            self._subfolders.stop()

    def started(self) -> None:
        """The start-up scan is done: the lanes whose folders went while the app was off
        are forgotten."""
        self._later(self._forget_lanes_without_folders)

    def jobs_folder_changed(self) -> None:
        """The jobs folder was removed, renamed or replaced: its lane folders went with
        it, watched still where they went, and are let go of."""
        self._later(self._let_go_of_every_lane)

    def folder_event(self, event: FileSystemEvent) -> None:
        """A folder made, moved or deleted in the jobs folder or in a lane folder."""
        if isinstance(event, DirMovedEvent):
            old, new = self._lane_named(event.src_path), self._lane_named(event.dest_path)
            if old is not None and new is not None:
                self._later(self._lane_renamed, old, new)
                return
            places = (event.src_path, event.dest_path)  # one of them "" when moved out or in
        elif isinstance(event, DirCreatedEvent | DirDeletedEvent):
            places = (event.src_path,)
        else:
            return  # modified: nothing a lane needs
        for place in places:
            if place:
                self.found(place)

    def found(self, path: str) -> None:
        """Something happened to a folder (or a link to one) at `path`: right in the
        jobs folder, it is a lane's; deeper, it is none."""
        name = self._lane_named(path)
        if name is not None:
            self._later(self._settle_lane, name)
        elif self.lane_at(os.path.dirname(path)) is not None:
            self._later(self._tell_deeper, path)

    def lane_at(self, folder: str) -> str | None:
        """The lane whose drops land in `folder` (main for the jobs folder), or None
        when `folder` is no lane folder in use."""
        if folder == str(self.folder):
            return lanes.MAIN
        if self._subfolders is not None and self._subfolders.identity(folder) is not None:
            return os.path.basename(folder)
        return None

    def lane_to_take_from(self, folder: str) -> str | None:
        """The lane of a drop in `folder`, or None when nothing is to be taken from it:
        a lane folder is taken from only while it is the very folder vetted when its
        watch began (not, say, a link renamed over it since), and still fit to use."""
        lane = self.lane_at(folder)
        if lane is None or lane == lanes.MAIN:
            return lane
        try:
            info = os.lstat(folder)
        except FileNotFoundError:
            info = None
        if info is None or FileId.of(info) != self._watches.identity(folder) \
                or lane_folder_problem(info) is not None:
            self._later(self._settle_lane, lane)  # says why, and stops watching it
            return None
        return lane

    def _lane_named(self, path: str) -> str | None:
        """The name of the entry at `path` when it is right in the jobs folder."""
        parent, name = os.path.split(path)
        return name if path and parent == str(self.folder) else None

    def _folder_changed(self, folder: Path) -> None:
        """A lane folder was deleted, or a folder not used changed its mode or owner
        (the PathWatch thread tells)."""
        self._later(self._settle_lane, folder.name)

    # -- the lanes' thread ---------------------------------------------------------------

    @property
    def _watches(self) -> Subfolders:
        """The lane folders' watches (there once started)."""
        assert self._subfolders is not None
        return self._subfolders

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
                self._scan(path)  # what was in it before its watch began
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
        was_watched = str(path) in self._watches.watched()  # (its identity is gone with it)
        if gone:
            self._told.pop(str(path), None)
        self._watches.drop(path)
        self._unwatched(path)
        if lane_name_problem(path.name) is None:
            self.queue.forget_lane(path.name)
        if gone and was_watched:  # said once the queue knows: what it says is so
            log.info("the lane folder %s is gone; lane %s stays listed only while it "
                     "has jobs", path, path.name)

    def _say_once(self, path: Path, info: os.stat_result, sentence: str) -> None:
        """Log why a folder is not used, once for as long as that stays so."""
        said = (FileId.of(info), sentence)
        if self._told.get(str(path)) != said:
            self._remember(str(path), said)
            log.warning("%s", sentence)

    def _remember(self, path: str, said: tuple) -> None:
        """What the log said of `path`, kept with the TOLD newest."""
        self._told.pop(path, None)
        self._told[path] = said
        while len(self._told) > TOLD:
            del self._told[next(iter(self._told))]

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
        self._unwatched(old_path)
        moved = self.queue.rename_lane(old, new)
        log.info("lane %s renamed to %s%s", old, new, jobs_going_along(moved))
        self._settle_lane(new)
        self._settle_lane(old)  # a folder made under the old name meanwhile: a lane of its own

    def _let_go_of_every_lane(self) -> None:
        """The jobs folder went, or was replaced: its lane folders are not where they
        were watched."""
        for path in self._watches.watched():
            self._watches.drop(Path(path))
            self._unwatched(Path(path))
            self.queue.forget_lane(os.path.basename(path))
        for path in self._watches.held():
            self._watches.drop(Path(path))
            self._unwatched(Path(path))
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
        self._remember(path, ("deeper",))
        log.info("%s is a folder inside a lane folder, not a lane; its files are left "
                 "alone", printable(path))
