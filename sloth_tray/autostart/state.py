"""What every OS's entry says: `Status` (on or off, where, the sentence why) and its sentences.

A Status also carries the command found in the entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sloth_tray.autostart.command import CONFIG_OPTION, HOME_OPTION, JOBS_OPTION, option_value

APP_ID = "sloth-tray"

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
