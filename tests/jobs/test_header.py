from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sloth_tray.jobs.header import BadJobFile, command_for, job_name, parse_options

P = Path("/jobs/report.sh")


@pytest.mark.parametrize("head, expected", [
    (b"#!/bin/bash\necho", ["/bin/bash", str(P)]),
    (b"#!/usr/bin/env python3\n", ["/usr/bin/env", "python3", str(P)]),
    (b"#! /usr/bin/env -S deno run\r\n", ["/usr/bin/env", "-S deno run", str(P)]),
    (b"echo no shebang", ["/bin/sh", str(P)]),
])
def test_the_shebang_wins_else_the_extension(head, expected):
    assert command_for(P, head, windows=False) == expected


def test_a_py_without_a_shebang_runs_under_the_python3_on_path(tmp_path, monkeypatch):
    """The user's own python3 (with their modules), not the app's interpreter."""
    mine = tmp_path / "python3"
    mine.write_text("#!/bin/sh\n")
    mine.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert command_for(Path("tidy.py"), b"import requests\n", windows=False) == [
        str(mine), "tidy.py"]


def test_a_py_without_a_shebang_and_no_python3_on_path_runs_under_the_apps(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # holds no python3
    assert command_for(Path("tidy.py"), b"pass\n", windows=False) == [sys.executable,
                                                                        "tidy.py"]


@pytest.mark.parametrize("head", [b"", b"\n", b"  \r\n\t\n"])
def test_an_empty_script_has_nothing_to_run(head):
    with pytest.raises(BadJobFile, match=r"^report.sh is empty: there is nothing to run"):
        command_for(P, head, windows=False)


@pytest.mark.parametrize("name, windows, prefix", [
    ("backup.bash", False, None),
    ("task.bat", True, ["cmd.exe", "/d", "/c"]),
    ("task.ps1", True, ["powershell.exe", "-NoProfile", "-ExecutionPolicy", "Bypass", "-File"]),
])
def test_extensions(name, windows, prefix):
    argv = command_for(Path(name), b"exit 0\n", windows=windows)
    assert argv[-1] == name
    if prefix:
        assert argv[:-1] == prefix
    else:
        assert argv[0].endswith("bash")


@pytest.mark.parametrize("name, windows, message", [
    ("report.xyz", False, "don't know how to run report.xyz: add a #! line or name it .py or .sh"),
    ("task.bat", False, "don't know how to run task.bat"),
    ("Makefile", False, "don't know how to run Makefile"),
    ("report.xyz", True, "name it .py, .sh, .bash, .bat, .cmd or .ps1"),
])
def test_unknown_kinds_say_what_to_do(name, windows, message):
    with pytest.raises(BadJobFile, match=message.replace(".", r"\.")):
        command_for(Path(name), b"\x00\x01 binary", windows=windows)


def test_an_empty_shebang_is_refused():
    with pytest.raises(BadJobFile, match="empty #! line"):
        command_for(P, b"#!\n")


def test_the_job_is_named_after_the_files_stem():
    assert job_name(Path("tidy downloads.sh")) == "tidy downloads"
    assert job_name(Path("-dash.py")) == "-dash"


def test_header_options_with_every_comment_style():
    assert parse_options(b"#!/bin/sh\n# sloth: max_attempts=3 timeout=10m delay=30s lease=2m "
                         b"every=1h\necho") == {
        "max_attempts": 3, "timeout": 600.0, "delay": 30.0, "lease": 120.0, "every": 3600.0}
    assert parse_options(b"// sloth: timeout=90") == {"timeout": 90.0}
    assert parse_options(b"@echo off\r\nrem sloth: every=1d\r\n") == {"every": 86400.0}
    assert parse_options(b"REM Sloth: delay=2h") == {"delay": 7200.0}
    assert parse_options(b"#!/bin/sh\necho '# sloth: timeout=1'") == {}  # not a comment
    assert parse_options(b"\n" * 20 + b"# sloth: timeout=1") == {}  # past the first 20 lines
    assert parse_options(b"no header at all") == {}


def test_every_sloth_line_among_the_first_counts():
    """A person writes one option a line as readily as all on one: each line counts."""
    assert parse_options(b"#!/bin/sh\n# sloth: max_attempts=1\n# backs up the photos\n"
                         b"# sloth: timeout=1s\nsleep 3") == {"max_attempts": 1, "timeout": 1.0}
    assert parse_options(b"#!/bin/sh\n# sloth: every=1h\n\n// sloth: require=ac\n") == {
        "every": 3600.0, "require": "ac"}


def test_a_sloth_line_after_the_scripts_code_is_its_text_not_its_header():
    """`add -- sh -c '...' 'a<newline># sloth: every=1s'` writes that word on a line of
    its own, below the command's `exec`: a word, never an option."""
    assert parse_options(b"#!/bin/sh\n# sloth: timeout=1s\nexec sh -c 'x' 'a\n"
                         b"# sloth: every=1s'\n") == {"timeout": 1.0}
    assert parse_options(b"#!/bin/sh\nset -e\n# sloth: timeout=1s\necho\n# sloth: bogus=1") \
        == {"timeout": 1.0}  # the first sloth: line may come after code, as ever


@pytest.mark.parametrize("line, message", [
    (b"# sloth: retries=3", "report.sh, line 1: unknown option 'retries' in the sloth: header "
                            "(known: at, catchup, cron, delay, every, grace, interrupt, lease, "
                            "max_attempts, require, timeout, window)"),
    (b"# sloth: timeout=10x", "bad value '10x' for timeout: use a number of seconds, or a "
                              "number followed by s, m, h or d"),
    (b"# sloth: max_attempts=0", "bad value '0' for max_attempts: use a whole number between 1 "
                                 "and 1000"),
    (b"# sloth: every=0s", "bad value '0s' for every: use a number of seconds, or a number "
                           "followed by s, m, h or d (90, 90s, 10m, 2h, 1d), between 1s and "
                           "3650d"),
    (b"# sloth: timeout", "timeout needs a value"),
    (b"# sloth: max_atempts=3", "report.sh, line 1: unknown option 'max_atempts' in the sloth: "
                                "header; did you mean max_attempts? (known: at, catchup, cron, "),
    (b"# sloth: every=1h timout=5m", "unknown option 'timout' in the sloth: header; did you "
                                     "mean timeout?"),
    # a later sloth: line is read, and refused, as the first is
    (b"#!/bin/sh\n# sloth: max_attempts=1\n# sloth: bogus_key=1\necho x",
     "report.sh, line 3: unknown option 'bogus_key' in the sloth: header"),
    (b"# sloth: timeout=1s timeout=1h", "report.sh, line 1: timeout is given twice: keep one"),
    (b"#!/bin/sh\n# sloth: timeout=1s\n# sloth: every=1h timeout=1h",
     "report.sh, line 3: timeout is given on line 2 already: keep one"),
    (b"# sloth: at=09:00\n# sloth: every=1h", "report.sh, line 2: every, at and cron each say "
                                               "when the job repeats: use one of them"),
    (b"# sloth: require=ac\n# sloth: catchup=skip", "report.sh, line 2: catchup applies only "
                                                     "to at= and cron= schedules"),
])
def test_a_bad_header_names_the_key_and_the_accepted_form(line, message):
    with pytest.raises(BadJobFile) as caught:
        parse_options(line, "report.sh")
    assert message in str(caught.value)


@pytest.mark.parametrize("line, message", [
    (b"# sloth: every=5 minutes", "report.sh, line 1: the value of every ends at the space "
                                  "before 'minutes': write a duration with no space in it, as "
                                  "in every=5m"),
    (b"# sloth: timeout=2 hours max_attempts=3", "the value of timeout ends at the space before "
                                                 "'hours': write a duration with no space in "
                                                 "it, as in timeout=2h"),
    (b"# sloth: every=1h grace=90 s", "the value of grace ends at the space before 's': write a "
                                      "duration with no space in it, as in grace=90s"),
    (b"# sloth: max_attempts=3 times", "the value of max_attempts ends at the space before "
                                       "'times': write max_attempts=3"),
    (b"# sloth: require=ac, network", "the value of require ends at the space before 'network': "
                                      'put it in quotes, as in require="ac, network"'),
    # a word that is no unit, after a whole value: an option with its = forgotten
    (b"# sloth: every=1h nightly", "unknown option 'nightly' in the sloth: header (known: "),
])
def test_a_value_cut_at_a_space_is_said_with_how_to_write_it(line, message):
    with pytest.raises(BadJobFile) as caught:
        parse_options(line, "report.sh")
    assert message in str(caught.value)


def test_a_quoted_list_of_conditions_is_one_value():
    assert parse_options(b'# sloth: require="ac, network"') == {"require": "ac,network"}


@pytest.mark.parametrize("line, key, accepted", [
    (b"# sloth: max_attempts=99999999999999999999", "max_attempts", "between 1 and 1000"),
    (b"# sloth: max_attempts=1001", "max_attempts", "between 1 and 1000"),
    (b"# sloth: timeout=" + b"9" * 400, "timeout", "more than 0s and at most 3650d"),
    (b"# sloth: every=3651d", "every", "between 1s and 3650d"),
    (b"# sloth: delay=" + b"9" * 30 + b"d", "delay", "between 0s and 3650d"),
    (b"# sloth: lease=0.001", "lease", "between 1s and 1d"),
    (b"# sloth: lease=2d", "lease", "between 1s and 1d"),
    ("# sloth: max_attempts=３".encode(), "max_attempts", "between 1 and 1000"),
    ("# sloth: timeout=١٢".encode(), "timeout", "more than 0s and at most 3650d"),
    (b"# sloth: delay=1\0", "delay", "between 0s and 3650d"),
    (b"# sloth: timeout=inf", "timeout", "more than 0s and at most 3650d"),
    (b"# sloth: lease=nan", "lease", "between 1s and 1d"),
    (b"# sloth: delay=-5", "delay", "between 0s and 3650d"),
])
def test_a_header_number_out_of_its_range_is_one_sentence_with_the_range(line, key, accepted):
    with pytest.raises(BadJobFile) as caught:
        parse_options(line, "report.sh")
    message = str(caught.value)
    assert message.startswith("report.sh, line 1: bad value ")
    assert f" for {key}: use " in message and accepted in message
    assert "\n" not in message and "\0" not in message


def test_header_numbers_at_the_edges_of_their_ranges_are_kept():
    assert parse_options(b"# sloth: max_attempts=1000 lease=1 timeout=3650d delay=0 "
                         b"every=1") == {"max_attempts": 1000, "lease": 1.0,
                                           "timeout": 3650 * 86400.0, "delay": 0.0,
                                           "every": 1.0}
    assert parse_options(b"# sloth: lease=1d max_attempts=1") == {"lease": 86400.0,
                                                                  "max_attempts": 1}
