"""Settings: defaults, then config.toml, then the environment, then flags.

Every effective value remembers where it came from, so `sloth-tray config`
can say so. A bad file is refused with one sentence naming the file, the line
and the key: the app does not start on a guess.
"""

import os
import re
from collections.abc import Mapping

from sloth_tray.errors import SlothError
from sloth_tray.paths import JOBS_ENV, user_dir

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from sloth_tray import limits

    Place = str | os.PathLike[str]  # a Path, or text (a look imports no pathlib: paths.py)

CONFIG_ENV = "SLOTH_TRAY_CONFIG"


def default_path() -> str:
    return os.path.join(user_dir("config"), "config.toml")


def _flag(value: "Any") -> bool:
    if not isinstance(value, bool):
        raise ValueError("true or false")
    return value


def _folder(value: "Any") -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("a folder, as a quoted path such as \"~/sloth-jobs\"")
    return os.path.expanduser(value)


class Key:
    """One setting: `parse` turns the file's value into it (raising ValueError that says
    what is accepted); `limit` is a number's range, shared with headers and flags.

    A class, not a named tuple: the tuple's class is compiled at import, half a percent
    of what a glance costs."""

    __slots__ = ("parse", "default", "help", "limit_name")

    def __init__(self, parse: "Callable[[Any], Any]", default: "Any", help: str,
                 limit_name: str | None = None) -> None:
        self.parse, self.default, self.help = parse, default, help
        self.limit_name = limit_name

    @property
    def limit(self) -> "limits.Limit | None":
        """The range in limits.py, loaded once asked for: a look with no config file
        and no number on its line needs none (2% of a glance's instructions)."""
        if self.limit_name is None:
            return None
        from sloth_tray import limits

        return getattr(limits, self.limit_name)


def _number(limit_name: str, default: "Any", help: str) -> Key:
    def parse(value: "Any") -> "Any":
        from sloth_tray import limits

        return getattr(limits, limit_name).convert(value)

    return Key(parse, default, help, limit_name)


KEYS: dict[str, Key] = {
    "jobs_dir": Key(_folder, None, "the watched jobs folder (default: <home>/jobs)"),
    "lease": _number("LEASE", 60.0, "how long a job's lease lasts between heartbeats"),
    "max_attempts": _number("ATTEMPTS", 5, "tries before a job is failed for good"),
    "timeout": _number("TIMEOUT", None,
                       "the longest a job may run, unless its header says"),
    "log_cap": _number("LOG_CAP", 10 * 1024 * 1024, "the most output kept per attempt"),
    "notifications": Key(_flag, True, "a desktop notification when a job fails for good"),
    "notify_lane_emptied": Key(_flag, False,
                               "a notification when a lane is done with a burst of jobs"),
}


# The defaults as config.toml would say them (README's Settings shows them so).
DEFAULT_TEXTS = {"lease": "60s", "log_cap": "10MiB"}


def value_text(key: str, value: "Any") -> str | None:
    """A setting's value as config.toml takes it: durations and sizes in their short
    forms (`90s`, `2h`, `10MiB`), true or false; None for no value."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    limit = KEYS[key].limit if key in KEYS else None
    if limit is None:
        return str(value)
    from sloth_tray import limits

    if limit.kind == limits.Kind.DURATION:
        return limits.compact_duration(value)
    if limit.kind == limits.Kind.SIZE:
        return "1 byte" if value == 1 else limits._compact_size(int(value))
    return str(value)


class Settings:
    """The effective `values`, where each came from (`sources`: key -> default, file PATH,
    env NAME or flag), the config file they were read from (`path`), and the words a
    value was written in there (`texts`: "90s" stays "90s")."""

    __slots__ = ("values", "sources", "path", "texts")

    def __init__(self, values: "dict[str, Any] | None" = None,
                 sources: dict[str, str] | None = None, path: "Place | None" = None,
                 texts: dict[str, str] | None = None) -> None:
        self.values = dict(values or {})
        self.sources = dict(sources or {})
        self.path = path
        self.texts = dict(texts or {})

    def __getitem__(self, key: str) -> "Any":
        return self.values[key]

    def text(self, key: str) -> str | None:
        """The value as it was written: in config.toml's words when it came from there,
        the default as README's Settings says it, else in its short form (value_text)."""
        source = self.sources.get(key, "default")
        if source.startswith("file") and key in self.texts:
            return self.texts[key]
        if source == "default" and key in DEFAULT_TEXTS and \
                self.values.get(key) == KEYS[key].default:
            return DEFAULT_TEXTS[key]
        return value_text(key, self.values.get(key))


