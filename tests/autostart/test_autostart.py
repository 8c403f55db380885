from __future__ import annotations

import os
import plistlib
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.desktopfile import read_exec

from sloth_tray import autostart
from sloth_tray.autostart import (
    Status,
    default_command,
    disable,
    enable,
    files,
    status,
)
from sloth_tray.autostart.launchd import AGENT_LABEL
from sloth_tray.autostart.windows import RUN_KEY, RUN_VALUE, WinregRunKey, split_run_value
from sloth_tray.autostart.xdg import desktop_exec, parse_desktop_entry, read_desktop_exec
from sloth_tray.errors import SlothError

# -- a reader for Exec, written from the spec, independent of the writer -------------


# -- Exec quoting -----------------------------------------------------------------------


@pytest.mark.parametrize("argv, expected", [
    (["/usr/bin/python3", "-m", "sloth_tray"], "/usr/bin/python3 -m sloth_tray"),
    (["/opt/My Apps/python"], '"/opt/My Apps/python"'),
    # A literal $ in a quoted argument is "\\$" in the file, as the spec spells out.
    (["/home/$USER/py"], r'"/home/\\$USER/py"'),
    # And a literal backslash takes four.
    (["/odd\\dir/py"], r'"/odd\\\\dir/py"'),
    (["/bin/echo", 'say "hi"'], r'/bin/echo "say \\"hi\\""'),
    (["/bin/echo", "`id`"], r'/bin/echo "\\`id\\`"'),
    (["/bin/echo", "it's"], '/bin/echo "it\'s"'),
    (["/bin/echo", "~/x", "a;b", "a|b", "a&b", "<>", "*?", "#1", "(x)"],
     '/bin/echo "~/x" "a;b" "a|b" "a&b" "<>" "*?" "#1" "(x)"'),
    (["/bin/echo", "100%"], "/bin/echo 100%%"),
    (["/bin/echo", "50% off"], '/bin/echo "50%% off"'),
    (["/bin/echo", ""], '/bin/echo ""'),
    (["/bin/echo", "a\nb", "c\td"], r'/bin/echo "a\nb" "c\td"'),
    (["/bin/echo", "--opt=1,2:3"], "/bin/echo --opt=1,2:3"),
])
def test_exec_quoting_follows_the_spec(argv, expected):
    assert desktop_exec(argv) == expected
    assert read_exec(expected) == argv


@pytest.mark.parametrize("argv", [
    ["/a b/c$d/e\\f/python", "-m", "sloth_tray"],
    ["/x", '\\"', "\\\\", "$$", "%%u", "%f", "\\n", "é ü", " lead", "trail "],
])
def test_exec_round_trips_through_a_spec_reader(argv):
    assert read_exec(desktop_exec(argv)) == argv
    assert read_desktop_exec(desktop_exec(argv)) == argv  # the module's own reader


@pytest.mark.parametrize("value", ['/bin/echo "unclosed', r'/bin/echo "a\\qb"'])
def test_an_exec_that_breaks_the_quoting_rules_reads_as_no_command(value):
    assert read_desktop_exec(value) is None


@pytest.mark.parametrize("argv", [["/opt/a=b/python"], ["/bin/echo", "bell\x07"]])
def test_exec_refuses_what_the_spec_cannot_hold(argv):
    with pytest.raises(SlothError) as caught:
        desktop_exec(argv)
    assert "\n" not in str(caught.value)


# -- Linux -------------------------------------------------------------------------------


