"""Opening a file or folder with the desktop's programs, as real child processes: fake
xdg-open, gio, kde-open, kde-open5, kioclient and kioclient5 on a PATH of the test's own
record their arguments and the activation variables they were given. No session bus
here: the portal and the file manager cannot answer (tests/tray/test_notify_open.py has
them on a private bus)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from helpers.processes import wait_for

pytestmark = pytest.mark.skipif(sys.platform == "darwin" or os.name == "nt",
                                reason="the freedesktop openers")

from sloth_tray.tray import opener  # noqa: E402
from sloth_tray.tray.opener import open_now, open_path, reveal_now  # noqa: E402

PROGRAMS = ("xdg-open", "gio", "kde-open", "kde-open5", "kioclient", "kioclient5")
UNSET = "(unset)"
NOT_INSTALLED = "not installed: xdg-open, gio, kde-open, kde-open5, kioclient, kioclient5"


class Told:
    def __init__(self) -> None:
        self.told: list[tuple[str, str]] = []

    def notify(self, title, body, actions=(), on_action=None) -> None:
        self.told.append((title, body))


class Programs:
    """A folder that is the whole PATH, and the calls its programs recorded."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.record = folder.parent / "calls"

    def add(self, name: str, status: int = 0, *, wait_on: Path | None = None) -> None:
        """A program that records its call and exits with `status` (after a line can be
        read from the fifo `wait_on`, when given). Shell built-ins only: PATH has
        nothing else."""
        waits = f"read line < {wait_on}\n" if wait_on else ""
        script = self.folder / name
        script.write_text(
            "#!/bin/sh\n"
            f"{{ printf '%s' {name}; for arg in \"$@\"; do printf '\\t%s' \"$arg\"; done\n"
            f"  printf '\\tXDG_ACTIVATION_TOKEN=%s' \"${{XDG_ACTIVATION_TOKEN-{UNSET}}}\"\n"
            f"  printf '\\tDESKTOP_STARTUP_ID=%s\\n' \"${{DESKTOP_STARTUP_ID-{UNSET}}}\"\n"
            f"}} >> {self.record}\n"
            f"{waits}exit {status}\n")
        script.chmod(0o755)

    def calls(self) -> list[list[str]]:
        if not self.record.exists():
            return []
        return [line.split("\t") for line in self.record.read_text().splitlines()]

    def names(self) -> list[str]:
        return [call[0] for call in self.calls()]


