"""The tray icon as a StatusNotifierItem: what KDE Plasma, GNOME with the AppIndicator
extension, Xfce, Cinnamon, MATE and waybar show, on X11 and on Wayland.

The item is an object on the session bus (org.kde.StatusNotifierItem at
/StatusNotifierItem). The panel's StatusNotifierWatcher is told its object path; panels
then read the item's properties (the icon as pixels, the tooltip, the status), listen
for its New* signals, and render its menu, a com.canonical.dbusmenu object (dbusmenu.py).

Registration is by object path, and the item owns no org.kde.StatusNotifierItem-<pid>-<n>
name: every watcher (KDE's, GNOME's AppIndicator extension, Xfce's, waybar's) takes the
path with the caller's connection. GNOME's extension (46) drops an item registered by
such a name about a second later in one start of two: it watches the name, and the
watch's first news clears what it had read of the item, which its next property check
then trips over. It finds such names by itself too when it starts, hence none is owned.
A watcher that drops the item anyway (it says StatusNotifierItemUnregistered, or the
item is missing from its list a moment after registering) is told again, a few times
with growing pauses; a panel that restarts gets a new watcher, and is told too.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from functools import lru_cache
from typing import Annotated, Any

from dbus_fast import DBusError, Message, MessageType
from dbus_fast.aio import MessageBus
from dbus_fast.annotations import (
    DBusBool,
    DBusInt32,
    DBusObjectPath,
    DBusSignature,
    DBusStr,
)
from dbus_fast.service import (
    PropertyAccess,
    ServiceInterface,
    dbus_method,
    dbus_property,
    dbus_signal,
)
from PIL import Image

from sloth_tray.daemon import stopsignals
from sloth_tray.desktop.bus import (
    DBUS_NAME,
    BusLoop,
    add_match,
    call,
    name_owner_rule,
    name_reachable,
)
from sloth_tray.tray.dbusmenu import MENU_PATH, DbusMenu
from sloth_tray.tray.icons import EVERY_LOOK, Look, render
from sloth_tray.tray.surface import Appearance, MenuBuilder

log = logging.getLogger("sloth_tray")

WATCHER_NAME = "org.kde.StatusNotifierWatcher"
WATCHER_PATH = "/StatusNotifierWatcher"
PROPERTIES = "org.freedesktop.DBus.Properties"
ITEM_INTERFACE = "org.kde.StatusNotifierItem"
ITEM_PATH = "/StatusNotifierItem"
ITEM_ID = "sloth-tray"
ICON_SIZES = (16, 22, 24, 32, 48, 64)  # panels pick the nearest; none has to scale much
# A watcher that drops the item is told again after 1, 2, 4 ... s, at most this often in a
# row; staying registered for a check resets the count.
REREGISTER_AT_MOST = 6
CHECK_AFTER = 2.0  # seconds after registering: is the item still in the watcher's list?
# A watcher that has not answered in this long is frozen (or never starts): the item
# waits, at no cost, for the next watcher to take the name.
WATCHER_TIMEOUT = 10.0
# How long the start waits for the registration's answer (a live watcher answers in
# milliseconds: the item is registered before the jobs start); past it, the jobs start
# and the registration goes on waiting on its own.
REGISTER_BEFORE_READY = 0.5
TOKEN_FRESH_FOR = 10.0  # seconds an activation token from a click stays usable
STARTING = Appearance(Look.IDLE, "sloth: starting")

Pixmaps = Annotated[list[list[Any]], DBusSignature("a(iiay)")]
ToolTipValue = Annotated[list[Any], DBusSignature("(sa(iiay)ss)")]
StrSignal = Annotated[str, DBusSignature("s")]


def watcher_present(address: str | None = None, *, timeout: float = 2.0) -> bool:
    """Whether a panel that shows StatusNotifierItems runs in this session (or the bus
    would start its watcher on demand). False when there is no session bus at all."""
    return name_reachable(WATCHER_NAME, address, timeout=timeout)


def argb32(image: Image.Image) -> bytes:
    """The pixels as ARGB32 in network byte order (A, R, G, B bytes), as the spec says;
    straight alpha, not premultiplied."""
    red, green, blue, alpha = image.convert("RGBA").split()
    return Image.merge("RGBA", (alpha, red, green, blue)).tobytes()


@lru_cache(maxsize=len(EVERY_LOOK))
def icon_pixmaps(look: Look) -> list[list[Any]]:
    """Every size, drawn once per look (a panel asks again on every NewIcon)."""
    return [[size, size, argb32(render(look, size))] for size in ICON_SIZES]


class StatusNotifierItem(ServiceInterface):
    """org.kde.StatusNotifierItem: properties a panel reads, signals it listens for."""

    def __init__(self, item_id: str, appearance: Appearance,
                 activate: Callable[[], None], *,
                 can_send: Callable[[], bool] = lambda: True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(ITEM_INTERFACE)
        self.item_id = item_id
        self.appearance = appearance
        self._activate = activate
        self.can_send = can_send  # False once the loop lets go of the bus (DbusMenu's)
        self._clock = clock
        self.activation_token: tuple[str, float] | None = None  # (token, when given)

    def take_activation_token(self) -> str | None:
        """The token of the click being handled, once: a token is for one activation."""
        given, self.activation_token = self.activation_token, None
        if given is None or not given[0] or self._clock() - given[1] > TOKEN_FRESH_FOR:
            return None  # none, an empty one (Plasma without KWin gives ""), or stale
        return given[0]

    def update(self, appearance: Appearance) -> None:
        """Take a new appearance; signal only what changed (each signal makes every
        panel read the property again)."""
        before, self.appearance = self.appearance, appearance
        if not self.can_send():
            return
        if appearance.look != before.look:
            self.NewIcon()
            self.NewAttentionIcon()
        if appearance.title != before.title:
            self.NewTitle()
            self.NewToolTip()
        if appearance.status != before.status:
            self.NewStatus(appearance.status.value)

    # -- properties ------------------------------------------------------------------

    @dbus_property(access=PropertyAccess.READ)
    def Category(self) -> DBusStr:
        return "ApplicationStatus"

    @dbus_property(access=PropertyAccess.READ)
    def Id(self) -> DBusStr:
        return self.item_id

    @dbus_property(access=PropertyAccess.READ)
    def Title(self) -> DBusStr:
        return self.appearance.title

    @dbus_property(access=PropertyAccess.READ)
    def Status(self) -> DBusStr:
        return self.appearance.status.value

    @dbus_property(access=PropertyAccess.READ)
    def WindowId(self) -> DBusInt32:
        return 0  # no window to raise

    @dbus_property(access=PropertyAccess.READ)
    def IconThemePath(self) -> DBusStr:
        return ""

    @dbus_property(access=PropertyAccess.READ)
    def IconName(self) -> DBusStr:
        return ""  # no themed icon: panels draw IconPixmap

    @dbus_property(access=PropertyAccess.READ)
    def IconPixmap(self) -> Pixmaps:
        return icon_pixmaps(self.appearance.look)

    @dbus_property(access=PropertyAccess.READ)
    def OverlayIconName(self) -> DBusStr:
        return ""

    @dbus_property(access=PropertyAccess.READ)
    def OverlayIconPixmap(self) -> Pixmaps:
        return []

    @dbus_property(access=PropertyAccess.READ)
    def AttentionIconName(self) -> DBusStr:
        return ""

    @dbus_property(access=PropertyAccess.READ)
    def AttentionIconPixmap(self) -> Pixmaps:
        # Panels that swap to the attention icon on NeedsAttention show the same face:
        # the failed look already carries its warning badge.
        return icon_pixmaps(self.appearance.look)

    @dbus_property(access=PropertyAccess.READ)
    def AttentionMovieName(self) -> DBusStr:
        return ""

    @dbus_property(access=PropertyAccess.READ)
    def ToolTip(self) -> ToolTipValue:
        # The title as the tooltip's heading, no body: KDE reads the body as rich text,
        # and a job's name is not markup.
        return ["", [], self.appearance.title, ""]

    @dbus_property(access=PropertyAccess.READ)
    def IconAccessibleDesc(self) -> DBusStr:
        return self.appearance.title  # what a screen reader says for the icon

    @dbus_property(access=PropertyAccess.READ)
    def AttentionAccessibleDesc(self) -> DBusStr:
        return self.appearance.title

    @dbus_property(access=PropertyAccess.READ)
    def ItemIsMenu(self) -> DBusBool:
        return False  # a left click activates (the menu's default item)

    @dbus_property(access=PropertyAccess.READ)
    def Menu(self) -> DBusObjectPath:
        return MENU_PATH

    # -- methods (dbus-fast reads a return annotation as the reply's D-Bus type, so
    #    the methods that reply with nothing have none) ---------------------------------

    @dbus_method()
    def Activate(self, x: DBusInt32, y: DBusInt32):
        self._activate()

    @dbus_method()
    def ProvideXdgActivationToken(self, token: DBusStr):
        """KDE's, before a click: the token lets what the click opens take the focus."""
        self.activation_token = (token, self._clock())

    @dbus_method()
    def SecondaryActivate(self, x: DBusInt32, y: DBusInt32):
        """A middle click: nothing of its own."""

    @dbus_method()
    def ContextMenu(self, x: DBusInt32, y: DBusInt32):
        """Panels render the Menu object themselves; there is no menu of our own to pop."""

    @dbus_method()
    def Scroll(self, delta: DBusInt32, orientation: DBusStr):
        """Scrolling over the icon does nothing."""

    # -- signals ---------------------------------------------------------------------

    @dbus_signal()
    def NewTitle(self) -> None:
        pass

    @dbus_signal()
    def NewIcon(self) -> None:
        pass

    @dbus_signal()
    def NewAttentionIcon(self) -> None:
        pass

    @dbus_signal()
    def NewToolTip(self) -> None:
        pass

    @dbus_signal()
    def NewStatus(self, status: str) -> StrSignal:
        return status


