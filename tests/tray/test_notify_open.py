"""Notifications and opening files over a real, private D-Bus: a dbus-daemon of the
test's own, with fake notification, portal and file manager services exported on it."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Annotated

import pytest
from helpers.processes import wait_for

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("dbus-daemon") is None,
    reason="needs Linux and dbus-daemon")

from dbus_fast import Variant  # noqa: E402
from dbus_fast.annotations import (  # noqa: E402
    DBusSignature,
)

from sloth_tray.tray.announce import RETRY, SHOW_LOG  # noqa: E402
from sloth_tray.tray.notify import CallbackNotifier, Notifier  # noqa: E402
from sloth_tray.tray.opener import open_now, open_path, reveal_now  # noqa: E402

StrList = Annotated[list[str], DBusSignature("as")]
FAILURE_ACTIONS = (RETRY, SHOW_LOG)  # an ordinary failure's buttons


@pytest.fixture
def notifier():
    made = Notifier()
    try:
        yield made
    finally:
        made.close()


class RecordingNotifier:
    def __init__(self) -> None:
        self.told: list[tuple[str, str]] = []

    def notify(self, title, body, actions=(), on_action=None) -> None:
        self.told.append((title, body))


def notification_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sloth_tray"]


def join_action_threads() -> None:
    for thread in threading.enumerate():
        if thread.name == "notification-action":
            thread.join(timeout=10)


# -- notifications ------------------------------------------------------------------------

def test_a_failure_notification_has_retry_and_show_log_buttons_and_the_apps_icon(
        desktop, notifier, tmp_path, monkeypatch):
    from PIL import Image

    from sloth_tray.tray.icons import Look, render

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    server = desktop.notifications(["actions", "body"])
    notifier.notify("sloth-tray: a job failed", "tidy: exit status 1", FAILURE_ACTIONS,
                    on_action=lambda key: None)
    wait_for(lambda: server.sent, what="the notification")
    sent = server.sent[0]
    icon = tmp_path / "cache" / "sloth-tray" / "sloth-tray.png"
    assert (sent["app_name"], sent["replaces_id"], sent["app_icon"]) == (
        "sloth-tray", 0, icon.as_uri())
    with Image.open(icon) as drawn:
        assert drawn.tobytes() == render(Look.IDLE, 64).tobytes()
    assert (sent["summary"], sent["body"]) == ("sloth-tray: a job failed", "tidy: exit status 1")
    assert sent["actions"] == ["retry", "Retry", "log", "Show log"]
    # No desktop-entry: it would name a .desktop file that pip never installs.
    assert sent["hints"] == {"urgency": Variant("y", 1)}
    assert sent["expire_timeout"] == -1


def test_a_click_on_an_update_before_its_reply_is_answered_by_the_new_buttons(
        desktop, notifier):
    server = desktop.notifications(["actions", "body"])
    clicked: list[str] = []
    for count in (1, 2):
        notifier.notify(f"{count} jobs failed", "tidy", [("retry-all", "Retry all")],
                        on_action=lambda key, count=count: clicked.append(f"{key} {count}"),
                        key="burst")
        wait_for(lambda count=count: len(server.sent) == count, what=f"notification {count}")
        server.click_on_update = "retry-all"
    wait_for(lambda: clicked, what="the click")
    assert clicked == ["retry-all 2"]


def test_a_click_on_a_new_notification_before_its_reply_is_answered(desktop, notifier):
    """The test of a step cut short clicked Mark done as soon as the server had the
    notification: now and then, before the app had its id, and the click was lost."""
    server = desktop.notifications(["actions", "body"])
    server.click_on_show = "retry"
    clicked: list[str] = []
    notifier.notify("sloth-tray: a job failed", "tidy: exit status 1", FAILURE_ACTIONS,
                    on_action=clicked.append)
    wait_for(lambda: clicked, what="the click")
    assert clicked == ["retry"]


def test_a_notification_with_a_key_is_updated_in_place_with_its_newest_text(
        desktop, notifier):
    server = desktop.notifications(["actions", "body"])
    clicked: list[str] = []
    for count in range(1, 21):
        notifier.notify(f"{count} jobs failed", "tidy", [("retry-all", "Retry all")],
                        on_action=lambda key, count=count: clicked.append(f"{key} {count}"),
                        key="burst")
        if count == 1:
            wait_for(lambda: server.sent, what="the first")
    wait_for(lambda: server.sent and server.sent[-1]["summary"] == "20 jobs failed",
             what="the newest text")
    # The first at once, then the newest after UPDATE_GAP: never one call per change.
    assert [(sent["replaces_id"], sent["summary"]) for sent in server.sent] == [
        (0, "1 jobs failed"), (101, "20 jobs failed")]
    desktop.call(server.ActionInvoked, 101, "retry-all")
    wait_for(lambda: clicked, what="the button")
    assert clicked == ["retry-all 20"]  # the newest text's button


def test_a_withdrawn_notification_is_closed_and_shows_nothing_more(desktop, notifier):
    server = desktop.notifications(["actions", "body"])
    notifier.notify("a job failed", "tidy", key="one")
    notifier.notify("a job failed", "backup", key="other")
    wait_for(lambda: len(server.sent) == 2, what="both notifications")
    notifier.withdraw("one")
    wait_for(lambda: server.closed, what="CloseNotification")
    notifier.notify("a job failed", "tidy, again", key="one")  # too late: it is gone
    notifier.notify("2 jobs failed", "backup", key="other")
    wait_for(lambda: len(server.sent) == 3, what="the other one's update")
    assert server.closed == [101]
    assert [(sent["replaces_id"], sent["body"]) for sent in server.sent] == [
        (0, "tidy"), (0, "backup"), (102, "backup")]


def test_a_notification_the_user_closed_is_told_and_never_brought_back(desktop, notifier):
    server = desktop.notifications(["actions", "body"])
    closed: list[str] = []
    notifier.notify("a job failed", "tidy", key="k", on_closed=lambda: closed.append("k"))
    wait_for(lambda: server.sent, what="the notification")
    desktop.call(server.NotificationClosed, 101, 2)  # dismissed by the user
    wait_for(lambda: closed, what="on_closed")
    notifier.notify("2 jobs failed", "tidy, backup", key="k")
    notifier.notify("a job failed", "sync", key="new")
    wait_for(lambda: len(server.sent) == 2, what="the new key's notification")
    assert [sent["body"] for sent in server.sent] == ["tidy", "sync"]
    assert closed == ["k"]


def test_the_callback_notifier_shows_a_key_once_and_cannot_withdraw(caplog):
    shown: list[tuple[str, str]] = []
    told = CallbackNotifier(lambda title, body: shown.append((title, body)))
    told.notify("a job failed", "tidy", key="k")
    told.notify("2 jobs failed", "tidy, backup", key="k")
    told.withdraw("k")
    told.notify("ready", "drop scripts")
    assert shown == [("a job failed", "tidy"), ("ready", "drop scripts")]


def test_clicking_retry_calls_on_action_once_and_the_notification_is_then_forgotten(
        desktop, notifier):
    server = desktop.notifications(["actions", "body"])
    first: list[str] = []
    second: list[str] = []
    notifier.notify("failed", "tidy", FAILURE_ACTIONS, on_action=first.append)
    notifier.notify("failed", "backup", FAILURE_ACTIONS, on_action=second.append)
    wait_for(lambda: len(server.sent) == 2, what="both notifications")
    # A double click, then the other button before the server closes the notification:
    # only the first click counts.
    desktop.call(server.ActionInvoked, 101, "retry")
    desktop.call(server.ActionInvoked, 101, "retry")
    desktop.call(server.ActionInvoked, 101, "log")
    desktop.call(server.NotificationClosed, 101, 2)
    desktop.call(server.ActionInvoked, 102, "log")
    wait_for(lambda: second, what="the second notification's action")
    join_action_threads()
    assert first == ["retry"]
    assert second == ["log"]


def test_a_key_that_was_not_offered_and_a_closed_notification_call_nothing(desktop, notifier):
    server = desktop.notifications(["actions"])
    clicked: list[str] = []
    notifier.notify("failed", "tidy", FAILURE_ACTIONS, on_action=clicked.append)
    notifier.notify("failed", "backup", FAILURE_ACTIONS, on_action=clicked.append)
    wait_for(lambda: len(server.sent) == 2, what="both notifications")
    desktop.call(server.ActionInvoked, 101, "default")  # a click on the body
    desktop.call(server.NotificationClosed, 102, 1)  # expired unclicked
    desktop.call(server.ActionInvoked, 102, "retry")
    desktop.call(server.ActionInvoked, 101, "log")
    wait_for(lambda: clicked, what="the offered action")
    join_action_threads()
    assert clicked == ["log"]


def test_a_server_that_draws_no_buttons_gets_none(desktop, notifier):
    server = desktop.notifications(["body"])
    notifier.notify("failed", "tidy", FAILURE_ACTIONS, on_action=lambda key: None)
    wait_for(lambda: server.sent, what="the notification")
    assert server.sent[0]["actions"] == []
    assert server.sent[0]["hints"]["urgency"] == Variant("y", 1)


@pytest.mark.parametrize("bus", ["no notification server", "no session bus", "no address"])
def test_without_a_notification_server_the_log_says_so_once_and_keeps_every_message(
        desktop, notifier, bus, caplog, monkeypatch, tmp_path):
    caplog.set_level(logging.INFO, logger="sloth_tray")
    if bus == "no session bus":
        monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", f"unix:path={tmp_path}/no-bus")
    elif bus == "no address":
        monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS")
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    for name in ("tidy", "backup", "sync"):
        notifier.notify("sloth-tray: a job failed", f"{name}: exit status 1", FAILURE_ACTIONS,
                        on_action=lambda key: None)
    wait_for(lambda: sum("sync: exit status 1" in line for line in notification_lines(caplog)),
             what="the last message in the log")
    lines = notification_lines(caplog)
    assert [line for line in lines if "notifications are off" in line] == lines[:1], lines
    assert lines[1:] == [f"sloth-tray: a job failed: {name}: exit status 1"
                         for name in ("tidy", "backup", "sync")]
    assert all(record.exc_info is None for record in caplog.records)


def test_without_an_address_the_per_user_bus_socket_is_used(desktop, notifier, tmp_path,
                                                            monkeypatch):
    server = desktop.notifications(["actions"])
    socket_path = os.environ["DBUS_SESSION_BUS_ADDRESS"].split("path=", 1)[1].split(",")[0]
    runtime = tmp_path / "run"
    runtime.mkdir()
    (runtime / "bus").symlink_to(socket_path)
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    notifier.notify("title", "body")
    wait_for(lambda: server.sent, what="the notification")


def test_a_notifier_starts_its_thread_only_when_first_used_and_close_ends_it(desktop):
    before = {t for t in threading.enumerate() if t.name == "notifications"}
    made = Notifier()
    assert {t for t in threading.enumerate() if t.name == "notifications"} == before
    server = desktop.notifications(["actions"])
    made.notify("title", "body")
    wait_for(lambda: server.sent, what="the notification")
    made.close()
    assert {t for t in threading.enumerate() if t.name == "notifications"} == before
    made.notify("after close", "goes to the log only")  # and does not raise


def test_the_callback_notifier_passes_title_and_body_and_logs_once_when_it_cannot(caplog):
    caplog.set_level(logging.INFO, logger="sloth_tray")
    shown: list[tuple[str, str]] = []
    CallbackNotifier(lambda title, body: shown.append((title, body))).notify(
        "sloth-tray: a job failed", "tidy: exit 1", FAILURE_ACTIONS, lambda key: None)
    assert shown == [("sloth-tray: a job failed", "tidy: exit 1")]

    def refuse(title, body):
        raise RuntimeError("no notification service")

    broken = CallbackNotifier(refuse)
    broken.notify("a", "one")
    broken.notify("b", "two")
    CallbackNotifier(None).notify("c", "three")  # a surface with no notifications
    lines = notification_lines(caplog)
    assert lines == ["desktop notifications are off (no notification service); they go to "
                     "this log", "a: one", "b: two", "c: three"]


# -- opening ------------------------------------------------------------------------------

@pytest.fixture
def place(tmp_path, monkeypatch):
    """A home with a jobs folder and a log file in it; PATH with no opener on it."""
    home = tmp_path / "home"
    (home / "jobs").mkdir(parents=True)
    (home / "tidy.log").write_text("exit status 1\n")
    monkeypatch.setenv("HOME", str(home))
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return home


def fake_opener(tmp_path: Path, monkeypatch, name: str = "xdg-open", status: int = 0) -> Path:
    """An opener script first on PATH that records its arguments."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    record = tmp_path / f"{name}.args"
    script = folder / name
    move = shutil.which("mv", path=os.defpath)  # PATH itself may hold nothing else
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {record}.part\n"
                      f"{move} {record}.part {record}\nexit {status}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return record


