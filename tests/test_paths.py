"""Where a job's logs go: a folder a person finds by the job's name, kept by its id."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from sloth_tray.paths import LOG_NAME_CHARACTERS, Home, locate, log_folder_name

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
    assert Path(config.default_path()) == Path(
        platformdirs.user_config_dir(APP_NAME, appauthor=False)) / "config.toml"


@pytest.mark.skipif(os.name != "posix", reason="elsewhere absolute() is pathlib's own")
@given(st.lists(st.sampled_from(["", ".", "..", "~", "a", "b c", "é", "x.d", "-"]),
                max_size=6),
       st.sampled_from(["", "/", "//", "///"]), st.booleans())
def test_a_place_as_text_is_written_as_pathlib_writes_it(parts, lead, tilde):
    """A look's home as text (absolute) is the very text a Path of it gives: the same
    folder named the same way in every sentence, `paths`, and the autostart entry."""
    from sloth_tray.paths import absolute

    place = ("~/" if tilde else lead) + "/".join(parts)
    assume(place)
    assert absolute(place) == str(Path(place).expanduser().absolute())


def test_a_home_located_as_text_names_the_places_its_paths_name(tmp_path, monkeypatch):
    """`locate(..., text=True)` (a look's) and `locate()` (every other command's) are one
    home: each place the same text, one in str, the other in Path."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "jobs").mkdir()
    for home, jobs in (("./h/", None), ("h//x/..", "jobs/."), (str(tmp_path / "h"), None)):
        (tmp_path / "h" / "x").mkdir(parents=True, exist_ok=True)
        as_text, as_paths = locate(home, jobs, env={}, text=True), locate(home, jobs, env={})
        assert isinstance(as_text.root, str) and isinstance(as_paths.root, Path)
        for place in ("root", "jobs", "db", "spool", "logs", "doorbell", "lock",
                      "own_folders", "own_files"):
            text, path = getattr(as_text, place), getattr(as_paths, place)
            assert str(text) == str(path) if not isinstance(text, tuple) else \
                [str(p) for p in text] == [str(p) for p in path], place
        assert as_text.lane_folder("work") == str(as_paths.lane_folder("work"))
        assert as_text.job_logs("0123456789ab", "n") == str(as_paths.job_logs("0123456789ab",
                                                                              "n"))
