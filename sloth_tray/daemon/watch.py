"""Watching the file system: watchdog's observer and the doorbell, set up once for
the whole app (each event handled on the thread that read it); and, on Linux, a
small inotify of our own for what watchdog does not report: a watched folder or
file itself moved away, deleted or replaced.

`PathWatch` is that inotify ("moved or deleted itself" only); `KeptFolder` keeps the
jobs folder watched through its removal and re-creation (a watched inode's own end,
not its number, says a folder is new: ext4 reuses numbers); `Subfolders` gives each
lane folder a watch of its own (never a recursive one; the same rule says a lane
folder is new).
"""

from __future__ import annotations

import ctypes
import enum
import logging
import os
import select
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, EventQueue, ObservedWatch

from sloth_tray.fileid import FileId

log = logging.getLogger("sloth_tray")


def make_observer() -> BaseObserver:
    """One observer for the whole app. Its threads block with no timeout on
    Linux and macOS: an idle app costs no wake-ups (measured: 0 per minute).

    On Linux, full events tell a file renamed in from elsewhere (atomic: take it
    now) apart from one being created by a writer (wait for its close), a rename's
    halves are paired without a walk of every event queued (move_pairing), each
    event is handled on the thread that read it (handled_where_read), and each read
    of inotify is handed on as it comes (handed_on_as_read).
    """
    if sys.platform.startswith("linux"):
        from watchdog.observers.inotify import InotifyObserver

        from sloth_tray.daemon.move_pairing import QuickPairingEmitter

        handed_on_as_read()
        observer = InotifyObserver(generate_full_events=True)
        observer._emitter_class = QuickPairingEmitter  # what each schedule() makes
        return handled_where_read(observer)
    return Observer()


def handed_on_as_read() -> None:
    """Each read of inotify handed on to the events' thread as it comes, not held for
    the reads that may follow it.

    watchdog (7.1 on) holds a read that comes within a millisecond of the one before
    for up to a millisecond more, to hand a burst on in fewer pieces. A drop is a draft
    written, then renamed: two reads that close, so every drop waited that millisecond
    on its way to its start. The inbox batches a burst's drops itself. Measured, drop
    to start on an idle app (tests/bench/drop_latency.py, 4 interleaved runs of 41
    drops): median 5.1 to 5.5 ms held, 4.3 to 4.7 ms handed on; a 1,000-drop burst the
    same either way. This sets one of watchdog's inner names, process-wide (this app's
    watches are its only ones); tests/daemon/test_observer.py holds it to the
    installed watchdog.
    """
    from watchdog.observers import inotify_c

    if hasattr(inotify_c, "_COALESCE_BURST_GAP_S"):
        inotify_c._COALESCE_BURST_GAP_S = 0.0  # no read follows another this closely


def handled_where_read(observer: BaseObserver) -> BaseObserver:
    """`observer`, its events handed to their handlers by the watch's own thread, the
    one that read them, rather than queued for the observer's thread to hand over.

    watchdog passes each event through three threads (the inotify reader, the
    watch's, the observer's); a hand-off costs a wake-up and a GIL switch. Measured
    from a file's close to its handler, on an idle app: 0.44 ms through the
    observer's thread, 0.33 ms without it.

    Handlers still run one at a time, under a lock of their own, as on the
    observer's one thread: the inbox's bookkeeping relies on it. Not under the
    observer's lock, as its thread does: unschedule() holds that lock while it
    waits for the watch's thread to end, and that thread may be here. An event of a
    watch on a file (not a folder) goes the usual way: watchdog checks there that it
    is that file's. This leans on two of watchdog's inner names (the observer's
    queue and handlers); tests/daemon/test_observer.py holds it to what it says.
    """
    handled = _HandledWhereRead(observer)
    observer._event_queue = handled  # the queue every emitter is made with
    return observer


class _HandledWhereRead(EventQueue):
    """The queue the emitters put (event, watch) in: each handed to its handlers at
    once, on the putting thread; anything else (the stop sentinel) queued as before."""

    def __init__(self, observer: BaseObserver) -> None:
        super().__init__()
        self._observer = observer
        self._one_at_a_time = threading.Lock()  # across every watch's thread

    def put(self, item: object, block: bool = True, timeout: float | None = None) -> None:
        if not isinstance(item, tuple) or getattr(item[1], "is_file", False):
            super().put(item, block, timeout)  # the observer's thread takes it
            return
        event, watch = item
        handlers = self._observer._handlers
        with self._one_at_a_time:
            for handler in list(handlers.get(watch, ())):
                if handler not in handlers.get(watch, ()):
                    continue  # unscheduled by a handler before it: as watchdog does
                try:  # an exception here would end the watch's thread
                    handler.dispatch(event)
                except Exception:
                    log.exception("a file system event handler failed on %s", event)


