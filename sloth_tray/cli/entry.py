"""main(): parse, hand the command its home and settings, turn errors into one sentence
and Ctrl-C into 130."""

import os
import sys

from sloth_tray.cli import glance
from sloth_tray.cli.common import (
    BROKEN_PIPE_STATUS,
    IN_A_JOB,
    INTERRUPTED,
    MODULES,
    command_named,
)
from sloth_tray.cli.glance import step_options
from sloth_tray.errors import SlothError

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from sloth_tray import config


def load_settings(args: "argparse.Namespace") -> "config.Settings":
    """config.toml, the environment, and the flags this command has."""
    from sloth_tray import config

    flag = vars(args).get
    return config.load(flag("config") or None, flags={
        "jobs_dir": flag("jobs_dir"), "lease": flag("lease"),
        "notifications": False if flag("no_notifications") else None})


def main(argv: "Sequence[str] | None" = None) -> int:
    try:
        code = _main(argv)
        if sys.stdout is not None:  # None in a windowed bundle, which has no console
            sys.stdout.flush()  # here, not at exit: a reader that went away is seen below
        return code
    except BrokenPipeError:
        # `sloth-tray list | head -1`: the reader has what it wanted. Stop quietly with
        # the status of a tool stopped by SIGPIPE; stdout goes to devnull so that
        # Python's own flush at exit does not complain either.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return BROKEN_PIPE_STATUS


