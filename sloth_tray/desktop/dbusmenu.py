"""The tray's menu as com.canonical.dbusmenu, the protocol every StatusNotifierItem host
renders (KDE, GNOME's AppIndicator extension, Xfce, Cinnamon, MATE, waybar).

The host asks for the layout (a tree of numbered items with properties), shows it,
and sends back `Event(id, "clicked")`. The presenter's Items carry no ids, so MenuModel
numbers them: an item keeps its id while its path of labels stays the same, and a click
on an id from the layout the host last fetched still reaches its action after a rebuild.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from dbus_fast import DBusError, Variant
from dbus_fast.annotations import (
    DBusBool,
    DBusInt32,
    DBusSignature,
    DBusStr,
    DBusUInt32,
    DBusVariant,
)
from dbus_fast.service import (
    PropertyAccess,
    ServiceInterface,
    dbus_method,
    dbus_property,
    dbus_signal,
)

from sloth_tray.presenter import REFRESH_SECONDS, SEPARATOR, Item, default_action
from sloth_tray.surface import MenuBuilder

from .bus import guarded

log = logging.getLogger("sloth_tray")

INTERFACE = "com.canonical.dbusmenu"
MENU_PATH = "/MenuBar"
ROOT_ID = 0
VERSION = 3  # the protocol libdbusmenu >= 0.4 and every current host speak
LAYOUT_SIGNATURE = "(ia{sv}av)"
BAD_ID = "org.freedesktop.DBus.Error.InvalidArgs"
OPEN_AT_MOST = 600.0  # seconds an open menu is kept fresh without a new "opened"

# The D-Bus types of the methods below (dbus-fast reads them from the annotations).
Ints = Annotated[list[int], DBusSignature("ai")]
Strs = Annotated[list[str], DBusSignature("as")]
LayoutReply = Annotated[list[Any], DBusSignature("u" + LAYOUT_SIGNATURE)]
GroupProperties = Annotated[list[Any], DBusSignature("a(ia{sv})")]
Events = Annotated[list[Any], DBusSignature("a(isvu)")]
GroupAboutToShow = Annotated[list[list[int]], DBusSignature("aiai")]
LayoutChange = Annotated[list[int], DBusSignature("ui")]

# (name, D-Bus signature, value), sorted by name: plain values, so layouts compare with ==.
Props = tuple[tuple[str, str, Any], ...]
LabelPath = tuple[tuple[str, int], ...]  # (label, how many siblings before had that label)

ROOT_PROPS: Props = (("children-display", "s", "submenu"),)


@dataclass(frozen=True)
class Node:
    id: int
    item: Item | None  # None: the root, which the host never shows as an item
    props: Props
    children: tuple[int, ...] = ()


def mnemonic_free(label: str) -> str:
    """dbusmenu reads `_x` as an access key (`tidy_downloads` would lose its `_`)."""
    return label.replace("_", "__")


def properties(item: Item) -> Props:
    if item == SEPARATOR:
        return (("type", "s", "separator"),)
    props: dict[str, tuple[str, Any]] = {
        "label": ("s", mnemonic_free(item.label)),
        "enabled": ("b", item.enabled),
        "visible": ("b", True),
    }
    if item.submenu:
        props["children-display"] = ("s", "submenu")
    if item.checked is not None:
        props["toggle-type"] = ("s", "checkmark")
        props["toggle-state"] = ("i", 1 if item.checked else 0)
    return tuple(sorted((name, sig, value) for name, (sig, value) in props.items()))


def as_variants(props: Props, names: Sequence[str] = ()) -> dict[str, Variant]:
    """The properties a host asked for (all of them when it named none)."""
    return {name: Variant(sig, value) for name, sig, value in props
            if not names or name in names}


class MenuModel:
    """The presenter's Items, numbered for dbusmenu. Pure: no bus, no loop."""

    def __init__(self) -> None:
        self.nodes: dict[int, Node] = {ROOT_ID: Node(ROOT_ID, None, ROOT_PROPS)}
        self.revision = 0
        # The nodes of the last two layouts a host fetched: a click may be on its way
        # while the host fetches the layout after a rebuild.
        self._served: dict[int, Node] = self.nodes
        self._served_before: dict[int, Node] = {}
        self._ids: dict[LabelPath, int] = {}
        self._next_id = ROOT_ID + 1

    def update(self, items: Sequence[Item]) -> bool:
        """Take the menu's new items; True when what a host shows changed."""
        nodes: dict[int, Node] = {}
        ids: dict[LabelPath, int] = {}
        root = Node(ROOT_ID, None, ROOT_PROPS, self._number(items, (), nodes, ids))
        nodes[ROOT_ID] = root
        changed = _shape(nodes) != _shape(self.nodes)
        # Only the current paths are remembered: labels with times in them would
        # otherwise pile up for as long as the tray runs.
        self.nodes, self._ids = nodes, ids
        if changed:
            self.revision += 1
        return changed

    def _number(self, items: Sequence[Item], parent: LabelPath, nodes: dict[int, Node],
                ids: dict[LabelPath, int]) -> tuple[int, ...]:
        seen: Counter[str] = Counter()
        children = []
        for item in items:
            path = (*parent, (item.label, seen[item.label]))
            seen[item.label] += 1  # two failed jobs may read alike; each keeps its own id
            node_id = self._ids.get(path)
            if node_id is None:
                node_id, self._next_id = self._next_id, self._next_id + 1
            ids[path] = node_id
            kids = self._number(item.submenu, path, nodes, ids)
            nodes[node_id] = Node(node_id, item, properties(item), kids)
            children.append(node_id)
        return tuple(children)

    def layout(self, node_id: int, depth: int, names: Sequence[str] = ()) -> list[Any]:
        """(id, properties, children) down to `depth` levels (-1: all)."""
        tree = self._layout(self.node(node_id), depth, names)
        # The host now holds these ids: a whole new tree, or one submenu of the current one.
        if node_id == ROOT_ID:
            if self._served is not self.nodes:
                self._served_before, self._served = self._served, self.nodes
        else:
            self._served = {**self._served, **self.nodes}
        return tree

    def _layout(self, node: Node, depth: int, names: Sequence[str]) -> list[Any]:
        children = [] if depth == 0 else [
            Variant(LAYOUT_SIGNATURE, self._layout(self.nodes[child], depth - 1, names))
            for child in node.children]
        return [node.id, as_variants(node.props, names), children]

    def node(self, node_id: int) -> Node:
        node = self.nodes.get(node_id)
        if node is None:
            raise DBusError(BAD_ID, f"the menu has no item {node_id}")
        return node

    def clickable(self, node_id: int) -> Node | None:
        """The node a click on `node_id` means: from the current items, else from the
        layouts the host fetched last (ids are never reused, so none is mistaken)."""
        return (self.nodes.get(node_id) or self._served.get(node_id)
                or self._served_before.get(node_id))

    def top_items(self) -> tuple[Item, ...]:
        return tuple(self.nodes[child].item for child in self.nodes[ROOT_ID].children
                     if self.nodes[child].item is not None)


