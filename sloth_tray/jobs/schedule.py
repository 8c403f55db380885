"""Calendar schedules (`at=`, `cron=`) and what becomes of the times a sleeping laptop missed.

Pure functions: the moment to start from and the time zone are arguments, so
tests move through daylight-saving changes without touching the machine's clock.

A calendar time is a wall-clock time in a zone. It runs at the first moment the
wall clock shows that time or later: a 02:30 that a spring-forward jump skips
runs once, at the jump; a 02:30 that an autumn fall-back shows twice runs once,
the first time.
"""

from __future__ import annotations

import math
import os
import re
from collections import namedtuple
from datetime import datetime, time, timedelta, tzinfo
from pathlib import Path

from sloth_tray import limits
from sloth_tray.timefmt import format_duration

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
CATCHUP_POLICIES = ("once", "skip")

# A run that starts within this long of its time is on time; later, its time was
# missed (the machine slept, was off, or was busy with another job).
GRACE = 60.0
# No clock change moves the wall clock by this much; looking back this far from a
# moment's wall time finds every calendar time that maps before it.
WIDEST_SHIFT = timedelta(hours=3)
# Missed times counted one by one before an event just says "more than".
COUNTED = 1000
SHOWN = 5  # missed times an event names

WINDOW = limits.WINDOW

AT_FORM = ("a time as HH:MM, several joined by commas, after the days when not every day: "
           '09:00, 09:00,17:30, mon-fri@09:00, sat,sun@10:30, or "mon-fri 09:00" in quotes')
CRON_FORM = ('five cron fields (minute hour day month weekday) in quotes, as in '
             'cron="0 9 * * 1-5"')
CATCHUP_FORM = "once (missed times become one run) or skip (missed times are dropped)"

_DAY = r"(?:mon|tue|wed|thu|fri|sat|sun)"
_DAY_ITEM = rf"{_DAY}(?:-{_DAY})?"
_CLOCK = r"[0-9]{1,2}:[0-9]{2}"
_AT = re.compile(
    rf"(?:(?P<days>{_DAY_ITEM}(?:\s*,\s*{_DAY_ITEM})*)\s*(?:@|\s)\s*)?"
    rf"(?P<times>{_CLOCK}(?:\s*,\s*{_CLOCK})*)",
    re.ASCII,
)


class BadSchedule(ValueError):
    """A schedule value that cannot be read; the message says what is accepted."""


class Calendar(namedtuple("Calendar", ["text", "days", "times", "cron"],
                          defaults=(frozenset(range(7)), (), None))):
    """When a job runs: on `days` (0 is Monday) at `times` (datetime.time), or by a
    `cron` expression. `text` is the canonical form, kept in the job's options.
    (Named tuples here and in overdue.py: `status` judges series without dataclasses.)"""

    __slots__ = ()

    def wall_times_from(self, start: datetime) -> Iterator[datetime]:
        """Wall-clock times (naive) at or after `start`, ascending, without end."""
        if self.cron is not None:
            from croniter import croniter  # here: only cron= jobs pay for it

            walker = croniter(self.cron, start - timedelta(minutes=1))
            while True:
                wall = walker.get_next(datetime)
                if wall >= start:
                    yield wall
        day = start.date()
        while True:
            if day.weekday() in self.days:
                for clock in self.times:
                    wall = datetime.combine(day, clock)
                    if wall >= start:
                        yield wall
            day += timedelta(days=1)

    def wall_times_back(self, start: datetime) -> Iterator[datetime]:
        """Wall-clock times (naive) at or before `start`, descending, without end."""
        if self.cron is not None:
            from croniter import croniter

            walker = croniter(self.cron, start + timedelta(minutes=1))
            while True:
                wall = walker.get_prev(datetime)
                if wall <= start:
                    yield wall
        day = start.date()
        while True:
            if day.weekday() in self.days:
                for clock in reversed(self.times):
                    wall = datetime.combine(day, clock)
                    if wall <= start:
                        yield wall
            day -= timedelta(days=1)


# -- reading schedules ---------------------------------------------------------------------


