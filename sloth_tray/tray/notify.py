"""Desktop notifications. On Linux (and other freedesktop desktops) they go to the
session's org.freedesktop.Notifications service over D-Bus, with buttons where the
server draws them; elsewhere they go through another notifier (pystray's); where the
desktop has no notification service they go to the log, which says so once.

`notify()` never raises and may be called from any thread: the D-Bus work happens on
one thread of its own, blocked on the bus socket, so an idle Notifier never wakes up.
A notification given a `key` is one notification for its whole life: notified again,
it is updated in place (replaces_id), at most once per UPDATE_GAP with the newest text;
`withdraw(key)` closes it; once closed, by anyone, its key shows nothing more.
Notifications carry the app's own icon, drawn into the user's cache.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("sloth_tray")

APP_NAME = "sloth-tray"
SERVICE = "org.freedesktop.Notifications"
SERVICE_PATH = "/org/freedesktop/Notifications"
CALL_TIMEOUT = 10.0  # a server that does not answer in this long is taken as absent
# A server that did not answer (or died mid-call) is not asked again for this long: the
# notifications meanwhile go to the log, each at no cost; the next one after it asks.
ASK_AGAIN_AFTER = 60.0
EARLY_KEPT = 8  # clicks kept that came before their notification's id was known
REMEMBERED = 64  # notifications whose buttons may still be clicked; older ones are forgotten
URGENCY_NORMAL = 1
# A notification updated in place is sent again at most this often, with the newest
# text: a burst of changes is a few redraws, and no server is asked a hundred times.
UPDATE_GAP = 1.0
ICON_SIZE = 64
ICON_FILE = "sloth-tray.png"

Actions = Sequence[tuple[str, str]]  # (key, label): the key comes back when clicked
OnAction = Callable[[str], None]
OnClosed = Callable[[], None]

_NO_SERVER_ERRORS = ("org.freedesktop.DBus.Error.ServiceUnknown",
                     "org.freedesktop.DBus.Error.NameHasNoOwner")
# The bus's word for a server that never answered: its start timed out (an activatable
# service that never appears), or it left the bus with our call pending.
_NO_ANSWER_ERRORS = ("org.freedesktop.DBus.Error.TimedOut",
                     "org.freedesktop.DBus.Error.Timeout",
                     "org.freedesktop.DBus.Error.NoReply")


class Notifies(Protocol):
    """What the app needs from any notifier."""

    def notify(self, title: str, body: str, actions: Actions = (),
               on_action: OnAction | None = None, *, key: str | None = None,
               on_closed: OnClosed | None = None) -> None: ...

    def withdraw(self, key: str) -> None: ...


class _SaysOnce:
    """Log each kind of trouble once per notifier, not once per notification."""

    def __init__(self) -> None:
        self._said: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, kind: str, sentence: str) -> None:
        with self._lock:
            if kind in self._said:
                return
            self._said.add(kind)
        log.warning("%s", sentence)


def _to_log(title: str, body: str) -> None:
    log.info("%s: %s", title, body)


class Notifier:
    """Notifications through the freedesktop Notifications service on the session bus."""

    def __init__(self, bus_address: str | None = None) -> None:
        self._bus_address = bus_address  # None: the session bus this process was given
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._say_once = _SaysOnce()
        # Everything below is touched only on the notifier's own thread.
        self._bus: Any = None
        self._icon: str | None = None  # the app icon's URI, once drawn ("": none)
        self._sending = asyncio.Lock()  # one at a time, in the order they were asked for
        self._tasks: set[asyncio.Task] = set()
        self._unnamed = itertools.count(1)  # keys for notifications given none
        self._wanted: dict[str, tuple] = {}  # the newest text of each key, not yet sent
        self._due: set[str] = set()  # keys with a send on its way (it takes the newest)
        self._sent_at: OrderedDict[str, float] = OrderedDict()  # loop time, per key
        self._quiet_until = float("-inf")  # loop time: no server is asked before it
        self._ids: OrderedDict[str, int] = OrderedDict()  # key -> the server's id, while up
        self._keys: dict[int, str] = {}  # and back
        self._on_closed: dict[str, OnClosed] = {}
        self._gone: OrderedDict[str, None] = OrderedDict()  # keys closed: they show no more
        self._waiting: OrderedDict[int, tuple[OnAction, frozenset[str]]] = OrderedDict()
        # Clicks that came while a Notify call was on its way, on no notification known
        # yet: a server may show one, and be clicked, before its reply gets here.
        self._early: list[tuple[int, str]] = []
        self._asking = 0  # Notify calls on their way

    # -- any thread ---------------------------------------------------------------------

    def notify(self, title: str, body: str, actions: Actions = (),
               on_action: OnAction | None = None, *, key: str | None = None,
               on_closed: OnClosed | None = None) -> None:
        """Show a notification; `on_action(key)` is called (on a thread of its own) when
        one of `actions` is clicked, at most once per notification. With a `key`, the
        notification of that key is updated in place while it is up, and nothing is
        shown once it was closed; `on_closed()` is called (on the notifier's thread,
        so it must be quick) when the user or the server closes it."""
        try:
            loop = self._own_loop()
            if loop is None:
                _to_log(title, body)
                return
            loop.call_soon_threadsafe(self._want, key,
                                      (title, body, tuple(actions), on_action, on_closed))
        except Exception as exc:  # a thread that cannot start, a loop closed under us
            self._say_once("broken", f"desktop notifications are off ({_describe(exc)}); "
                           "they go to this log")
            _to_log(title, body)

    def withdraw(self, key: str) -> None:
        """Close the notification of `key` (if it is still up); it shows nothing more."""
        with self._lock:
            loop = self._loop
        if loop is None:
            return  # nothing was ever shown
        try:
            loop.call_soon_threadsafe(self._start, self._close, key)
        except RuntimeError:
            pass  # the loop is closed: so is every notification of ours

    def close(self) -> None:
        """Drop the bus connection and end the notifier's thread."""
        with self._lock:
            self._closed = True
            loop, thread, self._loop = self._loop, self._thread, None
        if loop is None or thread is None:
            return

        def stop() -> None:
            if self._bus is not None:
                self._bus.disconnect()
            loop.stop()

        try:
            loop.call_soon_threadsafe(stop)
        except RuntimeError:
            return  # the loop is already closed
        thread.join(timeout=5)
        if not thread.is_alive():
            loop.close()

    def _own_loop(self) -> asyncio.AbstractEventLoop | None:
        with self._lock:
            if self._closed:
                return None
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="notifications",
                                          daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    # -- the notifier's thread -------------------------------------------------------

    def _start(self, make: Callable[..., Any], *args: Any) -> None:
        task = asyncio.get_running_loop().create_task(make(*args))
        self._tasks.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(self._tasks.discard)

    def _want(self, key: str | None, wanted: tuple) -> None:
        """Keep the newest text of `key`, and see that it is sent: now, or UPDATE_GAP
        after the last send of the same key."""
        key = f"#{next(self._unnamed)}" if key is None else key
        if key in self._gone:
            return  # closed: an update must not bring it back
        self._wanted[key] = wanted
        if key in self._due:
            return
        self._due.add(key)
        loop = asyncio.get_running_loop()
        wait = self._sent_at.get(key, float("-inf")) + UPDATE_GAP - loop.time()
        if wait > 0:
            loop.call_later(wait, self._start, self._send, key)
        else:
            self._start(self._send, key)

    async def _send(self, key: str) -> None:
        async with self._sending:
            self._due.discard(key)
            wanted = self._wanted.pop(key, None)
            if wanted is None or key in self._gone:
                return
            self._sent_at[key] = asyncio.get_running_loop().time()
            _forget_oldest(self._sent_at)
            title, body, actions, on_action, on_closed = wanted
            delivered = False
            if asyncio.get_running_loop().time() < self._quiet_until:
                _to_log(title, body)  # the server did not answer a moment ago
                return
            try:
                delivered = await self._deliver(key, title, body, actions, on_action,
                                                on_closed)
            except _NoServer as exc:
                self._say_once("no-server", "desktop notifications are off: nothing on the "
                               f"session bus shows them ({exc}); they go to this log")
            except _Refused as exc:
                self._say_once("refused", f"the desktop's notification service refused a "
                               f"notification ({exc}); refused ones go to this log")
            except (TimeoutError, _NoAnswer) as exc:
                self._quiet_until = asyncio.get_running_loop().time() + ASK_AGAIN_AFTER
                why = str(exc) or f"no reply in {CALL_TIMEOUT:g} s"
                self._say_once("timeout", "the desktop's notification service did not "
                               f"answer ({why}); notifications go to this log, and it is "
                               f"asked again after {ASK_AGAIN_AFTER:g} s")
            except Exception as exc:  # the connection broke mid-call, a malformed reply
                self._forget_bus()
                self._say_once("failed", f"a desktop notification failed ({_describe(exc)}); "
                               "notifications that fail go to this log")
            if not delivered:
                _to_log(title, body)

    async def _deliver(self, key: str, title: str, body: str, actions: Actions,
                       on_action: OnAction | None, on_closed: OnClosed | None) -> bool:
        from dbus_fast import Variant

        bus = await self._connected()
        if bus is None:
            return False
        buttons = actions and on_action is not None and "actions" in await self._capabilities(bus)
        flat = [part for action, label in actions for part in (action, label)] if buttons else []
        # No "desktop-entry" hint: pip installs no .desktop file for a server to find.
        hints = {"urgency": Variant("y", URGENCY_NORMAL)}
        replaces = self._ids.get(key, 0)
        if replaces and flat and on_action is not None:
            # Its new buttons answer from now on: the server may show the new text, and
            # be clicked, before its reply to this call comes back here.
            self._waiting[replaces] = (on_action,
                                       frozenset(action for action, _ in actions))
        self._asking += 1
        try:
            [notification_id] = await _call(bus, SERVICE, SERVICE_PATH, SERVICE, "Notify",
                                            "susssasa{sv}i",
                                            [APP_NAME, replaces, self._app_icon(), title,
                                             body, flat, hints, -1])
        finally:
            self._asking -= 1
        if replaces and notification_id != replaces:  # the old one was gone meanwhile
            self._keys.pop(replaces, None)
            self._waiting.pop(replaces, None)
        if flat and on_action is not None:
            self._waiting[notification_id] = (on_action,
                                              frozenset(action for action, _ in actions))
            self._waiting.move_to_end(notification_id)
            _forget_oldest(self._waiting)
            for early in [click for click in self._early if click[0] == notification_id]:
                self._early.remove(early)
                self._act(*early)
        else:
            self._waiting.pop(notification_id, None)  # its update has no buttons
        if key not in self._gone:  # closed while we asked: nothing more to follow
            self._ids[key] = notification_id
            self._ids.move_to_end(key)
            self._keys[notification_id] = key
            if on_closed is not None:
                self._on_closed[key] = on_closed
            while len(self._ids) > REMEMBERED:
                old_key, old_id = self._ids.popitem(last=False)
                self._keys.pop(old_id, None)
                self._on_closed.pop(old_key, None)
        return True

    async def _close(self, key: str) -> None:
        async with self._sending:  # after any send of it already asked for: its id is known
            self._went(key)
            notification_id = self._ids.pop(key, None)
            if notification_id is None:
                return
            self._keys.pop(notification_id, None)
            self._waiting.pop(notification_id, None)
            if self._bus is None or not self._bus.connected:
                return
            try:
                await _call(self._bus, SERVICE, SERVICE_PATH, SERVICE, "CloseNotification",
                            "u", [notification_id])
            except Exception as exc:  # closed by the user first, say: nothing to do
                log.debug("closing notification %d: %s", notification_id, _describe(exc))

    def _went(self, key: str) -> None:
        """`key` is closed for good: forget what was still to be sent, and who to tell."""
        self._gone[key] = None
        _forget_oldest(self._gone, 4 * REMEMBERED)
        self._wanted.pop(key, None)
        self._on_closed.pop(key, None)

    def _app_icon(self) -> str:
        if self._icon is None:
            try:
                self._icon = app_icon()
            except Exception as exc:  # no cache folder, a full disk, no Pillow
                self._say_once("icon", f"notifications go without the app's icon "
                               f"({_describe(exc)})")
                self._icon = ""
        return self._icon

    async def _capabilities(self, bus: Any) -> list[str]:
        try:
            [capabilities] = await _call(bus, SERVICE, SERVICE_PATH, SERVICE,
                                         "GetCapabilities", "", [])
        except _NoServer:
            raise
        except _Refused:
            return []  # a server that will not say what it can: no buttons, to be safe
        return list(capabilities)

    async def _connected(self) -> Any:
        """The bus, connected and listening for clicks; None (said once) when there is none."""
        if self._bus is not None and self._bus.connected:
            return self._bus
        self._bus = None
        try:
            bus = await asyncio.wait_for(session_bus(self._bus_address), CALL_TIMEOUT)
        except ImportError:
            self._say_once("no-library", "desktop notifications are off: the dbus-fast "
                           "package is not installed; they go to this log")
            return None
        except Exception as exc:
            self._say_once("no-bus", f"desktop notifications are off: no session bus "
                           f"({_describe(exc)}); they go to this log")
            return None
        bus.add_message_handler(self._on_message)
        rule = (f"type='signal',sender='{SERVICE}',interface='{SERVICE}',"
                f"path='{SERVICE_PATH}'")
        try:
            await _call(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                        "org.freedesktop.DBus", "AddMatch", "s", [rule])
        except BaseException:
            bus.disconnect()
            raise
        self._bus = bus
        return bus

    def _forget_bus(self) -> None:
        if self._bus is not None:
            self._bus.disconnect()
            self._bus = None

    def _act(self, notification_id: int, key: str) -> bool:
        """Run the action a click on `key` of notification `notification_id` asks for;
        False when it is none of ours (or a click on the body, "default", we offered
        nothing for)."""
        waiting = self._waiting.get(notification_id)
        if waiting is None or key not in waiting[1]:
            return False
        del self._waiting[notification_id]
        # Its own thread: the action may take a while (open a file, touch the queue),
        # and the bus must keep answering meanwhile.
        threading.Thread(target=_run_action, args=(waiting[0], key),
                         name="notification-action", daemon=True).start()
        return True

    def _on_message(self, message: Any) -> None:
        from dbus_fast import MessageType

        if message.message_type is not MessageType.SIGNAL or message.interface != SERVICE:
            return
        if message.member == "ActionInvoked" and message.signature == "us":
            notification_id, key = message.body
            if not self._act(notification_id, key) and self._asking:
                self._early.append((notification_id, key))  # answered once the reply is in
                del self._early[:-EARLY_KEPT]
        elif message.member == "NotificationClosed" and message.signature == "uu":
            notification_id = message.body[0]
            self._waiting.pop(notification_id, None)
            key = self._keys.pop(notification_id, None)
            if key is None or self._ids.get(key) != notification_id:
                return  # not ours, or one we closed ourselves
            del self._ids[key]
            on_closed = self._on_closed.get(key)
            self._went(key)
            if on_closed is not None:
                try:
                    on_closed()
                except Exception:  # the caller's bug is its own
                    log.exception("on_closed of a notification failed")