@pytest.fixture
def xdg(tmp_path):
    """Keyword arguments that put a Linux desktop (the user's login folder) under tmp_path."""
    env = {"XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    return {"platform": "linux", "user_home": tmp_path, "env": env}


def spaced_python(tmp_path: Path) -> list[str]:
    return [str(tmp_path / "my $HOME env" / "bin" / "python3"), "-m", "sloth_tray"]


def test_linux_round_trip(tmp_path, xdg):
    argv = spaced_python(tmp_path)
    path = tmp_path / "cfg" / "autostart" / "sloth-tray.desktop"
    assert status(**xdg, command=argv) == Status(False, str(path), "not set to start at login")

    after = enable(**xdg, command=argv)

    assert after == Status(True, str(path), "starts at login")
    text = path.read_text("utf-8")
    assert text.startswith("#")  # only comments may come before the group
    entries = parse_desktop_entry(text)
    assert entries == {
        "Type": "Application",
        "Name": "sloth-tray",
        "Comment": entries["Comment"],
        "Exec": f'"{tmp_path}/my \\\\$HOME env/bin/python3" -m sloth_tray',
        "Icon": "sloth-tray",
        "Terminal": "false",
        "X-GNOME-Autostart-enabled": "true",
        "X-Sloth-Tray": "1",
    }
    assert entries["Comment"]
    assert read_exec(entries["Exec"]) == argv
    assert "[Desktop Entry]\n" in text
    assert sorted(p.name for p in path.parent.iterdir()) == ["sloth-tray.desktop"]  # no temp left
    assert status(**xdg, command=argv) == after

    disabled = disable(**xdg, command=argv)

    assert not path.exists()
    assert disabled == Status(False, str(path), "not set to start at login")
    assert disable(**xdg, command=argv) == disabled


def test_linux_enable_is_idempotent(tmp_path, xdg):
    enable(**xdg)
    path = tmp_path / "cfg" / "autostart" / "sloth-tray.desktop"
    before = path.stat()
    content = path.read_bytes()

    again = enable(**xdg)

    assert again.enabled
    assert path.read_bytes() == content
    # os.replace would have given the file a new inode: it was not rewritten at all.
    assert path.stat().st_ino == before.st_ino


@pytest.mark.parametrize("key", ["Hidden=true", "X-GNOME-Autostart-enabled=false"])
def test_linux_a_user_who_turned_it_off_is_honoured(tmp_path, xdg, key):
    enable(**xdg)
    path = tmp_path / "cfg" / "autostart" / "sloth-tray.desktop"
    text = path.read_text("utf-8").replace("X-GNOME-Autostart-enabled=true\n", "")
    path.write_text(text + key + "\n", "utf-8")

    assert status(**xdg) == Status(False, str(path), f"disabled by you ({key})")

    again = enable(**xdg)  # from our own menu: the user changed their mind

    assert again.enabled
    entries = parse_desktop_entry(path.read_text("utf-8"))
    assert "Hidden" not in entries
    assert entries["X-GNOME-Autostart-enabled"] == "true"


def test_linux_a_file_we_did_not_write_is_never_touched(tmp_path, xdg):
    path = tmp_path / "cfg" / "autostart" / "sloth-tray.desktop"
    path.parent.mkdir(parents=True)
    foreign = b"[Desktop Entry]\nType=Application\nName=mine\nExec=/usr/bin/sloth-tray\n"
    path.write_bytes(foreign)

    for action in (status, disable, enable, disable):
        result = action(**xdg)
        assert path.read_bytes() == foreign
        assert result.where == str(path)
        assert "not written by sloth-tray" in result.detail
        assert "left alone" in result.detail


def test_linux_an_old_command_shows_and_enable_updates_it(tmp_path, xdg):
    enable(**xdg, command=["/old/python", "-m", "sloth_tray"])

    stale = status(**xdg, command=["/new/python", "-m", "sloth_tray"])
    assert stale.enabled and "another command" in stale.detail

    enable(**xdg, command=["/new/python", "-m", "sloth_tray"])
    path = Path(stale.where)
    assert parse_desktop_entry(path.read_text("utf-8"))["Exec"] == "/new/python -m sloth_tray"


@pytest.mark.parametrize("env, expected", [
    ({}, ".config/autostart/sloth-tray.desktop"),
    ({"XDG_CONFIG_HOME": ""}, ".config/autostart/sloth-tray.desktop"),
    ({"XDG_CONFIG_HOME": "relative/cfg"}, ".config/autostart/sloth-tray.desktop"),  # invalid
    ({"XDG_CONFIG_HOME": "{tmp}/elsewhere"}, "elsewhere/autostart/sloth-tray.desktop"),
])
def test_linux_where_follows_xdg_config_home(tmp_path, env, expected):
    env = {k: v.format(tmp=tmp_path) for k, v in env.items()}
    result = enable(platform="linux", user_home=tmp_path, env=env)
    assert result.where == str(tmp_path / expected)
    assert Path(result.where).is_file()


def test_an_unwritable_folder_is_one_sentence(tmp_path, xdg):
    # A file where the autostart folder should be: unwritable even for root.
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "autostart").write_text("not a folder")

    with pytest.raises(SlothError) as caught:
        enable(**xdg)

    message = str(caught.value)
    assert message.startswith("cannot ")
    assert str(tmp_path / "cfg" / "autostart") in message
    assert "\n" not in message