def _main(argv: "Sequence[str] | None") -> int:
    line = list(sys.argv[1:] if argv is None else argv)
    # `sloth-tray add -- COMMAND ...`: the command's words are its own, whatever they
    # look like (--cwd, -h, another --): they are taken off before the parse.
    inline = None
    if _command_of(line) == "add" and "--" in line:
        cut = line.index("--")
        line, inline = line[:cut], line[cut + 1:]
    if _command_of(line) == "step" and _step_name_forgotten(line):
        print("sloth-tray: a step's NAME goes before `--`: sloth-tray step NAME [--ask] "
              "[--retries N] [--backoff D] [--timeout D] -- COMMAND [ARG...]",
              file=sys.stderr)
        return 2  # argparse's code for a usage mistake
    args = glance.parsed(line) if inline is None else None  # a plain line: no argparse
    if args is None:
        from sloth_tray.cli.parser import build_parser

        # `sloth-tray retry --fresh ID`: the command comes first, so only its parser is
        # needed; anything else (help, options first, no command) gets them all.
        known = line and (line[0] in MODULES or line[0] in IN_A_JOB)
        parser = build_parser(only=line[0] if known else None,
                              listing=_help_before_command(line))
        args = parser.parse_args(line)
        if args.command is None:  # plain `sloth-tray` starts the app
            args = parser.parse_args([*line, "run"])
    if inline is not None:
        args.inline = inline
    if args.command == "step":  # inside a job: no settings, no home: the run names its queue
        from sloth_tray.cli import step

        how = {"ask": args.ask, "retries": args.retries, "backoff": args.backoff,
               "timeout": args.timeout}
        try:  # NAME --ask --retries 3 -- ...: argparse left them in the rest
            command = step_options(list(args.step_command), how)
        except ValueError as exc:
            print(f"sloth-tray step: {exc}", file=sys.stderr)
            return 2  # argparse's code for a usage mistake
        return step.main(args.name, command[1:] if command[:1] == ["--"] else command,
                         ask=how.pop("ask"), **how)
    if args.command in ("sleep", "ask"):  # inside a job, as `step`: the run names its queue
        from sloth_tray.cli import wait

        if args.command == "sleep":
            return wait.main_sleep(args.duration, args.until, args.name)
        return wait.main_ask(args.question, args.choices, args.default, args.timeout,
                             args.name)
    try:
        from sloth_tray.paths import locate

        refuse_empty_names(args)
        args.settings = load_settings(args)
        home = locate(getattr(args, "home", None), args.settings["jobs_dir"],
                      jobs_source=args.settings.sources.get("jobs_dir"),
                      text=is_a_look(args))
        with interrupted_at_once(args.command not in (*DAEMONS, *WAITING)):
            return command_named(args.command)(args, home)
    except SlothError as exc:
        from sloth_tray.text import printable

        print(f"sloth-tray: {printable(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return INTERRUPTED


def refuse_empty_names(args: "argparse.Namespace") -> None:
    """`--home ""` (a variable that was not set, say) is no option left out: taken as
    one, the command would use, and write into, the home it was meant to avoid."""
    for name, what in (("home", "a folder"), ("jobs_dir", "a folder"), ("config", "a file")):
        if vars(args).get(name) == "":
            raise SlothError(f"--{name.replace('_', '-')} was given an empty name: give it "
                             f"{what}, or leave it out")


DAEMONS = ("run", "work")  # they stop cleanly on Ctrl-C themselves (stopsignals.py)
# They only read, and may wait for long: Ctrl-C ends them with 130 (KeyboardInterrupt).
WAITING = ("wait", "log", "mcp")
# The options every command takes that are followed by a value (before the command too).
COMMON_VALUED = ("--home", "--config", "--jobs-dir")


def _command_of(line: "Sequence[str]") -> str | None:
    """The command a command line names: its first word that is not an option (nor
    the value of one) before any `--`."""
    at = _command_at(line)
    return None if at is None else line[at]


def _command_at(line: "Sequence[str]") -> int | None:
    """Where the command's word is in the command line (see _command_of)."""
    words = iter(enumerate(line))
    for at, word in words:
        if word == "--":
            return None
        if word in COMMON_VALUED:
            next(words, None)
        elif not word.startswith("-"):
            return at
    return None


def _help_before_command(line: "Sequence[str]") -> bool:
    """`sloth-tray --help`: argparse prints the commands and stops at the help, before
    any command's own options are needed."""
    at = _command_at(line)
    before = line[:at] if at is not None else line[:line.index("--")] if "--" in line else line
    return "-h" in before or "--help" in before


def _step_name_forgotten(line: "Sequence[str]") -> bool:
    """`sloth-tray step -- echo x`: the `--` comes before any NAME (nothing but the
    step's options between `step` and it), where argparse would take COMMAND's first
    word for the name and run the rest. Unless a second `--` follows that one word:
    `step -- -n -- cmd` is how a name that starts with a dash is given."""
    after = list(line)[(_command_at(line) or 0) + 1:]
    if "--" not in after:
        return False
    try:
        if step_options(after, {}) != after[after.index("--"):]:
            return False  # a word before `--` that is not a step's option: the name
        flags = step_options(after[after.index("--") + 2:], {})
    except ValueError:
        return False  # argparse says what is wrong with the option
    return flags[:1] != ["--"]


class interrupted_at_once:  # lower case: used as the function it was
    """Ctrl-C ends a one-shot command at once, as it ends any C tool.

    Python turns it into KeyboardInterrupt wherever the interpreter happens to
    be, even inside a context manager's own code between taking a lock and
    the code that gives it back: an `add` waiting on a locked queue then hung
    for good. A one-shot command has nothing to clean up: each write is one
    SQLite transaction, and `add` copies where no start would queue it.

    A class, not a generator: importing contextlib costs a look half a millisecond.
    """

    __slots__ = ("one_shot", "previous")

    def __init__(self, one_shot: bool) -> None:
        self.one_shot, self.previous = one_shot, None

    def __enter__(self) -> None:
        if not self.one_shot:
            return
        signal = _signals()
        try:
            self.previous = signal.signal(signal.SIGINT, signal.SIG_DFL)
        except ValueError:  # not the main thread (main() called from a thread): leave it be
            pass

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            signal = _signals()
            signal.signal(signal.SIGINT, self.previous)


def _signals():
    """The C module signal wraps: signal's enums cost a glance a twentieth of its time."""
    try:
        import _signal as signal
    except ImportError:  # an interpreter without it
        import signal
    return signal


# The commands that only look, given their home as text: they import no pathlib
# (paths.py). `log -f` follows the log with the daemon's own watch, in Paths.
LOOKS = ("status", "list", "show", "log", "paths", "config", "schedules")


def is_a_look(args: "argparse.Namespace") -> bool:
    return args.command in LOOKS and not getattr(args, "follow", False)
