"""An entry that is one file we write whole (the XDG desktop file, the launchd agent):
read, judged, written atomically, removed; an OSError as one sentence.

Written (temp file, fsync, 0644, rename) only when missing, or ours and different;
removed only when ours.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Generic, TypeVar

from sloth_tray.autostart.state import NOT_SET, Status
from sloth_tray.errors import SlothError

Parsed = TypeVar("Parsed")


class FileEntry(Generic[Parsed]):
    """Start at login as the file `path` holding `content`, judged by what it parses to.

    The OS's class says how the file reads (`parse`), whether it is ours (`ours`:
    nothing else is ever rewritten or removed) and what a file that is there
    means (`judge`). No file: not set. `enable` writes only when the file is
    missing or ours and different; `disable` removes only ours. Both answer
    with the status read afterwards.
    """

    def __init__(self, path: Path, content: bytes) -> None:
        self.path = path
        self.content = content

    def parse(self, data: bytes) -> Parsed:
        raise NotImplementedError

    def ours(self, parsed: Parsed) -> bool:
        raise NotImplementedError

    def judge(self, parsed: Parsed) -> Status:
        raise NotImplementedError

    def _read(self) -> tuple[bytes, Parsed] | None:
        data = read_bytes(self.path)
        return None if data is None else (data, self.parse(data))

    def _status(self, current: tuple[bytes, Parsed] | None) -> Status:
        if current is None:
            return Status(False, str(self.path), NOT_SET)
        return self.judge(current[1])

    def status(self) -> Status:
        return self._status(self._read())

    def enable(self) -> Status:
        current = self._read()
        if current is not None and (not self.ours(current[1]) or current[0] == self.content):
            return self._status(current)
        write_atomic(self.path, self.content)
        return self.status()

    def disable(self) -> Status:
        current = self._read()
        if current is not None and self.ours(current[1]):
            remove(self.path)
        return self.status()


def why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def read_bytes(path: Path) -> bytes | None:
    """The file's bytes; None when there is no file."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SlothError(f"cannot read {path}: {why(exc)}") from None


def write_atomic(path: Path, data: bytes) -> None:
    """Write through a temp file in the same folder, so a crash never leaves half a file
    for the desktop to read at the next login."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SlothError(f"cannot create {path.parent}: {why(exc)}") from None
    try:
        # The suffix keeps the desktop and launchd from reading a temp file as an entry.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise SlothError(f"cannot write {path}: {why(exc)}") from None
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        # mkstemp makes 0600; these files are usually 0644, and launchd refuses
        # an agent that others can write to.
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise SlothError(f"cannot write {path}: {why(exc)}") from None


def remove(path: Path) -> None:
    """Remove the file; a missing one is not an error."""
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise SlothError(f"cannot remove {path}: {why(exc)}") from None