def test_a_folder_that_cannot_be_made_is_one_sentence(tmp_path, xdg):
    # A dangling link where the autostart folder should be (a dotfiles link to an
    # unmounted disk): reading finds nothing, and the folder cannot be made, even by root.
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "autostart").symlink_to(tmp_path / "unmounted" / "autostart")

    with pytest.raises(SlothError) as caught:
        enable(**xdg)

    assert str(caught.value) == f"cannot create {tmp_path / 'cfg' / 'autostart'}: File exists"


def test_other_xdg_platforms_use_the_desktop_file(tmp_path):
    result = enable(platform="freebsd14", user_home=tmp_path, env={})
    assert result.where.endswith(".config/autostart/sloth-tray.desktop")


# -- macOS --------------------------------------------------------------------------------


def test_macos_launch_agent(tmp_path):
    argv = spaced_python(tmp_path)
    mac = {"platform": "darwin", "user_home": tmp_path, "command": argv}
    path = tmp_path / "Library" / "LaunchAgents" / "org.sloth-tray.agent.plist"
    assert status(**mac) == Status(False, str(path), "not set to start at login")

    assert enable(**mac) == Status(True, str(path), "starts at login")

    agent = plistlib.loads(path.read_bytes())
    assert agent == {
        "Label": "org.sloth-tray.agent",
        "ProgramArguments": argv,
        "RunAtLoad": True,
        "ProcessType": "Interactive",
    }
    assert "KeepAlive" not in agent
    assert path.stat().st_mode & 0o022 == 0  # launchd refuses agents others can write
    inode = path.stat().st_ino
    assert enable(**mac).enabled
    assert path.stat().st_ino == inode  # idempotent: not rewritten

    assert disable(**mac) == Status(False, str(path), "not set to start at login")
    assert not path.exists()


def test_macos_a_user_disabled_agent_is_honoured(tmp_path):
    mac = {"platform": "darwin", "user_home": tmp_path}
    path = Path(enable(**mac).where)
    agent = plistlib.loads(path.read_bytes())
    path.write_bytes(plistlib.dumps({**agent, "Disabled": True}))

    assert status(**mac) == Status(False, str(path), "disabled by you (Disabled=true)")
    assert enable(**mac).enabled
    assert "Disabled" not in plistlib.loads(path.read_bytes())


def test_macos_an_old_command_shows_and_enable_updates_it(tmp_path):
    mac = {"platform": "darwin", "user_home": tmp_path}
    enable(**mac, command=["/old/python", "-m", "sloth_tray"])

    stale = status(**mac, command=["/new/python", "-m", "sloth_tray"])
    assert stale.enabled and "another command" in stale.detail

    assert enable(**mac, command=["/new/python", "-m", "sloth_tray"]).detail == "starts at login"
    agent = plistlib.loads(Path(stale.where).read_bytes())
    assert agent["ProgramArguments"] == ["/new/python", "-m", "sloth_tray"]


@pytest.mark.parametrize("content", [
    plistlib.dumps({"Label": "com.example.other", "ProgramArguments": ["/bin/true"]}),
    b"this is not a plist",
])
def test_macos_an_agent_that_is_not_ours_is_never_touched(tmp_path, content):
    mac = {"platform": "darwin", "user_home": tmp_path}
    path = tmp_path / "Library" / "LaunchAgents" / f"{AGENT_LABEL}.plist"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)

    for action in (status, disable, enable, disable):
        result = action(**mac)
        assert path.read_bytes() == content
        assert "left alone" in result.detail


# -- Windows --------------------------------------------------------------------------------


class FakeRunKey:
    """The Run key as a dict, recording writes."""

    def __init__(self, values: dict[str, str] | None = None) -> None:
        self.values = dict(values or {})
        self.writes: list[tuple[str, str]] = []
        self.fail_with: OSError | None = None

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def set(self, name: str, value: str) -> None:
        if self.fail_with:
            raise self.fail_with
        self.writes.append((name, value))
        self.values[name] = value

    def delete(self, name: str) -> None:
        self.values.pop(name, None)


