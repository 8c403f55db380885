"""When a recurring series runs next, by the rules its user states. Pure.

A series is the runs of one job with `every=`, `at=` or `cron=`. Each run carries
`scheduled`, the series' clock: the time the schedule gave that run. The rules:

- A run that started late (the laptop slept, the queue was paused, another job
  ran long) stands for every time it missed: the series goes on from when it
  started. every= is next due one period after that start; a calendar at its
  first time after it. So two runs of a series never follow back to back.
- A run that started before its time was made due by hand (run-now, or a retry
  that started the series again): it is an extra run, and the series' next run
  stays at that time. Run-now never moves the schedule.
- Retrying the run that was waiting when the series was cancelled starts the
  series again: one run now, and the next at the series' next time.
- A clock set back (a wrong clock corrected) keeps each waiting job's own wait:
  what it had left to wait when it was queued counts again from now, and a
  calendar run goes to its calendar time nearest to that.

Moments and the zone are arguments, so tests move time instead of waiting.
"""

from __future__ import annotations

from sloth_tray.jobs import schedule

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    from datetime import tzinfo
    from typing import Any

# A clock set back by less than this changes no due time: clocks that processes read
# a moment apart, and small steps of time synchronisation, are not a correction.
CLOCK_SLACK = 1.0


def repeats(options: dict[str, Any]) -> bool:
    """Whether these options make a series (every=, at= or cron=)."""
    return bool(options.get("every")) or options.get("at") is not None \
        or options.get("cron") is not None


def _every(options: dict[str, Any]) -> float | None:
    every = options.get("every")
    return float(every) if every else None


def next_time_after(options: dict[str, Any], moment: float, tz: tzinfo) -> float:
    """The series' first time after `moment`: one period on for every=, else the first
    calendar time strictly after it (a calendar that cannot be read raises BadSchedule)."""
    every = _every(options)
    if every is not None:
        return moment + every
    calendar = schedule.calendar_of(options)
    if calendar is None:
        raise schedule.BadSchedule("the job does not repeat")
    return schedule.next_time(calendar, moment, tz)


def next_due(options: dict[str, Any], started: float, now: float, tz: tzinfo) -> float:
    """When the run after this one is due: this run was scheduled at
    options["scheduled"], its last attempt started at `started`, and it ends `now`.

    Started before its time: an extra run by hand; the next stays at that time.
    Otherwise the next comes after the start (a late start stood for what it missed).
    `now` bounds both, for a clock set back while the run ran."""
    started = min(started, now)
    scheduled = float(options.get("scheduled", started))
    if started < scheduled:
        return min(scheduled, next_time_after(options, now, tz))
    return next_time_after(options, started, tz)


def nearest_calendar_time(options: dict[str, Any], moment: float, after: float,
                          tz: tzinfo) -> float:
    """The calendar time nearest to `moment` that is later than `after`."""
    calendar = schedule.calendar_of(options)
    if calendar is None:
        raise schedule.BadSchedule("the job does not repeat by a calendar")
    later = schedule.next_time(calendar, moment, tz)
    earlier = schedule.previous_time(calendar, moment, tz)
    if earlier > after and moment - earlier <= later - moment:
        return earlier
    return later


def reanchored(options: dict[str, Any], not_before: float, changed: float, now: float,
               tz: tzinfo) -> float:
    """When a job last changed at `changed`, due at `not_before`, is due now that the
    clock reads `now`, earlier than `changed`: the wait it had counts from now. A
    calendar run at its calendar time goes to the calendar time nearest to that,
    which keeps it off a time the series ran by the wrong clock unless the clock
    moved by most of a period."""
    wait = max(not_before - changed, 0.0)
    at_its_time = options.get("scheduled") == not_before and (
        options.get("at") is not None or options.get("cron") is not None)
    if at_its_time:
        return nearest_calendar_time(options, now + wait, now, tz)
    return now + wait