class SniSurface:
    """A Surface (sloth_tray.tray.surface) that is a StatusNotifierItem with a dbusmenu.

    One thread: the one calling run() serves the bus on an asyncio loop, runs the menu's
    actions and whatever other threads post(). Nothing polls; an idle tray sleeps.
    """

    name = "sni"
    has_default_action = True  # panels call Activate on a left click

    def __init__(self, *, bus_address: str | None = None, item_id: str = ITEM_ID,
                 appearance: Appearance | None = None,
                 stop_signals: tuple[int, ...] = ()) -> None:
        self._loop = BusLoop(bus_address)
        self._stop_signals = stop_signals
        self.menu = DbusMenu(can_send=self._bus_open)
        self.item = StatusNotifierItem(item_id, appearance or STARTING,
                                       self.menu.activate_default, can_send=self._bus_open)
        self.bus_name: str | None = None  # the connection's unique name, once connected
        self._bus: MessageBus | None = None
        self._retold = 0  # times in a row a watcher dropped the item and was told again
        self._next_try: asyncio.TimerHandle | None = None  # a registration or a check
        self._next_work: Callable[[], Awaitable[None]] | None = None  # what it will do

    def _bus_open(self) -> bool:
        """Whether signals may still go out: not once the loop lets go of the bus."""
        return not self._loop.stopping

    # -- Surface ---------------------------------------------------------------------

    def run(self, ready: Callable[[], None],
            on_signal: Callable[[], None] | None = None) -> None:
        """Connect, show the item, call `ready`, then serve until stop(). Raises SlothError
        when the session bus cannot be reached. A stop signal calls `on_signal`
        (default: stop) on the loop's thread."""

        def stopped_by(sig: int) -> None:
            stopsignals.note(sig)  # the exit status says which (Ctrl-C: 130)
            (on_signal or self.stop)()

        async def start(bus: MessageBus) -> None:
            for sig in self._stop_signals:
                self._loop.loop.add_signal_handler(sig, stopped_by, sig)
            await self._start(bus)
            ready()

        self._loop.run(start)

    def stop(self) -> None:
        self._loop.stop()

    def post(self, call: Callable[[], object]) -> None:
        self._loop.post(call)

    def show(self, appearance: Appearance) -> None:
        if self._elsewhere(lambda: self.show(appearance)):
            return
        self.item.update(appearance)

    def set_menu(self, build: MenuBuilder) -> None:
        if self._elsewhere(lambda: self.set_menu(build)):
            return
        self.menu.build = build
        self.menu.refresh()

    def menu_changed(self) -> None:
        if self._elsewhere(self.menu_changed):
            return
        self.menu.refresh()

    def take_activation_token(self) -> str | None:
        """The panel's token for the click being handled (KDE gives one), once."""
        return self.item.take_activation_token()

    def _elsewhere(self, call: Callable[[], object]) -> bool:
        """Called from another thread while the loop runs: post `call` instead, since a
        signal sent from two threads at once would garble the bus connection."""
        owner = self._loop.thread
        if owner is None or owner == threading.get_ident():
            return False
        self.post(call)
        return True

    # -- on the bus ------------------------------------------------------------------

    async def _start(self, bus: MessageBus) -> None:
        self._bus = bus
        bus.export(ITEM_PATH, self.item)
        bus.export(MENU_PATH, self.menu)
        self.bus_name = bus.unique_name
        bus.add_message_handler(self._on_message)
        await add_match(bus, name_owner_rule(WATCHER_NAME))
        await add_match(bus, f"type='signal',interface='{WATCHER_NAME}',"
                             f"member='StatusNotifierItemUnregistered'")
        # Not awaited for long: a watcher that hangs must hold up neither the jobs nor
        # a quit.
        registering = asyncio.ensure_future(self._register())
        self._loop.spawn(registering)
        await asyncio.wait({registering}, timeout=REGISTER_BEFORE_READY)

    async def _register(self) -> None:
        assert self._bus is not None
        try:
            await call(self._bus, WATCHER_NAME, WATCHER_PATH, WATCHER_NAME,
                       "RegisterStatusNotifierItem", "s", [ITEM_PATH],
                       timeout=WATCHER_TIMEOUT)
        except DBusError as exc:
            log.info("no panel shows the tray icon yet (%s: %s); it appears when one starts",
                     WATCHER_NAME, exc.text or exc.type)
            return
        except TimeoutError:
            log.warning("no panel shows the tray icon yet (%s did not answer in %g s); it "
                        "appears when a panel starts", WATCHER_NAME, WATCHER_TIMEOUT)
            return
        log.debug("tray icon %s%s registered with %s", self.bus_name, ITEM_PATH, WATCHER_NAME)
        self._later(CHECK_AFTER, self._check_registered)

    async def _check_registered(self) -> None:
        """A moment after registering: still in the watcher's list? (A watcher that
        dropped the item need not say so.)"""
        assert self._bus is not None
        try:
            [listed] = await call(self._bus, WATCHER_NAME, WATCHER_PATH, PROPERTIES, "Get",
                                  "ss", [WATCHER_NAME, "RegisteredStatusNotifierItems"],
                                  timeout=WATCHER_TIMEOUT)
        except (DBusError, TimeoutError):
            return  # the watcher is gone: the next one's arrival registers the item
        if any(self._is_me(entry) for entry in listed.value):
            self._retold = 0
        else:
            self._tell_again()

    def _is_me(self, entry: str) -> bool:
        """How watchers list an item registered by path: `:1.42/StatusNotifierItem`
        (KDE, Xfce, waybar) or `:1.42@/StatusNotifierItem` (GNOME)."""
        me = self.bus_name or ""
        return entry == me or entry.startswith((me + "/", me + "@"))

    def _tell_again(self) -> None:
        if self._next_try is not None and self._next_work == self._register:
            return  # already on its way
        if self._retold >= REREGISTER_AT_MOST:
            log.warning("the panel keeps dropping the tray icon; it is told again when "
                        "the panel restarts")
            return
        pause = 2.0 ** self._retold
        self._retold += 1
        log.info("the panel dropped the tray icon; telling it again in %.0f s", pause)
        self._later(pause, self._register)

    def _later(self, delay: float, work: Callable[[], Awaitable[None]]) -> None:
        """One registration or check waits at a time: a newer one replaces it, except
        that a check never replaces a registration. (A watcher may drop the item while
        its registration is still answering: the check that registration then asks
        for would put off being told again.)"""
        if self._next_try is not None:
            if self._next_work == self._register and work != self._register:
                return  # the registration to come asks for its own check
            self._next_try.cancel()

        def run() -> None:
            self._next_try = None
            self._loop.spawn(work())

        self._next_try = self._loop.loop.call_later(delay, run)
        self._next_work = work

    def _on_message(self, message: Message) -> None:
        """A (new) watcher took its name: a panel started or restarted; tell it again.
        A watcher says it dropped this item: tell it again, after a pause."""
        if message.message_type != MessageType.SIGNAL:
            return
        if (message.member == "NameOwnerChanged" and message.interface == DBUS_NAME
                and message.body[0] == WATCHER_NAME and message.body[2]):
            self._retold = 0
            self._loop.spawn(self._register())
        elif (message.member == "StatusNotifierItemUnregistered"
                and message.interface == WATCHER_NAME and self._is_me(message.body[0])):
            self._tell_again()
