"""Every number a user can give, the one range it must fall in, and the one check.

A script's header, config.toml, the flags and the queue's own arguments all
call these, so a value is refused with the same words wherever it comes from,
and before it reaches the database or a timer: an infinite timeout stored as
JSON `Infinity` stalls every claim, a lease of a millisecond spins a core on
heartbeats, and an integer past 64 bits cannot be stored at all.

Text is read strictly: ASCII digits in the written forms only. Python's own
parsers would take '３', '١٢', '1_000', 'inf' and 'nan', none of which a person
means as a lease.
"""

import math
import re
from collections import namedtuple
from enum import Enum

from sloth_tray.errors import SlothError
from sloth_tray.timefmt import DURATION_FORM, parse_duration

DAY = 86400.0
TEN_YEARS = 3650 * DAY
TIB = 1024**4
SIZE_UNITS = {"": 1, "b": 1, "kb": 1000, "kib": 1024, "mb": 1000**2, "mib": 1024**2,
              "gb": 1000**3, "gib": 1024**3, "tb": 1000**4, "tib": TIB}
SIZE_FORM = 'a number of bytes, or a size such as "10MiB" or "500KB"'
# ASCII patterns, compiled on first use (re keeps them): a glance reads none.
_SIZE = r"([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)"
_WHOLE = r"[0-9]+"
_MAX_DIGITS = 20  # more significant digits than any range here allows; int() of 5000 would fail
_SHOWN = 40  # a refused value is quoted up to this many characters


class Kind(Enum):
    COUNT = "a whole number"
    DURATION = "a duration"
    SIZE = "a size"


class Limit(namedtuple("Limit", ["key", "kind", "low", "high", "low_open", "note"],
                       defaults=(False, ""))):
    """The accepted range of one setting, named `key`, of a `kind`: from `low` to `high`.
    `low_open` means more than `low`, not `low` itself; `note` says what a special value
    means, such as "0: all". (A named tuple: see paths.Home.)"""

    __slots__ = ()

    # -- the words ------------------------------------------------------------

    @property
    def range_text(self) -> str:
        low, high = self._show(self.low), self._show(self.high)
        text = (f"more than {low} and at most {high}" if self.low_open
                else f"between {low} and {high}")
        return f"{text} ({self.note})" if self.note else text

    @property
    def form(self) -> str:
        """How the value is written, when that needs more words than its kind."""
        return {Kind.DURATION: DURATION_FORM, Kind.SIZE: SIZE_FORM}.get(self.kind, "")

    @property
    def accepted(self) -> str:
        """What to write instead, after "use": the form and the range."""
        if self.form:
            return f"{self.form}, {self.range_text}"
        return f"{self.kind.value} {self.range_text}"

    def refusal(self, value: object, where: str | None = None) -> str:
        """The one sentence for a value out of range, naming where it came from."""
        prefix = f"{where}: " if where else ""
        return f"{prefix}bad value {shown(value)} for {self.key}: use {self.accepted}"

    def _show(self, bound: float) -> str:
        if self.kind == Kind.DURATION:
            return compact_duration(bound)
        if self.kind == Kind.SIZE:
            return "1 byte" if bound == 1 else _compact_size(int(bound))
        return str(int(bound))

    # -- the checks -----------------------------------------------------------

    def contains(self, number: object) -> bool:
        if isinstance(number, bool) or not isinstance(number, int | float):
            return False
        if self.kind != Kind.DURATION and not isinstance(number, int):
            return False
        if isinstance(number, float) and not math.isfinite(number):
            return False
        above_low = number > self.low if self.low_open else number >= self.low
        return above_low and number <= self.high

    def convert(self, value: object) -> int | float:
        """The value (a number, or text as a person writes it) within range.

        Raises ValueError (its message: what is accepted) for anything else.
        """
        number = self._number(value)
        if not self.contains(number):
            raise ValueError(self.accepted)
        return number

    def well_formed(self, text: str) -> bool:
        """Whether `text` is written as a value of this kind is (`90s`, `10MiB`), whatever
        its range."""
        return self._number(text) is not None

    def check(self, value: object, where: str | None = None) -> int | float:
        """`convert`, refusing with SlothError: one sentence naming `where` and the key."""
        try:
            return self.convert(value)
        except ValueError:
            raise SlothError(self.refusal(value, where)) from None

    def argument(self, text: str) -> int | float:
        """An argparse `type`: argparse names the flag, this says what it takes."""
        try:
            return self.convert(text)
        except ValueError:
            import argparse  # here: a glance reads its command line without argparse

            raise argparse.ArgumentTypeError(self.not_argument(text)) from None

    def not_argument(self, text: str) -> str:
        """What is wrong with `text` given to a flag, after the flag's name."""
        form = f": use {self.form}" if self.form else ""
        return f"{shown(text)} is not {self.kind.value} {self.range_text}{form}"

    def _number(self, value: object) -> int | float | None:
        """Text or a number as a number of this kind; None when it is not one at all."""
        if isinstance(value, str):
            return self._parse(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if self.kind == Kind.DURATION:
            try:
                return float(value)
            except OverflowError:  # an int past a float's range
                return None
        return value

    def _parse(self, text: str) -> int | float | None:
        text = text.strip()
        if self.kind == Kind.COUNT:
            if not re.fullmatch(_WHOLE, text, re.ASCII) or len(text.lstrip("0")) > _MAX_DIGITS:
                return None
            return int(text)
        if self.kind == Kind.DURATION:
            try:
                return parse_duration(text)
            except ValueError:
                return None
        match = re.fullmatch(_SIZE, text.lower(), re.ASCII)
        if not match or match.group(2) not in SIZE_UNITS:
            return None
        size = float(match.group(1)) * SIZE_UNITS[match.group(2)]
        return int(size) if math.isfinite(size) else None


def shown(value: object) -> str:
    """A value as a refusal quotes it: repr (control characters escaped), shortened."""
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN - 3]}..."