def test_windows_run_value():
    argv = [r"C:\Program Files\Python311\pythonw.exe", "-m", "sloth_tray"]
    registry = FakeRunKey({"OneDrive": r'"C:\OneDrive.exe" /background'})
    win = {"platform": "win32", "registry": registry, "command": argv}
    where = RUN_KEY + "\\" + RUN_VALUE
    assert where == r"HKCU\Software\Microsoft\Windows\CurrentVersion\Run\sloth-tray"
    assert status(**win) == Status(False, where, "not set to start at login")

    assert enable(**win) == Status(True, where, "starts at login")

    line = registry.values["sloth-tray"]
    assert line == subprocess.list2cmdline(argv)
    assert line == r'"C:\Program Files\Python311\pythonw.exe" -m sloth_tray'
    enable(**win)
    assert len(registry.writes) == 1  # idempotent

    assert disable(**win) == Status(False, where, "not set to start at login")
    assert registry.values == {"OneDrive": r'"C:\OneDrive.exe" /background'}


def test_windows_an_old_command_shows_and_enable_updates_it():
    registry = FakeRunKey({"sloth-tray": r"C:\old\python.exe -m sloth_tray"})
    win = {"platform": "win32", "registry": registry, "command": [r"C:\new\sloth-tray.exe"]}

    assert "another command" in status(**win).detail
    assert enable(**win).detail == "starts at login"
    assert registry.values["sloth-tray"] == r"C:\new\sloth-tray.exe"


def test_windows_a_registry_refusal_is_one_sentence():
    registry = FakeRunKey()
    registry.fail_with = PermissionError(13, "Access is denied")

    with pytest.raises(SlothError) as caught:
        enable(platform="win32", registry=registry, command=["app.exe"])

    assert str(caught.value) == f"cannot write {RUN_KEY}\\{RUN_VALUE}: Access is denied"


# -- the command ------------------------------------------------------------------------------


def test_the_default_command_runs_the_package(tmp_path):
    assert default_command() == [sys.executable, "-m", "sloth_tray"]
    path = Path(enable(platform="linux", user_home=tmp_path, env={}).where)
    exec_value = parse_desktop_entry(path.read_text("utf-8"))["Exec"]
    assert read_exec(exec_value) == [sys.executable, "-m", "sloth_tray"]


def test_a_frozen_app_starts_itself(monkeypatch):
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert default_command() == [sys.executable]
    assert default_command("/Applications/sloth-tray.app/Contents/MacOS/sloth-tray") == [
        "/Applications/sloth-tray.app/Contents/MacOS/sloth-tray"
    ]


def test_windows_prefers_pythonw_so_no_console_opens(tmp_path):
    python = tmp_path / "python.exe"
    python.write_bytes(b"")
    assert default_command(str(python), frozen=False, platform="win32") == [
        str(python), "-m", "sloth_tray"
    ]
    (tmp_path / "pythonw.exe").write_bytes(b"")
    assert default_command(str(python), frozen=False, platform="win32") == [
        str(tmp_path / "pythonw.exe"), "-m", "sloth_tray"
    ]
    assert default_command(str(python), frozen=False, platform="linux")[0] == str(python)


def test_winreg_is_only_imported_when_the_real_registry_is_used():
    # Importing the package on Linux worked (there is no winreg here); making the adapter too.
    assert "winreg" not in sys.modules
    assert isinstance(WinregRunKey(), WinregRunKey)


# -- where the app lives: its home, jobs folder and config file ---------------------------------


def odd_places(tmp_path: Path) -> dict[str, Path]:
    return {"home": tmp_path / "sloth $HOME 100%", "jobs": tmp_path / 'jobs "quoted" \\ `x`',
            "config": tmp_path / "conf; #1" / "c.toml"}


def test_linux_the_entry_starts_the_app_on_the_home_and_jobs_folder_it_was_enabled_for(
        tmp_path, xdg):
    places = odd_places(tmp_path)
    after = enable(**xdg, **places)

    assert after.detail == "starts at login"
    exec_value = parse_desktop_entry(Path(after.where).read_text("utf-8"))["Exec"]
    assert read_exec(exec_value) == [*default_command(), "--home", str(places["home"]),
                                     "--jobs-dir", str(places["jobs"]),
                                     "--config", str(places["config"])]
    assert (after.home, after.jobs_dir, after.config) == tuple(map(str, places.values()))
    assert status(**xdg, **places) == after

    # Asked about from another home, the entry is another command, and says whose it is.
    other = status(**xdg, home=tmp_path / "other")
    assert other.enabled and other.detail == autostart.OTHER_COMMAND
    assert other.home == str(places["home"])


