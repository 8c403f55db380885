"""macOS: the launchd agent `~/Library/LaunchAgents/org.sloth-tray.agent.plist`.

launchctl is never called: loading the agent now would start a second copy of
the running app; launchd picks the file up at the next login. `Disabled=true`
in it: turned off by the user."""

from __future__ import annotations

import plistlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sloth_tray.autostart.files import FileEntry
from sloth_tray.autostart.state import FOREIGN, OTHER_COMMAND, STARTS, Status

AGENT_LABEL = "org.sloth-tray.agent"



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


class LaunchAgent(FileEntry[dict[str, Any] | None]):
    def __init__(self, path: Path, argv: Sequence[str]) -> None:
        super().__init__(path, launch_agent(argv))
        self.argv = list(argv)

    def parse(self, data: bytes) -> dict[str, Any] | None:
        return _parse_plist(data)

    def ours(self, parsed: dict[str, Any] | None) -> bool:
        return parsed is not None and parsed.get("Label") == AGENT_LABEL

    def judge(self, parsed: dict[str, Any] | None) -> Status:
        where = str(self.path)
        if parsed is None:
            return Status(False, where, "this is not a launch agent plist, so it is left alone")
        found = parsed.get("ProgramArguments")
        command = tuple(found) if isinstance(found, list) and all(
            isinstance(arg, str) for arg in found) else None
        if not self.ours(parsed):
            return Status(parsed.get("Disabled") is not True, where, FOREIGN, command)
        if parsed.get("Disabled") is True:
            return Status(False, where, "disabled by you (Disabled=true)", command)
        same = found == self.argv
        return Status(True, where, STARTS if same else OTHER_COMMAND, command)
