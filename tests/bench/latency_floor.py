"""The durable floor of a drop's start: the least any folder-watching queue in Python that
loses nothing does between a script renamed into its folder and the script's start.

    python tests/bench/latency_floor.py JOBS SPOOL READY   # the floor's daemon (Linux)
    python tests/bench/latency_floor.py --watchdog JOBS SPOOL READY

It reads inotify itself (no library, no thread), moves the script into a spool folder
of its own, commits one row at synchronous=FULL in WAL mode (a queue that starts a job
before its record is durable can lose it, or run it twice, in a crash), then spawns the
script as sloth-tray's runner does: /bin/sh, a session of its own, output on pipes.
READY is written once it watches. compare.py's latency section drops into it as into
sloth-tray, after the same idle times: the gap between the two is sloth-tray's own cost
(its watcher library and threads, its lease, history and lanes, its log), and tsp,
which keeps no durable record, is not held to the commit.

With --watchdog its folder is watched by watchdog's observer, as sloth-tray must watch
its own: compare.py's idle section measures that daemon's memory as the floor of its
RSS row (the interpreter, SQLite, subprocess and watchdog with a watch running, and
nothing of sloth-tray's own).
"""

from __future__ import annotations

import ctypes
import os
import sqlite3
import struct
import subprocess
import sys
import time
from pathlib import Path

IN_MOVED_TO = 0x00000080  # <sys/inotify.h>: a name renamed into the folder
EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; the name follows


def run(jobs: Path, spool: Path, ready: Path) -> None:
    db = open_queue(spool)
    libc = ctypes.CDLL(None, use_errno=True)
    inotify = libc.inotify_init1(os.O_CLOEXEC)
    if inotify < 0 or libc.inotify_add_watch(inotify, os.fsencode(jobs), IN_MOVED_TO) < 0:
        raise OSError(ctypes.get_errno(), "inotify")
    ready.write_text("watching\n", encoding="utf-8")
    while True:
        events = os.read(inotify, 65536)  # blocks: nothing polls
        at = 0
        while at < len(events):
            _, _, _, length = EVENT.unpack_from(events, at)
            name = os.fsdecode(events[at + EVENT.size:at + EVENT.size + length].rstrip(b"\0"))
            at += EVENT.size + length
            if not name.startswith("."):  # a draft renamed into place is the drop
                start(jobs / name, spool, db)


def run_watched(jobs: Path, spool: Path, ready: Path) -> None:
    """The same floor, its folder watched by watchdog's observer (its own threads)."""
    import threading

    from watchdog.events import FileMovedEvent, FileSystemEventHandler
    from watchdog.observers import Observer

    db = open_queue(spool, check_same_thread=False)

    class Drops(FileSystemEventHandler):
        def on_moved(self, event: FileMovedEvent) -> None:
            name = os.path.basename(os.fsdecode(event.dest_path))
            if not name.startswith("."):
                start(jobs / name, spool, db)

    observer = Observer()
    observer.schedule(Drops(), str(jobs))
    observer.start()
    ready.write_text("watching\n", encoding="utf-8")
    threading.Event().wait()  # until stopped


def open_queue(spool: Path, **options: bool) -> sqlite3.Connection:
    spool.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(spool / "floor.db", isolation_level=None, **options)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    db.execute("CREATE TABLE IF NOT EXISTS jobs (id INTEGER PRIMARY KEY, script TEXT NOT NULL)")
    return db


def start(script: Path, spool: Path, db: sqlite3.Connection) -> None:
    """The drop moved into a folder of its own, its row durable, then its start; the
    next drop waits for its end (one at a time, as a lane runs them)."""
    folder = spool / str(time.monotonic_ns())
    folder.mkdir()
    placed = folder / script.name
    os.rename(script, placed)
    db.execute("INSERT INTO jobs(script) VALUES (?)", (str(placed),))  # its own commit
    child = subprocess.Popen(["/bin/sh", str(placed)], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
    child.communicate()


if __name__ == "__main__":
    watched = sys.argv[1:2] == ["--watchdog"]
    (run_watched if watched else run)(*(Path(arg) for arg in sys.argv[1 + watched:4 + watched]))
