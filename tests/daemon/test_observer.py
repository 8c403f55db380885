"""The app's one watchdog observer, for real (inotify, real folders and files): each
event is handled on the thread that read it, handlers one at a time, and watches
come and go while events flow without anything waiting on anything for ever."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
from helpers.processes import wait_for
from watchdog.events import FileClosedEvent, FileSystemEvent, FileSystemEventHandler

from sloth_tray.daemon.watch import make_observer

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")

CLOSES = [FileClosedEvent]


class Recorder(FileSystemEventHandler):
    """Records each closed file it is told of, and on which thread."""

    def __init__(self, during=None) -> None:
        self.seen: list[tuple[str, str]] = []  # (file name, thread name)
        self.during = during  # called inside the handler, with the event

    def on_closed(self, event: FileSystemEvent) -> None:
        if self.during is not None:
            self.during(event)
        self.seen.append((Path(event.src_path).name, threading.current_thread().name))


@pytest.fixture
def observer():
    started = make_observer()
    started.start()
    yield started
    # stop() joins every watch's thread: a hang there must fail the test, not the run
    stopping = threading.Thread(target=started.stop, daemon=True)
    stopping.start()
    stopping.join(timeout=10)
    started.join(timeout=10)
    assert not stopping.is_alive() and not started.is_alive(), "the observer did not stop"


def folders(tmp_path: Path, *names: str) -> list[Path]:
    made = [tmp_path / name for name in names]
    for folder in made:
        folder.mkdir()
    return made


def test_an_event_is_handled_on_its_watchs_thread_not_handed_to_the_observers(
        observer, tmp_path):
    (folder,) = folders(tmp_path, "jobs")
    recorder = Recorder()
    observer.schedule(recorder, str(folder), event_filter=CLOSES)
    (folder / "a.sh").write_text("true\n")
    wait_for(lambda: recorder.seen, timeout=10, what="the close to be handled")
    assert recorder.seen[0][0] == "a.sh"
    assert recorder.seen[0][1] != observer.name  # no hand-off to the observer's thread


def test_handlers_of_two_watches_never_run_at_once(observer, tmp_path):
    first, second = folders(tmp_path, "one", "two")
    running = threading.Event()  # a handler is inside, now
    overlapped = threading.Event()

    def hold_a_while(event: FileSystemEvent) -> None:
        if Path(event.src_path).parent == first:
            running.set()
            (second / "b.sh").write_text("true\n")  # its watch reads this meanwhile
            # A deadline by design: the other handler would set it if it ran now,
            # and the proof is that it does not.
            overlapped.wait(0.5)
            running.clear()
        elif running.is_set():
            overlapped.set()

    recorder = Recorder(hold_a_while)
    observer.schedule(recorder, str(first), event_filter=CLOSES)
    observer.schedule(recorder, str(second), event_filter=CLOSES)
    (first / "a.sh").write_text("true\n")
    wait_for(lambda: len(recorder.seen) == 2, timeout=10, what="both closes handled")
    assert [name for name, _ in recorder.seen] == ["a.sh", "b.sh"]
    assert not overlapped.is_set()


def test_a_watch_on_one_file_hears_of_that_file_alone(observer, tmp_path):
    """Its events still go through the observer's thread, where watchdog tells that
    file's from its neighbours' (inotify watches the folder)."""
    (folder,) = folders(tmp_path, "home")
    bell, neighbour = folder / "doorbell", folder / "neighbour"
    bell.write_text("")
    recorder = Recorder()
    observer.schedule(recorder, str(bell), event_filter=CLOSES)
    neighbour.write_text("x")
    bell.write_text("rung")
    wait_for(lambda: recorder.seen, timeout=10, what="the bell's close to be handled")
    assert {name for name, _ in recorder.seen} == {"doorbell"}


def test_a_handler_that_raises_does_not_end_its_watch(observer, tmp_path):
    (folder,) = folders(tmp_path, "jobs")

    def fail_on_the_first(event: FileSystemEvent) -> None:
        if Path(event.src_path).name == "bad.sh":
            raise RuntimeError("a handler's bug")

    recorder = Recorder(fail_on_the_first)
    observer.schedule(recorder, str(folder), event_filter=CLOSES)
    (folder / "bad.sh").write_text("true\n")
    (folder / "good.sh").write_text("true\n")
    wait_for(lambda: recorder.seen, timeout=10, what="the next close to be handled")
    assert [name for name, _ in recorder.seen] == ["good.sh"]


def test_a_watch_dropped_while_its_event_waits_for_the_handler_never_hangs(
        observer, tmp_path):
    """unschedule() waits for the watch's thread to end while holding the observer's
    lock. That thread may have read an event and be waiting for another handler to
    finish: it must not need that lock to hand its event over, or nothing ends."""
    steady, coming = folders(tmp_path, "steady", "coming")
    inside = threading.Event()  # the steady folder's handler is running
    dropping = threading.Event()  # the churn is about to drop the coming folder's watch

    def hold_until_dropping(event: FileSystemEvent) -> None:
        if Path(event.src_path).parent == steady:
            inside.set()
            dropping.wait(5)
            dropping.clear()

    recorder = Recorder(hold_until_dropping)
    observer.schedule(recorder, str(steady), event_filter=CLOSES)
    done = threading.Event()

    def churn() -> None:
        for i in range(20):
            watch = observer.schedule(recorder, str(coming), event_filter=CLOSES)
            inside.clear()
            (steady / f"s{i}.sh").write_text("true\n")
            inside.wait(5)
            (coming / f"c{i}.sh").write_text("true\n")  # its watch reads it, then waits
            dropping.set()
            observer.unschedule(watch)
        done.set()

    threading.Thread(target=churn, daemon=True).start()
    assert done.wait(30), "dropping a watch hung"
    wait_for(lambda: sum(name.startswith("s") for name, _ in recorder.seen) == 20,
             timeout=10, what="every close in the steady folder handled")


def test_a_drops_events_are_handed_on_as_read_never_held_for_more(observer, tmp_path,
                                                                   monkeypatch):
    """A drop is a draft written, then renamed: two reads of inotify well within a
    millisecond. watchdog (7.1 on) holds a read that follows another that closely for
    up to a millisecond more, to hand a burst on in fewer pieces; on a drop's way to its
    start that is a millisecond lost, and the inbox batches a burst itself."""
    from watchdog.observers import inotify_c

    held = []
    if hasattr(inotify_c.InotifyFD, "_coalesce_event_buffer"):
        original = inotify_c.InotifyFD._coalesce_event_buffer

        def coalescing(self, first_chunk, deadline):
            held.append(len(first_chunk))
            return original(self, first_chunk, deadline)

        monkeypatch.setattr(inotify_c.InotifyFD, "_coalesce_event_buffer", coalescing)
    (folder,) = folders(tmp_path, "jobs")
    recorder = Recorder()
    observer.schedule(recorder, str(folder), event_filter=CLOSES)
    for number in range(30):
        draft = folder / f".{number}.draft"
        draft.write_text("true\n")
        draft.rename(folder / f"{number}.sh")
    wait_for(lambda: len(recorder.seen) >= 30, timeout=10, what="every draft's close")
    assert held == []
