"""Start at login, per OS: an XDG autostart file, a launchd agent, or a Run registry value.

The platform code is thin: everything written is rendered by pure functions
(`xdg.desktop_entry`, `xdg.desktop_exec`, `launchd.launch_agent`,
`windows.run_value`), and every location is a parameter, so all three OSes are
testable on Linux. This package's face is the one way in (`status`, `enable`,
`disable`); each OS's format and backend is in its own module (`xdg`,
`launchd`, `windows`), the file entries' reading, atomic writing and removing
in `files`, the command in `command`, and `Status` in `state`.

- Linux and other XDG desktops (`xdg`): `$XDG_CONFIG_HOME/autostart/sloth-tray.desktop`.
- macOS (`launchd`): `~/Library/LaunchAgents/org.sloth-tray.agent.plist`, never loaded
  by launchctl.
- Windows (`windows`): the value `sloth-tray` under `HKCU\\...\\CurrentVersion\\Run`.

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

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from sloth_tray.autostart.command import (
    CONFIG_OPTION,
    HOME_OPTION,
    JOBS_OPTION,
    app_location,
    app_options,
    default_command,
    option_value,
)
from sloth_tray.autostart.launchd import LaunchAgent, launch_agent_path
from sloth_tray.autostart.state import APP_ID, FOREIGN, NOT_SET, OTHER_COMMAND, STARTS, Status
from sloth_tray.autostart.windows import RunKey, RunValue, WinregRunKey
from sloth_tray.autostart.xdg import XdgAutostart, parse_desktop_entry, xdg_autostart_path

# parse_desktop_entry: the desktop file as a desktop reads it, for whoever checks what
# was written (tests/test_cli.py reads it from here).
__all__ = [
    "APP_ID", "CONFIG_OPTION", "FOREIGN", "HOME_OPTION", "JOBS_OPTION", "NOT_SET",
    "OTHER_COMMAND", "STARTS", "RunKey", "Status", "app_location", "app_options",
    "default_command", "disable", "enable", "option_value", "parse_desktop_entry", "status",
]


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
        return RunValue(registry if registry is not None else WinregRunKey(), argv)
    user_home = user_home if user_home is not None else Path.home()
    if platform == "darwin":
        return LaunchAgent(launch_agent_path(user_home), argv)
    # Linux, the BSDs and any other desktop that follows XDG.
    return XdgAutostart(xdg_autostart_path(user_home, os.environ if env is None else env),
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
