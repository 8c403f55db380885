"""The session bus, on an asyncio loop that runs on the thread that calls `run`.

One thread does everything: the loop serves the bus, runs what other threads `post`,
and sleeps in epoll with no timer when nothing happens (waiting costs nothing).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from dbus_fast import DBusError, Message, MessageType
from dbus_fast.aio import MessageBus

from sloth_tray.desktop import session_address
from sloth_tray.errors import SlothError

log = logging.getLogger("sloth_tray")

DBUS_NAME = "org.freedesktop.DBus"
DBUS_PATH = "/org/freedesktop/DBus"

Start = Callable[[MessageBus], Awaitable[None]]


class ClosedByUs(logging.Filter):
    """After our own disconnect, dbus-fast still hands the messages already read to
    their handlers, and a method call's reply then meets the closed socket (EBADF):
    it logs that with a traceback. The connection was closed on purpose, by us; the
    caller (a panel asking for the menu as the app quits) is told by the bus that we
    are gone. Nothing there is the user's to read."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (isinstance(exc, OSError) and exc.errno == errno.EBADF)


CLOSED_BY_US = ClosedByUs()
# Where dbus-fast says a handler failed: its reader, the bus itself for a method
# call's handler, or the reply (which is what meets the closed socket).
HANDLER_LOGS = ("dbus_fast.aio.message_reader", "dbus_fast.message_bus",
                "dbus_fast.send_reply")


def describe(call: Callable[..., object]) -> str:
    return getattr(call, "__qualname__", None) or repr(call)


def guarded(call: Callable[[], object], what: str = "") -> None:
    """Run `call`; an exception is logged as what it is and never ends the loop."""
    try:
        call()
    except Exception:
        log.exception("%s failed", what or describe(call))


async def connect(address: str | None = None) -> MessageBus:
    """The session bus (or the bus at `address`), connected; SlothError when unreachable.
    Found as notifications and the opener find it (session_address)."""
    address = address or session_address()
    try:
        bus = await MessageBus(bus_address=address).connect()
    except Exception as exc:  # OSError, AuthError, InvalidAddressError, ...: all mean "no bus"
        where = address or "the address in DBUS_SESSION_BUS_ADDRESS"
        raise SlothError(f"could not connect to the session D-Bus at {where}: {exc}") from exc
    return tolerate_full_socket(bus)


class _WaitWhenFull:
    """A socket whose send() says "nothing sent yet" where the kernel says EAGAIN.

    dbus-fast's writer sends straight away and takes any error for a lost
    connection; a socket buffer that is merely full (a panel asking for all the
    icon's pixmaps at once, a bus daemon slower for a moment) then cost the
    whole connection, and the icon left the panel. With nothing sent, the
    writer waits until the socket is writable, as it does for a partial send.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def send(self, data, *flags) -> int:
        try:
            return self._sock.send(data, *flags)
        except (BlockingIOError, InterruptedError):
            return 0

    def sendmsg(self, *args) -> int:
        try:
            return self._sock.sendmsg(*args)
        except (BlockingIOError, InterruptedError):
            return 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def tolerate_full_socket(bus: MessageBus) -> MessageBus:
    """Make a full send buffer a wait, not a disconnect (see _WaitWhenFull).
    Reaches into dbus-fast's writer; a version without one is left as it is."""
    writer = getattr(bus, "_writer", None)
    if writer is not None and isinstance(getattr(writer, "sock", None), socket.socket):
        writer.sock = _WaitWhenFull(writer.sock)
    return bus


async def call(bus: MessageBus, destination: str, path: str, interface: str, member: str,
               signature: str = "", body: Sequence[Any] = (), *, unix_fds: Sequence[int] = (),
               timeout: float | None = None) -> list[Any]:
    """A method call's reply body; an error reply raises DBusError, and no reply within
    `timeout` seconds (when given) TimeoutError."""
    sent = bus.call(Message(destination=destination, path=path, interface=interface,
                            member=member, signature=signature, body=list(body),
                            unix_fds=list(unix_fds)))
    reply = await (sent if timeout is None else asyncio.wait_for(sent, timeout))
    if reply.message_type == MessageType.ERROR:
        text = reply.body[0] if reply.body and isinstance(reply.body[0], str) else ""
        raise DBusError(reply.error_name or "org.freedesktop.DBus.Error.Failed", text)
    return reply.body