def _forget_oldest(remembered: OrderedDict, keep: int = REMEMBERED) -> None:
    while len(remembered) > keep:
        remembered.popitem(last=False)


def app_icon(folder: Path | None = None) -> str:
    """The app's icon as a file:// URI (what a server takes as app_icon): the tray's
    idle sloth, drawn once into the user's cache folder (pip installs no icon file, and
    no icon theme knows the app). Raises OSError when it cannot be written."""
    from sloth_tray.tray.icons import Look, render

    if folder is None:
        cache = os.environ.get("XDG_CACHE_HOME", "")
        folder = (Path(cache) if os.path.isabs(cache) else Path.home() / ".cache") / APP_NAME
    path = folder / ICON_FILE
    drawn = io.BytesIO()
    render(Look.IDLE, ICON_SIZE).save(drawn, "PNG")
    try:
        if path.read_bytes() == drawn.getvalue():
            return path.as_uri()
    except OSError:
        pass
    folder.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_bytes(drawn.getvalue())
    os.replace(partial, path)  # whole or not at all: a server may read it any time
    return path.as_uri()


def _run_action(on_action: OnAction, key: str) -> None:
    try:
        on_action(key)
    except Exception as exc:
        log.error("the notification button %r failed: %s", key, exc)


class _Refused(Exception):
    """An error reply; the message is the service's own text."""


