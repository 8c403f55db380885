"""Start at login, per OS: an XDG autostart file, a launchd agent, or a Run registry value.

The platform code is thin: everything written is rendered by pure functions
(`desktop_entry`, `desktop_exec`, `launch_agent`, `run_value`), and every
location is a parameter, so all three OSes are testable on Linux.

- Linux and other XDG desktops: `$XDG_CONFIG_HOME/autostart/sloth-tray.desktop`,
  with a marker key `X-Sloth-Tray=1` that says we wrote it.
- macOS: `~/Library/LaunchAgents/org.sloth-tray.agent.plist`. launchctl is never
  called: loading the agent now would start a second copy of the running app;
  launchd picks the file up at the next login.
- Windows: the value `sloth-tray` under the key
  `HKCU\\Software\\Microsoft\\Windows\\CurrentVersion\\Run`. (A "Disable" in Task
  Manager is kept elsewhere, under Explorer\\StartupApproved, and is not read here.)

The entry starts the app on the queue it was enabled from: the home, the
jobs folder and the config file given to `enable` go into its command as
`--home`, `--jobs-dir` and `--config` (absolute paths), so an app started with
SLOTH_TRAY_HOME=... comes back at login on that same queue, not the default one.

The user's own choices win over ours. A file we did not write is never
overwritten or deleted, whatever is asked: status says so and leaves it alone.
A file we wrote that the user turned off (`Hidden=true` or
`X-GNOME-Autostart-enabled=false` in the desktop file, `Disabled=true` in the
plist) reads as disabled "by you"; `enable` rewrites it, because enabling from
our own UI is the user changing their mind.
"""

from __future__ import annotations

import contextlib
import ntpath
import os
import plistlib
import posixpath
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sloth_tray.config import default_path as default_config_path
from sloth_tray.errors import SlothError

if TYPE_CHECKING:
    from sloth_tray.config import Settings
    from sloth_tray.paths import Home

APP_ID = "sloth-tray"
DESKTOP_FILE = f"{APP_ID}.desktop"
MARKER_KEY = "X-Sloth-Tray"
AGENT_LABEL = "org.sloth-tray.agent"
RUN_SUBKEY = r"Software\Microsoft\Windows\CurrentVersion\Run"
RUN_KEY = "HKCU\\" + RUN_SUBKEY
RUN_VALUE = APP_ID

NOT_SET = "not set to start at login"
STARTS = "starts at login"
OTHER_COMMAND = "starts at login, but with another command; enabling again updates it"
FOREIGN = "this was not written by sloth-tray, so it is left alone"


@dataclass(frozen=True)
class Status:
    """Whether the app starts at login, where that is decided, and a sentence on why."""

    enabled: bool
    where: str  # a file path, or for Windows the registry value: RUN_KEY\sloth-tray
    detail: str
    # The command found there (ours or not), if it could be read: what login starts.
    command: tuple[str, ...] | None = field(default=None, compare=False)

    @property
    def home(self) -> str | None:
        """The app's home that login starts it on; None: the default one."""
        return option_value(self.command, HOME_OPTION)

    @property
    def jobs_dir(self) -> str | None:
        return option_value(self.command, JOBS_OPTION)

    @property
    def config(self) -> str | None:
        return option_value(self.command, CONFIG_OPTION)


class RunKey(Protocol):
    """The values under HKCU\\...\\CurrentVersion\\Run, by name."""

    def get(self, name: str) -> str | None: ...

    def set(self, name: str, value: str) -> None: ...

    def delete(self, name: str) -> None:
        """Remove the value; a missing value is not an error."""


# -- the command ------------------------------------------------------------


def default_command(
    executable: str | None = None, *, frozen: bool | None = None, platform: str | None = None
) -> list[str]:
    """The argv that starts the app: the frozen executable itself, else `python -m sloth_tray`.

    On Windows, pythonw.exe is preferred to a python.exe beside it: python.exe
    opens a console window at every login, and closing that window kills the app.
    """
    executable = executable or sys.executable
    frozen = getattr(sys, "frozen", False) if frozen is None else frozen
    if frozen:
        return [executable]
    if (platform or sys.platform) == "win32":
        exe = Path(executable)
        windowless = exe.with_name("pythonw.exe")
        if exe.name.lower() == "python.exe" and windowless.is_file():
            executable = str(windowless)
    return [executable, "-m", "sloth_tray"]


HOME_OPTION, JOBS_OPTION, CONFIG_OPTION = "--home", "--jobs-dir", "--config"


