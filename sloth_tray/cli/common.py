"""What every command shares: the registry of commands, the queue opened (vetted, or
only for reading), a job found by id or name, and the shapes of output.

`status --json`, the glance scripts run, loads this module and none of what a
person's table needs (text.py, timefmt.py, the states' enum): those are imported
where they are used."""

import json
import sys
from collections.abc import Sequence

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from typing import Any

    from sloth_tray.paths import Home
    from sloth_tray.store.rows import Job

    Command = Callable[[argparse.Namespace, Home], int]

BROKEN_PIPE_STATUS = 128 + 13  # 128 + SIGPIPE, as a shell reports a tool the signal stopped
INTERRUPTED = 128 + 2  # 128 + SIGINT: Ctrl-C, after a clean stop
COMMANDS: "dict[str, Command]" = {}  # filled by @command as the command modules load

# The module of cli/ each command lives in, loaded only when that command runs: a
# glance pays for no other command's imports. The three a job calls (`step`, `sleep`,
# `ask`) take no home and are called by entry.py itself.
MODULES = {
    "paths": "reading", "status": "status", "list": "reading", "schedules": "reading",
    "show": "reading", "config": "reading", "wait": "reading", "log": "reading",
    "retry": "changing", "cancel": "changing", "run-now": "changing", "pause": "changing",
    "resume": "changing", "add": "changing", "answer": "changing",
    "autostart": "changing", "prune": "changing",
    "run": "daemons", "work": "daemons", "mcp": "agents",
}
IN_A_JOB = ("step", "sleep", "ask")


def command(function: "Command") -> "Command":
    """cmd_run_now is `sloth-tray run-now`."""
    COMMANDS[function.__name__.removeprefix("cmd_").replace("_", "-")] = function
    return function


def command_named(name: str) -> "Command":
    """The function of command `name`, its module loaded now."""
    __import__(f"sloth_tray.cli.{MODULES[name]}")
    return COMMANDS[name]


def every_command() -> "dict[str, Command]":
    """COMMANDS, every command module loaded (the README's check lists them all)."""
    for name in MODULES:
        command_named(name)
    return COMMANDS


def no_queue_here(home: "Home") -> None:
    """Say, on stderr, that there is no queue to read (the command's output stays empty)."""
    from sloth_tray.text import printable

    print(f"sloth-tray: {printable(home.no_queue)}", file=sys.stderr)


def emit_json(data: "Any") -> None:
    text = json.dumps(data, indent=2, ensure_ascii=False)
    try:
        text.encode(sys.stdout.encoding or "utf-8", sys.stdout.errors or "strict")
    except UnicodeEncodeError:  # a file name's undecodable bytes: \u escapes are exact too
        text = json.dumps(data, indent=2)
    print(text)


def table(rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell; the last column is left ragged.

    Every cell is made printable first: a name or result carrying a newline or
    an escape sequence must not forge a row or drive the terminal."""
    from sloth_tray.text import printable

    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join([cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
                  + [row[-1]]).rstrip()
        for row in rows
    )


def when(job: "Job", now: float, paused: bool = False) -> str:
    """A pending job due while the queue is paused says so: nothing starts it now."""
    from sloth_tray.store.states import State
    from sloth_tray.timefmt import relative

    if job.state == State.PENDING:
        if job.not_before <= now:
            return "due (paused)" if paused else "due now"
        return f"due {relative(job.not_before, now)}"
    if job.state == State.RUNNING:
        return f"started {relative(job.updated_at, now)}"
    return relative(job.updated_at, now)


def in_lane(lane: str | None) -> str:
    """` in lane net`, to end a sentence about a whole lane (nothing for every lane)."""
    from sloth_tray.text import printable

    return "" if lane is None else f" in lane {printable(lane)}"

