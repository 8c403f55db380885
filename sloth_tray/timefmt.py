"""Durations and moments as people write and read them: '90s', '10m', 'in 4s', '2m ago'."""

from __future__ import annotations

import math
import re
import time

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DURATION_FORM = "a number of seconds, or a number followed by s, m, h or d (90, 90s, 10m, 2h, 1d)"
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhd]?)", re.ASCII)  # not '３' or '١٢'


def parse_duration(text: str) -> float:
    """'90' / '90s' -> 90.0, '10m' -> 600.0, '2h', '1d'. ValueError names the accepted form."""
    match = _DURATION.fullmatch(text.strip().lower())
    if not match:
        raise ValueError(f"{text!r} is not a duration: use {DURATION_FORM}")
    number, unit = match.groups()
    seconds = float(number) * UNITS[unit or "s"]
    if not math.isfinite(seconds):  # 400 digits make a float infinity, not an error
        raise ValueError(f"{text!r} is too long to be a duration: use {DURATION_FORM}")
    return seconds


def format_duration(seconds: float) -> str:
    """Compact and rounded down to what a person cares about: 42s, 4m, 1h5m, 3d."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 86400:
        hours, minutes = divmod(seconds // 60, 60)
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    return f"{seconds // 86400}d"


def relative(moment: float, now: float) -> str:
    """'in 4s', '2m ago', 'now'."""
    delta = moment - now
    if abs(delta) < 1:
        return "now"
    return f"in {format_duration(delta)}" if delta > 0 else f"{format_duration(-delta)} ago"


def clock_time(moment: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(moment))
