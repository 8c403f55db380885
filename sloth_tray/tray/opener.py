"""Open a file or folder in the desktop's own app, never with a traceback.

On Linux (and other freedesktop desktops) each way is tried in turn: the desktop portal
(org.freedesktop.portal.OpenURI: OpenFile for a file, so a log opens in its app), the
file manager (org.freedesktop.FileManager1; only for a folder, or a file to show in its
folder: it never opens a file), then
the programs: `xdg-open`, `gio open` and KDE's own (`kde-open`, `kde-open5`, `kioclient
exec`, `kioclient5 exec`; before gio on Plasma). A program that fails at once hands over
to the next. macOS has `open`, Windows os.startfile. When nothing can open it, the user
is told the path to open by hand and what was tried (a notification, or the log).

A tray host may hand over an activation token for the click (Plasma calls
ProvideXdgActivationToken first): without it, Wayland keeps the focus from the window
that opens. It goes on to whatever opens: the portal's `activation_token` option, the
file manager's startup id, XDG_ACTIVATION_TOKEN (and under X11 DESKTOP_STARTUP_ID) in a
program's environment.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sloth_tray.daemon import procs
from sloth_tray.tray.notify import Notifies, _describe, session_bus
from sloth_tray.tray.presenter import tilde

log = logging.getLogger("sloth_tray")

PORTAL = "org.freedesktop.portal.Desktop"
PORTAL_PATH = "/org/freedesktop/portal/desktop"
OPEN_URI = "org.freedesktop.portal.OpenURI"
FILE_MANAGER = "org.freedesktop.FileManager1"
FILE_MANAGER_PATH = "/org/freedesktop/FileManager1"
# The first call may have D-Bus start the portal or the file manager, which takes a
# while; a hung one must not leave the user waiting forever.
CALL_TIMEOUT = 20.0
NOT_RUNNING = ("org.freedesktop.DBus.Error.ServiceUnknown",
               "org.freedesktop.DBus.Error.NameHasNoOwner")
# The bus's word for a service that never answered: it did not start in time (an
# activatable one that never appears), or it left with the call pending.
NO_ANSWER = ("org.freedesktop.DBus.Error.TimedOut", "org.freedesktop.DBus.Error.Timeout",
             "org.freedesktop.DBus.Error.NoReply")
# A service that did not answer is passed over for this long (what is opened meanwhile
# goes to the next way at once); the first open after it asks it again.
ASK_AGAIN_AFTER = 60.0
_unanswered: dict[str, float] = {}  # bus name -> time.monotonic() it may be asked again
BOTH_SERVICES = "the desktop portal and the file manager"
# A program that cannot open the path says so at once (no handler, no display); one still
# running after this long has opened it: some stay until the app they started quits.
SETTLE_SECONDS = 5.0
# (program, its arguments before the path)
XDG_OPEN = ("xdg-open", ())
GIO = ("gio", ("open",))
KDE_TOOLS = (("kde-open", ()), ("kde-open5", ()),  # Plasma 6's names, then Plasma 5's
             ("kioclient", ("exec",)), ("kioclient5", ("exec",)))
ACTIVATION_VARIABLES = ("XDG_ACTIVATION_TOKEN", "DESKTOP_STARTUP_ID")
TITLE = "sloth-tray"


def open_path(path: str | os.PathLike[str], notifier: Notifies | None = None, *,
              activation_token: str | None = None) -> None:
    """Open a file (in its app) or a folder (in the file manager). Returns at once; the
    work happens on a thread of its own. Never raises. `activation_token`: the one the
    tray host gave for the click, if any."""
    _in_background(open_now, path, notifier, activation_token)


def reveal_path(path: str | os.PathLike[str], notifier: Notifies | None = None, *,
                activation_token: str | None = None) -> None:
    """Show a file in its folder, as `reveal_now` does, on a thread of its own."""
    _in_background(reveal_now, path, notifier, activation_token)


def open_now(path: str | os.PathLike[str], notifier: Notifies | None = None, *,
             activation_token: str | None = None) -> str:
    """Open `path` on this thread (which must not be running an asyncio loop).
    Returns the way that took it ("portal", "file-manager", "xdg-open", "gio",
    "kde-open", "kde-open5", "kioclient", "kioclient5", "open", "startfile"), or ""
    when none did and the user has been told."""
    return _open(path, notifier, reveal=False, token=activation_token)


def reveal_now(path: str | os.PathLike[str], notifier: Notifies | None = None, *,
               activation_token: str | None = None) -> str:
    """Show a file in its folder (selected, where the file manager can), on this
    thread; returns the way taken, as `open_now` does."""
    return _open(path, notifier, reveal=True, token=activation_token)


def _in_background(how: Callable[..., str], path: str | os.PathLike[str],
                   notifier: Notifies | None, token: str | None) -> None:
    try:
        threading.Thread(target=how, args=(path, notifier),
                         kwargs={"activation_token": token}, name="opener",
                         daemon=True).start()
    except Exception as exc:  # no thread to be had
        _cannot(path, _describe(exc), notifier)


class Tried:
    """Each way tried and how it ended, for the one sentence the user reads."""

    def __init__(self) -> None:
        self.failed: list[str] = []
        self.missing: list[str] = []

    def fail(self, way: str, how: str) -> None:
        self.failed.append(f"{way} ({how})")

    def absent(self, program: str) -> None:
        self.missing.append(program)

    def sentence(self) -> str:
        parts = []
        if self.failed:
            parts.append("tried " + ", ".join(self.failed))
        if self.missing:
            parts.append("not installed: " + ", ".join(self.missing))
        return "; ".join(parts) or "nothing here opens files"


def _open(path: str | os.PathLike[str], notifier: Notifies | None, *, reveal: bool,
          token: str | None) -> str:
    try:
        target = Path(path).expanduser().absolute()
        if not target.exists():
            _cannot(target, "it does not exist", notifier)
            return ""
        tried = Tried()
        if sys.platform == "darwin":
            command = ["open", "-R", str(target)] if reveal else ["open", str(target)]
            way = _run_programs([("open", command)], target, notifier, token, tried)
        elif os.name == "nt":
            return _start_windows(target, notifier, reveal=reveal)
        else:  # a freedesktop desktop
            shown = target.parent if reveal and not target.is_dir() else target
            way = (_over_dbus(target, reveal=reveal, token=token, tried=tried)
                   or _run_programs(_commands(shown, os.environ), target, notifier, token,
                                    tried))
        if not way:
            _cannot(target, tried.sentence(), notifier)
        return way
    except Exception as exc:  # anything unforeseen still ends in one sentence
        _cannot(path, _describe(exc), notifier)
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

def _commands(shown: Path, environ: Mapping[str, str]) -> list[tuple[str, list[str]]]:
    """(program, command) for each program to try, in order. xdg-open first: it hands
    over to the desktop's own tool. On Plasma KDE's tools come before gio, which may
    have no handler there (gio's choice is GNOME's)."""
    desktops = environ.get("XDG_CURRENT_DESKTOP", "").upper().split(":")
    order = [XDG_OPEN, *KDE_TOOLS, GIO] if "KDE" in desktops else [XDG_OPEN, GIO, *KDE_TOOLS]
    return [(name, [name, *prefix, str(shown)]) for name, prefix in order]


def _run_programs(commands: list[tuple[str, list[str]]], target: Path,
                  notifier: Notifies | None, token: str | None, tried: Tried) -> str:
    """The first program that opens it (its name), trying each in turn; "" when none."""
    for name, command in commands:
        program = shutil.which(command[0])
        if program is None:
            tried.absent(name)
            continue
        failure = _start(name, [program, *command[1:]], target, notifier, token)
        if failure is None:
            return name
        tried.fail(name, failure)
    return ""


def _start(name: str, command: list[str], target: Path, notifier: Notifies | None,
           token: str | None) -> str | None:
    """Start an opener detached from us (own session, no terminal output) and wait the
    first moments for it to fail: how it failed, or None when it opened the path (or is
    still at it: a thread then waits for it, blocked, so a late failure is told)."""
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True,
                                 env=_opener_environment(os.environ, token))
    except OSError as exc:
        log.debug("%s could not start: %s", name, exc)
        return f"could not start: {exc.strerror or exc}"
    try:
        status = child.wait(timeout=SETTLE_SECONDS)
    except subprocess.TimeoutExpired:
        threading.Thread(target=_tell_failure, args=(child, name, target, notifier),
                         name=f"{name}-wait", daemon=True).start()
        return None
    return None if status == 0 else _ended(status)


def _opener_environment(environ: Mapping[str, str], token: str | None) -> dict[str, str]:
    """The environment a job would get (so a frozen bundle's libraries stay out of it),
    with the click's activation token: XDG_ACTIVATION_TOKEN for Wayland's
    xdg-activation, and outside Wayland also DESKTOP_STARTUP_ID, the startup id X11's
    toolkits read. A token good for the app's own start is spent: never passed on."""
    env = procs.job_environment(environ)
    for name in ACTIVATION_VARIABLES:
        env.pop(name, None)
    if token:
        env["XDG_ACTIVATION_TOKEN"] = token
        if not env.get("WAYLAND_DISPLAY"):
            env["DESKTOP_STARTUP_ID"] = token
    return env


def _ended(status: int) -> str:
    return f"killed by signal {-status}" if status < 0 else f"exit status {status}"


def _tell_failure(child: subprocess.Popen, name: str, target: Path,
                  notifier: Notifies | None) -> None:
    status = child.wait()  # some openers stay until the app they started quits
    if status != 0:
        _cannot(target, f"{name} failed ({_ended(status)})", notifier)


def _start_windows(target: Path, notifier: Notifies | None, *, reveal: bool) -> str:
    shown = target.parent if reveal and not target.is_dir() else target
    try:
        os.startfile(str(shown))  # type: ignore[attr-defined]  # noqa: S606
    except OSError as exc:  # no app registered for this kind of file
        _cannot(target, _describe(exc), notifier)
        return ""
    return "startfile"


# -- D-Bus --------------------------------------------------------------------------------

def _over_dbus(target: Path, *, reveal: bool, token: str | None, tried: Tried) -> str:
    try:
        return asyncio.run(_ask_desktop(target, reveal=reveal, token=token, tried=tried))
    except Exception as exc:  # no dbus-fast, a loop already running on this thread
        log.debug("opening %s over D-Bus: %s", target, _describe(exc))
        tried.fail(BOTH_SERVICES, _describe(exc))
        return ""


async def _ask_desktop(target: Path, *, reveal: bool, token: str | None, tried: Tried) -> str:
    try:
        # unix_fds: the portal's OpenDirectory takes the file as an open descriptor.
        bus = await asyncio.wait_for(session_bus(unix_fds=True), CALL_TIMEOUT)
    except Exception as exc:
        log.debug("no session bus to open %s: %s", target, _describe(exc))
        tried.fail(BOTH_SERVICES, "no session bus")
        return ""
    ways = [("portal", "the desktop portal", PORTAL, _portal)]
    if reveal or target.is_dir():  # it shows a file in its folder, never opens one
        ways.append(("file-manager", "the file manager", FILE_MANAGER, _file_manager))
    try:
        for way, who, name, ask in ways:
            if _unanswered.get(name, float("-inf")) > time.monotonic():
                tried.fail(who, "did not answer a moment ago")
                continue
            try:
                await ask(bus, target, reveal, token)
                return way
            except Exception as exc:
                if _no_answer(exc):
                    log.warning("%s did not answer (%s); asked again after %g s", name,
                                _dbus_failure(exc), ASK_AGAIN_AFTER)
                    _unanswered[name] = time.monotonic() + ASK_AGAIN_AFTER
                log.debug("%s could not open %s: %s", way, target, _describe(exc))
                tried.fail(who, _dbus_failure(exc))
        return ""
    finally:
        bus.disconnect()


def _no_answer(exc: Exception) -> bool:
    from dbus_fast import DBusError

    return isinstance(exc, TimeoutError) or (isinstance(exc, DBusError)
                                             and exc.type in NO_ANSWER)


def _dbus_failure(exc: Exception) -> str:
    from dbus_fast import DBusError

    if isinstance(exc, DBusError):
        return "not running" if exc.type in NOT_RUNNING else (exc.text or exc.type)
    if isinstance(exc, TimeoutError):
        return f"no answer in {CALL_TIMEOUT:g} s"
    return _describe(exc)


async def _portal(bus: Any, target: Path, reveal: bool, token: str | None) -> None:
    """OpenURI for a folder itself; OpenFile for a file, given as a descriptor (the
    portal's way to open a file in its app: a log is read, not shown in its folder).
    OpenDirectory (given the file as a descriptor) shows the folder the file is in, so
    it serves `reveal`: for a folder it would show the folder's parent."""
    from dbus_fast import Variant

    options = {"activation_token": Variant("s", token)} if token else {}
    if not reveal and target.is_dir():
        await _call(bus, PORTAL, PORTAL_PATH, OPEN_URI, "OpenURI", "ssa{sv}",
                    ["", target.as_uri(), options])
        return
    method = "OpenDirectory" if reveal else "OpenFile"
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
    if reveal:
        flags |= getattr(os, "O_PATH", 0)  # only where it is: nothing is read
    fd = os.open(target, flags)
    try:
        await _call(bus, PORTAL, PORTAL_PATH, OPEN_URI, method, "sha{sv}",
                    ["", 0, options], unix_fds=[fd])
    finally:
        os.close(fd)


async def _file_manager(bus: Any, target: Path, reveal: bool, token: str | None) -> None:
    """ShowFolders or ShowItems; the token is the startup id the file manager's window
    activates with."""
    member = "ShowFolders" if target.is_dir() and not reveal else "ShowItems"
    await _call(bus, FILE_MANAGER, FILE_MANAGER_PATH, FILE_MANAGER, member, "ass",
                [[target.as_uri()], token or ""])


async def _call(bus: Any, destination: str, path: str, interface: str, member: str,
                signature: str, body: list[Any], unix_fds: list[int] | None = None) -> None:
    """The call, or DBusError (TimeoutError past CALL_TIMEOUT)."""
    from sloth_tray.desktop.bus import call

    await call(bus, destination, path, interface, member, signature, body,
               unix_fds=unix_fds or [], timeout=CALL_TIMEOUT)
