from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sloth_tray import config
from sloth_tray.errors import SlothError


def write(tmp_path, text: str):
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_defaults_then_file_then_env_then_flag(tmp_path):
    path = write(tmp_path, 'lease = "2m"\nmax_attempts = 3\njobs_dir = "~/drop"\n'
                           'log_cap = "1MiB"\nnotifications = false\ntimeout = 600\n')
    settings = config.load(path, env={}, flags={})
    assert settings["lease"] == 120 and settings["max_attempts"] == 3
    assert settings["log_cap"] == 1024 * 1024 and settings["notifications"] is False
    assert settings["timeout"] == 600 and Path(settings["jobs_dir"]).name == "drop"
    assert settings.sources["lease"] == f"file {path}"
    env = {"SLOTH_TRAY_JOBS": str(tmp_path / "from-env")}
    settings = config.load(path, env=env, flags={"lease": 5.0, "jobs_dir": None})
    assert Path(settings["jobs_dir"]) == tmp_path / "from-env"
    assert settings.sources["jobs_dir"] == "env SLOTH_TRAY_JOBS"
    assert (settings["lease"], settings.sources["lease"]) == (5.0, "flag")
    assert settings.sources["max_attempts"] == f"file {path}"


def test_no_file_means_defaults(tmp_path):
    settings = config.load(tmp_path / "none.toml", env={})
    assert settings.values == {key: spec.default for key, spec in config.KEYS.items()}
    assert set(settings.sources.values()) == {"default"}


@pytest.mark.parametrize("text, message", [
    ('lease = "2m"\nretries = 3\n', "line 2: unknown setting 'retries'"),
    ('max_attempts = 0\n', "line 1: bad value for max_attempts: use a whole number"),
    ('\n\nlease = "soon"\n', "line 3: bad value for lease: use a number of seconds"),
    ('log_cap = "10 parsecs"\n', "line 1: bad value for log_cap: use a number of bytes"),
    ('notifications = "yes"\n', "line 1: bad value for notifications: use true or false"),
    ('lease = \n', "is not valid TOML: Invalid value (at line 1, column 9)"),
    ('max_atempts = 3\n', "line 1: unknown setting 'max_atempts'; did you mean max_attempts? "
                          "(known: jobs_dir, lease, "),
    ('lease = "2m"\n\ntimeout = 30m\n', 'line 3: timeout = 30m needs quotes in TOML: write '
                                        'timeout = "30m"'),
    ('log_cap = 10MiB  # per run\n', 'line 1: log_cap = 10MiB needs quotes in TOML: write '
                                     'log_cap = "10MiB"'),
    ("timeout = 1.5h\n", 'line 1: timeout = 1.5h needs quotes in TOML: write timeout = "1.5h"'),
    ("lease = 10x\n", "is not valid TOML: Expected newline"),  # quotes would not mend it
    ("lease_time = 60s\n", "is not valid TOML: Expected newline"),  # nor a key never known
])
def test_a_bad_file_is_one_sentence_with_the_file_line_and_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(SlothError) as caught:
        config.load(path, env={})
    assert str(caught.value).startswith(str(path))
    assert message in str(caught.value)


def test_the_app_refuses_to_start_on_a_bad_config(tmp_path):
    path = write(tmp_path, "max_attempts = -1\n")
    done = subprocess.run([sys.executable, "-m", "sloth_tray", "run", "--headless",
                           "--config", str(path), "--home", str(tmp_path / "home")],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert done.stderr == (f"sloth-tray: {path}, line 1: bad value for max_attempts: use a "
                           "whole number between 1 and 1000\n")
    assert not (tmp_path / "home" / "queue.db").exists()


def test_config_command_says_where_each_value_comes_from(tmp_path):
    path = write(tmp_path, "max_attempts = 3\n")
    done = subprocess.run([sys.executable, "-m", "sloth_tray", "config", "--json",
                           "--home", str(tmp_path / "home")], capture_output=True, text=True,
                          timeout=30, env={**__import__("os").environ,
                                           "SLOTH_TRAY_CONFIG": str(path)})
    shown = json.loads(done.stdout)
    assert shown["file"] == str(path)
    assert shown["settings"]["max_attempts"] == {"value": 3, "text": "3",
                                                 "from": f"file {path}"}
    assert shown["settings"]["lease"] == {"value": 60.0, "text": "60s", "from": "default"}
    assert shown["settings"]["jobs_dir"]["value"] == str(tmp_path / "home" / "jobs")


@pytest.mark.parametrize("text, key, accepted", [
    ("lease = nan\n", "lease", "between 1s and 1d"),
    ("lease = inf\n", "lease", "between 1s and 1d"),
    ("lease = -inf\n", "lease", "between 1s and 1d"),
    ("lease = 0.001\n", "lease", "between 1s and 1d"),
    ('lease = "0.5s"\n', "lease", "between 1s and 1d"),
    ("timeout = 1e400\n", "timeout", "more than 0s and at most 3650d"),
    (f"timeout = {10**400}\n", "timeout", "more than 0s and at most 3650d"),
    ('timeout = "１０m"\n', "timeout", "more than 0s and at most 3650d"),
    ("max_attempts = 99999999999999999999\n", "max_attempts", "between 1 and 1000"),
    ("max_attempts = 1001\n", "max_attempts", "between 1 and 1000"),
    (f'log_cap = "{"9" * 400}"\n', "log_cap", "between 1 byte and 1TiB"),
    ('log_cap = "2TiB"\n', "log_cap", "between 1 byte and 1TiB"),
    ('log_cap = "0.5"\n', "log_cap", "between 1 byte and 1TiB"),
    ('log_cap = "1\\u0000"\n', "log_cap", "between 1 byte and 1TiB"),
    ("log_cap = 0\n", "log_cap", "between 1 byte and 1TiB"),
])
def test_a_config_number_out_of_its_range_is_one_sentence_with_the_range(tmp_path, text, key,
                                                                         accepted):
    path = write(tmp_path, "\n" + text)
    with pytest.raises(SlothError) as caught:
        config.load(path, env={})
    message = str(caught.value)
    assert message.startswith(f"{path}, line 2: bad value for {key}: use ")
    assert accepted in message and "\n" not in message


def test_config_numbers_at_the_edges_of_their_ranges_are_kept(tmp_path):
    path = write(tmp_path, 'lease = 1\nmax_attempts = 1000\ntimeout = "3650d"\n'
                           'log_cap = "1TiB"\n')
    settings = config.load(path, env={})
    assert (settings["lease"], settings["max_attempts"]) == (1.0, 1000)
    assert (settings["timeout"], settings["log_cap"]) == (3650 * 86400.0, 1024**4)


def test_a_flag_value_out_of_range_is_refused_even_when_passed_directly(tmp_path):
    with pytest.raises(SlothError, match=r"^--lease: bad value nan for lease: use .*"
                                         r"between 1s and 1d"):
        config.load(tmp_path / "none.toml", env={}, flags={"lease": float("nan")})


def test_an_integer_too_long_for_python_to_read_is_one_sentence(tmp_path):
    path = write(tmp_path, "max_attempts = 3\nlease = 1" + "0" * 5000 + "\n")
    with pytest.raises(SlothError) as caught:
        config.load(path, env={})
    assert str(caught.value) == (f"{path}, line 2: bad value for lease: use a number of "
                                 "seconds, or a number followed by s, m, h or d (90, 90s, "
                                 "10m, 2h, 1d), between 1s and 1d")
