"""Linux and the other XDG desktops: `$XDG_CONFIG_HOME/autostart/sloth-tray.desktop`,
with a marker key `X-Sloth-Tray=1` that says we wrote it. `Hidden=true` or
`X-GNOME-Autostart-enabled=false` in it: turned off by the user.

Exec is quoted, and read back, as the Desktop Entry spec says.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from sloth_tray.autostart.files import FileEntry
from sloth_tray.autostart.state import APP_ID, FOREIGN, OTHER_COMMAND, STARTS, Status
from sloth_tray.errors import SlothError

DESKTOP_FILE = f"{APP_ID}.desktop"
MARKER_KEY = "X-Sloth-Tray"

# The Desktop Entry spec's reserved characters: an Exec argument holding one
# must be quoted. CR is not in the spec's list, but quoting more than needed is
# allowed, and a bare CR would not survive every reader.
_RESERVED = frozenset(" \t\n\r\"'\\><~|&;$*?#()`")
_ESCAPED_IN_QUOTES = frozenset('"`$\\')
# The general escapes for string values, which readers undo before the Exec quoting.
_STRING_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def quote_exec_arg(arg: str) -> str:
    """One argument, quoted by the Exec key's rules (before the string escapes).

    `%` starts a field code (`%f`, `%u`, ...) inside quotes too, so a literal
    one is always doubled. An empty argument is quoted so it is not lost.
    """
    body = arg.replace("%", "%%")
    if arg and _RESERVED.isdisjoint(arg):
        return body
    return '"' + "".join("\\" + c if c in _ESCAPED_IN_QUOTES else c for c in body) + '"'


def escape_string(value: str) -> str:
    """A value escaped by the spec's general rule for strings (`\\\\`, `\\n`, `\\t`, `\\r`)."""
    return "".join(_STRING_ESCAPES.get(c, c) for c in value)


def desktop_exec(argv: Sequence[str]) -> str:
    """The Exec value for `argv`, exactly as it goes after `Exec=` in the file.

    Quoting comes first and the string escapes second, because a reader undoes
    them in the other order: a literal backslash in a quoted argument takes four
    backslashes in the file, a literal `$` becomes `\\\\$`.
    """
    if not argv:
        raise ValueError("the command to start at login is empty")
    if "=" in argv[0]:
        raise SlothError(
            f"cannot start at login from {argv[0]}: a desktop entry's program path "
            "may not contain '='"
        )
    for arg in argv:
        if any((ord(c) < 0x20 and c not in _STRING_ESCAPES) or c == "\x7f" for c in arg):
            raise SlothError(f"cannot start at login with {arg!r}: it holds a control character")
    return escape_string(" ".join(quote_exec_arg(arg) for arg in argv))


def desktop_entry(argv: Sequence[str]) -> bytes:
    """The whole autostart file. Non-ASCII paths are written as UTF-8, as every desktop reads."""
    lines = [
        "# Written by sloth-tray's \"Start at login\"; turning that off removes this file.",
        "[Desktop Entry]",
        "Type=Application",
        f"Name={APP_ID}",
        "Comment=Runs the scripts you drop in a folder, one at a time",
        f"Exec={desktop_exec(argv)}",
        f"Icon={APP_ID}",
        "Terminal=false",
        "X-GNOME-Autostart-enabled=true",
        f"{MARKER_KEY}=1",
    ]
    return ("\n".join(lines) + "\n").encode("utf-8")


_STRING_UNESCAPES = {"s": " ", "n": "\n", "t": "\t", "r": "\r", "\\": "\\"}


def read_desktop_exec(value: str) -> list[str] | None:
    """The argv of an Exec value, undone as a desktop undoes it (the string escapes,
    then the quoting, then `%%`); None when it breaks the spec's rules."""
    text, i = [], 0
    while i < len(value):  # the general string escapes
        if value[i] == "\\" and i + 1 < len(value):
            text.append(_STRING_UNESCAPES.get(value[i + 1], "\\" + value[i + 1]))
            i += 2
        else:
            text.append(value[i])
            i += 1
    line = "".join(text)
    args: list[str] = []
    current: list[str] | None = None  # None: between arguments
    quoted = False
    i = 0
    while i < len(line):
        c = line[i]
        if c == " " and not quoted:
            if current is not None:
                args.append("".join(current))
            current = None
        else:
            current = [] if current is None else current
            if quoted and c == "\\":
                if i + 1 >= len(line) or line[i + 1] not in _ESCAPED_IN_QUOTES:
                    return None
                i += 1
                current.append(line[i])
            elif c == '"':
                quoted = not quoted
            else:
                current.append(c)
        i += 1
    if quoted:
        return None
    if current is not None:
        args.append("".join(current))
    return [arg.replace("%%", "%") for arg in args]


def parse_desktop_entry(text: str) -> dict[str, str]:
    """The raw values of the [Desktop Entry] group; comments and other groups are skipped."""
    entries: dict[str, str] = {}
    group = None
    for raw in text.split("\n"):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            group = line[1:-1]
        elif group == "Desktop Entry" and "=" in line:
            key, _, value = line.partition("=")
            entries[key.strip()] = value.strip()
    return entries


def xdg_autostart_path(home: Path, env: Mapping[str, str]) -> Path:
    # The base-directory spec says a relative XDG_CONFIG_HOME is invalid and must be ignored.
    config = env.get("XDG_CONFIG_HOME", "")
    base = Path(config) if os.path.isabs(config) else home / ".config"
    return base / "autostart" / DESKTOP_FILE


def _turned_off_by_user(entries: Mapping[str, str]) -> str | None:
    """The key=value by which the user turned this entry off, if any."""
    # GLib, which GNOME's session uses, also reads 1 and 0 as booleans.
    if entries.get("Hidden") in ("true", "1"):
        return f"Hidden={entries['Hidden']}"
    gnome = entries.get("X-GNOME-Autostart-enabled")
    if gnome in ("false", "0"):
        return f"X-GNOME-Autostart-enabled={gnome}"
    return None


class XdgAutostart(FileEntry[dict[str, str]]):
    def __init__(self, path: Path, argv: Sequence[str]) -> None:
        super().__init__(path, desktop_entry(argv))
        self.exec = desktop_exec(argv)

    def parse(self, data: bytes) -> dict[str, str]:
        return parse_desktop_entry(data.decode("utf-8", "replace"))

    def ours(self, parsed: dict[str, str]) -> bool:
        return MARKER_KEY in parsed

    def judge(self, parsed: dict[str, str]) -> Status:
        where = str(self.path)
        found = read_desktop_exec(parsed["Exec"]) if "Exec" in parsed else None
        command = tuple(found) if found is not None else None
        off = _turned_off_by_user(parsed)
        if not self.ours(parsed):
            return Status(off is None, where, FOREIGN, command)
        if off:
            return Status(False, where, f"disabled by you ({off})", command)
        same = parsed.get("Exec") == self.exec
        return Status(True, where, STARTS if same else OTHER_COMMAND, command)
