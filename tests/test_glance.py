"""A plain command line is read without argparse (cli/glance.py): into exactly what
argparse makes of it, or not at all."""

from __future__ import annotations

import argparse

import pytest

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
]


def argparse_reads(line: list[str]) -> dict[str, object] | str:
    """What argparse makes of `line`: its Namespace, or "exit N" when it stops there."""
    try:
        return vars(build_parser().parse_args(line))
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
    ["schedules", "--all"], ["step", "fetch", "--", "true"]], ids=" ".join)
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
