"""Conditions a job may wait for (`require=ac,network,unmetered`), and their current truth.

A due job whose condition does not hold waits: it stays pending, uses no attempt and
is not claimed; jobs without that condition run meanwhile. What is true comes from
the desktop (desktop/system.py on Linux) as events; each change calls the listeners,
so the engine looks again at once and never polls.

Where no service tells of changes (no UPower or NetworkManager, macOS, Windows), a
condition can be *probed*: read from the machine itself (desktop/probes.py). The engine
probes at most once a minute, and wakes for it only while a due job waits on a
probed condition; never when none does.

Every condition starts as holding, and a condition nothing can tell about (neither a
service nor a probe) stays holding: such jobs must never wait forever.
"""

from collections.abc import Callable, Iterable

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    from typing import Any

CONDITIONS = ("ac", "network", "unmetered")  # also the order they are written in
# What each condition waits for, as a person would say it ("waiting for AC power").
WAITING_FOR = {"ac": "AC power", "network": "a network connection",
               "unmetered": "an unmetered network"}
REQUIRE_FORM = "ac, network or unmetered, several joined with commas (require=ac,network)"

Listener = Callable[[frozenset[str]], None]
# Reads conditions from the machine: name -> holds (None: cannot tell, taken as holding).
Probe = Callable[[], dict[str, "bool | None"]]


def parse_require(value: "Any") -> str:
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


def parse_yes_no(value: "Any") -> bool:
    """`interrupt=yes` / `no` (a bool from a program too)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("yes", "no"):
        return value.lower() == "yes"
    raise ValueError(YES_NO_FORM)


def required(options: "dict[str, Any]") -> tuple[str, ...]:
    """The conditions a job's options require."""
    text = options.get("require")
    return tuple(text.split(",")) if isinstance(text, str) and text else ()


def waiting_for(options: "dict[str, Any]", unmet: Iterable[str]) -> str | None:
    """What a job waits for while `unmet` do not hold ("AC power"), or None."""
    missing = [name for name in required(options) if name in set(unmet)]
    return " and ".join(WAITING_FOR[name] for name in missing) or None


class Conditions:
    """The current truth of each condition, safe to share between threads.

    With a `start`, what tells them (the system bus, a probe) begins only when a due
    job first waits on one (`start_telling`): a queue with no require= job never
    pays for it. Until then none is known, so none holds: a job that requires AC
    power never starts on battery for want of a first reading.
    """

    def __init__(self, start: Callable[[], None] | None = None) -> None:
        self._start = start
        self._holds = dict.fromkeys(CONDITIONS, start is None)
        import threading  # here: `list` reads a job's require= without loading it

        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._probes: dict[str, Probe] = {}  # condition -> what reads it, where probed
        self._batches = 0  # readings under way that are told as one (`reading`)
        self._before: frozenset[str] = frozenset()  # what was unmet as the first began

    @property
    def told(self) -> bool:
        """Whether what tells the conditions has begun (or there is nothing to begin)."""
        with self._lock:
            return self._start is None

    def start_telling(self) -> None:
        """Begin what tells the conditions, once; it sets each as it learns it."""
        with self._lock:
            start, self._start = self._start, None
        if start is not None:
            start()

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
        """Record what a source says; listeners hear only of real changes (within a
        `reading`, once it is whole)."""
        with self._lock:
            if self._holds[name] == holds:
                return
            self._holds[name] = holds
            if self._batches:
                return
            unmet = self._unmet_now()
        self._tell(unmet)

    def reading(self) -> "_OneLook":
        """Several conditions read as one look (a probe of two, a service's properties,
        the first look at all of them): listeners hear its outcome once, never a
        moment of it ("not met: network, unmetered" while the network is being read)."""
        return _OneLook(self)

    def _look_begins(self) -> None:
        with self._lock:
            if not self._batches:
                self._before = self._unmet_now()
            self._batches += 1

    def _look_ends(self) -> None:
        with self._lock:
            self._batches -= 1
            before, unmet = self._before, self._unmet_now()
        if not self._batches and unmet != before:  # the outermost look is whole
            self._tell(unmet)

    def _unmet_now(self) -> frozenset[str]:
        return frozenset(name for name, holds in self._holds.items() if not holds)

    def _tell(self, unmet: frozenset[str]) -> None:
        for listener in self._listeners:
            listener(unmet)

    # -- conditions no service tells of ------------------------------------------------

    def probe_with(self, names: Iterable[str], probe: Probe) -> None:
        """From now on `names` are read by `probe` (their source has gone), starting now."""
        with self._lock:
            for name in names:
                self._probes[name] = probe
        self.probe()

    def stop_probing(self, names: Iterable[str]) -> None:
        """A service tells of `names` again: its events, not a probe, say what holds."""
        with self._lock:
            for name in names:
                self._probes.pop(name, None)

    @property
    def probed(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._probes)

    def probe(self) -> None:
        """Read every probed condition now; a probe that fails reads as holding."""
        groups: dict[int, tuple[Probe, list[str]]] = {}
        with self._lock:
            for name, probe in self._probes.items():
                groups.setdefault(id(probe), (probe, []))[1].append(name)
        with self.reading():
            for probe, names in groups.values():
                try:
                    readings = probe()
                except Exception:  # a reading must never cost the daemon
                    readings = {}
                for name in names:
                    self.set(name, readings.get(name) is not False)


class _OneLook:
    """`with conditions.reading():`. A class, not a generator: importing contextlib
    costs `list`, which reads this module's names, half a millisecond."""

    __slots__ = ("conditions",)

    def __init__(self, conditions: Conditions) -> None:
        self.conditions = conditions

    def __enter__(self) -> None:
        self.conditions._look_begins()

    def __exit__(self, *exc: object) -> None:
        self.conditions._look_ends()