class _NoServer(_Refused):
    """Nobody owns the name and nothing on the bus can be started to own it."""


class _NoAnswer(Exception):
    """The bus says the server never answered: it did not start in time, or died."""


async def _call(bus: Any, destination: str, path: str, interface: str, member: str,
                signature: str, body: list[Any]) -> list[Any]:
    """A method call's reply body, with a deadline. Raises _NoServer or _Refused for an
    error reply."""
    from dbus_fast import DBusError

    from sloth_tray.desktop.bus import call

    try:
        return await call(bus, destination, path, interface, member, signature, body,
                          timeout=CALL_TIMEOUT)
    except DBusError as exc:
        if exc.type in _NO_ANSWER_ERRORS:
            raise _NoAnswer(exc.text or exc.type) from None
        refusal = _NoServer if exc.type in _NO_SERVER_ERRORS else _Refused
        raise refusal(exc.text or exc.type) from None


# -- the session bus ----------------------------------------------------------------------

async def session_bus(address: str | None = None, *, unix_fds: bool = False) -> Any:
    """A connected dbus-fast MessageBus on the session bus (ImportError without dbus-fast;
    OSError or dbus-fast's errors when there is no bus to reach)."""
    from dbus_fast.aio import MessageBus

    from sloth_tray.desktop import session_address

    address = address or session_address()
    if address is None:
        raise LookupError("DBUS_SESSION_BUS_ADDRESS is not set")
    from sloth_tray.desktop.bus import tolerate_full_socket

    return tolerate_full_socket(
        await MessageBus(bus_address=address, negotiate_unix_fd=unix_fds).connect())


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