def app_options(home: str | os.PathLike[str] | None = None,
                jobs: str | os.PathLike[str] | None = None,
                config: str | os.PathLike[str] | None = None, *,
                platform: str | None = None) -> list[str]:
    """The options that bring the app back where it lives. Absolute (by `platform`'s
    rules, sys.platform's by default): login starts it in another working folder."""
    rules = ntpath if (platform or sys.platform) == "win32" else posixpath
    options: list[str] = []
    for option, place in ((HOME_OPTION, home), (JOBS_OPTION, jobs), (CONFIG_OPTION, config)):
        if place is not None:
            path = os.fspath(place)
            options += [option, path if rules.isabs(path) else os.path.abspath(path)]
    return options


def app_location(home: Home, settings: Settings) -> dict[str, Path]:
    """The keywords for enable/status that bring the app back on this very queue.

    Its home, always. Its jobs folder when the environment or a flag chose it
    (one from the config file is read from the file again at login, so a later
    edit of the file still counts; the default one follows the home). The
    config file when it is not the default one (--config, SLOTH_TRAY_CONFIG).
    """
    where = {"home": home.root}
    if settings.sources.get("jobs_dir", "default").startswith(("env", "flag")):
        where["jobs"] = home.jobs
    if settings.path is not None and Path(settings.path) != default_config_path():
        where["config"] = Path(settings.path)
    return where


def option_value(argv: Sequence[str] | None, option: str) -> str | None:
    """The value of `--option VALUE` or `--option=VALUE` in argv, the last one winning
    (as argparse does); None when it is not there."""
    value = None
    args = list(argv or ())
    for i, arg in enumerate(args):
        if arg == option and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(option + "="):
            value = arg[len(option) + 1:]
    return value


# -- Linux: the XDG autostart desktop entry -----------------------------------

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


class _XdgAutostart:
    def __init__(self, path: Path, argv: Sequence[str]) -> None:
        self.path = path
        self.content = desktop_entry(argv)
        self.exec = desktop_exec(argv)

    def _read(self) -> tuple[bytes, dict[str, str]] | None:
        data = _read_bytes(self.path)
        if data is None:
            return None
        return data, parse_desktop_entry(data.decode("utf-8", "replace"))

    def _status(self, current: tuple[bytes, dict[str, str]] | None) -> Status:
        where = str(self.path)
        if current is None:
            return Status(False, where, NOT_SET)
        entries = current[1]
        found = read_desktop_exec(entries["Exec"]) if "Exec" in entries else None
        command = tuple(found) if found is not None else None
        off = _turned_off_by_user(entries)
        if MARKER_KEY not in entries:
            return Status(off is None, where, FOREIGN, command)
        if off:
            return Status(False, where, f"disabled by you ({off})", command)
        same = entries.get("Exec") == self.exec
        return Status(True, where, STARTS if same else OTHER_COMMAND, command)

    def status(self) -> Status:
        return self._status(self._read())

    def enable(self) -> Status:
        current = self._read()
        if current is not None and (MARKER_KEY not in current[1] or current[0] == self.content):
            return self._status(current)
        _write_atomic(self.path, self.content)
        return self.status()

    def disable(self) -> Status:
        current = self._read()
        if current is not None and MARKER_KEY in current[1]:
            _remove(self.path)
        return self.status()


# -- macOS: the launchd agent -----------------------------------------------


def launch_agent(argv: Sequence[str]) -> bytes:
    """The agent's plist. No KeepAlive: quitting the app from its menu must stay quit."""
    if not argv:
        raise ValueError("the command to start at login is empty")
    agent = {
        "Label": AGENT_LABEL,
        "ProgramArguments": list(argv),
        "RunAtLoad": True,
        # Interactive: launchd must not throttle a UI app as a background daemon.
        "ProcessType": "Interactive",
    }
    return plistlib.dumps(agent, fmt=plistlib.FMT_XML, sort_keys=True)


def launch_agent_path(home: Path) -> Path:
    return home / "Library" / "LaunchAgents" / f"{AGENT_LABEL}.plist"


def _parse_plist(data: bytes) -> dict[str, Any] | None:
    try:
        agent = plistlib.loads(data)
    except Exception:  # plistlib raises several kinds on garbage; none is ours to fix
        return None
    return agent if isinstance(agent, dict) else None