@pytest.fixture
def place(tmp_path, monkeypatch):
    """A home with a jobs folder and a log; no session bus; an empty PATH of our own."""
    home = tmp_path / "home"
    (home / "jobs").mkdir(parents=True)
    (home / "tidy.log").write_text("exit status 1\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", f"unix:path={tmp_path}/no-bus")
    monkeypatch.delenv("XDG_CURRENT_DESKTOP", raising=False)
    for name in ("XDG_ACTIVATION_TOKEN", "DESKTOP_STARTUP_ID", "WAYLAND_DISPLAY"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def programs(tmp_path, monkeypatch):
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    return Programs(folder)


def cannot(path: str, why: str) -> tuple[str, str]:
    return ("sloth-tray", f"cannot open {path}: {why}; open it yourself")


# -- which program, in which order ---------------------------------------------------------

def test_each_program_is_tried_in_turn_until_one_opens_the_path(place, programs):
    programs.add("xdg-open", 1)
    programs.add("gio", 2)
    programs.add("kde-open", 4)
    programs.add("kde-open5")
    programs.add("kioclient")
    told = Told()
    assert open_now(place / "jobs", told) == "kde-open5"
    jobs = str(place / "jobs")
    assert [call[:-2] for call in programs.calls()] == [
        ["xdg-open", jobs], ["gio", "open", jobs], ["kde-open", jobs], ["kde-open5", jobs]]
    assert told.told == []


def test_on_plasma_its_own_tools_come_before_gio_and_each_failure_is_named(place, programs,
                                                                          monkeypatch):
    monkeypatch.setenv("XDG_CURRENT_DESKTOP", "KDE")
    for status, name in enumerate(PROGRAMS, start=1):
        programs.add(name, status)
    told = Told()
    assert open_now(place / "tidy.log", told) == ""
    log = str(place / "tidy.log")
    assert [call[:-2] for call in programs.calls()] == [
        ["xdg-open", log], ["kde-open", log], ["kde-open5", log], ["kioclient", "exec", log],
        ["kioclient5", "exec", log], ["gio", "open", log]]
    assert told.told == [cannot("~/tidy.log", (
        "tried the desktop portal and the file manager (no session bus), xdg-open (exit "
        "status 1), kde-open (exit status 3), kde-open5 (exit status 4), kioclient (exit "
        "status 5), kioclient5 (exit status 6), gio (exit status 2)"))]


def test_with_only_kde_open5_installed_the_click_opens_the_folder_with_it(place, programs):
    programs.add("kde-open5")
    told = Told()
    open_path(place / "jobs", told)  # returns at once; the opener runs on its own thread
    wait_for(programs.calls, what="kde-open5 to run")
    assert [call[:-2] for call in programs.calls()] == [["kde-open5", str(place / "jobs")]]
    assert told.told == []


def test_when_gio_fails_kdes_own_opener_still_opens_it(place, programs):
    programs.add("gio", 2)  # "No application is registered as handling this file"
    programs.add("kioclient5")
    assert open_now(place / "jobs") == "kioclient5"
    assert programs.names() == ["gio", "kioclient5"]
    assert programs.calls()[-1][:-2] == ["kioclient5", "exec", str(place / "jobs")]


def test_showing_a_file_in_its_folder_hands_a_program_the_folder(place, programs):
    programs.add("kde-open")
    assert reveal_now(place / "tidy.log") == "kde-open"
    assert programs.calls()[0][:-2] == ["kde-open", str(place)]


# -- what the user is told ---------------------------------------------------------------

def test_with_nothing_to_open_it_the_sentence_names_every_way_tried_and_the_path(
        place, programs):
    told = Told()
    assert open_now(place / "jobs", told) == ""
    assert told.told == [cannot("~/jobs", "tried the desktop portal and the file manager "
                                          f"(no session bus); {NOT_INSTALLED}")]


def test_a_program_that_fails_later_is_told_then(place, programs, tmp_path, monkeypatch):
    """An opener still running once the first moments are over has opened it (some stay
    until the app they started quits); should it fail after all, the user hears of it."""
    monkeypatch.setattr(opener, "SETTLE_SECONDS", 0.2)
    fifo = tmp_path / "go"
    os.mkfifo(fifo)
    programs.add("xdg-open", 3, wait_on=fifo)
    programs.add("gio")
    told = Told()
    assert open_now(place / "jobs", told) == "xdg-open"
    with open(fifo, "w") as go:
        go.write("now\n")
    wait_for(lambda: told.told, what="the late failure to be told")
    assert told.told == [cannot("~/jobs", "xdg-open failed (exit status 3)")]
    assert programs.names() == ["xdg-open"]


# -- the activation token -----------------------------------------------------------------

@pytest.mark.parametrize(("session", "startup_id"), [("wayland", UNSET), ("x11", "tok-7")])
def test_the_activation_token_reaches_the_program_that_opens(place, programs, monkeypatch,
                                                             session, startup_id):
    """XDG_ACTIVATION_TOKEN for Wayland's xdg-activation; under X11 the same token is the
    startup id GTK and Qt read from DESKTOP_STARTUP_ID."""
    if session == "wayland":
        monkeypatch.setenv("WAYLAND_DISPLAY", "wayland-0")
    programs.add("gio", 2)
    programs.add("kde-open5")
    assert open_now(place / "jobs", activation_token="tok-7") == "kde-open5"
    for call in programs.calls():  # each program tried gets it: it is not used up by a failure
        assert call[-2:] == ["XDG_ACTIVATION_TOKEN=tok-7", f"DESKTOP_STARTUP_ID={startup_id}"]


def test_open_path_passes_the_token_on_from_its_own_thread(place, programs):
    programs.add("xdg-open")
    open_path(place / "tidy.log", activation_token="tok-8")
    wait_for(programs.calls, what="xdg-open to run")
    assert programs.calls()[0][-2] == "XDG_ACTIVATION_TOKEN=tok-8"


def test_without_a_token_none_left_from_the_apps_own_start_is_passed_on(place, programs,
                                                                       monkeypatch):
    """A token is good for one activation: the one the app was started with is spent."""
    monkeypatch.setenv("XDG_ACTIVATION_TOKEN", "spent")
    monkeypatch.setenv("DESKTOP_STARTUP_ID", "spent")
    programs.add("xdg-open")
    assert open_now(place / "jobs") == "xdg-open"
    wait_for(programs.calls, what="xdg-open to run")
    assert programs.calls()[0][-2:] == [f"XDG_ACTIVATION_TOKEN={UNSET}",
                                        f"DESKTOP_STARTUP_ID={UNSET}"]


def test_a_menu_click_opens_with_the_token_the_panel_gave_for_it(place, programs):
    """Plasma gives a token before each click (ProvideXdgActivationToken); the tray hands
    it to what the click opens, and only once."""
    from sloth_tray.tray.tray import Tray

    class Surface:
        tokens = ["tok-9"]

        def take_activation_token(self) -> str | None:
            return self.tokens.pop() if self.tokens else None

    tray = Tray.__new__(Tray)  # only what opening needs
    tray.surface, tray.notifier = Surface(), None
    programs.add("xdg-open")
    tray._open(place / "jobs")
    wait_for(programs.calls, what="xdg-open to run")
    tray._open(place / "jobs")
    wait_for(lambda: len(programs.calls()) == 2, what="xdg-open to run again")
    assert [call[-2] for call in programs.calls()] == [
        "XDG_ACTIVATION_TOKEN=tok-9", f"XDG_ACTIVATION_TOKEN={UNSET}"]
