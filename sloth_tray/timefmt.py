"""Durations and moments as people write and read them: '90s', '10m', 'in 4s', '2m ago'."""

import math
import re
import time

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DURATION_FORM = "a number of seconds, or a number followed by s, m, h or d (90, 90s, 10m, 2h, 1d)"
# Patterns are compiled on first use (re keeps them): a command that reads none pays nothing.
_DURATION = r"([0-9]+(?:\.[0-9]+)?)([smhd]?)"  # ASCII: not '３' or '١٢'


def parse_duration(text: str) -> float:
    """'90' / '90s' -> 90.0, '10m' -> 600.0, '2h', '1d'. ValueError names the accepted form."""
    match = re.fullmatch(_DURATION, text.strip().lower(), re.ASCII)
    if not match:
        raise ValueError(f"{text!r} is not a duration: use {DURATION_FORM}")
    number, unit = match.groups()
    seconds = float(number) * UNITS[unit or "s"]
    if not math.isfinite(seconds):  # 400 digits make a float infinity, not an error
        raise ValueError(f"{text!r} is too long to be a duration: use {DURATION_FORM}")
    return seconds


def nearest_whole(number: float) -> int:
    """Half up, as a person rounds (round() takes 0.5 to 0 and 2.5 to 2)."""
    return math.floor(number + 0.5)


def format_duration(seconds: float) -> str:
    """Compact, to the nearest of the unit shown: 42s, 4m, 1h5m, 3d. Never rounded down:
    an hour's wait read a moment later is 1h, not 59m (59.5s is 1m, 59m30s is 1h)."""
    if math.isnan(seconds):
        return "an unknown time"
    if seconds == math.inf:
        return "forever"
    seconds = max(0.0, seconds)
    if nearest_whole(seconds) < 60:
        return f"{nearest_whole(seconds)}s"
    minutes = nearest_whole(seconds / 60)
    if minutes < 60:
        return f"{minutes}m"
    if minutes < 24 * 60:
        hours, minutes = divmod(minutes, 60)
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    return f"{nearest_whole(seconds / 86400)}d"


def relative(moment: float, now: float) -> str:
    """'in 4s', '2m ago', 'now'."""
    delta = moment - now
    if abs(delta) < 1:
        return "now"
    return f"in {format_duration(delta)}" if delta > 0 else f"{format_duration(-delta)} ago"


def clock_time(moment: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(moment))
