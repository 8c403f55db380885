"""Conditions a job may wait for (`require=ac,network,unmetered`), and their current truth.

A due job whose condition does not hold waits: it stays pending, uses no attempt and
is not claimed; jobs without that condition run meanwhile. What is true comes from
the desktop (desktop/power.py on Linux) as events; each change calls the listeners,
so the engine looks again at once and never polls.

Every condition starts as holding, and a condition nothing can tell about (no UPower,
no NetworkManager, no system bus) stays holding: a machine without those services
must never keep such jobs waiting forever.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

CONDITIONS = ("ac", "network", "unmetered")  # also the order they are written in
# What each condition waits for, as a person would say it ("waiting for AC power").
WAITING_FOR = {"ac": "AC power", "network": "a network connection",
               "unmetered": "an unmetered network"}
REQUIRE_FORM = "ac, network or unmetered, several joined with commas (require=ac,network)"

Listener = Callable[[frozenset[str]], None]


def parse_require(value: Any) -> str:
    """The canonical `require=` value ("ac,network"): known words, each once, in
    CONDITIONS order. A list of words is read too (options pushed by a program)."""
    if isinstance(value, str):
        words = value.split(",")
    elif isinstance(value, (list, tuple)) and all(isinstance(word, str) for word in value):
        words = list(value)
    else:
        raise ValueError(value)
    wanted = {word.strip().lower() for word in words}
    if not wanted or not wanted <= set(CONDITIONS):
        raise ValueError(value)
    return ",".join(name for name in CONDITIONS if name in wanted)


YES_NO_FORM = "yes or no"


def parse_yes_no(value: Any) -> bool:
    """`interrupt=yes` / `no` (a bool from a program too)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("yes", "no"):
        return value.lower() == "yes"
    raise ValueError(YES_NO_FORM)


def required(options: dict[str, Any]) -> tuple[str, ...]:
    """The conditions a job's options require."""
    text = options.get("require")
    return tuple(text.split(",")) if isinstance(text, str) and text else ()


def waiting_for(options: dict[str, Any], unmet: Iterable[str]) -> str | None:
    """What a job waits for while `unmet` do not hold ("AC power"), or None."""
    missing = [name for name in required(options) if name in set(unmet)]
    return " and ".join(WAITING_FOR[name] for name in missing) or None


class Conditions:
    """The current truth of each condition, safe to share between threads."""

    def __init__(self) -> None:
        self._holds = dict.fromkeys(CONDITIONS, True)
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        """`listener(unmet)` is called, on the reporting thread, after each change."""
        self._listeners.append(listener)

    def holds(self, name: str) -> bool:
        with self._lock:
            return self._holds[name]

    def unmet(self) -> frozenset[str]:
        with self._lock:
            return frozenset(name for name, holds in self._holds.items() if not holds)

    def set(self, name: str, holds: bool) -> None:
        """Record what a source says; listeners hear only of real changes."""
        with self._lock:
            if self._holds[name] == holds:
                return
            self._holds[name] = holds
            unmet = frozenset(n for n, h in self._holds.items() if not h)
        for listener in self._listeners:
            listener(unmet)
