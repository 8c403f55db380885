"""The tray's menu as com.canonical.dbusmenu, the protocol every StatusNotifierItem host
renders (KDE, GNOME's AppIndicator extension, Xfce, Cinnamon, MATE, waybar).

The host asks for the layout (a tree of numbered items with properties), shows it,
and sends back `Event(id, "clicked")`. How hosts keep what they were given decides the
rules here (each seen with the real host):
- A row is known by its id. GNOME's extension reads a known id's properties only when
  `ItemsPropertiesUpdated` names it, and never moves a known row; libdbusmenu (Xfce,
  waybar) breaks an open submenu whose row changes id. So a row's id follows what the
  row is (the presenter's key, and its kind: plain, submenu or check), never its label,
  and a label that moves is sent as a property change.
- `LayoutUpdated(revision, parent)` goes out only when rows come or go, once per
  changed parent (KDE fetches only that parent again); it never carries a relabel.
- GNOME's extension never moves a known row, and puts a new one at its index among
  the rows it still draws, those about to go included. So a row keeps its id only if
  that host would draw it at its place; otherwise it gets a new id (its old one goes,
  a new one comes at the new place).
- Ids are never reused: a click on an id from an older layout still reaches its action,
  or nothing.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import os
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
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

from sloth_tray.desktop.bus import guarded
from sloth_tray.text import printable
from sloth_tray.tray.icons import Look, badge
from sloth_tray.tray.presenter import REFRESH_SECONDS, SEPARATOR, Item, default_action
from sloth_tray.tray.surface import MenuBuilder

log = logging.getLogger("sloth_tray")

INTERFACE = "com.canonical.dbusmenu"
MENU_PATH = "/MenuBar"
ROOT_ID = 0
VERSION = 3  # the protocol libdbusmenu >= 0.4 and every current host speak
LAYOUT_SIGNATURE = "(ia{sv}av)"
BAD_ID = "org.freedesktop.DBus.Error.InvalidArgs"
# How long a menu is kept fresh. A host that says "opened" is believed until it says
# "closed" (or a row is clicked), but never longer than OPEN_AT_MOST after it last
# spoke. A host that only asks (AboutToShow, AboutToShowGroup: Xfce and waybar never
# say "opened" for the root menu, nor waybar "closed") gets ASKED_FOR seconds from its
# last question: a menu nobody reads costs no more than that.
OPEN_AT_MOST = 600.0
ASKED_FOR_ENV = "SLOTH_TRAY_MENU_ASKED_FOR"  # seconds: a knob for tests and diagnosis only


def asked_for(environ: Mapping[str, str]) -> float:
    """ASKED_FOR: 30 s, or the seconds $SLOTH_TRAY_MENU_ASKED_FOR says (the desktop tests,
    which run the app as a child process, would otherwise wait the 30 s out)."""
    given = environ.get(ASKED_FOR_ENV)
    if given is None:
        return 30.0
    try:
        seconds = float(given)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= OPEN_AT_MOST:  # NaN too
        log.warning("%s=%s is not a number of seconds from 0 to %g: the menu keeps to 30 s",
                    ASKED_FOR_ENV, printable(given), OPEN_AT_MOST)
        return 30.0
    return seconds


ASKED_FOR = asked_for(os.environ)

# The D-Bus types of the methods below (dbus-fast reads them from the annotations).
Ints = Annotated[list[int], DBusSignature("ai")]
Strs = Annotated[list[str], DBusSignature("as")]
LayoutReply = Annotated[list[Any], DBusSignature("u" + LAYOUT_SIGNATURE)]
GroupProperties = Annotated[list[Any], DBusSignature("a(ia{sv})")]
Events = Annotated[list[Any], DBusSignature("a(isvu)")]
GroupAboutToShow = Annotated[list[list[int]], DBusSignature("aiai")]
LayoutChange = Annotated[list[int], DBusSignature("ui")]
PropertiesChange = Annotated[list[Any], DBusSignature("a(ia{sv})a(ias)")]

# (name, D-Bus signature, value), sorted by name: plain values, so layouts compare with ==.
Props = tuple[tuple[str, str, Any], ...]
# A row's place in the menu: per level, (its key among its siblings, its kind).
Slot = tuple[str, str]
Path = tuple[Slot, ...]

ROOT_PROPS: Props = (("children-display", "s", "submenu"),)


@dataclass(frozen=True)
class Node:
    id: int
    item: Item | None  # None: the root, which the host never shows as an item
    props: Props
    children: tuple[int, ...] = ()


@dataclass
class Change:
    """What a host must be told after an update."""

    parents: list[int] = field(default_factory=list)  # rows came or went under these
    updated: list[tuple[int, dict[str, Variant]]] = field(default_factory=list)
    removed: list[tuple[int, list[str]]] = field(default_factory=list)

    @property
    def layout(self) -> bool:
        return bool(self.parents)

    def __bool__(self) -> bool:
        return bool(self.parents or self.updated or self.removed)


def mnemonic_free(label: str) -> str:
    """dbusmenu reads `_x` as an access key (`tidy_downloads` would lose its `_`)."""
    return label.replace("_", "__")


def properties(item: Item) -> Props:
    if replace(item, key="") == SEPARATOR:
        return (("type", "s", "separator"),)
    props: dict[str, tuple[str, Any]] = {
        "label": ("s", mnemonic_free(item.label)),
        "enabled": ("b", item.enabled),
        "visible": ("b", True),
    }
    if item.submenu:
        props["children-display"] = ("s", "submenu")
    if item.icon is not None:  # the badge's drawing, as PNG bytes (icon-data)
        props["icon-data"] = ("ay", badge_png(item.icon))
    if item.checked is not None:
        props["toggle-type"] = ("s", "checkmark")
        props["toggle-state"] = ("i", 1 if item.checked else 0)
    return tuple(sorted((name, sig, value) for name, (sig, value) in props.items()))


@functools.lru_cache(maxsize=8)
def badge_png(look: Look, size: int = 16) -> bytes:
    """The icon drawn for `look` at a menu row's size, as PNG bytes."""
    import io

    out = io.BytesIO()
    badge(look, size).save(out, format="PNG")
    return out.getvalue()