def parse_at(text: str) -> Calendar:
    """`09:00`, `09:00,17:30`, `mon-fri@09:00`, `sat,sun 10:30`; BadSchedule names the forms."""
    match = _AT.fullmatch(text.strip().lower())
    if not match:
        raise BadSchedule(AT_FORM)
    times = []
    for item in re.split(r"\s*,\s*", match.group("times")):
        hour, minute = (int(part) for part in item.split(":"))
        if hour > 23 or minute > 59:
            raise BadSchedule(AT_FORM)
        times.append(time(hour, minute))
    days_text = re.sub(r"\s+", "", match.group("days") or "")
    days = frozenset(range(7))
    if days_text:
        days = frozenset(day for item in days_text.split(",") for day in _day_range(item))
    clocks = ",".join(f"{clock:%H:%M}" for clock in sorted(set(times)))
    return Calendar(text=f"{days_text} {clocks}" if days_text else clocks, days=days,
                    times=tuple(sorted(set(times))))


def _day_range(item: str) -> list[int]:
    first, _, last = item.partition("-")
    start = DAY_NAMES.index(first)
    end = DAY_NAMES.index(last) if last else start
    return [(start + step) % 7 for step in range((end - start) % 7 + 1)]  # fri-mon wraps


def parse_cron(text: str) -> Calendar:
    """Five cron fields, read by croniter; one that never fires (`0 0 30 2 *`) is refused."""
    fields = text.split()
    if len(fields) != 5 or not text.isascii():
        raise BadSchedule(CRON_FORM)
    expression = " ".join(fields)
    from croniter import CroniterError, croniter

    try:
        if not croniter.is_valid(expression):
            raise BadSchedule(CRON_FORM)
        croniter(expression, datetime(2000, 1, 1)).get_next(datetime)
    except (CroniterError, ValueError, KeyError, IndexError, OverflowError) as exc:
        if isinstance(exc, BadSchedule):
            raise
        raise BadSchedule(CRON_FORM) from None
    return Calendar(text=expression, cron=expression)


def parse_catchup(text: str) -> str:
    policy = text.strip().lower()
    if policy not in CATCHUP_POLICIES:
        raise BadSchedule(CATCHUP_FORM)
    return policy


def calendar_of(options: dict[str, Any]) -> Calendar | None:
    """The calendar of a job's options, or None for a job that does not repeat by one."""
    if options.get("at") is not None:
        return parse_at(str(options["at"]))
    if options.get("cron") is not None:
        return parse_cron(str(options["cron"]))
    return None


# -- calendar times as moments -------------------------------------------------------------


