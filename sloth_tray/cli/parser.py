"""The command line's grammar: argparse, with one-line mistakes and "did you mean"."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable

from sloth_tray import __version__, limits
from sloth_tray.cli.glance import STEP_VALUED, limit_named
from sloth_tray.store.reasons import Reason
from sloth_tray.store.states import State
from sloth_tray.text import printable

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    from typing import Any, NoReturn


class Parser(argparse.ArgumentParser):
    """argparse, but a mistake on the command line is one line on stderr, like any
    other error (exit 2, argparse's code for a usage mistake)."""

    # What argparse takes for a negative number, not an option, after an option that
    # wants a value: with units too (`--older-than -1d`), so that the option's own
    # check says what it accepts instead of "expected one argument".
    NEGATIVE_VALUE = re.compile(r"^-[0-9]*\.?[0-9]+[a-zA-Z]*$")

    def __init__(self, *args: Any, columns: int | None = None, **kwargs: Any) -> None:
        # The terminal's width, read once for the whole command line (build_parser):
        # argparse asks it again for every option added.
        self._columns = terminal_columns() if columns is None else columns
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = self.NEGATIVE_VALUE  # argparse's own hook (3.11)

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments: "):
            named = message.split(": ", 1)[1].split()  # the words argparse did not take
        elif message.startswith("the following arguments are required"):
            named = getattr(self, "_given", [])
        else:
            named = []
        dashed = [word for word in named if word.startswith("-") and word != "--"
                  and word.split("=", 1)[0] not in self._option_string_actions
                  and word.split("=", 1)[0] not in COMMON_OPTIONS
                  and not self.NEGATIVE_VALUE.match(word)]
        if dashed:
            # A job may be named so (a drop `-rf.sh`): argparse took it for options.
            command = self.prog if " " in self.prog else f"{self.prog} COMMAND"
            message += (f"; a job whose name starts with a dash goes after --, as in "
                        f"`{command} -- {dashed[0]}`")
        self.exit(2, f"{self.prog}: {printable(message)}\n")

    def _get_formatter(self) -> argparse.HelpFormatter:
        """argparse's formatter, given its width: left to itself it imports shutil (and
        with it zlib, bz2 and lzma) in every add_argument, for the terminal's width."""
        return self.formatter_class(prog=self.prog, width=self._columns - 2)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """A choice mistyped (a command, a --state) gets the nearest one: `did you mean
        status?`."""
        if action.choices is not None and value not in action.choices:
            from sloth_tray.nearest import did_you_mean  # here: only a mistake needs it

            near = did_you_mean(str(value), action.choices)
            if near:
                raise argparse.ArgumentError(action, f"invalid choice: {value!r}{near}")
        super()._check_value(action, value)

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)  # for error()'s hint
        namespace, extras = super().parse_known_args(args, namespace)
        for action in self._actions:
            # `--lease=--`: argparse (3.11) drops the "--" and stores [], past `type`.
            if (action.option_strings and action.type is not None and action.nargs is None
                    and isinstance(getattr(namespace, action.dest, None), list)):
                self.error(f"argument {action.option_strings[0]}: expected one value")
        return namespace, extras


# Options every command takes, before the command too (a command's own parser may not
# list them): never a job's name.
COMMON_OPTIONS = ("--home", "--config", "--jobs-dir", "--help", "-h", "--version")

ID_HELP = ("a job id, enough of its start to be unique (`sloth-tray list` shows them), or "
           "a job's name (its newest job)")


class _NotBuilt:
    """A command's parser not needed this time: what is added to it goes nowhere."""

    def add_argument(self, *args: object, **kwargs: object) -> None:
        return None

    def add_mutually_exclusive_group(self) -> _NotBuilt:
        return self


