"""A rename's two halves are paired without walking every event queued before it, so
a burst of drops costs each drop the same, however many are still waiting: the queue
itself, then the app's observer for real (inotify, real folders, renames by the
hundred held up behind a busy handler)."""

from __future__ import annotations

import os
import sys
import threading

import pytest
from helpers.processes import wait_for
from watchdog.events import FileMovedEvent, FileSystemEvent, FileSystemEventHandler

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")

if sys.platform.startswith("linux"):
    from watchdog.utils.delayed_queue import DelayedQueue

    from sloth_tray.daemon.move_pairing import MoveSourcesFoundQuickly, QuickPairingEmitter
    from sloth_tray.daemon.watch import make_observer

QUEUED = 10_000


class Counting:
    """A predicate that matches one element, and counts how often it was asked."""

    def __init__(self, wanted: object) -> None:
        self.wanted = wanted
        self.asked = 0

    def __call__(self, element: object) -> bool:
        self.asked += 1
        return element is self.wanted


def queue_with(held_back: list[object], others: int = QUEUED) -> DelayedQueue:
    """`others` events queued as watchdog queues them, then `held_back` (as watchdog
    holds back a rename's first half, for its second), then one more event."""
    queue = MoveSourcesFoundQuickly(0.5)
    for number in range(others):
        queue.put(("event", number))
    for element in held_back:
        queue.put(element, delay=True)
    queue.put(("event", "last"))
    return queue


def test_a_renames_first_half_is_found_without_asking_of_every_queued_event():
    source = ("moved from", 7)
    queue = queue_with([("moved from", 6), source])
    wanted = Counting(source)
    assert queue.find(wanted) is source
    assert wanted.asked == 1  # watchdog's own queue asks of all 10,002 before it
    wanted = Counting(source)
    assert queue.remove(wanted) is source
    assert wanted.asked == 1
    assert queue.find(Counting(source)) is None  # gone from the queue, and only it
    assert [entry[0] for entry in queue._queue][-2:] == [("moved from", 6), ("event", "last")]
    assert len(queue._queue) == QUEUED + 2


def test_a_move_in_from_elsewhere_walks_nothing_when_no_first_half_waits():
    queue = queue_with([])
    nothing = Counting(("moved from", 9))
    assert queue.find(nothing) is None and queue.remove(nothing) is None
    assert nothing.asked == 0
    assert len(queue._queue) == QUEUED + 1


def test_queued_events_still_come_out_oldest_first():
    queue = queue_with([], others=3)
    taken = [queue.get() for _ in range(4)]
    assert taken == [("event", 0), ("event", 1), ("event", 2), ("event", "last")]


class Moves(FileSystemEventHandler):
    """Records the moves it is told of; holds its thread on the first event until
    `go` is set, so that what happens meanwhile queues up behind it."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.moves: list[tuple[str, str]] = []  # (source name, destination name)

    def on_any_event(self, event: FileSystemEvent) -> None:
        assert self.go.wait(30), "the test never let the handler go"
        if isinstance(event, FileMovedEvent):
            self.moves.append((os.path.basename(event.src_path),
                               os.path.basename(event.dest_path)))


def test_renames_queued_by_the_hundred_behind_a_busy_handler_are_told_as_moves(tmp_path):
    folder, elsewhere = tmp_path / "jobs", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    observer = make_observer()
    handler = Moves()
    observer.schedule(handler, str(folder))
    observer.start()
    try:
        (emitter,) = observer.emitters
        assert isinstance(emitter, QuickPairingEmitter)
        # On the installed watchdog the quick walk is in place (an update that moves
        # its queue elsewhere fails here, rather than a burst slowing unseen).
        assert type(emitter._inotify._move_event_grouper._queue) is MoveSourcesFoundQuickly
        (folder / "wake").write_text("")  # the handler now holds its thread
        renamed = 300
        for number in range(renamed):
            draft = folder / f".{number}.draft"
            draft.write_text("true\n")
            os.rename(draft, folder / f"{number}.sh")
            if number % 3 == 0:  # in from a folder not watched: no first half
                (elsewhere / f"in-{number}.sh").write_text("true\n")
                os.rename(elsewhere / f"in-{number}.sh", folder / f"in-{number}.sh")
        os.rename(folder / "0.sh", elsewhere / "0.sh")  # out: no second half
        handler.go.set()
        expected = ([(f".{number}.draft", f"{number}.sh") for number in range(renamed)]
                    + [("", f"in-{number}.sh") for number in range(0, renamed, 3)]
                    + [("0.sh", "")])
        wait_for(lambda: len(handler.moves) >= len(expected), timeout=30,
                 what="every rename to be told")
        assert sorted(handler.moves) == sorted(expected)
        # each rename within the folder is told once, its two names together
        assert [move for move in handler.moves if move[0].endswith(".draft")] == \
            expected[:renamed]
    finally:
        handler.go.set()
        observer.stop()
        observer.join(timeout=10)