def test_a_file_and_a_folder_go_to_the_portal_when_there_is_one(desktop, place):
    portal = desktop.portal()
    manager = desktop.file_manager()
    assert open_now(place / "tidy.log") == "portal"
    assert open_now(place / "jobs") == "portal"
    assert portal.calls == [("OpenFile", str(place / "tidy.log")),  # a file: as a descriptor
                            ("OpenURI", (place / "jobs").as_uri())]
    assert manager.calls == []


def test_showing_a_file_in_its_folder_hands_the_portal_the_file_itself(desktop, place):
    portal = desktop.portal()
    assert reveal_now(place / "tidy.log") == "portal"
    assert portal.calls == [("OpenDirectory", str(place / "tidy.log"))]


def test_without_a_portal_the_file_manager_shows_a_folder_but_a_log_opens_in_its_app(
        desktop, place, tmp_path, monkeypatch):
    """The file manager only shows a file in its folder: a log to read goes to a
    program that opens it."""
    manager = desktop.file_manager()
    record = fake_opener(tmp_path, monkeypatch)
    assert open_now(place / "jobs") == "file-manager"
    assert open_now(place / "tidy.log") == "xdg-open"
    assert manager.calls == [("ShowFolders", [(place / "jobs").as_uri()])]
    wait_for(record.exists, what="xdg-open to run")
    assert record.read_text() == f"{place / 'tidy.log'}\n"