def compact_duration(seconds: float) -> str:
    """A duration as a header or a flag takes it: 1h, 90m, 90s."""
    for unit, length in (("d", DAY), ("h", 3600.0), ("m", 60.0)):
        if seconds >= length and seconds % length == 0:
            return f"{int(seconds // length)}{unit}"
    return f"{seconds:g}s"


def _compact_size(size: int) -> str:
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        length = SIZE_UNITS[unit.lower()]
        if size >= length and size % length == 0:
            return f"{size // length}{unit}"
    return f"{size} bytes"


# The ranges. Each is the only statement of its bounds; README.md "Limits" lists them.
LEASE = Limit("lease", Kind.DURATION, 1.0, DAY)  # heartbeats come every lease/3
ATTEMPTS = Limit("max_attempts", Kind.COUNT, 1, 1000)
TIMEOUT = Limit("timeout", Kind.DURATION, 0.0, TEN_YEARS, low_open=True)
EVERY = Limit("every", Kind.DURATION, 1.0, TEN_YEARS)  # a faster series would spin
DELAY = Limit("delay", Kind.DURATION, 0.0, TEN_YEARS)
LOG_CAP = Limit("log_cap", Kind.SIZE, 1, TIB)
OLDER_THAN = Limit("older_than", Kind.DURATION, 0.0, TEN_YEARS)
LIST_LIMIT = Limit("limit", Kind.COUNT, 0, 1_000_000, note="0: all")
OCCURRENCE = Limit("occurrence", Kind.COUNT, 1, 1_000_000)  # a step's Nth call in one run
GRACE = Limit("grace", Kind.DURATION, 60.0, TEN_YEARS)  # how late a series may be
WINDOW = Limit("window", Kind.DURATION, 60.0, TEN_YEARS)  # how late a missed time still runs
# A step's own tries (`sloth-tray step --retries/--backoff/--timeout`, step(retries=...)):
# for_jobs/sloth_step.py checks the same ranges itself (RETRIES_MAX, BACKOFF_MAX,
# TIMEOUT_MAX), since a job's Python cannot import this module.
RETRIES = Limit("retries", Kind.COUNT, 0, 100)
BACKOFF = Limit("backoff", Kind.DURATION, 0.0, DAY)  # the cap on 1, 2, 4... seconds
