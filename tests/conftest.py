from __future__ import annotations

import pytest

from sloth_tray.queue import Queue


class FakeClock:
    """Wall time that only moves when a test says so."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(tmp_path, clock):
    q = Queue(tmp_path / "queue.db", clock=clock, lease_seconds=10, max_attempts=3,
              backoff_cap=6)
    yield q
    q.close()