def test_without_portal_or_file_manager_xdg_open_is_started(desktop, place, tmp_path,
                                                             monkeypatch):
    record = fake_opener(tmp_path, monkeypatch)
    told = RecordingNotifier()
    open_path(place / "jobs", told)  # returns at once; the opener runs on its own thread
    wait_for(record.exists, what="xdg-open to run")
    assert record.read_text() == f"{place / 'jobs'}\n"
    assert told.told == []


def test_gio_open_serves_when_xdg_open_is_missing(desktop, place, tmp_path, monkeypatch):
    record = fake_opener(tmp_path, monkeypatch, name="gio")
    assert open_now(place / "tidy.log") == "gio"
    wait_for(record.exists, what="gio to run")
    assert record.read_text() == f"open\n{place / 'tidy.log'}\n"


NOT_INSTALLED = "not installed: xdg-open, gio, kde-open, kde-open5, kioclient, kioclient5"


def test_with_no_opener_at_all_the_user_is_told_which_path_to_open(desktop, place):
    told = RecordingNotifier()
    assert open_now(place / "jobs", told) == ""
    assert told.told == [("sloth-tray", "cannot open ~/jobs: tried the desktop portal (not "
                                        "running), the file manager (not running); "
                                        f"{NOT_INSTALLED}; open it yourself")]