def kind(props: Props) -> str:
    """What a host builds for a row and never rebuilds for a known id: a separator, a
    row with a submenu, a check item or a plain row. A row that changes kind gets a new id."""
    names = {name: value for name, _sig, value in props}
    if names.get("type") == "separator":
        return "separator"
    if "children-display" in names:
        return "submenu"
    return "check" if "toggle-type" in names else "plain"


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
        # Since the last fetch of the whole menu: by submenu, the rows its last fetch let
        # go of (for a click that crossed that fetch).
        self._dropped_under: dict[int, dict[int, Node]] = {}
        self._ids: dict[Path, int] = {}
        self._next_id = ROOT_ID + 1

    def update(self, items: Sequence[Item], *, open_ids: Collection[int] = ()) -> Change:
        """Take the menu's new items; say what a host must be told. `open_ids`: rows
        whose submenu a host says is open; such a row keeps its id even if it moved,
        and its submenu's rows stay as they are until it closes (`_as_it_was`)."""
        nodes: dict[int, Node] = {}
        ids: dict[Path, int] = {}
        children = self._number(items, (), ROOT_ID, False, open_ids, nodes, ids)
        nodes[ROOT_ID] = Node(ROOT_ID, None, ROOT_PROPS, children)
        change = _difference(self.nodes, nodes)
        # Only the current paths are remembered: jobs come and go for as long as the
        # tray runs.
        self.nodes, self._ids = nodes, ids
        if change.layout:
            self.revision += 1
        return change

    def _number(self, items: Sequence[Item], parent: Path, parent_id: int, fresh: bool,
                open_ids: Collection[int], nodes: dict[int, Node],
                ids: dict[Path, int]) -> tuple[int, ...]:
        """Number one level. `fresh`: the parent has a new id, and so does all below it
        (a host never sees a known id under another parent)."""
        seen: Counter[str] = Counter()
        paths = []
        for item in items:
            name = item.key or item.label
            paths.append((*parent, (f"{name}#{seen[name]}" if seen[name] else name,
                                    kind(properties(item)))))
            seen[name] += 1  # two rows alike (a key given twice) still differ
        known = [None] * len(paths) if fresh else [self._ids.get(path) for path in paths]
        stays = self._in_place(parent_id, known, open_ids)
        children = []
        for item, path, node_id, keep in zip(items, paths, known, stays, strict=True):
            if node_id is None or not keep:
                node_id, self._next_id = self._next_id, self._next_id + 1
            ids[path] = node_id
            kids = self._number(item.submenu, path, node_id, not keep, open_ids, nodes, ids)
            nodes[node_id] = Node(node_id, item, properties(item), kids)
            children.append(node_id)
        if parent_id in open_ids and parent_id != ROOT_ID and not fresh:
            return self._as_it_was(parent_id, tuple(children), nodes, ids)
        return tuple(children)

    def _as_it_was(self, parent_id: int, children: tuple[int, ...],
                   nodes: dict[int, Node], ids: dict[Path, int]) -> tuple[int, ...]:
        """An open submenu's rows, as the host shows them: none comes or goes until it
        closes (GTK on Wayland, in waybar, draws an open submenu that gains a row as a
        blank strip); the rows that stay take their new labels. A row that went keeps
        its old self, and a click on it does what it did."""
        before = self.nodes.get(parent_id)
        if before is None:
            return children
        for gone in set(children) - set(before.children):  # shown once it has closed
            self._forget(gone, nodes, ids)
        for stale in set(before.children) - set(children):
            self._keep(stale, nodes)
        return before.children

    def _forget(self, node_id: int, nodes: dict[int, Node], ids: dict[Path, int]) -> None:
        node = nodes.pop(node_id)
        for path in [path for path, known in ids.items() if known == node_id]:
            del ids[path]
        for child in node.children:
            self._forget(child, nodes, ids)

    def _keep(self, node_id: int, nodes: dict[int, Node]) -> None:
        node = nodes[node_id] = self.nodes[node_id]
        for child in node.children:
            self._keep(child, nodes)

    def _in_place(self, parent_id: int, known: list[int | None],
                  open_ids: Collection[int]) -> list[bool]:
        """Which known rows keep their ids: as many as a host that never moves rows
        still draws in the layout's order (GNOME's extension: see `draws`). Every
        known row, if that works; else each row only where the host draws it at its
        index when its turn comes, which always works. A row whose submenu is open
        keeps its id all the same (libdbusmenu breaks an open submenu whose row goes)."""
        before = self.nodes.get(parent_id)
        drawn = list(before.children) if before else []
        every = [node_id is not None for node_id in known]
        if draws(drawn, known, every) == known:
            return every
        rows: list[int | None] = list(drawn)
        keep = []
        for index, node_id in enumerate(known):
            fits = node_id is not None and index < len(rows) and rows[index] == node_id
            stays = fits or (node_id is not None and node_id in open_ids)
            if not stays:
                rows.insert(index, None)  # a new id: the host puts it here
            keep.append(stays)
        return keep

    def layout(self, node_id: int, depth: int, names: Sequence[str] = ()) -> list[Any]:
        """(id, properties, children) down to `depth` levels (-1: all)."""
        tree = self._layout(self.node(node_id), depth, names)
        # The host now holds these ids: a whole new tree, or one submenu of the current one.
        if node_id == ROOT_ID:
            if self._served is not self.nodes:
                self._served_before, self._served = self._served, self.nodes
                self._dropped_under.clear()
        else:  # the host holds this subtree in place of the one it held there before
            held = dict(self._served)
            now = _below(self.nodes, node_id)
            # Rows it no longer holds go, kept until that submenu's next fetch for a
            # click that crossed this one: a host that fetches only the changed submenu
            # (KDE) would else have every row ever shown held, for as long as the tray
            # runs. Kept by submenu: two fetched back to back keep both their rows.
            self._dropped_under[node_id] = {gone: held.pop(gone)
                                            for gone in _below(held, node_id) - now}
            held.update((each, self.nodes[each]) for each in (*now, node_id))
            self._served = held
            for parent in [p for p in self._dropped_under if p not in held]:
                del self._dropped_under[parent]  # a submenu the host holds no more
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
                or self._served_before.get(node_id)
                or next((rows[node_id] for rows in self._dropped_under.values()
                         if node_id in rows), None))

    def top_items(self) -> tuple[Item, ...]:
        return tuple(self.nodes[child].item for child in self.nodes[ROOT_ID].children
                     if self.nodes[child].item is not None)


