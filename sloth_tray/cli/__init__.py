"""The command line: parse, call the queue (or the daemon), print. Nothing else lives here.

Each command imports what only it uses, inside it: `status` must answer as fast as
an interpreter that opens SQLite, not load the daemon, the tray or the desktop
(tests/test_imports.py keeps it so).

common: what every command shares (the registry, the queue opened, a job found, the
shapes of output) · reading: the commands that only read · changing: those that change
the queue · daemons: run and work · step: `step` inside a job · parser: the grammar ·
entry: main().
"""

from sloth_tray.cli.common import COMMANDS
from sloth_tray.cli.entry import interrupted_at_once, main
from sloth_tray.cli.parser import build_parser

__all__ = ["COMMANDS", "build_parser", "interrupted_at_once", "main"]