def terminal_columns() -> int:
    """shutil.get_terminal_size().columns, as argparse asks it: $COLUMNS, else the
    terminal's, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80
    except (AttributeError, ValueError, OSError):
        return 80


def add_common(parser: argparse.ArgumentParser) -> None:
    """The options every command takes: where the home, the settings and the jobs are."""
    parser.add_argument("--home", default=argparse.SUPPRESS, metavar="DIR",
                        help="the app's folder (default: $SLOTH_TRAY_HOME or the "
                             "platform's data dir)")
    parser.add_argument("--config", default=argparse.SUPPRESS, metavar="FILE",
                        help="the settings file (default: $SLOTH_TRAY_CONFIG or the "
                             "platform's config dir/config.toml)")
    parser.add_argument("--jobs-dir", default=argparse.SUPPRESS, metavar="DIR",
                        help="the watched jobs folder (default: $SLOTH_TRAY_JOBS or HOME/jobs)")


def lane_name(text: str) -> str:
    """argparse's `type` for a lane: a name no lane's folder could have is a usage
    mistake, said in one sentence (exit 2) before anything is done."""
    from sloth_tray.store.lanes import problem  # here: only a command given a lane needs it

    why = problem(text)
    if why is not None:
        raise argparse.ArgumentTypeError(why)
    return text


def job_key(text: str) -> str:
    """argparse's `type` for `--key`: one no job could have is a usage mistake (exit 2)."""
    from sloth_tray.store.rows import key_problem  # here: only `add --key` needs it

    why = key_problem(text)
    if why is not None:
        raise argparse.ArgumentTypeError(why)
    return text


def lane_option(parser: argparse.ArgumentParser) -> None:
    """`--lane NAME` beside a LANE argument: the lane as every other command spells it."""
    parser.add_argument("--lane", dest="lane_option", type=lane_name, metavar="NAME",
                        help="the same as LANE")


def json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def by_name(parser: argparse.ArgumentParser, help: str) -> None:
    """`--name NAME`: every job of that name the command applies to, at once."""
    parser.add_argument("--name", dest="by_name", metavar="NAME", help=help)


def daemon_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lease", type=limits.LEASE.argument, metavar="SECONDS",
                        help="how long a job's lease lasts between heartbeats (default 60s)")