def _shape(nodes: dict[int, Node]) -> dict[int, tuple[Props, tuple[int, ...]]]:
    return {node_id: (node.props, node.children) for node_id, node in nodes.items()}


class DbusMenu(ServiceInterface):
    """com.canonical.dbusmenu over a MenuBuilder. Lives on the loop's thread."""

    def __init__(self, build: MenuBuilder = lambda: (), *,
                 can_send: Callable[[], bool] = lambda: True) -> None:
        super().__init__(INTERFACE)
        self.model = MenuModel()
        self.build = build
        # False once the loop lets go of the bus: a signal then would be written to
        # a closing socket (a panel's AboutToShow can race a quit).
        self.can_send = can_send
        self._ticking: asyncio.TimerHandle | None = None  # while the menu is open
        self._opened_at = 0.0

    def refresh(self) -> bool:
        """Ask the builder again; tell hosts (LayoutUpdated) when the layout changed."""
        try:
            items = self.build()
        except Exception:
            log.exception("building the tray menu failed; it shows the last one")
            return False
        changed = self.model.update(items)
        if changed and self.can_send():
            self.LayoutUpdated(self.model.revision, ROOT_ID)
        return changed

    def click(self, node_id: int) -> None:
        node = self.model.clickable(node_id)
        if node is None:
            raise DBusError(BAD_ID, f"the menu has no item {node_id}")
        item = node.item
        if item is None or item.action is None or not item.enabled:
            log.debug("menu item %d (%s) has nothing to do", node_id,
                      item.label if item else "the root")
            return
        # After the reply: the host is not kept waiting on what the action does.
        asyncio.get_running_loop().call_soon(self._run, item)

    def activate_default(self) -> None:
        """A left click on the icon: the default item of the menu as it is now."""
        self.refresh()
        item = default_action(self.model.top_items())
        if item is not None and item.action is not None and item.enabled:
            asyncio.get_running_loop().call_soon(self._run, item)

    def _run(self, item: Item) -> None:
        assert item.action is not None
        log.debug("menu: %s", item.label)
        guarded(item.action, f"the menu item {item.label!r}")
        self.refresh()  # a check mark it toggled shows right away

    def _event(self, node_id: int, event_id: str) -> None:
        if event_id == "clicked":
            self.click(node_id)
        elif event_id == "opened" and node_id == ROOT_ID:
            self.refresh()  # hosts that skip AboutToShow still see fresh times
            self._keep_fresh()
        elif event_id == "closed" and node_id == ROOT_ID:
            self._stop_ticking()
        else:
            self.model.node(node_id)  # hovered, ...: nothing to do; check the id

    # -- an open menu's moving times -------------------------------------------------------

    def _keep_fresh(self) -> None:
        """While the menu is open (from "opened" to "closed"), rebuild it once a
        second, so a running job's elapsed time moves where the user is looking;
        LayoutUpdated goes out only when a label did change. A closed menu costs
        no wake-up: it is rebuilt when it opens. A host that never says "closed"
        is stopped after OPEN_AT_MOST."""
        loop = asyncio.get_running_loop()
        self._opened_at = loop.time()
        if self._ticking is None:
            self._ticking = loop.call_later(REFRESH_SECONDS, self._tick)

    def _tick(self) -> None:
        self._ticking = None
        self.refresh()
        loop = asyncio.get_running_loop()
        if loop.time() - self._opened_at < OPEN_AT_MOST:
            self._ticking = loop.call_later(REFRESH_SECONDS, self._tick)

    def _stop_ticking(self) -> None:
        if self._ticking is not None:
            self._ticking.cancel()
            self._ticking = None

    # -- com.canonical.dbusmenu --------------------------------------------------------

    @dbus_method()
    def GetLayout(self, parent_id: DBusInt32, recursion_depth: DBusInt32,
                  property_names: Strs) -> LayoutReply:
        return [self.model.revision,
                self.model.layout(parent_id, recursion_depth, property_names)]

    @dbus_method()
    def GetGroupProperties(self, ids: Ints, property_names: Strs) -> GroupProperties:
        wanted = ids or list(self.model.nodes)  # none named: all of them
        return [[node_id, as_variants(self.model.nodes[node_id].props, property_names)]
                for node_id in wanted if node_id in self.model.nodes]

    @dbus_method()
    def GetProperty(self, node_id: DBusInt32, name: DBusStr) -> DBusVariant:
        for prop, sig, value in self.model.node(node_id).props:
            if prop == name:
                return Variant(sig, value)
        raise DBusError(BAD_ID, f"menu item {node_id} has no property {name}")

    @dbus_method()  # no return annotation: dbus-fast would read it as the reply's type
    def Event(self, node_id: DBusInt32, event_id: DBusStr, data: DBusVariant,
              timestamp: DBusUInt32):
        self._event(node_id, event_id)

    @dbus_method()
    def EventGroup(self, events: Events) -> Ints:
        unknown = []
        for node_id, event_id, _data, _timestamp in events:
            try:
                self._event(node_id, event_id)
            except DBusError:
                unknown.append(node_id)
        if events and len(unknown) == len(events):
            raise DBusError(BAD_ID, "the menu has none of these items")
        return unknown

    @dbus_method()
    def AboutToShow(self, node_id: DBusInt32) -> DBusBool:
        if node_id == ROOT_ID:
            changed = self.refresh()  # the menu opens: times in labels are of now
            self._keep_fresh()
            return changed
        self.model.node(node_id)
        return False

    @dbus_method()
    def AboutToShowGroup(self, ids: Ints) -> GroupAboutToShow:
        unknown = [node_id for node_id in ids if node_id not in self.model.nodes]
        changed = ROOT_ID in ids and self.refresh()
        return [[ROOT_ID] if changed else [], unknown]

    @dbus_signal()
    def LayoutUpdated(self, revision: int, parent: int) -> LayoutChange:
        return [revision, parent]

    @dbus_property(access=PropertyAccess.READ)
    def Version(self) -> DBusUInt32:
        return VERSION

    @dbus_property(access=PropertyAccess.READ)
    def TextDirection(self) -> DBusStr:
        return "ltr"

    @dbus_property(access=PropertyAccess.READ)
    def Status(self) -> DBusStr:
        return "normal"

    @dbus_property(access=PropertyAccess.READ)
    def IconThemePath(self) -> Strs:
        return []
