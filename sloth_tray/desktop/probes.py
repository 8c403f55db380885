"""Conditions read from the machine itself, where no service tells of their changes.

On a Linux desktop UPower and NetworkManager say when AC power or the network change
(system.py). Without them (a minimal install, a server), and on macOS and
Windows for now, these readings stand in; the engine takes them at most once a
minute, and only while a due job waits on them. A reading that cannot tell is None,
which counts as holding.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from sloth_tray.jobs.conditions import WAITING_FOR, Conditions

Reading = Callable[[], "bool | None"]

# Power supplies that feed the machine from the wall (Linux's power_supply "type").
EXTERNAL_SUPPLIES = ("Mains", "USB", "UPS", "Wireless")
RTF_UP = 0x1


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def linux_ac(sys_root: Path = Path("/sys")) -> bool | None:
    """On AC power: an external supply online; a laptop's battery with none online is
    not. None where the machine has no battery and no supply to tell (a desktop, a
    virtual machine)."""
    try:
        supplies = list((sys_root / "class/power_supply").iterdir())
    except OSError:
        return None
    battery = False
    for supply in supplies:
        kind = _text(supply / "type")
        if kind in EXTERNAL_SUPPLIES and _text(supply / "online") == "1":
            return True
        # A mouse's or a headset's battery has scope "Device": not the machine's.
        if kind == "Battery" and _text(supply / "scope") != "Device":
            battery = True
    return False if battery else None


def linux_network(proc_root: Path = Path("/proc")) -> bool | None:
    """A default route is up (IPv4 or IPv6). None when neither table can be read."""
    ipv4 = _text(proc_root / "net/route")
    ipv6 = _text(proc_root / "net/ipv6_route")
    if ipv4 is None and ipv6 is None:
        return None
    for line in (ipv4 or "").splitlines()[1:]:  # a header line first
        fields = line.split()
        if len(fields) >= 4 and fields[1] == "00000000" and int(fields[3], 16) & RTF_UP:
            return True
    for line in (ipv6 or "").splitlines():
        fields = line.split()
        # destination ::/0, not through the loopback device (its "unreachable" entry)
        if len(fields) >= 10 and fields[0] == "0" * 32 and fields[1] == "00" \
                and fields[9] != "lo":
            return True
    return False


def ac_from_pmset(text: str) -> bool | None:
    """macOS: `pmset -g batt` begins "Now drawing from 'AC Power'" or "'Battery Power'"."""
    first = text.splitlines()[0] if text else ""
    if "'AC Power'" in first:
        return True
    if "'Battery Power'" in first:
        return False
    return None


def macos_ac() -> bool | None:
    try:
        done = subprocess.run(["pmset", "-g", "batt"], capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return ac_from_pmset(done.stdout)


def windows_ac() -> bool | None:
    """GetSystemPowerStatus's ACLineStatus: 1 online, 0 offline, 255 unknown."""
    import ctypes
    from ctypes import wintypes

    class PowerStatus(ctypes.Structure):
        _fields_ = [("ACLineStatus", wintypes.BYTE), ("BatteryFlag", wintypes.BYTE),
                    ("BatteryLifePercent", wintypes.BYTE), ("SystemStatusFlag", wintypes.BYTE),
                    ("BatteryLifeTime", wintypes.DWORD), ("BatteryFullLifeTime", wintypes.DWORD)]

    status = PowerStatus()
    if not ctypes.windll.kernel32.GetSystemPowerStatus(ctypes.byref(status)):
        return None
    return {1: True, 0: False}.get(status.ACLineStatus & 0xFF)


def readings(platform: str = sys.platform) -> dict[str, Reading]:
    """The conditions this platform can read, and how. `unmetered` has no reading
    anywhere yet: without NetworkManager it counts as holding."""
    if platform.startswith("linux"):
        return {"ac": linux_ac, "network": linux_network}
    if platform == "darwin":
        return {"ac": macos_ac}
    if platform == "win32":
        return {"ac": windows_ac}
    return {}


def fall_back(conditions: Conditions, names: tuple[str, ...],
              table: dict[str, Reading] | None = None) -> str:
    """`names` have no service telling of them: probe those this machine can read
    (`table`: this platform's readings), the rest hold; listeners hear the outcome
    once. Returns what was done, for the one log line that says so."""
    table = readings() if table is None else table
    readable = tuple(name for name in names if name in table)
    unreadable = tuple(name for name in names if name not in table)
    with conditions.reading():
        if readable:
            conditions.probe_with(readable, lambda: {name: table[name]() for name in readable})
        for name in unreadable:
            conditions.set(name, True)  # nothing can tell: a job never waits for it forever
    said = []
    if readable:
        one = len(readable) == 1
        said.append(f"{_words(readable)} {'is' if one else 'are'} read from this machine "
                    f"instead, once a minute while a job waits for {'it' if one else 'them'}")
    if unreadable:
        said.append(f"{_words(unreadable)} cannot be known here: "
                    f"require={','.join(unreadable)} is taken as met")
    return "; ".join(said)


def _words(names: tuple[str, ...]) -> str:
    return " and ".join(WAITING_FOR[name] for name in names)
