"""Settings: defaults, then config.toml, then the environment, then flags.

Every effective value remembers where it came from, so `sloth-tray config`
can say so. A bad file is refused with one sentence naming the file, the line
and the key: the app does not start on a guess.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs

from sloth_tray.errors import SlothError
from sloth_tray.paths import APP_NAME, JOBS_ENV
from sloth_tray.timefmt import DURATION_FORM, parse_duration

CONFIG_ENV = "SLOTH_TRAY_CONFIG"
SIZE_UNITS = {"": 1, "b": 1, "kib": 1024, "kb": 1000, "mib": 1024**2, "mb": 1000**2,
              "gib": 1024**3, "gb": 1000**3}


def default_path() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME, appauthor=False)) / "config.toml"


def _duration(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(DURATION_FORM)
    try:
        seconds = float(value) if not isinstance(value, str) else parse_duration(value)
    except ValueError:
        raise ValueError(DURATION_FORM) from None
    if seconds <= 0:
        raise ValueError(f"more than zero: {DURATION_FORM}")
    return seconds


def _attempts(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError("a whole number of 1 or more, such as 5")
    return value


def _size(value: Any) -> int:
    form = "a number of bytes, or a size such as \"10MiB\" or \"500KB\""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", str(value).lower())
    if not isinstance(value, str) or not match or match.group(2) not in SIZE_UNITS:
        raise ValueError(form)
    return int(float(match.group(1)) * SIZE_UNITS[match.group(2)])


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("true or false")
    return value


def _folder(value: Any) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("a folder, as a quoted path such as \"~/sloth-jobs\"")
    return Path(value).expanduser()


@dataclass(frozen=True)
class Key:
    parse: Callable[[Any], Any]
    default: Any
    help: str


KEYS: dict[str, Key] = {
    "jobs_dir": Key(_folder, None, "the watched jobs folder (default: <home>/jobs)"),
    "lease": Key(_duration, 60.0, "how long a job's lease lasts between heartbeats"),
    "max_attempts": Key(_attempts, 5, "tries before a job is failed for good"),
    "timeout": Key(_duration, None, "the longest a job may run, unless its header says"),
    "log_cap": Key(_size, 10 * 1024 * 1024, "the most output kept per attempt"),
    "notifications": Key(_flag, True, "a desktop notification when a job fails for good"),
}


@dataclass(frozen=True)
class Settings:
    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # key -> default/file/env/flag
    path: Path | None = None

    def __getitem__(self, key: str) -> Any:
        return self.values[key]


def load(path: Path | None = None, *, env: Mapping[str, str] = os.environ,
         flags: Mapping[str, Any] | None = None) -> Settings:
    """The effective settings; `flags` are the command line's, None where not given."""
    path = path or (Path(env[CONFIG_ENV]) if env.get(CONFIG_ENV) else default_path())
    values = {key: spec.default for key, spec in KEYS.items()}
    sources = dict.fromkeys(KEYS, "default")
    for key, value in _read(path).items():
        values[key], sources[key] = value, f"file {path}"
    if env.get(JOBS_ENV):
        values["jobs_dir"], sources["jobs_dir"] = Path(env[JOBS_ENV]).expanduser(), \
            f"env {JOBS_ENV}"
    for key, value in (flags or {}).items():
        if value is not None:
            values[key], sources[key] = value, "flag"
    return Settings(values, sources, path)


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise SlothError(f"cannot read the config file {path}: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SlothError(f"{path} is not valid TOML: {exc}") from None
    parsed = {}
    for key, value in data.items():
        line = _line_of(text, key)
        if key not in KEYS:
            raise SlothError(f"{path}, line {line}: unknown setting {key!r} "
                             f"(known: {', '.join(KEYS)})")
        try:
            parsed[key] = KEYS[key].parse(value)
        except ValueError as exc:
            raise SlothError(f"{path}, line {line}: bad value for {key}: use {exc}") from None
    return parsed


def _line_of(text: str, key: str) -> int | str:
    for number, line in enumerate(text.splitlines(), start=1):
        if re.match(rf"\s*[\"']?{re.escape(key)}[\"']?\s*[=.]", line):
            return number
    return "?"
