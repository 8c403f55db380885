"""The command line: parse, call the queue (or the daemon), print. Nothing else lives here.

Each command imports what only it uses, inside it, and only its own module is loaded
(common.MODULES): `status` must answer as fast as an interpreter that opens SQLite,
not load the daemon, the tray, the desktop, or argparse for a plain line
(tests/test_imports.py keeps it so).

common: what every command shares (the registry, the shapes of output) · glance: a
plain command line read without argparse · status: the glance · reading: the other
commands that only read ·
changing: those that change the queue · daemons: run and work · step: `step` inside a
job · parser: the grammar · entry: main().
"""

from sloth_tray.cli.entry import interrupted_at_once, main

__all__ = ["COMMANDS", "build_parser", "interrupted_at_once", "main"]


def __getattr__(name: str):
    """COMMANDS (every command loaded) and build_parser, loaded when asked for."""
    if name == "COMMANDS":
        from sloth_tray.cli.common import every_command

        return every_command()
    if name == "build_parser":
        from sloth_tray.cli.parser import build_parser

        return build_parser
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