class Doorbell(FileSystemEventHandler):
    """Calls `ring` whenever another process touches the doorbell file."""

    def __init__(self, path: Path, ring: Callable[[], None]) -> None:
        self.path = str(path)
        self.ring = ring

    def on_any_event(self, event: FileSystemEvent) -> None:
        try:  # an exception here would kill watchdog's dispatch thread
            if self.path in (event.src_path, getattr(event, "dest_path", "")):
                self.ring()
        except Exception:
            log.exception("doorbell handler failed")


def watch_doorbell(observer: BaseObserver, path: Path, ring: Callable[[], None]) -> None:
    observer.schedule(Doorbell(path, ring), str(path.parent), recursive=False)


# -- inotify(7), for the paths themselves -------------------------------------------

IN_ATTRIB = 0x4  # on a file: its link count changed (an unlink while it is open)
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_UNMOUNT = 0x2000
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000  # the kernel dropped the watch: deleted, or its file system unmounted
IN_ONLYDIR = 0x1000000
IN_DONT_FOLLOW = 0x2000000  # a link at the path is refused (ENOTDIR with IN_ONLYDIR), not followed
GONE = IN_DELETE_SELF | IN_MOVE_SELF  # self-only: changes inside never wake the watcher
ARRIVALS = IN_CREATE | IN_MOVED_TO
# The watched inode itself is no more. Told late, a folder may already stand at the
# path again, and with the very same inode number (ext4 hands a freed one to the next
# folder made): its (device, inode) then says nothing, the event does.
INODE_GONE = IN_DELETE_SELF | IN_UNMOUNT | IN_IGNORED
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, length of the name that follows

EventCallback = Callable[[int, int, str], None]  # (watch descriptor, mask, name)


