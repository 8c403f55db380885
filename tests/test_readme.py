from __future__ import annotations

import argparse
import re
from pathlib import Path

from sloth_tray import limits
from sloth_tray.cli import COMMANDS, build_parser
from sloth_tray.for_jobs import sloth_step
from sloth_tray.store.queue import Queue
from sloth_tray.store.reasons import Reason

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
# The options every command takes, documented once above the Commands table.
COMMON_OPTIONS = {"--help", "--home", "--config", "--jobs-dir"}


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)\n```", text, flags=re.S)


def section(heading: str) -> str:
    """The text under `## heading` (or `### heading`), up to the next such heading."""
    found = re.search(rf"^##+ {re.escape(heading)}\n(.*?)(?=^##+ |\Z)", README,
                      flags=re.M | re.S)
    assert found, f"README has no section {heading!r}"
    return found.group(1)


def tables(text: str) -> list[list[list[str]]]:
    """The Markdown tables in `text`: each a list of rows (header and separator left out),
    each row a list of cells (`\\|` inside a cell is not a border)."""
    found, rows = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
        elif rows:
            found.append(rows[2:])
            rows = []
    return found


def sub_commands() -> dict[str, set[str]]:
    """Every sub-command of the command line, with the options it takes of its own."""
    parser = build_parser()
    sub = next(action for action in parser._actions
               if isinstance(action, argparse._SubParsersAction))
    return {name: {option for action in command._actions for option in action.option_strings
                   if option.startswith("--")} - COMMON_OPTIONS
            for name, command in sub.choices.items()}


def test_readme_opens_with_the_run_and_test_commands():
    run, test = shell_blocks(README)[:2]
    assert "pip install ." in run and run.endswith("sloth-tray")
    assert test.endswith("pytest")


def test_ci_runs_exactly_the_readmes_test_command():
    test = shell_blocks(README)[1]
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test in ci_lines


def test_every_command_is_documented():
    missing = [name for name in COMMANDS if f"`sloth-tray {name}" not in README]
    assert not missing, f"undocumented commands: {missing}"


def test_every_command_and_each_of_its_options_has_its_row_in_the_commands_table():
    rows: dict[str, str] = {}
    for table in tables(section("Commands")):
        for row in table:
            for name in re.findall(r"`sloth-tray ([a-z][a-z-]*)", row[0]):
                rows[name] = row[0]
    commands = sub_commands()
    assert set(commands) >= set(COMMANDS) | {"step"}
    missing = sorted(set(commands) - set(rows))
    assert not missing, f"commands without a row in the Commands table: {missing}"
    undocumented = {name: sorted(option for option in options if option not in rows[name])
                    for name, options in commands.items()}
    undocumented = {name: options for name, options in undocumented.items() if options}
    assert not undocumented, f"options missing from their command's row: {undocumented}"
    for option in COMMON_OPTIONS - {"--help"}:
        assert f"`{option} " in README, option


def test_every_header_the_readme_shows_is_one_the_app_takes():
    from sloth_tray.jobs.header import parse_options

    headers = re.findall(r"^(# sloth: .*?)(?:\s{2,}.*)?$", README, flags=re.M)
    assert len(headers) >= 10
    for header in headers:
        assert parse_options(header.encode(), "README"), header


def test_every_range_in_limits_py_has_its_row_in_the_limits_table():
    ranges, fixed = tables(section("Limits"))
    every = [value for value in vars(limits).values() if isinstance(value, limits.Limit)]
    assert len(every) >= 11
    for limit in every:
        # "between 1s and 1d" is written "1s to 1d"; "more than 0s and at most 3650d",
        # "more than 0s, at most 3650d"
        written = limit.range_text.removeprefix("between ").replace(" and at most ", ", at most ")
        written = written.replace(" and ", " to ")
        named = (f"`{limit.key}", f"{limit.key}=", f"--{limit.key.replace('_', '-')}")
        assert any(row[1] == written and any(name in row[2] for name in named)
                   for row in ranges), f"no row says {limit.key} is {written}"


def test_the_fixed_sizes_of_a_step_are_the_ones_in_sloth_step():
    ranges, fixed = tables(section("Limits"))
    by_what = {row[0]: row[1] for row in fixed}
    cap = sloth_step.size_text(sloth_step.OUTPUT_CAP)
    name = f"1 to {sloth_step.NAME_MAX} characters"
    assert by_what.get("a step's kept output") == cap, f"the Limits table should say {cap}"
    assert by_what.get("a step's name", "").startswith(name), f"it should say {name}"
    depth = f"lists and dicts {sloth_step.RESULT_DEPTH} deep"
    assert by_what.get("a Python step's result", "").startswith(depth), f"say {depth}"
    steps = section("Steps that happen once")
    assert f"first {sloth_step.size_text(sloth_step.OUTPUT_CAP)}" in steps
    assert f"1 to {sloth_step.NAME_MAX} characters" in steps
    assert f"at most {sloth_step.RESULT_DEPTH} deep" in steps


def test_every_reason_a_job_can_fail_for_is_in_the_json_section():
    json_output = section("JSON output")
    missing = [reason.value for reason in Reason if f"`{reason.value}`" not in json_output]
    assert not missing, f"reasons the JSON section does not list: {missing}"


def test_every_field_of_a_step_in_show_json_is_in_the_json_section(tmp_path):
    with Queue(tmp_path / "queue.db") as queue:
        job = queue.push("job")
        queue.claim("owner", token="token")
        run = sloth_step.Run(str(queue.path), job, "token", "owner")
        db = sloth_step.connection(run.queue)
        try:
            decision = sloth_step.start(db, run, "name", ask=False, kind="shell")
            sloth_step.end(db, run, "name", decision.occurrence, ok=True, output=b"out")
        finally:
            db.close()
        fields = list(queue.steps(job)[0])
    shown = re.search(r'`"steps"` \(a\s+list of `\{(.*?)\}`', section("JSON output"), re.S)
    assert shown, "the JSON section does not describe show --json's steps"
    assert re.findall(r'"(\w+)"', shown.group(1)) == fields
