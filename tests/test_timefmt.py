"""Durations as people read them: to the nearest of the unit shown, never rounded down
(`--delay 1h` read a moment later is `in 1h`, not `in 59m`), and never a crash."""

from __future__ import annotations

import math

import pytest

from sloth_tray.timefmt import format_duration, relative


@pytest.mark.parametrize("seconds, shown", [
    (0, "0s"), (0.4, "0s"), (0.5, "1s"), (42.5, "43s"), (59.4, "59s"),
    (59.5, "1m"),  # the carry: 60s is a minute
    (89.9, "1m"), (90, "2m"), (3599.4, "1h"), (3569.9, "59m"), (3570, "1h"),
    (3600 + 5 * 60 + 29, "1h5m"), (3600 + 5 * 60 + 30, "1h6m"),
    (86400 - 20, "1d"), (86400 - 31, "23h59m"), (1.5 * 86400, "2d"), (2.5 * 86400, "3d"),
    (-5, "0s"), (-math.inf, "0s"),  # before now: relative() says "ago" itself
    (3650 * 86400.0, "3650d"), (1e12, "11574074d"),
])
def test_a_duration_is_rounded_to_the_nearest_of_its_unit(seconds, shown):
    assert format_duration(seconds) == shown


def test_durations_no_clock_can_give_still_read_as_words():
    assert format_duration(math.inf) == "forever"
    assert format_duration(math.nan) == "an unknown time"
    assert format_duration(1e300).endswith("d")  # every digit of it, no OverflowError


def test_relative_rounds_to_the_nearest_too():
    now = 1_000_000.0
    assert relative(now + 3600 - 0.7, now) == "in 1h"
    assert relative(now - 119.6, now) == "2m ago"
    assert relative(now + 0.9, now) == "now"
