"""What `log -f` and `wait` block on (daemon/follow.py), with real inotify."""

from __future__ import annotations

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
