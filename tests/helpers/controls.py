"""The menu's controls as a test holds them: what the menu asked for is remembered."""

from __future__ import annotations

import threading


class Recorder:
    """The menu's controls (presenter.Controls), remembering what the menu asked for,
    with what, and on which thread; a control named in `failing` raises."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.threads: set[str] = set()
        self.failing: set[str] = set()

    def __getattr__(self, name: str):
        def control(*args):
            self.threads.add(threading.current_thread().name)
            self.calls.append((name, *args))
            if name in self.failing:
                raise OSError(f"{name} could not open anything")
        return control
