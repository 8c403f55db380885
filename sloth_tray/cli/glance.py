"""A plain command line read without argparse: `status --json`, `list --state failed`,
`show ID`, `step NAME -- COMMAND`, `--version`, and the app's own `run` (or no command).

argparse costs a glance a fifth of its time (its import, its gettext look-ups for each
parser it builds); most command lines are the plain form of a command, whose words
this reads into the Namespace argparse would give (tests/test_glance.py compares
them). The options every command takes may come before it too, as the usage line
shows them (`--home DIR status`). A line with anything else, a mistake, a help, an
abbreviation, an option's value starting with `-`, is argparse's: None here.
"""

from types import SimpleNamespace

from sloth_tray import __version__

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from typing import Any

    from sloth_tray.limits import Limit

# The options every command takes (parser.add_common): absent unless given.
COMMON = {"--home": "home", "--config": "config", "--jobs-dir": "jobs_dir"}


def _lane(text: str) -> str | None:
    from sloth_tray.store.lanes import problem

    return None if problem(text) is not None else text


def _states(text: str) -> str | None:
    from sloth_tray.store.states import State

    return text if text in {state.value for state in State} else None


def _reasons(text: str) -> str | None:
    from sloth_tray.store.reasons import Reason

    return text if text in {reason.value for reason in Reason} else None


def limit_named(name: str) -> "Limit":
    """The limit of that name in limits.py, loaded once a value is read against it: a
    plain `status` reads none (its import is 2% of a glance's instructions)."""
    from sloth_tray import limits

    return getattr(limits, name)


def _count(limit: str) -> "Callable[[str], Any]":
    """A value read against the limit named `limit` (`"LEASE"`)."""
    def read(text: str) -> "Any":
        try:
            return limit_named(limit).convert(text)
        except ValueError:
            return None
    return read


class Form:
    """One command's plain form: its flags (`--json`: dest), its options with a value
    (`--lane`: (dest, reader: the value, or None for one argparse must refuse)), the
    positionals it requires, and the defaults argparse gives what is not said."""

    def __init__(self, flags: dict[str, str] | None = None,
                 valued: "dict[str, tuple[str, Callable[[str], Any] | None]] | None" = None,
                 positionals: tuple[str, ...] = (), defaults: "dict[str, Any] | None" = None
                 ) -> None:
        self.flags, self.valued = flags or {}, valued or {}
        self.positionals = positionals
        self.defaults = {dest: False for dest in self.flags.values()} | {
            dest: None for dest, _ in self.valued.values()} | (defaults or {})


JSON = {"--json": "json"}
FORMS = {
    "status": Form(JSON), "paths": Form(JSON), "config": Form(JSON),
    "schedules": Form(JSON | {"--all": "all"}, {"--lane": ("lane", _lane)}),
    "list": Form(JSON | {"--all-runs": "all_runs"},
                 {"--state": ("state", _states), "--reason": ("reason", _reasons),
                  "--limit": ("limit", _count("LIST_LIMIT")), "--lane": ("lane", _lane)},
                 defaults={"limit": 50}),
    "show": Form(JSON, {"--step": ("step", None),
                        "--occurrence": ("occurrence", _count("OCCURRENCE"))},
                 positionals=("id",)),
    "log": Form({"-f": "follow", "--follow": "follow"},
                {"--run": ("run", _count("OCCURRENCE"))}, positionals=("id",)),
    # The app itself: login starts it as `sloth-tray --home DIR`, and it would keep
    # argparse's modules in memory for as long as it runs.
    "run": Form({"--headless": "headless", "--no-notifications": "no_notifications"},
                {"--lease": ("lease", _count("LEASE"))}),
    "work": Form({"--once": "once"}, {"--lease": ("lease", _count("LEASE"))}),
}
APP = "run"  # what a line with no command starts