# -- elsewhere ----------------------------------------------------------------------------

class CallbackNotifier:
    """The same interface over a plain `show(title, body)`, such as a tray surface's own
    notification (pystray's, on macOS and Windows), or over nothing (None): the log.
    It has no buttons: `actions` are left out, and the body says what happened. It
    cannot update or close what it showed: a `key` is shown the first time only.
    `show` runs on the caller's thread."""

    def __init__(self, show: Callable[[str, str], object] | None) -> None:
        self._show = show
        self._say_once = _SaysOnce()
        self._keys: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def notify(self, title: str, body: str, actions: Actions = (),
               on_action: OnAction | None = None, *, key: str | None = None,
               on_closed: OnClosed | None = None) -> None:
        if key is not None:
            with self._lock:
                if key in self._keys:
                    return
                self._keys[key] = None
                _forget_oldest(self._keys, 4 * REMEMBERED)
        show_with = self._show
        if show_with is None:
            _to_log(title, body)
            return

        try:
            show_with(title, body)
        except Exception as exc:  # no notification service on this desktop
            self._say_once("failed", f"desktop notifications are off ({_describe(exc)}); "
                           "they go to this log")
            _to_log(title, body)

    def withdraw(self, key: str) -> None:
        """Nothing to do: a notification shown this way stays until the desktop drops it."""