class PathWatch:
    """One inotify instance with one thread, blocked in poll() with no timeout:
    watches cost nothing until something happens to them.

    watchdog leaves out a watched folder being moved away (IN_MOVE_SELF), and a
    file deleted while it is open tells only through its link count (IN_ATTRIB:
    IN_DELETE_SELF waits for the last close). Callbacks run on this thread.
    """

    def __init__(self, on_event: EventCallback) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._add_watch = libc.inotify_add_watch
        self._add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self._rm_watch = libc.inotify_rm_watch
        self._rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self._fd = fd
        self._stop_r, self._stop_w = os.pipe()
        self._closing = False
        self.on_event = on_event
        self._thread = threading.Thread(target=self._loop, name="path-watch", daemon=True)
        self._thread.start()

    def watch(self, path: Path, mask: int) -> int:
        """Watch `path` (its mask replaces any earlier one on the same inode)."""
        wd = self._add_watch(self._fd, os.fsencode(path), mask)
        if wd < 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno), str(path))
        return wd

    def unwatch(self, wd: int) -> None:
        self._rm_watch(self._fd, wd)  # EINVAL when the kernel dropped it already: fine

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        os.write(self._stop_w, b"!")
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _loop(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        try:
            while True:
                ready = {fd for fd, _ in poller.poll()}  # no timeout: no idle cost
                if self._stop_r in ready:
                    return
                try:
                    data = os.read(self._fd, 64 * 1024)
                except (BlockingIOError, InterruptedError):
                    continue
                offset = 0
                while offset + _EVENT.size <= len(data):
                    wd, mask, _, length = _EVENT.unpack_from(data, offset)
                    start = offset + _EVENT.size
                    name = os.fsdecode(data[start:start + length].rstrip(b"\0"))
                    offset = start + length
                    try:  # a callback's bug must not end the watching
                        self.on_event(wd, mask, name)
                    except Exception:
                        log.exception("a path watch handler failed")
        finally:
            for fd in (self._fd, self._stop_r, self._stop_w):
                os.close(fd)


def make_path_watch(on_event: EventCallback) -> PathWatch | None:
    """A PathWatch on Linux; None elsewhere (and where inotify is not to be had)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return PathWatch(on_event)
    except (OSError, AttributeError) as exc:
        log.warning("cannot watch for removed folders (%s)", exc)
        return None


# -- a folder watched through its removal -------------------------------------------


class FolderChange(enum.StrEnum):
    GONE = "gone"  # nothing (or no folder) at its path any more
    BACK = "back"  # a folder is at its path again
    REPLACED = "replaced"  # another folder took its place at once


class KeptFolder:
    """A watchdog handler kept on a folder through the folder's removal, renaming
    or replacement.

    While the folder is there, its own inode and those of its parents are watched
    for being deleted or moved (self events: nothing inside wakes them). Once it
    is missing, the nearest existing parent is also watched for new entries, and
    only then: a parent such as the home folder changes all day. When a folder is
    at the path again, watchdog watches it anew and `on_change` hears of it (on
    the PathWatch thread). Without inotify, the folder is watched as it was at
    the start.
    """

    MAX_TRIES = 10  # re-checks when the folder changes while the watches are set up

    def __init__(self, observer: BaseObserver, folder: Path, handler: FileSystemEventHandler,
                 on_change: Callable[[FolderChange], None], *,
                 events: list[type[FileSystemEvent]] | None = None) -> None:
        self.observer = observer
        self.folder = folder
        self.handler = handler
        self.on_change = on_change
        self.events = events  # the kinds of event the handler wants; None: all
        self._lock = threading.Lock()
        self._closed = False
        self._watch: ObservedWatch | None = None  # watchdog's, while the folder is there
        self._identity: FileId | None = None  # of the folder watchdog watches
        self._waiting_in: tuple[Path, FileId | None] | None = None
        self._wds: dict[int, Path] = {}
        self._paths: PathWatch | None = None

    def start(self) -> None:
        """Watch the folder, or wait for it when it is missing already."""
        self._paths = make_path_watch(self._on_event)
        with self._lock:
            if self._paths is None:
                self._watch = self.observer.schedule(self.handler, str(self.folder),
                                                     event_filter=self.events)
                return
            self._settle()  # the first watch is no change to tell
            missing = self._identity is None
        if missing:
            self.on_change(FolderChange.GONE)

    def stop(self) -> None:
        with self._lock:
            self._closed = True
        if self._paths is not None:
            self._paths.close()  # outside the lock: its thread may be waiting for it

    # -- the PathWatch thread ---------------------------------------------------------

    def _on_event(self, wd: int, mask: int, name: str) -> None:
        with self._lock:
            if self._closed:
                return
            lost = False
            if not mask & IN_Q_OVERFLOW:
                path = self._wds.get(wd)
                if path is None:
                    return  # a watch already given up
                if mask & IN_IGNORED:
                    del self._wds[wd]
                if (mask & ARRIVALS and self._waiting_in is not None
                        and name != self._next_step(path)):
                    return  # an entry on no way to the folder
                lost = bool(mask & INODE_GONE) and path == self.folder
            change = self._settle(lost=lost)
        if change is not None:
            self.on_change(change)

    def _next_step(self, parent: Path) -> str:
        return self.folder.relative_to(parent).parts[0]

    def _settle(self, *, lost: bool = False) -> FolderChange | None:
        """Bring the watches in line with what is at the folder's path; say what changed.
        lost: the watched folder itself is no more, whatever inode number stands there."""
        had = self._identity
        if lost:
            self._identity = None
        for tries_left in reversed(range(self.MAX_TRIES)):
            now = FileId.at(self.folder, folder=True)
            try:
                if now is None:
                    self._wait_for_folder()
                elif now != self._identity or self._watch is None:
                    self._watch_folder(now)
            except OSError:
                if not tries_left:
                    raise  # not a race: it cannot be watched
                continue  # it changed under us: look again
            if FileId.at(self.folder, folder=True) == now:
                break
        if self._identity == had and not lost:
            return None
        if self._identity is None:
            return FolderChange.GONE
        return FolderChange.BACK if had is None else FolderChange.REPLACED

    def _watch_folder(self, now: FileId) -> None:
        self._forget()
        self._identity = None
        self._watch_path_and_parents(self.folder, GONE | IN_ONLYDIR)
        self._watch = self.observer.schedule(self.handler, str(self.folder),
                                             event_filter=self.events)
        self._identity = now
        self._waiting_in = None

    def _wait_for_folder(self) -> None:
        nearest = next(p for p in self.folder.parents if os.path.isdir(p))
        waiting = (nearest, FileId.at(nearest, folder=True))
        if self._identity is None and self._waiting_in == waiting:
            return  # already watching the right place
        self._forget()
        self._identity = None
        self._watch_path_and_parents(nearest, GONE | ARRIVALS | IN_ONLYDIR)
        self._waiting_in = waiting

    def _watch_path_and_parents(self, path: Path, mask: int) -> None:
        assert self._paths is not None
        self._wds[self._paths.watch(path, mask)] = path
        for parent in path.parents:  # one of them moved: the path leads elsewhere
            try:
                self._wds[self._paths.watch(parent, GONE | IN_ONLYDIR)] = parent
            except OSError:
                pass  # a parent we may not read: its move goes unseen, nothing worse

    def _forget(self) -> None:
        """Drop every watch: watchdog's on the folder and ours on the paths."""
        if self._watch is not None:
            try:
                self.observer.unschedule(self._watch)
            except KeyError:
                pass  # the observer stopped already
            self._watch = None
        assert self._paths is not None
        for wd in self._wds:
            self._paths.unwatch(wd)
        self._wds.clear()


# -- folders inside a watched folder, one watch each --------------------------------


class Subfolders:
    """Folders inside a watched folder, each watched by watchdog on its own and never
    recursively (what lies deeper is not watched), with the same kinds of event.

    A folder's deletion is told by an inotify watch on the folder itself: in its
    parent, a deletion is no event the parent's watch asks for (it would wake the
    watcher once for every file taken). Self events only, so nothing dropped inside
    wakes that watch. A folder `held` (not to be used as it is) is watched for a
    change of its own mode or owner instead, so that it is looked at again once put
    right. Without inotify, watchdog's own events tell the deletions.

    `on_change(path)` runs on the PathWatch thread. One thread at a time changes the
    watches (the caller's); the lock guards the look-ups other threads make, and is
    never held while watchdog is called: watchdog's dispatch thread holds its own lock
    while it runs the handler, which looks up here.
    """

    def __init__(self, observer: BaseObserver, handler: FileSystemEventHandler,
                 on_change: Callable[[Path], None], *,
                 events: list[type[FileSystemEvent]] | None = None) -> None:
        self.observer = observer
        self.handler = handler
        self.on_change = on_change
        self.events = events
        self._lock = threading.Lock()
        # path -> (watchdog's watch, the folder's FileId, our watch descriptor);
        # the FileId None once that folder is no more (INODE_GONE)
        self._watched: dict[str, tuple[ObservedWatch, FileId | None, int | None]] = {}
        self._held: dict[str, int | None] = {}  # path -> our watch descriptor
        self._wds: dict[int, str] = {}
        self._paths = make_path_watch(self._on_event)

    def identity(self, path: str) -> FileId | None:
        """The FileId of the folder watched at `path`; None when none is, or
        when the folder watched there is no more (whatever stands there now is new)."""
        with self._lock:
            found = self._watched.get(path)
        return found[1] if found else None

    def watched(self) -> list[str]:
        with self._lock:
            return list(self._watched)

    def held(self) -> list[str]:
        with self._lock:
            return list(self._held)

    def watch(self, path: Path, identity: FileId) -> None:
        """Watch the folder at `path` (whose FileId the caller has vetted) for
        drops, and for its deletion. OSError when it cannot be watched."""
        self.drop(path)
        wd = self._watch_itself(path, IN_DELETE_SELF)
        try:
            watch = self.observer.schedule(self.handler, str(path), event_filter=self.events)
        except BaseException:
            self._unwatch_itself(wd)
            raise
        with self._lock:
            self._watched[str(path)] = (watch, identity, wd)
            if wd is not None:
                self._wds[wd] = str(path)

    def hold(self, path: Path) -> None:
        """Watch the folder at `path` only for a change of its mode or owner (and
        for its deletion); nothing dropped in it is seen."""
        self.drop(path)
        try:  # IN_ATTRIB also tells an entry's change inside: rare in a folder not used
            wd = self._watch_itself(path, IN_DELETE_SELF | IN_ATTRIB)
        except OSError:
            return  # gone, or a link: its replacement is told in the parent
        with self._lock:
            self._held[str(path)] = wd
            if wd is not None:
                self._wds[wd] = str(path)

    def drop(self, path: Path) -> None:
        """Stop watching the folder at `path`, however it was watched."""
        with self._lock:
            watched = self._watched.pop(str(path), None)
            held = self._held.pop(str(path), None)
            wds = [wd for wd in (watched[2] if watched else None, held) if wd is not None]
            for wd in wds:
                self._wds.pop(wd, None)
        for wd in wds:
            self._unwatch_itself(wd)
        if watched is not None:
            try:
                self.observer.unschedule(watched[0])
            except KeyError:
                pass  # the observer stopped already

    def stop(self) -> None:
        if self._paths is not None:
            self._paths.close()

    def _watch_itself(self, path: Path, mask: int) -> int | None:
        if self._paths is None:
            return None
        return self._paths.watch(path, mask | IN_ONLYDIR | IN_DONT_FOLLOW)

    def _unwatch_itself(self, wd: int | None) -> None:
        if self._paths is not None and wd is not None:
            self._paths.unwatch(wd)

    def _on_event(self, wd: int, mask: int, name: str) -> None:
        with self._lock:
            if mask & IN_Q_OVERFLOW:  # events were lost: every folder is looked at again
                paths = [*self._watched, *self._held]
            else:
                path = self._wds.pop(wd, None) if mask & IN_IGNORED else self._wds.get(wd)
                paths = [] if path is None else [path]
                watched = self._watched.get(path) if path is not None else None
                if watched is not None and mask & INODE_GONE:
                    # Its folder is no more: whatever stands at the path now is new to
                    # us, even with the same inode number, and is looked at as such.
                    self._watched[path] = (watched[0], None, watched[2])
        for path in paths:
            self.on_change(Path(path))