def local_zone() -> tzinfo:
    """This machine's time zone, with its daylight-saving rules (not a fixed offset)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # here: only calendar work needs it

    name = os.environ.get("TZ", "").lstrip(":")
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
    for path in (Path("/etc/localtime"),):
        try:
            with open(path, "rb") as file:
                return ZoneInfo.from_file(file, key="localtime")
        except (OSError, ValueError):
            pass
    try:
        from dateutil.tz import tzlocal  # croniter's own dependency: the OS's rules

        return tzlocal()
    except ImportError:  # pragma: no cover - a fixed offset is the last resort
        return datetime.now().astimezone().tzinfo or ZoneInfo("UTC")


def wall_clock(moment: float, tz: tzinfo) -> datetime:
    return datetime.fromtimestamp(moment, tz).replace(tzinfo=None)


def first_moment(wall: datetime, tz: tzinfo) -> float:
    """The first moment the wall clock in `tz` shows `wall` or later.

    One moment when the time exists once; the earlier of two when it happens
    twice (clocks turned back); the jump itself when clocks skip over it.
    """
    before = wall.replace(tzinfo=tz, fold=0).timestamp()
    after = wall.replace(tzinfo=tz, fold=1).timestamp()
    low, high = min(before, after), max(before, after)
    if low == high or wall_clock(low, tz) == wall:
        return low
    # In a gap: the wall clock passes `wall` at the jump, a whole second between them.
    low_s, high_s = math.floor(low), math.ceil(high)
    while high_s - low_s > 1:
        middle = (low_s + high_s) // 2
        if wall_clock(middle, tz) >= wall:
            high_s = middle
        else:
            low_s = middle
    return float(high_s)


def next_time(calendar: Calendar, after: float, tz: tzinfo) -> float:
    """The first calendar time strictly after the moment `after`."""
    # A wall time before after's own maps to a moment at or before it: start there.
    for wall in calendar.wall_times_from(wall_clock(after, tz)):
        moment = first_moment(wall, tz)
        if moment > after:
            return moment
    raise AssertionError("a calendar has times without end")  # pragma: no cover


def previous_time(calendar: Calendar, at_or_before: float, tz: tzinfo) -> float:
    """The last calendar time at or before the moment `at_or_before`."""
    # While clocks are turned back, a later wall time can map to an earlier moment.
    for wall in calendar.wall_times_back(wall_clock(at_or_before, tz) + WIDEST_SHIFT):
        moment = first_moment(wall, tz)
        if moment <= at_or_before:
            return moment
    raise AssertionError("a calendar has times without end")  # pragma: no cover


def times_between(calendar: Calendar, start: float, end: float, tz: tzinfo,
                  limit: int = COUNTED) -> list[float]:
    """Calendar times in [start, end], oldest first, at most `limit` of them."""
    found: list[float] = []
    for wall in calendar.wall_times_from(wall_clock(start, tz)):
        moment = first_moment(wall, tz)
        if moment > end or len(found) >= limit:
            break
        if moment >= start and (not found or moment > found[-1]):  # a gap's times run once
            found.append(moment)
    return found


# -- missed times --------------------------------------------------------------------------


class CatchUp(namedtuple("CatchUp", ["run_now", "kept", "kept_more", "dropped",
                                     "dropped_more", "latest", "next_due", "reason"])):
    """What to do with a run whose time passed while nothing could start it:
    - run_now: one run now, standing for `kept`, the missed times it stands for
      (oldest first, capped; `kept_more`: more than COUNTED of them);
    - dropped, dropped_more: the missed times dropped, likewise, and `reason`, why;
    - latest: the latest time the run now stands for (the series' clock);
    - next_due: when the series is next due, when nothing runs now."""

    __slots__ = ()


def is_late(scheduled: float, now: float) -> bool:
    return now - scheduled > GRACE


def catch_up(calendar: Calendar, scheduled: float, now: float, tz: tzinfo, *,
             catchup: str = "once", window: float | None = None) -> CatchUp:
    """Sort the times from `scheduled` to `now` into those one run now stands for and
    those dropped: `skip` drops every time not within GRACE of now; `once` keeps
    them all as one run, but a `window` drops those older than it."""
    if catchup == "skip":
        boundary, reason = now - GRACE, "catchup=skip drops missed times"
    elif window is not None:
        boundary = now - window
        reason = f"they are older than the window of {format_duration(window)}"
    else:
        boundary, reason = -math.inf, ""
    dropped = _missed(calendar, scheduled, min(boundary, now), tz)
    kept = _missed(calendar, max(scheduled, math.nextafter(boundary, math.inf)), now, tz,
                   scheduled=scheduled)
    run_now = bool(kept)
    latest = max(previous_time(calendar, now, tz), scheduled) if run_now else scheduled
    return CatchUp(run_now=run_now, kept=tuple(kept[:COUNTED]), kept_more=len(kept) > COUNTED,
                   dropped=tuple(dropped[:COUNTED]), dropped_more=len(dropped) > COUNTED,
                   latest=latest, next_due=next_time(calendar, now, tz), reason=reason)


def _missed(calendar: Calendar, start: float, end: float, tz: tzinfo, *,
            scheduled: float | None = None) -> list[float]:
    """The series' times in [start, end], up to one more than COUNTED. `scheduled`
    (the run's own time, which a retry may have set off the calendar) counts when
    it lies in the range."""
    if start > end:
        return []
    found = times_between(calendar, start, end, tz, COUNTED + 1)
    own = start if scheduled is None else scheduled
    if start <= own <= end and own not in found:
        found.insert(0, own)
    return found


def describe(times: tuple[float, ...], more: bool, tz: tzinfo) -> str:
    """'3 times: 2026-03-02 09:00 CET, ...' for a history event."""
    shown = [datetime.fromtimestamp(t, tz).strftime("%Y-%m-%d %H:%M %Z").strip()
             for t in times[:SHOWN]]
    if more:
        count = f"more than {COUNTED} times"
    else:
        count = "1 time" if len(times) == 1 else f"{len(times)} times"
    rest = len(times) - len(shown)
    tail = f" and {rest} more" if rest > 0 else (" and more" if more else "")
    return f"{count}: {', '.join(shown)}{tail}"