def parsed(line: "Sequence[str]") -> SimpleNamespace | None:
    """The Namespace argparse would make of `line`, when it is a plain one; else None.
    `--version` is answered here, as argparse answers it; a line without a command
    (none at all, or only the options every command takes) is `run`'s, as in main()."""
    if list(line) == ["--version"]:
        print(f"sloth-tray {__version__}")
        raise SystemExit(0)
    words = iter(line)
    before: dict[str, Any] = {}  # the options every command takes, said before it
    for word in words:
        flag, equals, value = word.partition("=")
        if flag not in COMMON:
            break
        value = _value(equals, value, words, None)
        if value is None:
            return None
        before[COMMON[flag]] = value
    else:
        word, words = APP, iter(())  # no command: `sloth-tray --home DIR` starts the app
    command = [word, *words]
    read = _step(command) if word == "step" else _command(command)
    # The command's own parser writes after the main one's: a value said after the
    # command wins, as in argparse.
    return None if read is None else SimpleNamespace(**before | vars(read))


def _command(line: "Sequence[str]") -> SimpleNamespace | None:
    """A command's plain line, from its name on."""
    form = FORMS.get(line[0])
    if form is None:
        return None
    found: dict[str, Any] = {"command": line[0]} | form.defaults
    positionals = []
    words = iter(line[1:])
    for word in words:
        flag, equals, value = word.partition("=")
        if word in form.flags:
            found[form.flags[word]] = True
        elif flag in COMMON or flag in form.valued:
            dest, read = (COMMON[flag], None) if flag in COMMON else form.valued[flag]
            value = _value(equals, value, words, read)
            if value is None:
                return None
            found[dest] = value
        elif word.startswith("-") or len(positionals) == len(form.positionals):
            return None
        else:
            positionals.append(word)
    if len(positionals) != len(form.positionals):
        return None
    return SimpleNamespace(**found, **dict(zip(form.positionals, positionals, strict=True)))


def _value(equals: str, value: str, words: "Iterator[str]",
           read: "Callable[[str], Any] | None") -> "Any":
    """An option's value: after its `=`, or the next word; read by `read` if given.
    None where argparse says what is missing or refuses the value, in its words."""
    if not equals:
        value = next(words, None)
        if value is None or value.startswith("-"):
            return None
    return value if read is None else read(value)


def _step(line: "Sequence[str]") -> SimpleNamespace | None:
    """`step NAME -- COMMAND...`, as argparse reads it: the `--` taken off. (A step's
    options after NAME are read by step_options from the rest, where argparse leaves
    them: such a line is argparse's.)"""
    if len(line) < 3 or line[1].startswith("-") or line[2] != "--" or "--" in line[3:]:
        return None
    return SimpleNamespace(command="step", name=line[1], ask=False, retries=None,
                           backoff=None, timeout=None, step_command=list(line[3:]))


# A step's options that take a value: (their limit's name, metavar, help). Given after
# NAME they reach step_options, not argparse (COMMAND's words follow).
STEP_VALUED = {
    "--retries": ("RETRIES", "N", "a failing COMMAND is tried again, in this run, up "
                                  "to N more times"),
    "--backoff": ("BACKOFF", "D", "the longest wait between tries: they wait 1s, 2s, "
                                  "4s..., at most D (default 60s)"),
    "--timeout": ("TIMEOUT", "D", "a try running longer has COMMAND's process group "
                                  "stopped (SIGTERM, then SIGKILL), and failed"),
}


def step_options(words: list[str], found: "dict[str, Any]") -> list[str]:
    """The step's options at the head of `words` (what argparse left after NAME), put
    in `found` by their dest ("ask", "retries", ...); the words after them. A bad value
    raises ValueError, in argparse's words."""
    while words:
        flag, equals, value = words[0].partition("=")
        if words[0] == "--ask":
            found["ask"], words = True, words[1:]
            continue
        if flag not in STEP_VALUED:
            break
        if not equals:
            if len(words) < 2:
                raise ValueError(f"argument {flag}: expected one argument")
            value, words = words[1], words[2:]
        else:
            words = words[1:]
        limit = limit_named(STEP_VALUED[flag][0])
        try:
            found[flag[2:]] = limit.convert(value)
        except ValueError:
            raise ValueError(f"argument {flag}: {limit.not_argument(value)}") from None
    return words
