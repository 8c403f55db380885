"""Desktop notifications. On Linux (and other freedesktop desktops) they go to the
session's org.freedesktop.Notifications service over D-Bus, with buttons where the
server draws them; elsewhere they go through another notifier (pystray's); where the
desktop has no notification service they go to the log, which says so once.

`notify()` never raises and may be called from any thread: the D-Bus work happens on
one thread of its own, blocked on the bus socket, so an idle Notifier never wakes up.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Protocol

log = logging.getLogger("sloth_tray")

APP_NAME = "sloth-tray"
SERVICE = "org.freedesktop.Notifications"
SERVICE_PATH = "/org/freedesktop/Notifications"
CALL_TIMEOUT = 10.0  # a server that does not answer in this long is taken as absent
REMEMBERED = 64  # notifications whose buttons may still be clicked; older ones are forgotten
URGENCY_NORMAL = 1

Actions = Sequence[tuple[str, str]]  # (key, label): the key comes back when clicked
OnAction = Callable[[str], None]

FAILURE_ACTIONS: tuple[tuple[str, str], ...] = (("retry", "Retry"), ("log", "Show log"))

_NO_SERVER_ERRORS = ("org.freedesktop.DBus.Error.ServiceUnknown",
                     "org.freedesktop.DBus.Error.NameHasNoOwner")


class Notifies(Protocol):
    """What the app needs from any notifier."""

    def notify(self, title: str, body: str, actions: Actions = (),
               on_action: OnAction | None = None) -> None: ...


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
        self._sending = asyncio.Lock()  # one at a time, in the order they were asked for
        self._tasks: set[asyncio.Task] = set()
        self._waiting: OrderedDict[int, tuple[OnAction, frozenset[str]]] = OrderedDict()

    # -- any thread ---------------------------------------------------------------------

    def notify(self, title: str, body: str, actions: Actions = (),
               on_action: OnAction | None = None) -> None:
        """Show a notification; `on_action(key)` is called (on a thread of its own) when
        one of `actions` is clicked, at most once per notification."""
        try:
            loop = self._own_loop()
            if loop is None:
                _to_log(title, body)
                return
            loop.call_soon_threadsafe(self._start_sending, title, body, tuple(actions),
                                      on_action)
        except Exception as exc:  # a thread that cannot start, a loop closed under us
            self._say_once("broken", f"desktop notifications are off ({_describe(exc)}); "
                           "they go to this log")
            _to_log(title, body)

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

    def _start_sending(self, title: str, body: str, actions: Actions,
                       on_action: OnAction | None) -> None:
        task = asyncio.get_running_loop().create_task(
            self._send(title, body, actions, on_action))
        self._tasks.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(self._tasks.discard)

    async def _send(self, title: str, body: str, actions: Actions,
                    on_action: OnAction | None) -> None:
        async with self._sending:
            delivered = False
            try:
                delivered = await self._deliver(title, body, actions, on_action)
            except _NoServer as exc:
                self._say_once("no-server", "desktop notifications are off: nothing on the "
                               f"session bus shows them ({exc}); they go to this log")
            except _Refused as exc:
                self._say_once("refused", f"the desktop's notification service refused a "
                               f"notification ({exc}); refused ones go to this log")
            except TimeoutError:
                self._say_once("timeout", "the desktop's notification service did not "
                               f"answer within {CALL_TIMEOUT:g} s; unanswered notifications "
                               "go to this log")
            except Exception as exc:  # the connection broke mid-call, a malformed reply
                self._forget_bus()
                self._say_once("failed", f"a desktop notification failed ({_describe(exc)}); "
                               "notifications that fail go to this log")
            if not delivered:
                _to_log(title, body)

    async def _deliver(self, title: str, body: str, actions: Actions,
                       on_action: OnAction | None) -> bool:
        from dbus_fast import Variant

        bus = await self._connected()
        if bus is None:
            return False
        buttons = actions and on_action is not None and "actions" in await self._capabilities(bus)
        flat = [part for key, label in actions for part in (key, label)] if buttons else []
        hints = {"urgency": Variant("y", URGENCY_NORMAL),
                 "desktop-entry": Variant("s", APP_NAME)}
        [notification_id] = await _call(bus, SERVICE, SERVICE_PATH, SERVICE, "Notify",
                                        "susssasa{sv}i",
                                        [APP_NAME, 0, "", title, body, flat, hints, -1])
        if flat and on_action is not None:
            self._waiting[notification_id] = (on_action, frozenset(key for key, _ in actions))
            while len(self._waiting) > REMEMBERED:
                self._waiting.popitem(last=False)
        return True

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

    def _on_message(self, message: Any) -> None:
        from dbus_fast import MessageType

        if message.message_type is not MessageType.SIGNAL or message.interface != SERVICE:
            return
        if message.member == "ActionInvoked" and message.signature == "us":
            notification_id, key = message.body
            waiting = self._waiting.get(notification_id)
            if waiting is None or key not in waiting[1]:
                return  # not ours, or a click on the body ("default") we offered nothing for
            del self._waiting[notification_id]
            # Its own thread: the action may take a while (open a file, touch the queue),
            # and the bus must keep answering meanwhile.
            threading.Thread(target=_run_action, args=(waiting[0], key),
                             name="notification-action", daemon=True).start()
        elif message.member == "NotificationClosed" and message.signature == "uu":
            self._waiting.pop(message.body[0], None)

def _run_action(on_action: OnAction, key: str) -> None:
    try:
        on_action(key)
    except Exception as exc:
        log.error("the notification button %r failed: %s", key, exc)


class _Refused(Exception):
    """An error reply; the message is the service's own text."""


class _NoServer(_Refused):
    """Nobody owns the name and nothing on the bus can be started to own it."""


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
    It has no buttons: `actions` are left out, and the body says what happened. `show`
    runs on the caller's thread."""

    def __init__(self, show: Callable[[str, str], object] | None) -> None:
        self._show = show
        self._say_once = _SaysOnce()

    def notify(self, title: str, body: str, actions: Actions = (),
               on_action: OnAction | None = None) -> None:
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