def build_parser(only: str | None = None, *, listing: bool = False
                 ) -> argparse.ArgumentParser:
    """The whole command line; with `only`, just that command's parser among the
    commands; `listing`: the commands' names and what they do, none of their options,
    all the main `--help` shows. (Each parser argparse builds looks up translations:
    options shared by commands are added to each, not kept in parent parsers built
    every time.)"""
    columns = terminal_columns()
    parser = Parser(
        prog="sloth-tray", columns=columns,
        description="Run the scripts you drop in a folder, one at a time, under leases.")
    add_common(parser)
    parser.add_argument("--version", action="version", version=f"sloth-tray {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, help: str, *extras: Callable[[argparse.ArgumentParser], None]) -> Any:
        if listing:
            sub.add_parser(name, help=help, add_help=False, columns=columns)
            return _NotBuilt()
        if only is not None and name != only:
            return _NotBuilt()
        command_parser = sub.add_parser(name, help=help, description=help, columns=columns)
        add_common(command_parser)
        for extra in extras:
            extra(command_parser)
        return command_parser

    add("paths", "where the app keeps its files", json_flag)
    add("status", "how many jobs are in each state, and what each lane is doing", json_flag)
    p = add("list", "the jobs, newest first", json_flag)
    p.add_argument("--state", choices=[s.value for s in State], help="only jobs in this state")
    p.add_argument("--reason", choices=[r.value for r in Reason],
                   help="only jobs whose last attempt failed for this reason")
    p.add_argument("--limit", type=limits.LIST_LIMIT.argument, default=50,
                   help="at most N jobs (0: all; default 50)")
    p.add_argument("--lane", type=lane_name, metavar="NAME",
                   help="only that lane's jobs (main: those dropped straight in the jobs "
                        "folder)")
    p.add_argument("--all-runs", action="store_true",
                   help="every run of a job that repeats (default: its newest done run "
                        "stands for the older ones)")
    p = add("schedules", "the jobs that repeat, one row per series: when each runs next, "
                         "how its last run went", json_flag)
    p.add_argument("--lane", type=lane_name, metavar="NAME", help="only that lane's series")
    p.add_argument("--all", action="store_true", help="series that were cancelled too")
    p = add("show", "one job: its fields, history, steps and logs", json_flag)
    p.add_argument("id", metavar="ID", help=ID_HELP)
    p.add_argument("--step", metavar="NAME", help="print that step's recorded output")
    p.add_argument("--occurrence", type=limits.OCCURRENCE.argument, metavar="N",
                   help="with --step: its Nth call in the run (default: the last)")
    p = add("retry", "put done, failed or cancelled jobs back in line, due now; their "
                     "done steps are skipped")
    p.add_argument("ids", nargs="*", metavar="ID", help=ID_HELP)
    p.add_argument("--all-failed", action="store_true", help="every failed job")
    p.add_argument("--lane", type=lane_name, metavar="NAME",
                   help="with --all-failed: every failed job of that lane only")
    by_name(p, "every failed job called NAME (those --all-failed would retry)")
    steps = p.add_mutually_exclusive_group()
    steps.add_argument("--from", dest="forget_from", metavar="STEP",
                       help="forget this step and every step after it: they run again")
    steps.add_argument("--fresh", action="store_true",
                       help="forget every step: the job runs from its first line")
    steps.add_argument("--step-done", metavar="STEP",
                       help="a step cut short did happen: mark it done, then go on")
    p = add("cancel", "cancel pending, running or failed jobs")
    p.add_argument("ids", nargs="*", metavar="ID", help=ID_HELP)
    p.add_argument("--all-failed", action="store_true",
                   help="every failed job (then `prune` can remove them)")
    p.add_argument("--lane", type=lane_name, metavar="NAME",
                   help="with --all-failed: every failed job of that lane only")
    by_name(p, "every pending, running or failed job called NAME")
    p = add("run-now", "make waiting jobs due now (failed ones: use retry)")
    p.add_argument("ids", nargs="*", metavar="ID", help=ID_HELP)
    by_name(p, "every waiting job called NAME")
    p = add("pause", "start no new job until resume, in every lane or in LANE only, in "
                     "this and every later start (a running job finishes)")
    p.add_argument("lane", nargs="?", type=lane_name, metavar="LANE",
                   help="only this lane, one a folder or a job has (default: every lane, "
                        "and lanes made later)")
    lane_option(p)
    p.add_argument("--series", metavar="NAME",
                   help="hold only the series called NAME (a job that repeats): its "
                        "runs wait, the rest go on")
    p = add("resume", "start due jobs again after a pause, in every lane or in LANE only")
    p.add_argument("lane", nargs="?", type=lane_name, metavar="LANE",
                   help="only this lane; the others stay as they are (default: every "
                        "lane, those paused on their own too)")
    lane_option(p)
    p.add_argument("--series", metavar="NAME",
                   help="let the series called NAME run again")
    p = add("add", "queue a script (a copy of it: later edits change nothing), or a "
                   "command: add -- COMMAND [ARG...]")
    p.add_argument("path", nargs="?", help="the script")
    p.add_argument("--cwd", metavar="DIR",
                   help="the folder it runs in (default: a script, the home folder; a "
                        "command, the folder add is called from)")
    p.add_argument("--delay", type=limits.DELAY.argument, metavar="SECONDS",
                   help="wait this long before the first run (90, 90s, 10m, 2h, 1d)")
    p.add_argument("--max-attempts", type=limits.ATTEMPTS.argument, metavar="N",
                   help="tries before giving up (1 to 1000)")
    p.add_argument("--name", help="the job's name (default: the file's name without "
                                  "extension, or the command line)")
    p.add_argument("--lane", type=lane_name, metavar="NAME",
                   help="the lane it runs in, one job at a time beside the other lanes "
                        "(default: main; the lane's folder need not exist)")
    p.add_argument("--key", type=job_key, metavar="KEY",
                   help="your own name for the job, unique: adding KEY again adds nothing "
                        "and prints the id of the job that has it (whatever its state)")
    p = add("wait", "wait until the jobs end, or until a lane has nothing pending or "
                    "running; exit 0 when all ended done")
    p.add_argument("ids", nargs="*", metavar="ID", help=ID_HELP)
    p.add_argument("--lane", type=lane_name, metavar="NAME",
                   help="every job pending or running in that lane, and those that join "
                        "it meanwhile (a repeating job's runs aside: they never end)")
    p = add("log", "the output of a job's last run (or of --run N)")
    p.add_argument("id", metavar="ID", help=ID_HELP)
    p.add_argument("--run", type=limits.OCCURRENCE.argument, metavar="N",
                   help="that run's output (1 is the first; default: the last)")
    p.add_argument("-f", "--follow", action="store_true",
                   help="follow the output as it is written until the job ends "
                        "(exit 0 when it ended done)")
    p = add("step", "inside a job: run COMMAND once; a later run of the job skips it "
                    "and writes its recorded output again")
    p.add_argument("name", metavar="NAME", help="the step's name, unique within the job")
    p.add_argument("--ask", action="store_true",
                   help="if the run ends while it runs, ask before running it again")
    for flag, how in STEP_VALUED.items():
        p.add_argument(flag, type=limit_named(how[0]).argument, metavar=how[1], help=how[2])
    p.add_argument("step_command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARG...]",
                   help="the command (after --)")
    _add_waits(add)
    p = add("run", "the daemon: run due jobs as they come", daemon_options)
    p.add_argument("--headless", action="store_true", help="no tray icon")
    p.add_argument("--no-notifications", action="store_true",
                   help="no desktop notification when a job fails for good")
    p = add("work", "run due jobs in the foreground, one line per job", daemon_options)
    p.add_argument("--once", action="store_true", help="run every job due now, then exit")
    add("mcp", "serve the queue to agents (MCP clients such as Claude Desktop) on stdin "
               "and stdout; needs the mcp extra: pip install 'sloth-tray[mcp]'")
    add("config", "the effective settings and where each comes from", json_flag)
    p = add("autostart", "start the app at login: enable, disable, or show the status",
            json_flag)
    p.add_argument("action", choices=["enable", "disable", "status"], nargs="?",
                   default="status")
    p = add("prune", "delete finished (done or cancelled) jobs and their history")
    p.add_argument("--older-than", type=limits.OLDER_THAN.argument, default=7 * 86400,
                   metavar="AGE",
                   help="age such as 7d, 12h, 30m (default 7d)")
    return parser



def _add_waits(add: Callable[..., Any]) -> None:
    """Steps that wait, inside a job (`sleep`, `ask`), and a person's `answer`."""
    p = add("sleep", "inside a job: sleep durably (the job runs again, from the top, at its "
                     "wake time, its done steps skipped); outside one, like sleep(1)")
    p.add_argument("duration", nargs="?", metavar="DURATION",
                   help="how long: 90, 90s, 10m, 2h, 1d")
    p.add_argument("--until", metavar="TIME",
                   help="until this local time: 14:00 (the next one), or 2026-03-02 14:00")
    p.add_argument("--name", default="sleep", help="the step's name (default: sleep)")
    p = add("ask", "inside a job: ask the person at the tray, durably; prints the answer")
    p.add_argument("question", metavar="QUESTION")
    p.add_argument("--choices", default="yes,no", help="the answers, comma-separated "
                                                      "(default: yes,no)")
    p.add_argument("--default", help="the answer once --timeout has passed")
    p.add_argument("--timeout", type=limits.TIMEOUT.argument, metavar="D",
                   help="how long to wait for an answer (90s, 10m, 2h, 1d)")
    p.add_argument("--name", help="the step's name (default: ask: QUESTION)")
    p = add("answer", "answer the question a job asks (`sloth-tray list` shows them)")
    p.add_argument("id", metavar="ID", help=ID_HELP)
    p.add_argument("choice", metavar="CHOICE")