def test_only_the_places_given_are_written_and_relative_ones_are_made_absolute(
        tmp_path, xdg, monkeypatch):
    monkeypatch.chdir(tmp_path)
    after = enable(**xdg, home="rel/home")
    exec_value = parse_desktop_entry(Path(after.where).read_text("utf-8"))["Exec"]
    assert read_exec(exec_value) == [*default_command(), "--home", str(tmp_path / "rel/home")]
    assert (after.home, after.jobs_dir, after.config) == (str(tmp_path / "rel/home"), None, None)
    assert enable(**xdg).home is None  # enabled again with none: the entry names none


def test_a_place_a_desktop_entry_cannot_hold_is_one_sentence(tmp_path, xdg):
    with pytest.raises(SlothError) as caught:
        enable(**xdg, home=tmp_path / "new\x07line")
    assert "control character" in str(caught.value) and "\n" not in str(caught.value)


def test_macos_the_agent_starts_the_app_on_its_home_and_jobs_folder(tmp_path):
    places = odd_places(tmp_path)
    mac = {"platform": "darwin", "user_home": tmp_path, "command": ["/py", "-m", "sloth_tray"]}
    after = enable(**mac, **places)
    agent = plistlib.loads(Path(after.where).read_bytes())
    assert agent["ProgramArguments"] == ["/py", "-m", "sloth_tray", "--home", str(places["home"]),
                                         "--jobs-dir", str(places["jobs"]),
                                         "--config", str(places["config"])]
    assert (after.home, after.jobs_dir, after.config) == tuple(map(str, places.values()))


@pytest.mark.parametrize("home", [r"C:\Users\Ann\sloth home", "C:\\odd\\ \"q\" \\", r"C:\plain"])
def test_windows_the_run_value_starts_the_app_on_its_home(home):
    registry = FakeRunKey()
    win = {"platform": "win32", "registry": registry, "command": [r"C:\a b\sloth-tray.exe"]}
    after = enable(**win, home=home, jobs=r"D:\jobs")
    line = registry.values["sloth-tray"]
    argv = [r"C:\a b\sloth-tray.exe", "--home", home, "--jobs-dir", r"D:\jobs"]
    assert line == subprocess.list2cmdline(argv)
    assert split_run_value(line) == argv
    assert (after.home, after.jobs_dir, after.config) == (home, r"D:\jobs", None)
    assert after.detail == "starts at login"


@pytest.mark.parametrize("line, argv", [
    (r'"C:\a b\x.exe" --home "C:\h\\"', [r"C:\a b\x.exe", "--home", "C:\\h\\"]),
    (r'x.exe a\\\"b "c d" e', ["x.exe", 'a\\"b', "c d", "e"]),
    (r'x.exe ""', ["x.exe", ""]),
])
def test_a_run_value_is_read_as_windows_splits_a_command_line(line, argv):
    assert split_run_value(line) == argv


# -- the file entries' shared writing (autostart/files.py) ----------------------------------


def test_an_entry_file_is_replaced_whole_never_seen_half_written(tmp_path, monkeypatch):
    path = tmp_path / "autostart" / "entry.desktop"
    path.parent.mkdir()
    path.write_bytes(b"old")
    real_replace = os.replace
    seen = []

    def replace(src, dst):
        # Up to the rename, the entry is the old one and the new one is whole beside it.
        seen.append((path.read_bytes(), Path(src).read_bytes(), Path(src).stat().st_mode & 0o777))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    files.write_atomic(path, b"new " * 1000)

    assert seen == [(b"old", b"new " * 1000, 0o644)]
    assert path.read_bytes() == b"new " * 1000
    assert [p.name for p in path.parent.iterdir()] == ["entry.desktop"]


def test_a_failed_write_leaves_the_old_entry_and_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "entry.plist"
    path.write_bytes(b"old")

    def fsync(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(SlothError) as caught:
        files.write_atomic(path, b"new")

    assert str(caught.value) == f"cannot write {path}: Input/output error"
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["entry.plist"]


def test_a_missing_entry_file_reads_as_none_and_removes_quietly(tmp_path):
    assert files.read_bytes(tmp_path / "none") is None
    files.remove(tmp_path / "none")
