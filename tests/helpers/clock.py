"""Time a test sets: a clock that moves only when told, and Berlin's calendar."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo


class FakeClock:
    """Wall time that only moves when a test says so."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# Calendar tests read times in Europe/Berlin, which moves its clocks on 2026-03-29
# (02:00 -> 03:00) and 2026-10-25 (03:00 -> 02:00).
BERLIN = ZoneInfo("Europe/Berlin")


def berlin(year, month, day, hour, minute, fold=0) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=BERLIN, fold=fold).timestamp()
