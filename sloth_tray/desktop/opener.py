"""Open a file or folder in the desktop's own app, never with a traceback.

On Linux (and other freedesktop desktops) each way is tried in turn: the desktop portal
(org.freedesktop.portal.OpenURI), the file manager (org.freedesktop.FileManager1), then
`xdg-open` or `gio open`. macOS has `open`, Windows os.startfile. When nothing can open
it, the user is told which path to open by hand (a notification, or the log).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sloth_tray import procs
from sloth_tray.desktop import freedesktop
from sloth_tray.desktop.notify import Notifies, _describe, session_bus
from sloth_tray.presenter import tilde

log = logging.getLogger("sloth_tray")

PORTAL = "org.freedesktop.portal.Desktop"
PORTAL_PATH = "/org/freedesktop/portal/desktop"
OPEN_URI = "org.freedesktop.portal.OpenURI"
FILE_MANAGER = "org.freedesktop.FileManager1"
FILE_MANAGER_PATH = "/org/freedesktop/FileManager1"
# The first call may have D-Bus start the portal or the file manager, which takes a
# while; a hung one must not leave the user waiting forever.
CALL_TIMEOUT = 20.0
TITLE = "sloth-tray"


def open_path(path: str | os.PathLike[str], notifier: Notifies | None = None) -> None:
    """Open a file (in its app) or a folder (in the file manager). Returns at once; the
    work happens on a thread of its own. Never raises."""
    _in_background(open_now, path, notifier)


def open_now(path: str | os.PathLike[str], notifier: Notifies | None = None) -> str:
    """Open `path` on this thread (which must not be running an asyncio loop).
    Returns the way that took it ("portal", "file-manager", "xdg-open", "gio", "open",
    "startfile"), or "" when none did and the user has been told."""
    return _open(path, notifier, reveal=False)


def reveal_now(path: str | os.PathLike[str], notifier: Notifies | None = None) -> str:
    """Show a file in its folder (selected, where the file manager can), on this
    thread; returns the way taken, as `open_now` does."""
    return _open(path, notifier, reveal=True)


def _in_background(how: Callable[..., str], path: str | os.PathLike[str],
                   notifier: Notifies | None) -> None:
    try:
        threading.Thread(target=how, args=(path, notifier), name="opener",
                         daemon=True).start()
    except Exception as exc:  # no thread to be had
        _cannot(path, _describe(exc), notifier)


def _open(path: str | os.PathLike[str], notifier: Notifies | None, *, reveal: bool) -> str:
    try:
        target = Path(path).expanduser().absolute()
        if not target.exists():
            _cannot(target, "it does not exist", notifier)
            return ""
        if sys.platform == "darwin":
            command = ["open", "-R", str(target)] if reveal else ["open", str(target)]
            return _spawn("open", command, target, notifier) or _nothing(target, notifier)
        if os.name == "nt":
            return _start_windows(target, notifier, reveal=reveal)
        if freedesktop():
            way = _over_dbus(target, reveal=reveal)
            if way:
                return way
        shown = target.parent if reveal and not target.is_dir() else target
        for name, prefix in (("xdg-open", []), ("gio", ["open"])):
            program = shutil.which(name)
            if program is None:
                continue
            way = _spawn(name, [program, *prefix, str(shown)], target, notifier)
            if way:
                return way
        return _nothing(target, notifier)
    except Exception as exc:  # anything unforeseen still ends in one sentence
        _cannot(path, _describe(exc), notifier)
        return ""


def _nothing(target: Path, notifier: Notifies | None) -> str:
    _cannot(target, "no file manager or opener found", notifier)
    return ""


def _cannot(path: str | os.PathLike[str], why: str, notifier: Notifies | None) -> None:
    sentence = f"cannot open {tilde(str(path), str(Path.home()))}: {why}; open it yourself"
    if notifier is None:
        log.warning("%s", sentence)
        return
    try:
        notifier.notify(TITLE, sentence)
    except Exception:  # a notifier must not raise, but the sentence must still be said
        log.warning("%s", sentence)


# -- programs -----------------------------------------------------------------------------

def _spawn(name: str, command: list[str], target: Path, notifier: Notifies | None) -> str:
    """Start an opener detached from us (own session, no terminal output, the environment
    a job would get, so a frozen bundle's libraries stay out of it). A thread waits for
    it, blocked, so that a failure is told rather than lost. "" when it cannot start."""
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True,
                                 env=procs.job_environment(os.environ))
    except OSError as exc:
        log.debug("%s could not start: %s", name, exc)
        return ""
    threading.Thread(target=_tell_failure, args=(child, name, target, notifier),
                     name=f"{name}-wait", daemon=True).start()
    return name


def _tell_failure(child: subprocess.Popen, name: str, target: Path,
                  notifier: Notifies | None) -> None:
    status = child.wait()  # some openers stay until the app they started quits
    if status != 0:
        _cannot(target, f"{name} failed (exit status {status})", notifier)


def _start_windows(target: Path, notifier: Notifies | None, *, reveal: bool) -> str:
    shown = target.parent if reveal and not target.is_dir() else target
    try:
        os.startfile(str(shown))  # type: ignore[attr-defined]  # noqa: S606
    except OSError as exc:  # no app registered for this kind of file
        _cannot(target, _describe(exc), notifier)
        return ""
    return "startfile"


# -- D-Bus --------------------------------------------------------------------------------

def _over_dbus(target: Path, *, reveal: bool) -> str:
    try:
        return asyncio.run(_ask_desktop(target, reveal=reveal))
    except Exception as exc:  # no dbus-fast, a loop already running on this thread
        log.debug("opening %s over D-Bus: %s", target, _describe(exc))
        return ""


async def _ask_desktop(target: Path, *, reveal: bool) -> str:
    try:
        # unix_fds: the portal's OpenDirectory takes the file as an open descriptor.
        bus = await asyncio.wait_for(session_bus(unix_fds=True), CALL_TIMEOUT)
    except Exception as exc:
        log.debug("no session bus to open %s: %s", target, _describe(exc))
        return ""
    try:
        for way, ask in (("portal", _portal), ("file-manager", _file_manager)):
            try:
                if await ask(bus, target, reveal):
                    return way
            except Exception as exc:
                log.debug("%s could not open %s: %s", way, target, _describe(exc))
        return ""
    finally:
        bus.disconnect()


async def _portal(bus: Any, target: Path, reveal: bool) -> bool:
    """OpenURI for a file or a folder itself. OpenDirectory (given the file as a
    descriptor) shows the folder the file is in, so it serves `reveal`: for a folder it
    would show the folder's parent."""
    if not reveal:
        return await _succeeds(bus, PORTAL, PORTAL_PATH, OPEN_URI, "OpenURI", "ssa{sv}",
                               ["", target.as_uri(), {}])
    flags = os.O_RDONLY | getattr(os, "O_PATH", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(target, flags)
    try:
        return await _succeeds(bus, PORTAL, PORTAL_PATH, OPEN_URI, "OpenDirectory",
                               "sha{sv}", ["", 0, {}], unix_fds=[fd])
    finally:
        os.close(fd)


async def _file_manager(bus: Any, target: Path, reveal: bool) -> bool:
    member = "ShowFolders" if target.is_dir() and not reveal else "ShowItems"
    return await _succeeds(bus, FILE_MANAGER, FILE_MANAGER_PATH, FILE_MANAGER, member, "ass",
                           [[target.as_uri()], ""])


async def _succeeds(bus: Any, destination: str, path: str, interface: str, member: str,
                    signature: str, body: list[Any], unix_fds: list[int] | None = None) -> bool:
    from dbus_fast import DBusError

    from sloth_tray.desktop.bus import call

    try:
        await call(bus, destination, path, interface, member, signature, body,
                   unix_fds=unix_fds or [], timeout=CALL_TIMEOUT)
    except DBusError as exc:
        log.debug("%s.%s: %s %s", interface, member, exc.type, exc.text)
        return False
    return True