def _below(nodes: dict[int, Node], node_id: int) -> set[int]:
    """The ids under `node_id` (its rows, theirs, ...) that `nodes` holds."""
    found: set[int] = set()
    todo = list(nodes[node_id].children) if node_id in nodes else []
    while todo:
        child = todo.pop()
        if child in nodes and child not in found:
            found.add(child)
            todo += nodes[child].children
    return found


def draws(drawn: list[int], known: list[int | None], keep: list[bool]) -> list[int | None]:
    """The rows GNOME's extension (46) shows after a parent's new layout (`known`, each
    row kept or new): it walks the layout inserting each new row at its index among
    the rows it draws, those about to go still among them; it never moves a known row
    (its handler for a move is given the wrong argument); it removes the gone rows
    last. New rows are None here, in the order inserted."""
    rows: list[int | None] = list(drawn)
    kept = {node_id for node_id, stays in zip(known, keep, strict=True) if stays}
    for index, stays in enumerate(keep):
        if not stays:
            rows.insert(index, None)
    return [node_id for node_id in rows if node_id is None or node_id in kept]


def _difference(old: dict[int, Node], new: dict[int, Node]) -> Change:
    """Rows come or go: the outermost parents whose children changed. Rows that stay:
    the properties that changed (a host that knows a row reads it again only then)."""
    change = Change()
    changed = {node_id for node_id, node in new.items()
               if node_id in old and old[node_id].children != node.children}
    for node_id in sorted(changed):
        if not any(ancestor in changed for ancestor in _ancestors(new, node_id)):
            change.parents.append(node_id)
    for node_id, node in new.items():
        if node_id not in old or old[node_id].props == node.props:
            continue
        before = {name: (sig, value) for name, sig, value in old[node_id].props}
        after = {name: (sig, value) for name, sig, value in node.props}
        updated = {name: Variant(sig, value) for name, (sig, value) in after.items()
                   if before.get(name) != (sig, value)}
        gone = [name for name in before if name not in after]
        if updated:
            change.updated.append((node_id, updated))
        if gone:
            change.removed.append((node_id, gone))
    return change


