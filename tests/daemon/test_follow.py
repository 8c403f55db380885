"""What `log -f` and `wait` block on (daemon/follow.py), with real inotify."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import threading

import pytest

from sloth_tray.daemon.follow import Changes

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")


def test_a_log_folder_made_after_the_follow_began_wakes_it_with_no_commit(home):
    """A run makes its log folder after its claim's commit and writes its first line
    there: a follower must see it without waiting for the queue to change again."""
    folder = home.job_logs("0123456789ab", "slow")
    woke = threading.Event()
    with Changes(home) as changes:
        changes.also(folder)  # not there yet

        def wait() -> None:
            changes.wait()
            woke.set()
        thread = threading.Thread(target=wait, daemon=True)
        thread.start()
        folder.mkdir(parents=True)
        (folder / "1.log").write_text("first\n")
        assert woke.wait(10), "the follower slept through its log's folder being made"


WRITER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA synchronous = FULL")
db.execute("INSERT INTO probe VALUES (1)")
"""


def strace_missing() -> str | None:
    """Why strace cannot hold a process's syscalls back here (None: it can)."""
    if shutil.which("strace") is None:
        return "strace is not installed (.ci/run installs it)"
    tried = subprocess.run(["strace", "-qq", "-o", "/dev/null", "true"],
                           capture_output=True, text=True)
    return None if tried.returncode == 0 else f"strace cannot trace here: {tried.stderr.strip()}"


def test_a_commit_whose_sync_outlasts_the_looks_after_its_write_is_still_seen(home, pids):
    """On a slow (or busy) disk a commit's frames are written, and wake the follower,
    seconds before readers may see them: after the sync. A follower that looked only
    a few times after the write, then slept until the next, saw it only at the next
    change, which may never come (a wait for the last job of a queue)."""
    if (why := strace_missing()) is not None:
        pytest.skip(why)
    with sqlite3.connect(home.db, isolation_level=None) as setup:
        setup.execute("PRAGMA journal_mode = WAL")
        setup.execute("CREATE TABLE probe (x)")
    seen = threading.Event()
    with Changes(home) as changes:
        def follow() -> None:
            look = sqlite3.connect(home.db)  # held open, as `wait` holds the queue
            while not look.execute("SELECT count(*) FROM probe").fetchone()[0]:
                changes.wait()
            look.close()
            seen.set()
        threading.Thread(target=follow, daemon=True).start()
        # The commit's sync is held 3 s (the writer's second: the first is of the WAL's
        # header), so it can be seen 3 s after its frames were written: past the
        # fourth look after them (2.6 s).
        writer = pids.popen(["strace", "-f", "-qq", "-o", "/dev/null",
                             "-e", "trace=fsync,fdatasync",
                             "-e", "inject=fsync,fdatasync:delay_exit=3000000:when=2",
                             sys.executable, "-c", WRITER, str(home.db)])
        assert writer.wait(timeout=30) == 0
        assert seen.wait(15), "the commit was made and never seen"