def load(path: "Place | None" = None, *, env: Mapping[str, str] = os.environ,
         flags: "Mapping[str, Any] | None" = None) -> Settings:
    """The effective settings; `flags` are the command line's, None where not given."""
    path = path or env.get(CONFIG_ENV) or default_path()
    values = {key: spec.default for key, spec in KEYS.items()}
    sources = dict.fromkeys(KEYS, "default")
    texts: dict[str, str] = {}
    for key, value in _read(path, texts).items():
        values[key], sources[key] = value, f"file {path}"
    if env.get(JOBS_ENV):
        values["jobs_dir"], sources["jobs_dir"] = os.path.expanduser(env[JOBS_ENV]), \
            f"env {JOBS_ENV}"
    for key, value in (flags or {}).items():
        if value is not None:
            limit = KEYS[key].limit
            if limit is not None:  # argparse checked it already; a caller in Python may not
                value = limit.check(value, f"--{key.replace('_', '-')}")
            values[key], sources[key] = value, "flag"
    return Settings(values, sources, path, texts)


def _read(path: "Place", texts: dict[str, str] | None = None) -> "dict[str, Any]":
    """The settings config.toml at `path` holds (none when there is no file); `texts`
    gets the words each was written in (a number written bare: its short form)."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise SlothError(f"cannot read the config file {path}: {exc}") from None
    import tomllib  # here: most commands run with no config file at all

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SlothError(_unquoted(path, text, exc) or f"{path} is not valid TOML: {exc}") \
            from None
    except ValueError:  # an integer of thousands of digits, which Python refuses to read
        raise SlothError(_overlong_number(path, text)) from None
    parsed = {}
    for key, value in data.items():
        line = _line_of(text, key)
        if key not in KEYS:
            from sloth_tray.nearest import did_you_mean  # here: only a mistake needs it

            raise SlothError(f"{path}, line {line}: unknown setting {key!r}"
                             f"{did_you_mean(key, KEYS)} (known: {', '.join(KEYS)})")
        try:
            parsed[key] = KEYS[key].parse(value)
        except ValueError as exc:
            raise SlothError(f"{path}, line {line}: bad value for {key}: use {exc}") from None
        if texts is not None:
            texts[key] = value.strip() if isinstance(value, str) else \
                value_text(key, parsed[key])
    return parsed


# `timeout = 30m`: a duration or a size written bare, as a header or a flag takes it.
# (Patterns, compiled by re when a bad file first needs them.)
_BARE_AMOUNT = r"""\s*["']?([A-Za-z0-9_-]+)["']?\s*=\s*([0-9][0-9_.]*[A-Za-z]+)\s*(?:#.*)?"""
_TOML_LINE = r"\(at line ([0-9]+), column [0-9]+\)"


def _unquoted(path: "Place", text: str, exc: Exception) -> str | None:
    """The sentence for the common mistake TOML only calls a syntax error: a duration
    or a size not in quotes (one its key takes once quoted), on the line the TOML error
    names; None for any other."""
    where = getattr(exc, "lineno", None)  # Python 3.14; before, only in its message
    if where is None:
        found = re.search(_TOML_LINE, str(exc))
        where = int(found.group(1)) if found else None
    lines = text.splitlines()
    if where is None or not 1 <= where <= len(lines):
        return None
    bare = re.fullmatch(_BARE_AMOUNT, lines[where - 1])
    if bare is None:
        return None
    key, value = bare.groups()
    limit = KEYS[key].limit if key in KEYS else None
    if limit is None or not limit.well_formed(value):  # quotes would not mend it
        return None
    return (f'{path}, line {where}: {key} = {value} needs quotes in TOML: write '
            f'{key} = "{value}"')


def _overlong_number(path: "Place", text: str) -> str:
    """The sentence for a number too long to read, naming its line and key if it can."""
    for number, line in enumerate(text.splitlines(), start=1):
        if re.search(r"[0-9_]{1000,}", line):
            key = line.partition("=")[0].strip().strip("\"'")
            limit = KEYS[key].limit if key in KEYS else None
            if limit is not None:
                return f"{path}, line {number}: bad value for {key}: use {limit.accepted}"
            return f"{path}, line {number}: a number of thousands of digits"
    return f"{path}: a number of thousands of digits"


def _line_of(text: str, key: str) -> int | str:
    for number, line in enumerate(text.splitlines(), start=1):
        if re.match(rf"\s*[\"']?{re.escape(key)}[\"']?\s*[=.]", line):
            return number
    return "?"
