"""What a dropped file is: its job name, how to run it, and its `# sloth:` options.

Pure functions over a file's first bytes; nothing here spawns anything.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from sloth_tray import limits, timefmt
from sloth_tray.errors import SlothError
from sloth_tray.jobs import conditions, schedule
from sloth_tray.nearest import did_you_mean, nearest

HEADER_LINES = 20  # options must sit among the first lines, like a shebang's neighbours
HEAD_BYTES = 64 * 1024


class BadJobFile(SlothError):
    """The file cannot become a runnable job; retrying will not change that."""


def job_name(path: Path) -> str:
    return path.stem or path.name


class NotAFile(BadJobFile):
    """What is at a script's path is not a regular file of its own (a symbolic link
    or a FIFO put in its place): it is never followed, never run."""


# Windows must not translate line ends; a FIFO must not hang the open.
_READ = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def open_file(path: Path, *, follow: bool = True) -> BinaryIO:
    """`path` opened for reading; without `follow`, a symbolic link there fails the
    open (ELOOP) rather than being followed."""
    return open(os.open(path, _READ | (0 if follow else _NOFOLLOW)), "rb")


def read_head(path: Path, *, follow: bool = True) -> bytes:
    """The first bytes of the file. Without `follow` it must be a regular file itself
    (NotAFile): a link is not followed, a FIFO not read."""
    try:
        with open_file(path, follow=follow) as file:
            if not follow and not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise NotAFile(f"refused: its script {path} is not a regular file")
            return file.read(HEAD_BYTES)
    except OSError as exc:
        if not follow and os.path.islink(path):
            raise NotAFile(f"refused: its script {path} is now a symbolic link (to "
                           f"{_link_target(path)}); sloth-tray will not follow it") from None
        raise BadJobFile(f"cannot read {path.name}: {exc.strerror}") from None


def _link_target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "somewhere else"


# -- how to run it ----------------------------------------------------------


def python_for_jobs() -> str:
    """The Python that runs a .py job with no #! line: the user's `python3` on PATH
    first (the one that has their modules), else the app's own interpreter, unless
    the app is a frozen bundle (then sys.executable is the app, not a Python). A
    job's PATH is the app's, with only the app's own folder after it."""
    found = shutil.which("python3")
    if found:
        return found
    if not getattr(sys, "frozen", False):
        return sys.executable
    return shutil.which("python") or "python3"


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


def empty_sentence(filename: str, head: bytes) -> str | None:
    """The sentence for a script with nothing in it but blank space (`touch x.sh`):
    running it would be a job done that did nothing."""
    if head.strip():
        return None
    return (f"{filename} is empty: there is nothing to run (write the script elsewhere, "
            "then move it into the jobs folder)")


def command_for(
    path: Path, head: bytes | None = None, *, windows: bool = os.name == "nt"
) -> list[str]:
    """The argv that runs the script: its #! line, else its extension.

    The script need not be executable: we run its interpreter on it. Like the
    kernel, everything after the interpreter on the #! line is one argument.
    """
    if head is None:
        head = read_head(path)
    empty = empty_sentence(path.name, head)
    if empty:
        raise BadJobFile(empty)
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
_COMMENT = re.compile(r"^\s*(?:#|//|--|;|rem\b|::)", re.IGNORECASE)  # any comment line


# Each option's range lives in limits, shared with config.toml, the flags and the queue.
OPTIONS: dict[str, limits.Limit] = {
    "max_attempts": limits.ATTEMPTS,  # tries before the job is failed for good
    "timeout": limits.TIMEOUT,  # an attempt running longer is stopped
    "delay": limits.DELAY,  # wait this long after the drop before the first run
    "lease": limits.LEASE,  # how long a silent worker keeps the job
    "every": limits.EVERY,  # run again this long after each due time
}


# Options that are words rather than numbers: how to read each, and what it accepts.
# (window is a duration, but only means something beside at= or cron=.)
WORD_OPTIONS: dict[str, tuple[Callable[[str], Any], str]] = {
    "at": (lambda text: schedule.parse_at(text).text, schedule.AT_FORM),  # calendar times
    "cron": (lambda text: schedule.parse_cron(text).text, schedule.CRON_FORM),
    "catchup": (schedule.parse_catchup, schedule.CATCHUP_FORM),  # what missed times become
    "window": (schedule.WINDOW.convert, schedule.WINDOW.accepted),  # how late is still useful
    # how late a series may be before it is overdue (a duration, but only beside a schedule)
    "grace": (limits.GRACE.convert, limits.GRACE.accepted),
    # what must hold before it starts; until then a due job waits, using no attempt
    "require": (conditions.parse_require, conditions.REQUIRE_FORM),
    # stop a running job whose required condition is lost, and put it back (uncounted)
    "interrupt": (conditions.parse_yes_no, conditions.YES_NO_FORM),
}
KNOWN = sorted([*OPTIONS, *WORD_OPTIONS])
DURATIONS = {*(key for key, limit in OPTIONS.items() if limit.kind == limits.Kind.DURATION),
             "grace", "window"}