class _LaunchAgent:
    def __init__(self, path: Path, argv: Sequence[str]) -> None:
        self.path = path
        self.argv = list(argv)
        self.content = launch_agent(argv)

    def _read(self) -> tuple[bytes, dict[str, Any] | None] | None:
        data = _read_bytes(self.path)
        return None if data is None else (data, _parse_plist(data))

    def _status(self, current: tuple[bytes, dict[str, Any] | None] | None) -> Status:
        where = str(self.path)
        if current is None:
            return Status(False, where, NOT_SET)
        agent = current[1]
        if agent is None:
            return Status(False, where, "this is not a launch agent plist, so it is left alone")
        found = agent.get("ProgramArguments")
        command = tuple(found) if isinstance(found, list) and all(
            isinstance(arg, str) for arg in found) else None
        if agent.get("Label") != AGENT_LABEL:
            return Status(agent.get("Disabled") is not True, where, FOREIGN, command)
        if agent.get("Disabled") is True:
            return Status(False, where, "disabled by you (Disabled=true)", command)
        same = found == self.argv
        return Status(True, where, STARTS if same else OTHER_COMMAND, command)

    def status(self) -> Status:
        return self._status(self._read())

    def enable(self) -> Status:
        current = self._read()
        if current is not None:
            data, agent = current
            if agent is None or agent.get("Label") != AGENT_LABEL or data == self.content:
                return self._status(current)
        _write_atomic(self.path, self.content)
        return self.status()

    def disable(self) -> Status:
        current = self._read()
        agent = current[1] if current is not None else None
        if agent is not None and agent.get("Label") == AGENT_LABEL:
            _remove(self.path)
        return self.status()


# -- Windows: the Run registry value ------------------------------------------


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


class _RunValue:
    where = f"{RUN_KEY}\\{RUN_VALUE}"

    def __init__(self, registry: RunKey, argv: Sequence[str]) -> None:
        self.registry = registry
        self.data = run_value(argv)

    def _get(self) -> str | None:
        try:
            return self.registry.get(RUN_VALUE)
        except OSError as exc:
            raise SlothError(f"cannot read {self.where}: {_why(exc)}") from None

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
                raise SlothError(f"cannot write {self.where}: {_why(exc)}") from None
        return self.status()

    def disable(self) -> Status:
        try:
            self.registry.delete(RUN_VALUE)
        except OSError as exc:
            raise SlothError(f"cannot remove {self.where}: {_why(exc)}") from None
        return self.status()


# -- files ----------------------------------------------------------------------


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SlothError(f"cannot read {path}: {_why(exc)}") from None


def _write_atomic(path: Path, data: bytes) -> None:
    """Write through a temp file in the same folder, so a crash never leaves half a file
    for the desktop to read at the next login."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SlothError(f"cannot create {path.parent}: {_why(exc)}") from None
    try:
        # The suffix keeps the desktop and launchd from reading a temp file as an entry.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise SlothError(f"cannot write {path}: {_why(exc)}") from None
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
        raise SlothError(f"cannot write {path}: {_why(exc)}") from None


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise SlothError(f"cannot remove {path}: {_why(exc)}") from None


# -- the API ----------------------------------------------------------------------


class _Backend(Protocol):
    def status(self) -> Status: ...

    def enable(self) -> Status: ...

    def disable(self) -> Status: ...


def _backend(
    *,
    home: str | os.PathLike[str] | None = None,
    jobs: str | os.PathLike[str] | None = None,
    config: str | os.PathLike[str] | None = None,
    platform: str | None = None,
    user_home: Path | None = None,
    env: Mapping[str, str] | None = None,
    registry: RunKey | None = None,
    command: Sequence[str] | None = None,
) -> _Backend:
    """Where start-at-login is decided, and what it starts.

    `home`, `jobs` and `config`: the app's home, jobs folder and config file,
    written into the command (see app_options); None leaves that one to its
    default at login. `platform` defaults to sys.platform, `user_home` (the
    user's login folder) to Path.home(), `env` to os.environ, `registry` to the
    real Run key (Windows only), `command` to default_command().
    status/enable/disable take the same keywords."""
    platform = platform or sys.platform
    argv = list(command) if command is not None else default_command(platform=platform)
    argv += app_options(home, jobs, config, platform=platform)
    if platform == "win32":
        return _RunValue(registry if registry is not None else WinregRunKey(), argv)
    user_home = user_home if user_home is not None else Path.home()
    if platform == "darwin":
        return _LaunchAgent(launch_agent_path(user_home), argv)
    # Linux, the BSDs and any other desktop that follows XDG.
    return _XdgAutostart(xdg_autostart_path(user_home, os.environ if env is None else env),
                         argv)


def status(**where: Any) -> Status:
    """Whether the app starts at login (keywords: see _backend). Given the home,
    jobs folder and config it runs with, says whether login starts it on those."""
    return _backend(**where).status()


def enable(**where: Any) -> Status:
    """Start the app at login. Idempotent: an entry that is already right is not rewritten.
    An entry we did not write is left alone (see the Status detail)."""
    return _backend(**where).enable()


def disable(**where: Any) -> Status:
    """Stop starting the app at login: removes only our own entry, never someone else's."""
    return _backend(**where).disable()
