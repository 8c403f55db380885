"""Overdue series: a recurring job whose last success is older than its period plus a grace.

A series is the runs of one recurring job (the same name and script, with
every=, at= or cron=). It is overdue once its last success (the newest run
that ended done; for a series that never succeeded, its first run's creation)
is older than one period plus a grace. The grace is the header's `grace=`,
else half the period, and never less than MINIMUM_GRACE: a job that is a bit
late is not news.

Pure functions: the queue gives the rows (reads.recurring_series), the
moment and the time zone are arguments, so tests move time instead of waiting.
`sloth-tray status` judges series too: the records here are named tuples and
the calendar code is loaded only for a calendar series, so that a queue of
every= jobs costs the command no more than an empty one.
"""

from collections import namedtuple
from collections.abc import Iterable

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    from datetime import tzinfo
    from typing import Any

MINIMUM_GRACE = 300.0  # seconds: the default grace is half the period, but at least this

PAUSED = "paused"


class Series(namedtuple("Series", ["name", "script", "options", "last_success",
                                   "first_created", "last_error"], defaults=(None,))):
    """What the queue knows of one recurring series, read cheaply (reads.recurring_series):
    its name, script and options; `last_success`, when its newest done run ended (None:
    it never succeeded); `first_created`, when its oldest known run was queued; and
    `last_error`, when its last run failed."""

    __slots__ = ()


class OverdueJob(namedtuple("OverdueJob", ["name", "since", "reason", "ever_succeeded"],
                            defaults=("", True))):
    """A series that is overdue: `since` its last success (or its first run's creation,
    if it never succeeded), and the likely `reason`: "failing: <error>", "paused", or
    "" when nothing is known."""

    __slots__ = ()


class Verdict(namedtuple("Verdict", ["overdue", "next_change"])):
    """The overdue series (a tuple of OverdueJob), and `next_change`: the earliest moment
    a series not yet overdue becomes so (None: never)."""

    __slots__ = ()


def period_of(options: "dict[str, Any]", around: float, tz: "tzinfo | None") -> float | None:
    """every='s value; for a calendar, the gap between its two calendar times around
    `around` (the series' last success: a deadline that does not move with the clock),
    in `tz` (None: this machine's zone). None when the options repeat by nothing, or by
    a schedule that cannot be read."""
    every = options.get("every")
    if isinstance(every, int | float) and not isinstance(every, bool) and every > 0:
        return float(every)
    from sloth_tray.jobs import schedule  # here: only a calendar series needs it

    try:
        calendar = schedule.calendar_of(options)
    except schedule.BadSchedule:
        return None
    if calendar is None:
        return None
    if tz is None:
        tz = schedule.local_zone()
    before = schedule.previous_time(calendar, around, tz)
    return schedule.next_time(calendar, around, tz) - before


def grace_of(options: "dict[str, Any]", period: float) -> float:
    grace = options.get("grace")
    if isinstance(grace, int | float) and not isinstance(grace, bool) and grace > 0:
        return float(grace)
    return max(period / 2, MINIMUM_GRACE)


def deadline_of(series: Series, tz: "tzinfo | None", now: float | None = None) -> float | None:
    """The moment the series becomes overdue, unless it succeeds before; None: never.
    A last success later than `now` (by a clock that was ahead, since set right)
    counts from now: its real age is unknown, and a year's wait would hide the series."""
    since = series.last_success if series.last_success is not None else series.first_created
    if now is not None:
        since = min(since, now)
    period = period_of(series.options, since, tz)
    if period is None:
        return None
    return since + period + grace_of(series.options, period)


def find(all_series: Iterable[Series], now: float, tz: "tzinfo | None", *,
         paused: bool = False) -> Verdict:
    """The series overdue at `now` (oldest first), and when the next one will be. A
    calendar series is read in `tz`; None: this machine's zone, read only if one is."""
    overdue: list[OverdueJob] = []
    upcoming: list[float] = []
    for series in all_series:
        deadline = deadline_of(series, tz, now)
        if deadline is None:
            continue
        if deadline > now:
            upcoming.append(deadline)
            continue
        if series.last_error:
            reason = f"failing: {series.last_error}"
        else:
            reason = PAUSED if paused else ""
        succeeded = series.last_success is not None
        overdue.append(OverdueJob(
            series.name, series.last_success if succeeded else series.first_created,
            reason, ever_succeeded=succeeded))
    overdue.sort(key=lambda job: (job.since, job.name))
    return Verdict(tuple(overdue), min(upcoming, default=None))
