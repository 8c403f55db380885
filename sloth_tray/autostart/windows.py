"""Windows: the value `sloth-tray` under the key
`HKCU\\Software\\Microsoft\\Windows\\CurrentVersion\\Run`. (A "Disable" in Task
Manager is kept elsewhere, under Explorer\\StartupApproved, and is not read here.)

winreg is imported on first use; the value is read back as the C runtime splits a
command line.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import Protocol

from sloth_tray.autostart.files import why
from sloth_tray.autostart.state import APP_ID, NOT_SET, OTHER_COMMAND, STARTS, Status
from sloth_tray.errors import SlothError

RUN_SUBKEY = r"Software\Microsoft\Windows\CurrentVersion\Run"
RUN_KEY = "HKCU\\" + RUN_SUBKEY
RUN_VALUE = APP_ID


class RunKey(Protocol):
    """The values under HKCU\\...\\CurrentVersion\\Run, by name."""

    def get(self, name: str) -> str | None: ...

    def set(self, name: str, value: str) -> None: ...

    def delete(self, name: str) -> None:
        """Remove the value; a missing value is not an error."""


def run_value(argv: Sequence[str]) -> str:
    """The Run value's data: the command line Windows will hand to CreateProcess."""
    if not argv:
        raise ValueError("the command to start at login is empty")
    return subprocess.list2cmdline(argv)


def split_run_value(line: str) -> list[str]:
    """A command line split as the C runtime splits it for the program: 2n
    backslashes before a quote are n and the quote delimits, 2n+1 are n and a
    literal quote; other backslashes are themselves (list2cmdline's inverse)."""
    args: list[str] = []
    current: list[str] | None = None  # None: between arguments
    quoted = False
    i = 0
    while i < len(line):
        c = line[i]
        if c in " \t" and not quoted:
            if current is not None:
                args.append("".join(current))
            current = None
            i += 1
            continue
        current = [] if current is None else current
        if c == "\\":
            run = len(line[i:]) - len(line[i:].lstrip("\\"))
            before_quote = i + run < len(line) and line[i + run] == '"'
            current.append("\\" * (run // 2 if before_quote else run))
            i += run
            if before_quote and run % 2:
                current.append('"')  # an escaped quote: a literal one
                i += 1
        elif c == '"':
            quoted = not quoted
            i += 1
        else:
            current.append(c)
            i += 1
    if current is not None:
        args.append("".join(current))
    return args


class WinregRunKey:
    """The real Run key, through winreg; imported on first use, so only ever on Windows."""

    def get(self, name: str) -> str | None:
        import winreg

        try:
            with winreg.OpenKey(winreg.HKEY_CURRENT_USER, RUN_SUBKEY) as key:
                value, _kind = winreg.QueryValueEx(key, name)
        except FileNotFoundError:
            return None
        return str(value)

    def set(self, name: str, value: str) -> None:
        import winreg

        with winreg.CreateKeyEx(
            winreg.HKEY_CURRENT_USER, RUN_SUBKEY, 0, winreg.KEY_SET_VALUE
        ) as key:
            winreg.SetValueEx(key, name, 0, winreg.REG_SZ, value)

    def delete(self, name: str) -> None:
        import winreg

        try:
            with winreg.OpenKey(
                winreg.HKEY_CURRENT_USER, RUN_SUBKEY, 0, winreg.KEY_SET_VALUE
            ) as key:
                winreg.DeleteValue(key, name)
        except FileNotFoundError:
            pass


class RunValue:
    where = f"{RUN_KEY}\\{RUN_VALUE}"

    def __init__(self, registry: RunKey, argv: Sequence[str]) -> None:
        self.registry = registry
        self.data = run_value(argv)

    def _get(self) -> str | None:
        try:
            return self.registry.get(RUN_VALUE)
        except OSError as exc:
            raise SlothError(f"cannot read {self.where}: {why(exc)}") from None

    def _status(self, current: str | None) -> Status:
        if current is None:
            return Status(False, self.where, NOT_SET)
        return Status(True, self.where, STARTS if current == self.data else OTHER_COMMAND,
                      tuple(split_run_value(current)))

    def status(self) -> Status:
        return self._status(self._get())

    def enable(self) -> Status:
        if self._get() != self.data:
            try:
                self.registry.set(RUN_VALUE, self.data)
            except OSError as exc:
                raise SlothError(f"cannot write {self.where}: {why(exc)}") from None
        return self.status()

    def disable(self) -> Status:
        try:
            self.registry.delete(RUN_VALUE)
        except OSError as exc:
            raise SlothError(f"cannot remove {self.where}: {why(exc)}") from None
        return self.status()
