"""The tray icon as a StatusNotifierItem: what KDE Plasma, GNOME with the AppIndicator
extension, Xfce, Cinnamon, MATE and waybar show, on X11 and on Wayland.

The item is an object on the session bus (org.kde.StatusNotifierItem at
/StatusNotifierItem) under a name of its own, org.kde.StatusNotifierItem-<pid>-<n>. The
panel's StatusNotifierWatcher is told that name; panels then read the item's properties
(the icon as pixels, the tooltip, the status), listen for its New* signals, and render
its menu, a com.canonical.dbusmenu object (dbusmenu.py). A panel that restarts gets a
new watcher, and the item registers again with it.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections.abc import Callable
from functools import lru_cache
from typing import Annotated, Any

from dbus_fast import DBusError, Message, MessageType, NameFlag, RequestNameReply
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

from sloth_tray.errors import SlothError
from sloth_tray.icons import Look, render
from sloth_tray.surface import Appearance, MenuBuilder

from .bus import DBUS_NAME, BusLoop, add_match, call, name_owner_rule, name_reachable
from .dbusmenu import MENU_PATH, DbusMenu

log = logging.getLogger("sloth_tray")

WATCHER_NAME = "org.kde.StatusNotifierWatcher"
WATCHER_PATH = "/StatusNotifierWatcher"
ITEM_INTERFACE = "org.kde.StatusNotifierItem"
ITEM_PATH = "/StatusNotifierItem"
ITEM_ID = "sloth-tray"
ICON_SIZES = (16, 22, 24, 32, 48, 64)  # panels pick the nearest; none has to scale much
MAX_ITEMS_PER_PROCESS = 100
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


@lru_cache(maxsize=len(Look))
def icon_pixmaps(look: Look) -> list[list[Any]]:
    """Every size, drawn once per look (a panel asks again on every NewIcon)."""
    return [[size, size, argb32(render(look, size))] for size in ICON_SIZES]


class StatusNotifierItem(ServiceInterface):
    """org.kde.StatusNotifierItem: properties a panel reads, signals it listens for."""

    def __init__(self, item_id: str, appearance: Appearance,
                 activate: Callable[[], None], *,
                 can_send: Callable[[], bool] = lambda: True) -> None:
        super().__init__(ITEM_INTERFACE)
        self.item_id = item_id
        self.appearance = appearance
        self._activate = activate
        self.can_send = can_send  # False once the loop lets go of the bus (DbusMenu's)

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
    """A Surface (sloth_tray.surface) that is a StatusNotifierItem with a dbusmenu.

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
        self.bus_name: str | None = None  # org.kde.StatusNotifierItem-<pid>-<n>, once owned
        self._bus: MessageBus | None = None

    def _bus_open(self) -> bool:
        """Whether signals may still go out: not once the loop lets go of the bus."""
        return not self._loop.stopping

    # -- Surface ---------------------------------------------------------------------

    def run(self, ready: Callable[[], None],
            on_signal: Callable[[], None] | None = None) -> None:
        """Connect, show the item, call `ready`, then serve until stop(). Raises SlothError
        when the session bus cannot be reached. A stop signal calls `on_signal`
        (default: stop) on the loop's thread."""

        async def start(bus: MessageBus) -> None:
            for sig in self._stop_signals:
                self._loop.loop.add_signal_handler(sig, on_signal or self.stop)
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
        self.bus_name = await self._own_name(bus)
        bus.add_message_handler(self._on_message)
        await add_match(bus, name_owner_rule(WATCHER_NAME))
        await self._register()

    async def _own_name(self, bus: MessageBus) -> str:
        """The item's name, as the spec spells it; another item of this process may
        already have -1."""
        pid = os.getpid()
        for n in itertools.count(1):
            name = f"{ITEM_INTERFACE}-{pid}-{n}"
            reply = await bus.request_name(name, NameFlag.DO_NOT_QUEUE)
            if reply in (RequestNameReply.PRIMARY_OWNER, RequestNameReply.ALREADY_OWNER):
                return name
            if n >= MAX_ITEMS_PER_PROCESS:
                break
        raise SlothError(f"could not own a name {ITEM_INTERFACE}-{pid}-N on the session "
                         f"D-Bus: {MAX_ITEMS_PER_PROCESS} are taken")

    async def _register(self) -> None:
        assert self._bus is not None and self.bus_name is not None
        try:
            await call(self._bus, WATCHER_NAME, WATCHER_PATH, WATCHER_NAME,
                       "RegisterStatusNotifierItem", "s", [self.bus_name])
        except DBusError as exc:
            log.info("no panel shows the tray icon yet (%s: %s); it appears when one starts",
                     WATCHER_NAME, exc.text or exc.type)
            return
        log.debug("tray icon %s registered with %s", self.bus_name, WATCHER_NAME)

    def _on_message(self, message: Message) -> None:
        """A (new) watcher took its name: a panel started or restarted; tell it again."""
        if (message.message_type == MessageType.SIGNAL
                and message.member == "NameOwnerChanged"
                and message.interface == DBUS_NAME
                and message.body[0] == WATCHER_NAME and message.body[2]):
            self._loop.spawn(self._register())