async def add_match(bus: MessageBus, rule: str) -> None:
    await call(bus, DBUS_NAME, DBUS_PATH, DBUS_NAME, "AddMatch", "s", [rule])


def name_owner_rule(name: str) -> str:
    """A match rule for the bus telling that `name` got a new owner or lost it."""
    return (f"type='signal',sender='{DBUS_NAME}',interface='{DBUS_NAME}',"
            f"member='NameOwnerChanged',arg0='{name}'")


def name_reachable(name: str, address: str | None = None, *, timeout: float = 2.0) -> bool:
    """Whether `name` is owned on the bus now, or the bus would start its owner on demand.
    False, never an exception, when there is no bus at all."""

    async def ask() -> bool:
        bus = await connect(address)
        try:
            [owned] = await call(bus, DBUS_NAME, DBUS_PATH, DBUS_NAME, "NameHasOwner", "s",
                                 [name])
            if owned:
                return True
            [activatable] = await call(bus, DBUS_NAME, DBUS_PATH, DBUS_NAME,
                                       "ListActivatableNames")
            return name in activatable
        finally:
            bus.disconnect()

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(asyncio.wait_for(ask(), timeout))
    except (SlothError, DBusError, TimeoutError, OSError) as exc:
        log.debug("%s is not on the session bus: %s", name, exc or "no answer")
        return False
    finally:
        loop.close()


class BusLoop:
    """A bus connection served on the thread that calls `run`, until `stop`."""

    def __init__(self, address: str | None = None) -> None:
        self.address = address
        self.loop = asyncio.new_event_loop()
        self.bus: MessageBus | None = None
        self._stop_wanted = False
        self._stopped: asyncio.Future[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.thread: int | None = None  # the ident of the thread inside run()

    def run(self, start: Start) -> None:
        """Connect, `await start(bus)`, then serve until stop() or until the bus goes away.
        Blocks; disconnecting gives back every name owned. The loop is closed afterwards."""
        self.thread = threading.get_ident()
        try:
            self.loop.run_until_complete(self._serve(start))
        finally:
            self.thread = None
            self.loop.close()

    async def _serve(self, start: Start) -> None:
        self._stopped = self.loop.create_future()
        if self._stop_wanted:  # stopped before it ran: never show up at all
            return
        self.bus = bus = await connect(self.address)
        gone = asyncio.ensure_future(bus.wait_for_disconnect())
        try:
            await start(bus)
            await asyncio.wait({self._stopped, gone}, return_when=asyncio.FIRST_COMPLETED)
            if gone.done():
                # The session is ending (or its bus crashed): nothing could show the icon.
                log.warning("the session D-Bus closed the connection; the tray icon is gone")
        finally:
            self._stop_wanted = True  # also when the bus went away: nothing more to send
            for task in self._tasks:
                task.cancel()
            for name in HANDLER_LOGS:
                logging.getLogger(name).addFilter(CLOSED_BY_US)  # the same one once
            bus.disconnect()  # the bus daemon drops every name we own
            # Until dbus-fast has seen the end of the stream and closed the socket.
            await asyncio.wait({gone}, timeout=5)
            if gone.done() and not gone.cancelled():
                gone.exception()  # retrieved: a lost connection was logged above

    def post(self, call: Callable[[], object]) -> None:
        """Run `call` on the loop's thread, from any thread (also before run()); not
        once stop() has been acted on."""
        try:
            self.loop.call_soon_threadsafe(self._run_posted, call)
        except RuntimeError:  # the loop is closed: the surface is gone, nothing to update
            log.debug("dropped %s: the tray icon is gone", describe(call))

    def _run_posted(self, call: Callable[[], object]) -> None:
        # Stopping, the loop lets go of the bus: an update (the tray's last snapshot,
        # racing the quit) would be written to a closing socket and fail in epoll.
        if self._stop_wanted:
            log.debug("dropped %s: the tray icon is leaving", describe(call))
            return
        guarded(call)

    @property
    def stopping(self) -> bool:
        """stop() was acted on, or the bus went away: nothing more goes out on it."""
        return self._stop_wanted

    def stop(self) -> None:
        """End run(), from any thread; before run() it makes run() return at once."""
        self.post(self._stop_now)

    def _stop_now(self) -> None:
        self._stop_wanted = True
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result(None)

    def spawn(self, work: Awaitable[Any]) -> None:
        """Start a coroutine on the loop and keep it alive until it ends (on the loop's
        thread). Its failure is logged."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            log.error("D-Bus: %s", exc, exc_info=exc)
