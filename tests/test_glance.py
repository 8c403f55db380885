"""A plain command line is read without argparse (cli/glance.py): into exactly what
argparse makes of it, or not at all."""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sloth_tray.cli import glance
from sloth_tray.cli.parser import build_parser

LINES = [
    ["status"], ["status", "--json"], ["status", "--home", "/h", "--json"],
    ["status", "--home=/h", "--config", "c.toml", "--jobs-dir", "j"],
    ["status", "--jobs-dir="], ["paths", "--json"], ["config"], ["config", "--json"],
    ["schedules"], ["schedules", "--all", "--lane", "net", "--json"],
    ["schedules", "--lane=net"], ["schedules", "--lane", "a/b"], ["schedules", "--lane", ""],
    ["list"], ["list", "--json"], ["list", "--state", "failed", "--reason", "timeout"],
    ["list", "--state", "fialed"], ["list", "--reason", "nope"], ["list", "--limit", "0"],
    ["list", "--limit", "7", "--limit", "8"], ["list", "--limit", "-1"],
    ["list", "--limit", "x"], ["list", "--limit"], ["list", "--lane", "net", "--all-runs"],
    ["list", "--js"], ["list", "--json=1"], ["list", "extra"], ["list", "--", "x"],
    ["show", "abc123"], ["show", "abc123", "--json", "--step", "fetch"],
    ["show", "--step", "fetch", "abc123", "--occurrence", "2"],
    ["show", "abc", "--occurrence", "0"], ["show"], ["show", "a", "b"], ["show", "-a"],
    ["show", "a", "--step", "-x"], ["show", ""],
    ["log", "abc"], ["log", "abc", "-f"], ["log", "--follow", "abc", "--run", "3"],
    ["log", "abc", "--run", "0"], ["log", "-f"],
    ["status", "-h"], ["status", "--help"], ["--home", "/h", "status"], ["help"],
    ["step", "fetch", "--", "curl", "-o", "x"], ["step", "fetch", "--", "--ask"],
    ["step", "fetch", "--ask", "--", "true"], ["step", "-n", "--", "true"],
    ["step", "fetch", "--"], ["step", "fetch"], ["step", "f", "--", "a", "--", "b"],
    # The options every command takes, said before it, as the usage line shows them
    ["--home", "/h", "status", "--json"], ["--home=/h", "--jobs-dir", "j", "list"],
    ["--home", "/a", "status", "--home", "/b"], ["--config", "c", "--config", "d", "paths"],
    ["--home", "/h", "show", "abc", "--json"], ["--home", "/h", "log", "abc", "-f"],
    ["--home", "-x", "status"], ["--home"], ["--home", "/h"], ["--home="],
    ["--ho", "/h", "status"], ["--home", "/h", "--version"], ["--home", "/h", "-h"],
    ["--home", "/h", "status", "-h"], ["--home", "/h", "retry", "abc"],
    ["--home", "/h", "step", "fetch", "--", "true"], ["--jobs-dir", "j", "--", "status"],
    ["--home", "status", "status"], ["--home", "/h", "list", "--limit", "x"],
    # The app: as login starts it (options, no command), and as a person does
    [], ["--home", "/h", "--jobs-dir", "/j"], ["run"], ["run", "--headless", "--lease", "30"],
    ["run", "--lease", "0"], ["run", "--lease", "nan"], ["run", "--lease=1h"],
    ["--home", "/h", "run", "--no-notifications"], ["work", "--once"], ["work", "--lease"],
    ["run", "--headless", "extra"], ["--home", "/h", "--"],
]


def argparse_reads(line: list[str]) -> dict[str, object] | str:
    """What argparse makes of `line`: its Namespace, or "exit N" when it stops there. A
    line without a command is `run`'s, as main() reads it."""
    parser = build_parser()
    try:
        read = parser.parse_args(line)
        if read.command is None:
            read = parser.parse_args([*line, "run"])
        return vars(read)
    except SystemExit as stop:
        return f"exit {stop.code}"


