"""Every number a user can give has one range, checked in one place, wherever it comes from.

The header, config.toml, the flags and the queue's own arguments go through the
same Limit; out of range is one sentence naming the source, the key and the range.
Hypothesis throws huge, negative, infinite, NaN, non-ASCII-digit and NUL values
at each of them.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile

import pytest
from helpers.examples import examples
from helpers.processes import wait_for
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from sloth_tray import config, limits
from sloth_tray.cli import build_parser
from sloth_tray.errors import SlothError
from sloth_tray.jobs.header import OPTIONS, BadJobFile, parse_options
from sloth_tray.paths import locate
from sloth_tray.store.queue import Queue, State
from sloth_tray.timefmt import parse_duration

# Hypothesis keeps its caches out of the source tree, and no example database.
set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "sloth-tray-hypothesis"))
FUZZ = settings(max_examples=examples(300), deadline=None, database=None)

# -- the ranges themselves ----------------------------------------------------------


@pytest.mark.parametrize("limit, inside, outside", [
    (limits.LEASE, [1, 1.0, 60, 86400], [0.999, 0, -1, 86400.5, math.inf, math.nan]),
    (limits.ATTEMPTS, [1, 5, 1000], [0, -1, 1001, 2**64, 5.0, True]),
    (limits.TIMEOUT, [0.001, 600, 3650 * 86400], [0, -0.0, 3650 * 86400 + 1, math.inf]),
    (limits.EVERY, [1, 3650 * 86400], [0.5, 0, -1, math.nan, 10**400]),
    (limits.DELAY, [0, 0.0, 3650 * 86400], [-0.001, 3650 * 86400 + 1, -math.inf]),
    (limits.LOG_CAP, [1, 1024, 1024**4], [0, -1, 1024**4 + 1, 1.5, False]),
    (limits.OLDER_THAN, [0, 7 * 86400, 3650 * 86400], [-1, math.inf, 3651 * 86400]),
    (limits.LIST_LIMIT, [0, 50, 1_000_000], [-1, 1_000_001, 2**63]),
    (limits.GRACE, [60, 3650 * 86400], [59.9, 0, -1, math.inf, math.nan, 10**400]),
    (limits.WINDOW, [60, 6 * 3600, 3650 * 86400], [59, 0, -math.inf, math.nan, 3651 * 86400]),
])
def test_each_limit_keeps_its_range_and_refuses_just_outside_it(limit, inside, outside):
    for value in inside:
        assert limit.check(value) == value
    for value in outside:
        with pytest.raises(SlothError) as caught:
            limit.check(value)
        assert str(caught.value).startswith(f"bad value {limits.shown(value)} for {limit.key}: ")
        assert limit.range_text in str(caught.value)


@pytest.mark.parametrize("limit, text, value", [
    (limits.LEASE, "90s", 90.0), (limits.LEASE, " 1d ", 86400.0), (limits.LEASE, "2M", 120.0),
    (limits.ATTEMPTS, "007", 7), (limits.LOG_CAP, "10MiB", 10 * 1024**2),
    (limits.LOG_CAP, "1.5 KB", 1500), (limits.LOG_CAP, "1TiB", 1024**4),
    (limits.DELAY, "0", 0.0), (limits.LIST_LIMIT, "0", 0),
])
def test_text_as_people_write_it(limit, text, value):
    assert limit.check(text) == value


@pytest.mark.parametrize("limit, text", [
    (limits.ATTEMPTS, "３"), (limits.ATTEMPTS, "١٢"), (limits.ATTEMPTS, "1\0"),
    (limits.ATTEMPTS, "+5"), (limits.ATTEMPTS, "1_000"), (limits.ATTEMPTS, "5.0"),
    (limits.LEASE, "inf"), (limits.LEASE, "nan"), (limits.LEASE, "1e3"), (limits.LEASE, "１m"),
    (limits.LEASE, "10ｍ"), (limits.LEASE, "\0"), (limits.LEASE, ""), (limits.LEASE, "-5"),
    (limits.LOG_CAP, "9" * 5000), (limits.LOG_CAP, "1 parsec"), (limits.LOG_CAP, "0.1"),
    (limits.LIST_LIMIT, "9" * 5000),
])
def test_anything_but_ascii_digits_in_a_known_form_is_refused(limit, text):
    with pytest.raises(SlothError) as caught:
        limit.check(text, "somewhere")
    message = str(caught.value)
    assert message.startswith(f"somewhere: bad value {text[:30]!r}"[:40])
    assert "\n" not in message and "\0" not in message and len(message) < 400


def test_a_flag_says_what_it_wants_in_one_line():
    import argparse

    with pytest.raises(argparse.ArgumentTypeError,
                       match=r"^'0' is not a whole number between 1 and 1000$"):
        limits.ATTEMPTS.argument("0")
    with pytest.raises(argparse.ArgumentTypeError,
                       match=r"^'soon' is not a duration between 1s and 1d: use a number"):
        limits.LEASE.argument("soon")


# -- end to end: a dropped file with absurd numbers ------------------------------------


def start_daemon(pids, home, log) -> subprocess.Popen:
    with open(log, "wb") as out:
        proc = pids.popen([sys.executable, "-m", "sloth_tray", "run", "--headless",
                           "--home", str(home.root)], stdin=subprocess.DEVNULL,
                          stdout=out, stderr=out)
    wait_for(lambda: "running headless" in log.read_text() or proc.poll() is not None,
             timeout=20, what="the daemon to say it runs")
    assert proc.poll() is None, log.read_text()
    return proc


def jobs_by_name(home) -> dict[str, object]:
    with Queue(home.db) as queue:
        return {job.name: job for job in queue.jobs()}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals, inotify")
def test_dropped_files_with_absurd_numbers_fail_with_a_sentence_and_the_queue_runs_on(
        tmp_path, pids):
    home = locate(tmp_path / "home").ensure()
    drops = {
        "many_tries": "# sloth: max_attempts=99999999999999999999\necho never\n",
        "endless": "# sloth: timeout=" + "9" * 400 + "\necho never\n",
        "jittery": "# sloth: lease=0.001\necho never\n",
        "good": "echo good ran\n",
    }
    for name, text in drops.items():
        (home.jobs / f"{name}.sh").write_text(text)
    daemon = start_daemon(pids, home, tmp_path / "first.log")
    wait_for(lambda: home.db.exists() and jobs_by_name(home).get("good")
             and jobs_by_name(home)["good"].state == State.DONE,
             timeout=30, what="the good job to run")
    jobs = jobs_by_name(home)
    for name, key in [("many_tries", "max_attempts"), ("endless", "timeout"),
                      ("jittery", "lease")]:
        assert jobs[name].state == State.FAILED
        assert f"{name}.sh, line 1: bad value " in jobs[name].last_error
        assert f" for {key}: use " in jobs[name].last_error
    assert jobs["good"].result == "good ran"
    assert not any(home.spool.iterdir()) or all(
        any(folder.name == job.id for job in jobs.values()) for folder in home.spool.iterdir())
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=20) == 0
    again = start_daemon(pids, home, tmp_path / "second.log")  # the next start is fine too
    (home.jobs / "later.sh").write_text("echo later ran\n")
    wait_for(lambda: jobs_by_name(home).get("later")
             and jobs_by_name(home)["later"].state == State.DONE,
             timeout=30, what="a job after the restart to run")
    again.send_signal(signal.SIGTERM)
    assert again.wait(timeout=20) == 0
    assert "Traceback" not in (tmp_path / "first.log").read_text()
    assert "Traceback" not in (tmp_path / "second.log").read_text()


# -- fuzzing: every source of a number ---------------------------------------------

NASTY = ["inf", "-inf", "+inf", "nan", "NaN", "1e400", "9" * 400, "9" * 5000, "-1", "0", "-0",
         "0.0", "３", "١٢", "٣m", "10ｍ", "1\0", "\0", "1_000", "0x10", "1e3", "+5", "1.", ".5",
         "00001", "1.5.5", "5 m", "1d1h", "18446744073709551616", "9223372036854775808",
         "1e-400", "0.0000000001", "\u202e5", "5\x1b[2J"]
no_surrogates = st.characters(exclude_categories=("Cs",))
number_texts = st.one_of(
    st.sampled_from(NASTY),
    st.integers().map(str),
    st.floats().map(repr),
    st.tuples(st.integers(min_value=0, max_value=10**30), st.sampled_from(["", "s", "m", "h", "d",
                                                                          "KiB", "MB", "TiB"]))
    .map(lambda pair: f"{pair[0]}{pair[1]}"),
    st.from_regex(r"[0-9０-９١-٩.\-+e]{1,30}[smhd]?", fullmatch=True),
    st.text(no_surrogates, min_size=1, max_size=20),
)


def one_token(text: str) -> bool:
    """A value the header keeps whole: no whitespace splits it, no line break ends it."""
    return len(f"x{text}x".split()) == 1 and len(f"x{text}x".splitlines()) == 1


# grace= and window= only stand beside what they qualify.
BESIDE = {"grace": "every=1h ", "window": "at=09:00 "}
HEADER_NUMBERS = {**OPTIONS, "grace": limits.GRACE, "window": limits.WINDOW}


@FUZZ
@given(key=st.sampled_from(sorted(HEADER_NUMBERS)), value=number_texts.filter(one_token))
def test_fuzz_a_header_value_is_in_range_or_one_sentence_naming_the_key(key, value):
    limit = HEADER_NUMBERS[key]
    try:
        options = parse_options(
            f"#!/bin/sh\n# sloth: {BESIDE.get(key, '')}{key}={value}\n".encode(), "job.sh")
    except BadJobFile as exc:
        message = str(exc)
        assert "\n" not in message
        if value.startswith('"') and "opens a quote" in message:  # grace="never closed
            assert message.startswith(f"job.sh, line 2: the value of {key} opens a quote ")
            return
        assert message.startswith("job.sh, line 2: bad value ")
        assert f" for {key}: use " in message and limit.range_text in message
    else:
        assert limit.contains(options[key]), (key, value, options)


@pytest.mark.parametrize("key, value", [("grace", math.nan), ("grace", -1), ("window", math.inf),
                                        ("every", 0), ("lease", 10**400)])
def test_options_a_program_pushes_are_checked_as_a_header_is(tmp_path, key, value):
    from sloth_tray.store.queue import Queue

    options = {key: value, **({"at": "09:00"} if key == "window" else {}),
               **({"every": 3600} if key == "grace" else {})}
    with Queue(tmp_path / "q.db") as queue, pytest.raises(SlothError) as caught:
        queue.push("job", options=options)
    assert str(caught.value).startswith("the job's options: bad value ")
    assert f" for {key}: " in str(caught.value) and "\n" not in str(caught.value)
    with Queue(tmp_path / "q.db") as queue:
        assert queue.jobs() == []


def toml_literal(value: object) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a TOML basic string, or invalid TOML
    if isinstance(value, float) and not math.isfinite(value):
        return {"inf": "inf", "-inf": "-inf"}.get(str(value), "nan")
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


toml_values = st.one_of(number_texts, st.integers(), st.floats(), st.booleans(),
                        st.sampled_from([10**400, -(10**400), 2**63, -(2**63) - 1]))


@FUZZ
@given(key=st.sampled_from(["lease", "max_attempts", "timeout", "log_cap"]), value=toml_values,
       raw=st.booleans())
def test_fuzz_a_config_value_is_in_range_or_one_sentence_naming_the_key(tmp_path_factory, key,
                                                                       value, raw):
    literal = str(value) if raw and isinstance(value, str) else toml_literal(value)
    path = tmp_path_factory.getbasetemp() / "fuzz-config.toml"
    path.write_text(f"{key} = {literal}\n", encoding="utf-8", errors="surrogatepass")
    try:
        settings_ = config.load(path, env={})
    except SlothError as exc:
        message = str(exc)
        assert message.startswith(str(path)) and "\n" not in message
        told_to_quote = f'needs quotes in TOML: write {key} = "{literal}"'
        assert (f"bad value for {key}: use " in message or "is not valid TOML" in message
                or message.endswith(told_to_quote))
        if told_to_quote in message:  # only for an amount the quotes make well-formed
            kind = config.KEYS[key].limit.kind
            assert kind in (limits.Kind.DURATION, limits.Kind.SIZE), (key, literal)
            if kind == limits.Kind.DURATION:
                parse_duration(literal)  # raises for what no quotes could mend
            else:
                assert re.fullmatch(r"[0-9]+(\.[0-9]+)?(b|[kmgt]i?b)", literal.lower())
    else:
        assert config.KEYS[key].limit.contains(settings_[key]), (key, literal)


FLAGS = [
    (["run"], "--lease", "lease", limits.LEASE),
    (["work"], "--lease", "lease", limits.LEASE),
    (["add", "job.sh"], "--delay", "delay", limits.DELAY),
    (["add", "job.sh"], "--max-attempts", "max_attempts", limits.ATTEMPTS),
    (["list"], "--limit", "limit", limits.LIST_LIMIT),
    (["prune"], "--older-than", "older_than", limits.OLDER_THAN),
]


@FUZZ
@given(flag=st.sampled_from(FLAGS), value=number_texts)
def test_fuzz_a_numeric_flag_is_in_range_or_one_argument_error_naming_it(flag, value):
    command, option, attribute, limit = flag
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = build_parser().parse_args([*command, f"{option}={value}"])
    except SystemExit as exc:
        assert exc.code == 2
        lines = stderr.getvalue().splitlines()
        assert len(lines) == 1 and f"argument {option}: " in lines[0], stderr.getvalue()
    else:
        assert limit.contains(getattr(args, attribute)), (option, value)


def test_the_readme_limits_table_says_what_the_code_checks():
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("## Limits", 1)[1].split("\n## ", 1)[0]
    documented = {row.split("|")[1].strip(): row.split("|")[2].strip()
                  for row in section.splitlines() if row.startswith("| ") and "---" not in row}
    rows = {"lease": limits.LEASE, "attempts": limits.ATTEMPTS, "timeout": limits.TIMEOUT,
            "every": limits.EVERY, "delay": limits.DELAY, "log cap": limits.LOG_CAP,
            "age": limits.OLDER_THAN, "jobs listed": limits.LIST_LIMIT,
            "grace": limits.GRACE, "catch-up window": limits.WINDOW}
    for what, limit in rows.items():
        said = (limit.range_text.replace(" and at most ", ", at most ")
                .replace("between ", "").replace(" and ", " to "))
        assert documented[what] == said, what


def test_a_python_steps_tries_are_checked_against_the_same_ranges():
    """A job's sloth_step cannot import limits.py: its own bounds are these."""
    from sloth_tray.for_jobs import sloth_step

    assert (limits.RETRIES.low, limits.RETRIES.high) == (0, sloth_step.RETRIES_MAX)
    assert (limits.BACKOFF.low, limits.BACKOFF.high) == (0, sloth_step.BACKOFF_MAX)
    assert limits.TIMEOUT.low_open and limits.TIMEOUT.high == sloth_step.TIMEOUT_MAX
    for retries in (0, 100):
        assert sloth_step.tries_problem(retries, 0, None) is None
    assert sloth_step.tries_problem(101, 0, None) == limits.RETRIES.refusal(101)
    assert sloth_step.tries_problem(True, 0, None) is not None  # a bool is not a count
