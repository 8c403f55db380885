"""`sloth-tray mcp`: the queue offered to agents (MCP clients) on stdin and stdout. The
SDK is an extra, imported by this command alone: without it, one line says what to
install."""

from __future__ import annotations

import argparse
import importlib.util
import sys

from sloth_tray.cli.common import command
from sloth_tray.paths import Home

INSTALL = "pip install 'sloth-tray[mcp]'"


@command
def cmd_mcp(args: argparse.Namespace, home: Home) -> int:
    try:
        found = importlib.util.find_spec("mcp") is not None
    except (ImportError, ValueError):  # a broken or half-removed install
        found = False
    if not found:
        print(f"sloth-tray mcp: the MCP server needs the mcp extra: {INSTALL}",
              file=sys.stderr)
        return 2
    try:
        from sloth_tray.mcp.server import serve
    except ImportError as exc:
        print(f"sloth-tray mcp: the mcp extra is not installed whole ({exc}): {INSTALL}",
              file=sys.stderr)
        return 2
    return serve(home)