CUT_CLOSE = 0.75  # a word after a value is taken for a mistyped option only when this close
SCHEDULES = ("every", "at", "cron")  # each says when a job repeats; one at most
CALENDARS = ("at", "cron")


# Options `sloth-tray add` gives a job, never its header: kept when a retry reads the
# header again. cwd: the folder the job runs in (absolute; default: the home folder).
ADDED_OPTIONS = ("cwd",)


def checked_cwd(value: Any, where: str = "the job's options") -> str:
    """A job's working folder as stored: an absolute path (that it exists is for the
    one who adds it to say, and for the run to find out)."""
    if not isinstance(value, str) or "\0" in value or not os.path.isabs(value):
        raise SlothError(f"{where}: bad value {limits.shown(value)} for cwd: use the "
                         "absolute path of a folder")
    return value


def checked_options(given: dict[str, Any], where: str = "the job's options") -> dict[str, Any]:
    """Options given as values (a push's, not a header's words): each known option
    read as a header's would be, a value no claim could use refused (SlothError)."""
    options = dict(given)
    if "cwd" in options:
        options["cwd"] = checked_cwd(options["cwd"], where)
    for key in options.keys() & OPTIONS.keys():
        options[key] = OPTIONS[key].check(options[key], where)
    for key in options.keys() & WORD_OPTIONS.keys():
        read, accepted = WORD_OPTIONS[key]
        try:
            options[key] = read(options[key])
        except (ValueError, TypeError):
            raise SlothError(f"{where}: bad value {limits.shown(options[key])} "
                             f"for {key}: use {accepted}") from None
    return options


# key=value, where a value in double quotes may hold spaces: at="mon-fri 09:00".
_ITEM = re.compile(r'([^\s=]*)(=?)(?:"([^"]*)"(?=\s|$)|(\S*))')


def parse_options(head: bytes, filename: str = "the script") -> dict[str, Any]:
    """The options of the header: the first `sloth:` comment line among the first 20
    lines, and each `sloth:` line after it before the script's next line of code (other
    comments and blank lines between are fine): one option a line counts as all on
    one. A `sloth:` line after that code is the script's own text (a command's word
    that holds one, as `add -- ...` writes it), not read. Each line is refused as a
    header is, by its number, and so is an option given on two lines; the schedule's
    options are checked together once all are read (their sentence names the last)."""
    lines = head.decode("utf-8", "replace").splitlines()[:HEADER_LINES]
    options: dict[str, Any] = {}
    given_on: dict[str, int] = {}  # option -> the line it was given on
    where = None
    for number, line in enumerate(lines, start=1):
        match = _HEADER.match(line)
        if not match:
            if where is not None and line.strip() and not _COMMENT.match(line):
                break  # the header ends at the first line of code after it
            continue
        where = f"{filename}, line {number}"
        for key, value in _line_settings(match.group(1), where).items():
            if key in given_on:
                raise BadJobFile(f"{where}: {key} is given on line {given_on[key]} already: "
                                 "keep one")
            options[key], given_on[key] = value, number
    if where is not None:
        _check_schedule(options, where)
    return options


def has_header(head: bytes) -> bool:
    """Whether a `sloth:` line is among the first lines (one with nothing after it too)."""
    lines = head.decode("utf-8", "replace").splitlines()[:HEADER_LINES]
    return any(_HEADER.match(line) for line in lines)


def settings_of(text: str, where: str) -> dict[str, Any]:
    """The options a header's `key=value ...` text says, refused as a header's are
    (BadJobFile, its sentence naming `where`): for options given outside a file."""
    return _parse_settings(text, where)


def _items(text: str) -> list[tuple[str, bool, str, bool]]:
    """(key, has '=', value, was quoted) for each whitespace-separated setting."""
    items, position = [], 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            return items
        match = _ITEM.match(text, position)
        quoted = match.group(3) is not None
        value = match.group(3) if quoted else match.group(4)
        items.append((match.group(1), bool(match.group(2)), value, quoted))
        position = match.end()


def _parse_settings(text: str, where: str) -> dict[str, Any]:
    options = _line_settings(text, where)
    _check_schedule(options, where)
    return options