def test_with_no_session_bus_and_no_opener_the_log_has_the_sentence(place, monkeypatch,
                                                                    caplog):
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    caplog.set_level(logging.INFO, logger="sloth_tray")
    assert open_now(place / "jobs") == ""
    assert notification_lines(caplog)[-1] == (
        "cannot open ~/jobs: tried the desktop portal and the file manager (no session bus); "
        f"{NOT_INSTALLED}; open it yourself")
    assert all(record.exc_info is None for record in caplog.records)


def test_an_opener_that_fails_is_reported_not_lost(desktop, place, tmp_path, monkeypatch):
    fake_opener(tmp_path, monkeypatch, status=3)
    told = RecordingNotifier()
    assert open_now(place / "jobs", told) == ""
    assert told.told == [("sloth-tray", "cannot open ~/jobs: tried the desktop portal (not "
                                        "running), the file manager (not running), xdg-open "
                                        "(exit status 3); not installed: gio, kde-open, "
                                        "kde-open5, kioclient, kioclient5; open it yourself")]


def test_a_path_that_is_gone_is_one_sentence(desktop, place):
    portal = desktop.portal()
    told = RecordingNotifier()
    assert open_now(place / "gone", told) == ""
    assert told.told == [("sloth-tray", "cannot open ~/gone: it does not exist; "
                                        "open it yourself")]
    assert portal.calls == []


# -- the activation token the tray was given for the click ---------------------------------

def test_the_portal_gets_the_activation_token_for_a_file_and_a_folder(desktop, place):
    portal = desktop.portal()
    assert open_now(place / "jobs", activation_token="tok-1") == "portal"
    assert reveal_now(place / "tidy.log", activation_token="tok-2") == "portal"
    assert open_now(place / "tidy.log") == "portal"
    assert [call[0] for call in portal.calls] == ["OpenURI", "OpenDirectory", "OpenFile"]
    assert portal.options == [{"activation_token": Variant("s", "tok-1")},
                              {"activation_token": Variant("s", "tok-2")}, {}]


def test_the_file_manager_gets_the_activation_token_as_its_startup_id(desktop, place):
    manager = desktop.file_manager()
    assert open_now(place / "jobs", activation_token="tok-3") == "file-manager"
    assert reveal_now(place / "tidy.log", activation_token="tok-4") == "file-manager"
    assert open_now(place / "jobs") == "file-manager"
    assert [call[0] for call in manager.calls] == ["ShowFolders", "ShowItems", "ShowFolders"]
    assert manager.startup_ids == ["tok-3", "tok-4", ""]
