"""The command login starts: the app itself, and the options that bring it back where it lives.

The frozen executable, else `python -m sloth_tray` (pythonw.exe on Windows), with
absolute `--home`, `--jobs-dir` and `--config`.
"""

from __future__ import annotations

import ntpath
import os
import posixpath
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sloth_tray.config import default_path as default_config_path

if TYPE_CHECKING:
    from sloth_tray.config import Settings
    from sloth_tray.paths import Home


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
    if settings.path is not None and Path(settings.path) != Path(default_config_path()):
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