@pytest.mark.parametrize("line", LINES, ids=" ".join)
def test_a_line_read_without_argparse_reads_as_argparse_reads_it(line, capsys):
    read = glance.parsed(line)
    if read is not None:
        assert vars(read) == argparse_reads(line)
    capsys.readouterr()


@pytest.mark.parametrize("line", [
    ["status", "--json"], ["list", "--state", "failed", "--limit", "0", "--lane", "net"],
    ["show", "abc123", "--step", "fetch"], ["log", "abc", "-f", "--home", "/h"],
    ["schedules", "--all"], ["step", "fetch", "--", "true"],
    ["--home", "/h", "status", "--json"], ["--home=/h", "--jobs-dir", "j", "list"],
    ["--config", "c.toml", "show", "abc123"], ["--home", "/h", "step", "fetch", "--", "true"],
    [], ["--home", "/h", "--jobs-dir", "/j"], ["run", "--headless"], ["work", "--once"]],
    ids=" ".join)
def test_the_plain_lines_are_read_without_argparse(line):
    assert glance.parsed(line) is not None


@pytest.mark.parametrize("line", [
    ["list", "--state", "fialed"], ["list", "--limit", "x"], ["schedules", "--lane", "a/b"],
    ["show"], ["status", "--jsno"], ["show", "a", "--occurrence", "0"]], ids=" ".join)
def test_a_mistake_is_left_to_argparse_and_its_words(line):
    assert glance.parsed(line) is None
    assert argparse_reads(line) == "exit 2"


def test_an_abbreviation_is_left_to_argparse_which_takes_it():
    assert glance.parsed(["status", "--js"]) is None
    assert argparse_reads(["status", "--js"]) == {"command": "status", "json": True}


@pytest.mark.parametrize("command", sorted(glance.FORMS))
def test_each_plain_form_knows_every_option_its_command_has(command):
    """An option added to a command's grammar (parser.py) and not to its form here
    would leave its dest out of the Namespace: the form would read lines wrongly."""
    sub = next(action for action in build_parser()._actions
               if isinstance(action, argparse._SubParsersAction)).choices[command]
    options = {flag for action in sub._actions for flag in action.option_strings} - {
        "-h", "--help"}
    positionals = tuple(action.dest for action in sub._actions if not action.option_strings)
    form = glance.FORMS[command]
    assert options == set(form.flags) | set(form.valued) | set(glance.COMMON)
    assert positionals == form.positionals


def test_version_is_answered_as_argparse_answers_it(capsys):
    with pytest.raises(SystemExit) as ours:
        glance.parsed(["--version"])
    said = capsys.readouterr()
    assert argparse_reads(["--version"]) == f"exit {ours.value.code}"
    assert capsys.readouterr() == said


# Words a person might type, in any order: commands, their options and values, the
# options every command takes, mistakes, and values that look like options.
WORDS = st.sampled_from([
    "status", "list", "show", "log", "schedules", "paths", "config", "step", "retry", "help",
    "--json", "--all", "--all-runs", "--state", "failed", "--reason", "timeout", "--limit",
    "0", "-1", "7", "--lane", "net", "a/b", "--step", "--occurrence", "2", "-f", "--run",
    "--home", "--home=/h", "/h", "--config", "c.toml", "--jobs-dir", "--jobs-dir=", "j",
    "run", "work", "--headless", "--no-notifications", "--once", "--lease", "30",
    "nan", "inf", "1e308",
    "abc", "--", "-x", "-h", "--version", "--js", "", "=", "--ask", "true"])


@given(st.lists(WORDS, max_size=7))
def test_any_line_glance_reads_it_reads_as_argparse_reads_it(line):
    """Whatever the words and their order: a line read here is read into argparse's
    very Namespace; any other is left to argparse."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            read = glance.parsed(line)
        except SystemExit as stop:  # --version alone, answered as argparse answers it
            assert argparse_reads(line) == f"exit {stop.code}"
            return
        if read is not None:
            assert vars(read) == argparse_reads(line)