def _ancestors(nodes: dict[int, Node], node_id: int) -> list[int]:
    parent_of = {child: node.id for node in nodes.values() for child in node.children}
    chain = []
    while node_id in parent_of:
        node_id = parent_of[node_id]
        chain.append(node_id)
    return chain


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
        self._ticking: asyncio.TimerHandle | None = None  # while the menu is kept fresh
        self._open: set[int] = set()  # rows a host said "opened" for and not "closed"
        self._open_until = 0.0  # loop time: believe "opened" until then at most
        self._asked_until = 0.0  # loop time: fresh until then for a host that only asks

    def refresh(self) -> bool:
        """Ask the builder again; tell hosts what changed: the properties of rows that
        stay, then the parents whose rows came or went. True when rows came or went."""
        try:
            items = self.build()
        except Exception:
            log.exception("building the tray menu failed; it shows the last one")
            return False
        change = self.model.update(items, open_ids=self._open)
        if change and self.can_send():
            if change.updated or change.removed:
                self.ItemsPropertiesUpdated(change.updated, change.removed)
            for parent in change.parents:
                self.LayoutUpdated(self.model.revision, parent)
        return change.layout

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
            self._closed()  # a click closes the menu
            self.click(node_id)
        elif event_id == "closed":
            self._closed(node_id)  # even of a row that is gone meanwhile
        else:
            self.model.node(node_id)  # an unknown id is answered as one
            if event_id == "opened":
                self._opened(node_id)
            else:
                self._asked()  # hovered, ...: someone is looking at the menu

    # -- an open menu's moving times -------------------------------------------------------
    #
    # While a host shows the menu, it is rebuilt once a second, so a running job's
    # elapsed time moves where the user is looking; only what changed is sent. A closed
    # menu costs no wake-up: it is rebuilt when it opens.

    def _opened(self, node_id: int) -> None:
        self.refresh()  # hosts that skip AboutToShow still see fresh times
        self._open.add(node_id)
        self._open_until = self._now() + OPEN_AT_MOST
        self._keep_fresh()

    def _closed(self, node_id: int = ROOT_ID) -> None:
        """The root closing closes everything; so does a click."""
        if node_id == ROOT_ID:
            self._open.clear()
            self._asked_until = 0.0
        elif node_id in self._open:
            self._open.discard(node_id)
            self.refresh()  # its rows as they are now, for when it opens again

    def _asked(self) -> None:
        self._asked_until = self._now() + ASKED_FOR
        self._keep_fresh()

    def _fresh_until(self) -> float:
        return max(self._asked_until, self._open_until if self._open else 0.0)

    def _keep_fresh(self) -> None:
        if self._ticking is None:
            self._ticking = asyncio.get_running_loop().call_later(REFRESH_SECONDS,
                                                                  self._tick)

    def _tick(self) -> None:
        self._ticking = None
        if self._now() >= self._fresh_until():
            self._open.clear()  # a host that never said "closed"
            return
        self.refresh()
        self._keep_fresh()

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

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
        """The signals go out before this reply, and the reply says nothing needs
        fetching: KDE ignores the next LayoutUpdated after a True here."""
        self.model.node(node_id)
        self.refresh()  # the menu opens: times in labels are of now
        self._asked()
        return False

    @dbus_method()
    def AboutToShowGroup(self, ids: Ints) -> GroupAboutToShow:
        unknown = [node_id for node_id in ids if node_id not in self.model.nodes]
        if len(unknown) < len(ids) or not ids:
            self.refresh()
            self._asked()
        return [[], unknown]

    @dbus_signal()
    def LayoutUpdated(self, revision: int, parent: int) -> LayoutChange:
        return [revision, parent]

    @dbus_signal()
    def ItemsPropertiesUpdated(self, updated: list[Any],
                               removed: list[Any]) -> PropertiesChange:
        return [[[node_id, props] for node_id, props in updated],
                [[node_id, names] for node_id, names in removed]]

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