def _line_settings(text: str, where: str) -> dict[str, Any]:
    """One line's options, each checked alone (not yet against the others)."""
    options: dict[str, Any] = {}
    items = _items(text)
    for index, (raw_key, equals, value, quoted) in enumerate(items):
        key = raw_key.strip().lower()
        if key in WORD_OPTIONS and not quoted and value.startswith('"'):
            raise BadJobFile(f"{where}: the value of {key} opens a quote that does not close "
                             f'before the next setting: write {key}="..."')
        if key in CALENDARS and not quoted:
            _refuse_a_spaced_value(key, value, items[index + 1:], where)
        elif equals and not quoted and key in KNOWN and index + 1 < len(items):
            _refuse_a_cut_value(key, value, items[index + 1], where)
        if key not in KNOWN:
            raise BadJobFile(f"{where}: unknown option {limits.shown(key)} in the sloth: header"
                             f"{did_you_mean(key, KNOWN)} (known: {', '.join(KNOWN)})")
        if not equals or (not value and not quoted):
            raise BadJobFile(f"{where}: {key} needs a value, as in {key}=...")
        if key in options:
            raise BadJobFile(f"{where}: {key} is given twice: keep one")
        if key in WORD_OPTIONS:
            read, accepted = WORD_OPTIONS[key]
            try:
                options[key] = read(value)
            except ValueError:
                raise BadJobFile(f"{where}: bad value {limits.shown(value)} for {key}: "
                                 f"use {accepted}") from None
            continue
        try:
            options[key] = OPTIONS[key].convert(value)
        except ValueError:
            raise BadJobFile(OPTIONS[key].refusal(value, where)) from None
    return options


def _refuse_a_cut_value(key: str, value: str, after: tuple[str, bool, str, bool],
                        where: str) -> None:
    """every=5 minutes reads as every=5 and an option 'minutes': say the value was cut at
    the space, and how to write it. A word after it that is an option, or one mistyped
    (close to one), or that no unit makes whole (every=1h nightly) is said as an option."""
    word, equals, _, _ = after
    if equals or not word or word.lower() in KNOWN or nearest(word.lower(), KNOWN, CUT_CLOSE):
        return
    cut = f"{where}: the value of {key} ends at the space before {limits.shown(word)}"
    if key in DURATIONS:
        joined = _joined_duration(value, word)
        if joined is not None:
            raise BadJobFile(f"{cut}: write a duration with no space in it, as in "
                             f"{key}={joined}")
        return
    if key == "require":  # a list of words: quotes keep it whole
        raise BadJobFile(f'{cut}: put it in quotes, as in {key}="{value} {word}"')
    raise BadJobFile(f"{cut}: write {key}={value or word}")


# The words a duration's unit is spelled in when it is cut off (`5 minutes`): its letter.
UNIT_WORDS = {**{word: "s" for word in ("s", "sec", "secs", "second", "seconds")},
              **{word: "m" for word in ("m", "min", "mins", "minute", "minutes")},
              **{word: "h" for word in ("h", "hr", "hrs", "hour", "hours")},
              **{word: "d" for word in ("d", "day", "days")}}


def _joined_duration(value: str, word: str) -> str | None:
    """`5` and `minutes` as one duration (`5m`); `every= 5m` too; None when they are not."""
    unit = UNIT_WORDS.get(word.lower())
    for joined in ((value + unit) if unit else None, value + word):
        if joined is None:
            continue
        try:
            timefmt.parse_duration(joined)
        except ValueError:
            continue
        return joined.lower()
    return None


def _refuse_a_spaced_value(key: str, value: str, rest: list[tuple[str, bool, str, bool]],
                           where: str) -> None:
    """at=mon-fri 09:00 reads as at=mon-fri and an option '09:00': say how to write it."""
    cut: list[str] = []
    for raw, equals, _, _ in rest:
        if equals or len(cut) == 4:
            break
        cut.append(raw)
    if not cut:
        return
    if key == "at":
        raise BadJobFile(f"{where}: the value of at ends at the space before "
                         f"{limits.shown(cut[0])}: join days and times with @ "
                         f'(at=mon-fri@09:00) or put them in quotes (at="mon-fri 09:00"), '
                         "and several times with commas (at=09:00,17:30)")
    words = " ".join([value, *cut])
    example = words if len(words) <= 40 and words.isprintable() else "0 9 * * 1-5"
    raise BadJobFile(f"{where}: the value of cron ends at the space before "
                     f"{limits.shown(cut[0])}: put all five fields in quotes, as in "
                     f'cron="{example}"')


def _check_schedule(options: dict[str, Any], where: str) -> None:
    """Options that each make sense alone but not together."""
    given = [key for key in SCHEDULES if key in options]
    if len(given) > 1:
        raise BadJobFile(f"{where}: every, at and cron each say when the job repeats: "
                         f"use one of them, not {' and '.join(given)}")
    for key in ("catchup", "window"):
        if key in options and not any(calendar in options for calendar in CALENDARS):
            raise BadJobFile(f"{where}: {key} applies only to at= and cron= schedules: "
                             f"add one, or remove {key}=")
    if "interrupt" in options and "require" not in options:
        raise BadJobFile(f"{where}: interrupt applies only beside require= (what to stop "
                         "the job for): add one, or remove interrupt=")
    if "grace" in options and not given:
        raise BadJobFile(f"{where}: grace applies only to every=, at= and cron= schedules: "
                         "add one, or remove grace=")
    if options.get("catchup") == "skip" and "window" in options:
        raise BadJobFile(f"{where}: window applies only to catchup=once (catchup=skip "
                         "drops every missed time): remove one of them")
