from __future__ import annotations

import re
from pathlib import Path

from sloth_tray.cli import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)\n```", text, flags=re.S)


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


def test_every_header_the_readme_shows_is_one_the_app_takes():
    from sloth_tray.jobs.header import parse_options

    headers = re.findall(r"^(# sloth: .*?)(?:\s{2,}.*)?$", README, flags=re.M)
    assert len(headers) >= 10
    for header in headers:
        assert parse_options(header.encode(), "README"), header
