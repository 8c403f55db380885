"""What a dropped file is: its job name, how to run it, and its `# sloth:` options.

Pure functions over a file's first bytes; nothing here spawns anything.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from sloth_tray import limits
from sloth_tray.errors import SlothError

HEADER_LINES = 20  # options must sit among the first lines, like a shebang's neighbours
HEAD_BYTES = 64 * 1024


class BadJobFile(SlothError):
    """The file cannot become a runnable job; retrying will not change that."""


def job_name(path: Path) -> str:
    return path.stem or path.name


def read_head(path: Path) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read(HEAD_BYTES)
    except OSError as exc:
        raise BadJobFile(f"cannot read {path.name}: {exc.strerror}") from None


# -- how to run it ----------------------------------------------------------


def python_for_jobs() -> str:
    """The Python that runs .py jobs: the app's own, unless the app is a frozen
    bundle (then sys.executable is the app, not an interpreter)."""
    if not getattr(sys, "frozen", False):
        return sys.executable
    return shutil.which("python3") or shutil.which("python") or "python3"


def _by_extension(suffix: str, windows: bool) -> list[str] | None:
    if suffix == ".py":
        return [python_for_jobs()]
    if suffix == ".sh":
        return ["/bin/sh"] if not windows else None
    if suffix == ".bash":
        return [shutil.which("bash") or "bash"]
    if windows and suffix in (".bat", ".cmd"):
        return ["cmd.exe", "/d", "/c"]
    if windows and suffix == ".ps1":
        return ["powershell.exe", "-NoProfile", "-ExecutionPolicy", "Bypass", "-File"]
    return None


def command_for(
    path: Path, head: bytes | None = None, *, windows: bool = os.name == "nt"
) -> list[str]:
    """The argv that runs the script: its #! line, else its extension.

    The script need not be executable: we run its interpreter on it. Like the
    kernel, everything after the interpreter on the #! line is one argument.
    """
    if head is None:
        head = read_head(path)
    first_line = head.split(b"\n", 1)[0].rstrip(b"\r")
    if first_line.startswith(b"#!"):
        shebang = first_line[2:].decode("utf-8", "replace").strip()
        if not shebang:
            raise BadJobFile(f"{path.name} has an empty #! line: name an interpreter after #!")
        interpreter, _, argument = shebang.partition(" ")
        return [interpreter, *([argument.strip()] if argument.strip() else []), str(path)]
    prefix = _by_extension(path.suffix.lower(), windows)
    if prefix is None:
        known = ".py, .sh, .bash, .bat, .cmd or .ps1" if windows else ".py or .sh"
        raise BadJobFile(f"don't know how to run {path.name}: add a #! line or name it {known}")
    return [*prefix, str(path)]


# -- the `# sloth:` header ----------------------------------------------------

_HEADER = re.compile(r"^\s*(?:#|//|--|;|rem\b|::)\s*sloth:(.*)$", re.IGNORECASE)


# Each option's range lives in limits, shared with config.toml, the flags and the queue.
OPTIONS: dict[str, limits.Limit] = {
    "max_attempts": limits.ATTEMPTS,  # tries before the job is failed for good
    "timeout": limits.TIMEOUT,  # an attempt running longer is stopped
    "delay": limits.DELAY,  # wait this long after the drop before the first run
    "lease": limits.LEASE,  # how long a silent worker keeps the job
    "every": limits.EVERY,  # run again this long after each due time
}


def parse_options(head: bytes, filename: str = "the script") -> dict[str, Any]:
    """The options of the first `sloth:` comment line among the first 20 lines."""
    lines = head.decode("utf-8", "replace").splitlines()[:HEADER_LINES]
    for number, line in enumerate(lines, start=1):
        match = _HEADER.match(line)
        if match:
            return _parse_settings(match.group(1), f"{filename}, line {number}")
    return {}


def _parse_settings(text: str, where: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for item in text.split():
        key, equals, value = item.partition("=")
        key = key.strip().lower()
        if key not in OPTIONS:
            known = ", ".join(sorted(OPTIONS))
            raise BadJobFile(f"{where}: unknown option {limits.shown(key)} in the sloth: header "
                             f"(known: {known})")
        if not equals or not value:
            raise BadJobFile(f"{where}: {key} needs a value, as in {key}=...")
        try:
            options[key] = OPTIONS[key].convert(value)
        except ValueError:
            raise BadJobFile(OPTIONS[key].refusal(value, where)) from None
    return options
