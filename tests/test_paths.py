"""Where a job's logs go: a folder a person finds by the job's name, kept by its id."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sloth_tray.paths import LOG_NAME_CHARACTERS, Home, log_folder_name

ID = "0123456789ab"


def test_a_log_folder_is_named_by_the_job_then_its_id():
    assert log_folder_name(ID, "backup") == f"backup-{ID}"


def test_what_a_folder_name_cannot_hold_is_replaced_and_a_long_name_cut():
    assert log_folder_name(ID, "a/b\\c:d") == f"a_b_c_d-{ID}"
    assert log_folder_name(ID, "two\nlines\x1b[31m") == f"two_lines_[31m-{ID}"
    assert log_folder_name(ID, "..hidden") == f"hidden-{ID}"
    assert log_folder_name(ID, "") == f"job-{ID}"
    assert log_folder_name(ID, "/") == f"_-{ID}"
    assert log_folder_name(ID, "x" * 500) == f"{'x' * LOG_NAME_CHARACTERS}-{ID}"


def test_a_jobs_folder_is_found_by_its_id_and_an_old_one_is_kept(tmp_path):
    home = Home(tmp_path, tmp_path / "jobs")
    made = home.job_logs(ID, "backup")
    assert made == tmp_path / "logs" / f"backup-{ID}"
    assert home.job_logs(ID) == tmp_path / "logs" / ID  # none yet: where it would be
    made.mkdir(parents=True)
    assert home.job_logs(ID) == made
    other = "ba9876543210"
    (tmp_path / "logs" / other).mkdir()  # an older version's folder, named by the id
    assert home.job_logs(other, "tidy") == tmp_path / "logs" / other
    (tmp_path / "logs" / "sloth-tray.log").write_text("")  # the app's own log: no job's
    assert home.log_folders() == {ID: made, other: tmp_path / "logs" / other}
    assert home.log_folders(other) == {other: tmp_path / "logs" / other}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the XDG folders: Linux")
@pytest.mark.parametrize("xdg", [None, "", "relative/dir", "/abs/xdg", "~/tilde"])
def test_the_default_home_and_config_are_where_platformdirs_puts_them(tmp_path, monkeypatch,
                                                                     xdg):
    import platformdirs

    from sloth_tray import config
    from sloth_tray.paths import APP_NAME, locate

    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("SLOTH_TRAY_HOME", "SLOTH_TRAY_JOBS", "XDG_DATA_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    if xdg is not None:
        monkeypatch.setenv("XDG_DATA_HOME", xdg)
        monkeypatch.setenv("XDG_CONFIG_HOME", xdg + "/conf" if xdg else xdg)
    assert locate().root == Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))
    assert config.default_path() == Path(
        platformdirs.user_config_dir(APP_NAME, appauthor=False)) / "config.toml"
