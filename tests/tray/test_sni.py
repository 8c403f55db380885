"""The tray icon as a StatusNotifierItem, seen by a panel over a real, private D-Bus.

The test is the panel: it owns a StatusNotifierWatcher, reads the item's properties,
fetches the dbusmenu layout and clicks every item, exactly as KDE's, GNOME's and Xfce's
hosts do. The surface runs on a thread of its own, as it runs on the main thread in the
app; its menu is the presenter's, over a recorder of what the menu asks for.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Annotated, Any

import pytest
from helpers.controls import Recorder
from helpers.processes import wait_for
from helpers.snapshots import BUSY, NOW
from test_lanes_menu import LANES

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("dbus-daemon") is None,
    reason="needs Linux and dbus-daemon (apt-get install dbus)")

from dbus_fast import DBusError, Message, MessageType, Variant  # noqa: E402
from dbus_fast.aio import MessageBus  # noqa: E402
from dbus_fast.annotations import DBusBool, DBusSignature, DBusStr  # noqa: E402
from dbus_fast.service import (  # noqa: E402
    PropertyAccess,
    ServiceInterface,
    dbus_property,
    dbus_signal,
)

from sloth_tray.daemon.snapshot import AskingJob, Snapshot  # noqa: E402
from sloth_tray.desktop import bus as busmod  # noqa: E402
from sloth_tray.errors import SlothError  # noqa: E402
from sloth_tray.text import printable  # noqa: E402
from sloth_tray.tray import presenter  # noqa: E402
from sloth_tray.tray.icons import Look, render  # noqa: E402
from sloth_tray.tray.sni import (  # noqa: E402
    ICON_SIZES,
    SniSurface,
    argb32,
    watcher_present,
)
from sloth_tray.tray.surface import Appearance, Status  # noqa: E402

WATCHER = "org.kde.StatusNotifierWatcher"
ITEM = "org.kde.StatusNotifierItem"
MENU = "com.canonical.dbusmenu"
PROPS = "org.freedesktop.DBus.Properties"
Strs = Annotated[list[str], DBusSignature("as")]

QUIET = Snapshot(done=3)
ASKED = AskingJob("q1", "feed-check", "ask", 1, "Post it?", ("yes", "no"), NOW - 5)


class FakeWatcher(ServiceInterface):
    """What a panel exports. Items tell it their bus name or, as this app does, their
    object path; it lists them as KDE's, Xfce's and waybar's watchers do
    (`:1.42/StatusNotifierItem`) or as GNOME's does (`:1.42@/StatusNotifierItem`)."""

    def __init__(self) -> None:
        super().__init__(WATCHER)
        self.items: list[str] = []  # every registration, in order, as listed
        self.dropped: set[str] = set()  # items the watcher no longer lists
        self.style = "/"  # "@": GNOME's

    def register(self, message: Message) -> Message | None:
        """RegisterStatusNotifierItem, answered by hand: a ServiceInterface method does
        not see the caller, and a path is registered with the caller's name."""
        if (message.message_type != MessageType.METHOD_CALL
                or message.member != "RegisterStatusNotifierItem"):
            return None
        [service] = message.body
        entry = message.sender + self.style.rstrip("/") + service \
            if service.startswith("/") else service
        self.items.append(entry)
        self.dropped.discard(entry)
        self.StatusNotifierItemRegistered(entry)
        return Message.new_method_return(message)

    def drop(self, entry: str) -> None:
        """What GNOME's extension does to an item it failed to read."""
        self.dropped.add(entry)
        self.StatusNotifierItemUnregistered(entry)

    @dbus_property(access=PropertyAccess.READ)
    def RegisteredStatusNotifierItems(self) -> Strs:
        return [item for item in dict.fromkeys(self.items) if item not in self.dropped]

    @dbus_property(access=PropertyAccess.READ)
    def IsStatusNotifierHostRegistered(self) -> DBusBool:
        return True

    @dbus_signal()
    def StatusNotifierItemRegistered(self, service: str) -> DBusStr:
        return service

    @dbus_signal()
    def StatusNotifierItemUnregistered(self, service: str) -> DBusStr:
        return service


class Panel:
    """A second peer on the bus, on a thread of its own: the watcher and the host."""

    def __init__(self, address: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="panel", daemon=True)
        self.thread.start()
        self.bus: MessageBus = self.do(busmod.connect(address))
        self.watcher = FakeWatcher()
        self.bus.export("/StatusNotifierWatcher", self.watcher)
        self.signals: list[tuple[str, list[Any]]] = []
        self.bus.add_message_handler(self._on_message)
        self.bus.add_message_handler(self.watcher.register)
        for path in ("/StatusNotifierItem", "/MenuBar"):
            self.do(busmod.add_match(self.bus, f"type='signal',path='{path}'"))
        self.take_watcher_name()

    def do(self, work, timeout: float = 5.0):
        """Await `work` (a coroutine) on the panel's loop; its result."""
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout)

    def call(self, destination: str, path: str, interface: str, member: str,
             signature: str = "", body: list[Any] | tuple = ()) -> list[Any]:
        return self.do(busmod.call(self.bus, destination, path, interface, member, signature,
                                   body))

    def _on_message(self, message: Message) -> None:
        if message.message_type == MessageType.SIGNAL and message.interface in (ITEM, MENU):
            self.signals.append((message.member, message.body))

    def take_watcher_name(self) -> None:
        self.do(self.bus.request_name(WATCHER))

    def drop_watcher_name(self) -> None:
        self.do(self.bus.release_name(WATCHER))

    def owned(self, name: str) -> bool:
        return self.call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                         "NameHasOwner", "s", [name])[0]

    def close(self) -> None:
        self.bus.disconnect()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class Scene:
    """What the tray shows: a snapshot at a time, over controls that record."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.now = NOW
        self.controls = Recorder()

    def menu(self, controls: Any = None) -> tuple[presenter.Item, ...]:
        return presenter.menu(self.snapshot, controls or self.controls, self.now,
                              jobs_folder="~/jobs")

    def appearance(self) -> Appearance:
        failed = self.snapshot.failed_count or self.snapshot.problem
        return Appearance(presenter.look(self.snapshot), presenter.title(self.snapshot, self.now),
                          Status.NEEDS_ATTENTION if failed else Status.ACTIVE)


class Tray:
    def __init__(self, surface: SniSurface, scene: Scene, panel: Panel) -> None:
        self.surface, self.scene, self.panel = surface, scene, panel
        self.name = surface.bus_name
        assert self.name

    def prop(self, name: str) -> Any:
        return self.panel.call(self.name, "/StatusNotifierItem", PROPS, "Get", "ss",
                               [ITEM, name])[0].value

    def layout(self) -> tuple[int, list[Any]]:
        revision, tree = self.panel.call(self.name, "/MenuBar", MENU, "GetLayout", "iias",
                                         [0, -1, []])
        return revision, tree

    def click(self, node_id: int) -> None:
        self.panel.call(self.name, "/MenuBar", MENU, "Event", "isvu",
                        [node_id, "clicked", Variant("s", ""), 0])
        # Actions run right after the reply; one more round trip means they have run.
        self.panel.call(self.name, "/MenuBar", PROPS, "Get", "ss", [MENU, "Version"])

    def about_to_show(self, node_id: int = 0) -> bool:
        return self.panel.call(self.name, "/MenuBar", MENU, "AboutToShow", "i", [node_id])[0]

    def change(self, call: Callable[[], None]) -> None:
        self.surface.post(call)

    def members(self) -> list[str]:
        return [member for member, _ in self.panel.signals]


@pytest.fixture(scope="module")
def bus_address():
    daemon = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--print-address=1"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        address = daemon.stdout.readline().strip()
        assert address, "dbus-daemon printed no address"
        yield address
    finally:
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.wait(10)


@pytest.fixture(scope="module")
def panel(bus_address):
    peer = Panel(bus_address)
    try:
        yield peer
    finally:
        peer.close()


def start(bus_address: str, panel: Panel, scene: Scene):
    surface = SniSurface(bus_address=bus_address, appearance=scene.appearance())
    surface.set_menu(scene.menu)  # before run(), on the thread that will run it: allowed
    ready = threading.Event()
    thread = threading.Thread(target=surface.run, args=(ready.set,), name="surface")
    thread.start()
    assert ready.wait(10), "the surface never became ready"
    return surface, thread


@pytest.fixture
def scene() -> Scene:
    return Scene(BUSY)


@pytest.fixture
def tray(bus_address, panel, scene):
    if not panel.owned(WATCHER):
        panel.take_watcher_name()
    panel.signals.clear()
    surface, thread = start(bus_address, panel, scene)
    try:
        yield Tray(surface, scene, panel)
    finally:
        surface.stop()
        thread.join(10)
        assert not thread.is_alive(), "run() did not return after stop()"


# -- registration ---------------------------------------------------------------------


def test_the_item_is_registered_with_the_watcher_before_ready_and_uses_one_thread(
        bus_address, panel, scene):
    threads_before = threading.active_count()
    surface, thread = start(bus_address, panel, scene)
    try:
        me = f"{surface.bus_name}/StatusNotifierItem"
        assert surface.bus_name and surface.bus_name.startswith(":")
        assert panel.watcher.items[-1] == me  # by its path, already when ready() ran
        assert threading.active_count() == threads_before + 1  # the one that calls run()
    finally:
        surface.stop()
        thread.join(10)
    assert not thread.is_alive()
    # Its connection is closed as run() returns; the bus daemon reads the hang-up in
    # its own time, and on a busy machine that is a moment later.
    wait_for(lambda: not panel.owned(surface.bus_name), timeout=5,
             what="the stopped item to leave the panel")
    surface.post(lambda: None)  # after the end: dropped, not an error


def test_the_item_owns_no_name_a_watcher_could_find_it_by(tray, panel):
    """GNOME's extension registers by itself any org.kde.StatusNotifierItem-* name it
    finds when it starts, and drops an item registered by name a second later in one
    start of two: the item owns no such name."""
    names = panel.call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                       "ListNames")[0]
    assert not [name for name in names if name.startswith(ITEM)]


def me(tray: Tray) -> str:
    return f"{tray.name}{tray.panel.watcher.style.rstrip('/')}/StatusNotifierItem"


def test_a_restarted_panel_gets_the_item_again(tray, panel):
    count = panel.watcher.items.count(me(tray))
    panel.drop_watcher_name()
    panel.take_watcher_name()
    wait_for(lambda: panel.watcher.items.count(me(tray)) == count + 1,
             what="the item to register with the new watcher")


@pytest.mark.parametrize("style", ["/", "@"])
def test_a_watcher_that_drops_the_item_is_told_again(tray, panel, style):
    panel.watcher.style = style
    try:
        count = panel.watcher.items.count(me(tray))
        panel.drop_watcher_name()  # a new watcher: the item registers in this style
        panel.take_watcher_name()
        wait_for(lambda: panel.watcher.items.count(me(tray)) == count + 1,
                 what="the item to register")
        count += 1
        panel.loop.call_soon_threadsafe(panel.watcher.drop, me(tray))
        wait_for(lambda: panel.watcher.items.count(me(tray)) == count + 1, timeout=10,
                 what="the dropped item to register again")
        assert me(tray) in panel.call(WATCHER, "/StatusNotifierWatcher", PROPS, "Get", "ss",
                                      [WATCHER, "RegisteredStatusNotifierItems"])[0].value
    finally:
        panel.watcher.style = "/"


def test_a_watcher_that_drops_the_item_silently_is_told_again(tray, panel):
    """A watcher need not say it dropped an item: a moment after registering, the item
    looks for itself in the watcher's list."""
    count = panel.watcher.items.count(me(tray))
    panel.watcher.dropped.add(me(tray))  # no signal
    wait_for(lambda: panel.watcher.items.count(me(tray)) == count + 1, timeout=8,
             what="the silently dropped item to register again")


def test_an_item_dropped_by_another_app_stays_put(tray, panel):
    count = len(panel.watcher.items)
    panel.loop.call_soon_threadsafe(panel.watcher.drop, ":1.999/StatusNotifierItem")
    panel.loop.call_soon_threadsafe(panel.watcher.drop, tray.name + "9/StatusNotifierItem")
    tray.panel.call(tray.name, "/MenuBar", PROPS, "Get", "ss", [MENU, "Version"])  # heard
    assert len(panel.watcher.items) == count
    assert tray.surface._next_work != tray.surface._register, "a registration is on its way"


def test_an_item_started_before_any_panel_shows_up_when_a_panel_starts(
        bus_address, panel, scene):
    panel.drop_watcher_name()
    assert not watcher_present(bus_address)
    count = len(panel.watcher.items)
    surface, thread = start(bus_address, panel, scene)  # ready() all the same
    try:
        assert len(panel.watcher.items) == count
        panel.take_watcher_name()
        wait_for(lambda: panel.watcher.items[count:] == [f"{surface.bus_name}/StatusNotifierItem"],
                 what="the item to register once a watcher appears")
    finally:
        surface.stop()
        thread.join(10)


def test_watcher_present_tells_whether_a_panel_would_show_the_item(bus_address, panel):
    panel.take_watcher_name()
    assert watcher_present(bus_address)
    panel.drop_watcher_name()
    try:
        assert not watcher_present(bus_address)
    finally:
        panel.take_watcher_name()
    assert not watcher_present("unix:path=/nonexistent/bus")


# -- what a panel reads ---------------------------------------------------------------


def unpack_argb(data: bytes) -> bytes:
    """ARGB (network order) back to PIL's RGBA bytes."""
    out = bytearray(len(data))
    out[0::4], out[1::4], out[2::4], out[3::4] = data[1::4], data[2::4], data[3::4], data[0::4]
    return bytes(out)


def test_a_panel_reads_the_icon_at_every_size_the_tooltip_and_the_status(tray):
    props = tray.panel.call(tray.name, "/StatusNotifierItem", PROPS, "GetAll", "s", [ITEM])[0]
    values = {name: variant.value for name, variant in props.items()}
    title = presenter.title(BUSY, NOW)
    assert values["Category"] == "ApplicationStatus"
    assert values["Id"] == "sloth-tray"
    assert values["Title"] == title
    assert values["Status"] == "NeedsAttention"
    assert values["IconName"] == ""
    assert values["ItemIsMenu"] is False
    assert values["Menu"] == "/MenuBar"
    assert list(values["ToolTip"]) == ["", [], title, ""]
    # GNOME's extension reads these on every icon change (a JS error each time without)
    assert values["IconAccessibleDesc"] == values["AttentionAccessibleDesc"] == title
    pixmaps = values["IconPixmap"]
    assert [(w, h) for w, h, _ in pixmaps] == [(size, size) for size in ICON_SIZES]
    for width, height, data in pixmaps:
        assert len(data) == width * height * 4
        assert unpack_argb(data) == render(presenter.look(BUSY), width).tobytes()
    assert list(map(list, values["AttentionIconPixmap"])) == list(map(list, pixmaps))


def test_argb32_puts_alpha_first():
    from PIL import Image

    assert argb32(Image.new("RGBA", (1, 1), (10, 20, 30, 40))) == bytes([40, 10, 20, 30])


def expected_layout(items: tuple[presenter.Item, ...]) -> list[tuple[dict, list]]:
    """The tree a host should see for the presenter's items (ids left out)."""
    tree = []
    for item in items:
        if replace(item, key="") == presenter.SEPARATOR:
            tree.append(({"type": "separator"}, []))
            continue
        props: dict[str, Any] = {"label": item.label.replace("_", "__"),
                                 "enabled": item.enabled, "visible": True}
        if item.submenu:
            props["children-display"] = "submenu"
        if item.checked is not None:
            props["toggle-type"] = "checkmark"
            props["toggle-state"] = int(item.checked)
        tree.append((props, expected_layout(item.submenu)))
    return tree


def plain(children: list[Variant]) -> list[tuple[dict, list]]:
    out = []
    for child in children:
        _id, props, kids = child.value
        out.append(({name: v.value for name, v in props.items()}, plain(kids)))
    return out


def ids_by_path(children: list[Variant], path: tuple = ()) -> dict[tuple, int]:
    """Menu ids keyed by their positions, e.g. (2, 0, 1): the third item's first's second."""
    found = {}
    for index, child in enumerate(children):
        node_id, _props, kids = child.value
        found[(*path, index)] = node_id
        found.update(ids_by_path(kids, (*path, index)))
    return found


def item_at(items: tuple[presenter.Item, ...], path: tuple) -> presenter.Item:
    item = items[path[0]]
    return item if len(path) == 1 else item_at(item.submenu, path[1:])


def host_draws(drawn: list[int], layout: list[int]) -> list[int]:
    """The rows GNOME's extension (46) draws after a new layout of a parent: it walks
    the layout, inserting each new id at its index in the rows it draws, which still
    hold the rows about to go; it never moves a known row; then removes the gone."""
    rows = list(drawn)
    for index, node_id in enumerate(layout):
        if node_id not in drawn:
            rows.insert(index, node_id)
    return [node_id for node_id in rows if node_id in layout]


class CachingHost:
    """A host that keeps what it read, as GNOME's AppIndicator extension (46) does: on
    LayoutUpdated it reads the layout's ids and types and the properties of new ids
    only; a known row keeps its properties until ItemsPropertiesUpdated changes them,
    and keeps its place among the rows it was drawn with (new rows go where the layout
    puts them)."""

    def __init__(self, tray: Tray) -> None:
        self.tray = tray
        self.props: dict[int, dict[str, Any]] = {}
        self.children: dict[int, list[int]] = {}
        self.seen = len(tray.panel.signals)
        self._read_layout()

    def _call(self, member: str, signature: str, body: list[Any]) -> list[Any]:
        return self.tray.panel.call(self.tray.name, "/MenuBar", MENU, member, signature, body)

    def _read_layout(self) -> None:
        _revision, tree = self._call("GetLayout", "iias", [0, -1, ["type"]])
        fresh: list[int] = []
        self._take(tree, fresh)
        if fresh:
            for node_id, props in self._call("GetGroupProperties", "aias", [fresh, []])[0]:
                self.props[node_id] = {k: v.value for k, v in props.items()}

    def _take(self, node: list[Any], fresh: list[int]) -> None:
        node_id, _props, kids = node
        self.children[node_id] = host_draws(self.children.get(node_id, []),
                                            [kid.value[0] for kid in kids])
        for kid in kids:
            if kid.value[0] not in self.props:
                fresh.append(kid.value[0])
                self.props[kid.value[0]] = {}
            self._take(kid.value, fresh)

    def _catch_up(self) -> None:
        for member, body in self.tray.panel.signals[self.seen:]:
            self.seen += 1
            if member == "LayoutUpdated":
                self._read_layout()
            elif member == "ItemsPropertiesUpdated":
                updated, removed = body
                for node_id, props in updated:
                    self.props.setdefault(node_id, {}).update(
                        {k: v.value for k, v in props.items()})
                for node_id, names in removed:
                    for name in names:
                        self.props.get(node_id, {}).pop(name, None)

    def shows(self, node_id: int = 0) -> list[tuple[dict, list]]:
        if node_id == 0:
            self._catch_up()
        return [(self.props[kid], self.shows(kid)) for kid in self.children.get(node_id, [])]


def test_the_layout_is_the_presenters_menu(tray, scene):
    _revision, (root_id, root_props, children) = tray.layout()
    assert root_id == 0
    assert root_props["children-display"].value == "submenu"
    assert plain(children) == expected_layout(scene.menu())
    status = children[0].value[1]["label"].value
    assert "backup_home" in presenter.status_line(BUSY, NOW)
    assert status == presenter.status_line(BUSY, NOW).replace("backup_home", "backup__home")
    ids = list(ids_by_path(children).values())
    assert len(set(ids)) == len(ids) and 0 not in ids


def click_everything(tray: Tray, scene: Scene) -> None:
    """Click every id of the layout; each must do what the presenter's item does."""
    _revision, (_root, _props, children) = tray.layout()
    expected = Recorder()
    expected.calls = list(scene.controls.calls)
    items = scene.menu(expected)
    for path, node_id in ids_by_path(children).items():
        item = item_at(items, path)
        if item.action is not None and item.enabled:
            item.action()  # what the click must do, recorded apart
        tray.click(node_id)
        assert scene.controls.calls == expected.calls, f"after a click on {item.label!r}"


def test_a_click_on_every_item_runs_its_action_on_the_surface_thread(tray, scene):
    click_everything(tray, scene)
    # The rows only lanes have (Pause and Resume by lane, ...) and a job's question
    scene.snapshot = replace(LANES, asking=(ASKED,), asking_count=1)
    assert tray.about_to_show() is False
    click_everything(tray, scene)
    names = {call[0] for call in scene.controls.calls}
    assert names == {name for name in vars(presenter.Controls) if not name.startswith("_")}
    assert scene.controls.threads == {"surface"}

    scene.snapshot = QUIET  # "Retry all failed" is there, greyed out: a click does nothing
    assert tray.about_to_show() is False  # what changed went out as signals, first
    assert "LayoutUpdated" in tray.members()
    before = len(scene.controls.calls)
    click_everything(tray, scene)
    assert ("retry_all_failed",) not in scene.controls.calls[before:]


def test_the_group_calls_of_dbusmenu_answer_like_the_single_ones(tray, scene):
    _revision, (_root, _props, children) = tray.layout()
    quit_id = ids_by_path(children)[(len(scene.menu()) - 1,)]
    menu = (tray.name, "/MenuBar", MENU)
    [[[node_id, props]]] = tray.panel.call(*menu, "GetGroupProperties", "aias",
                                           [[quit_id], ["label"]])
    assert (node_id, {k: v.value for k, v in props.items()}) == (
        quit_id, {"label": "Quit (stops backup__home; it runs again at the next start)"})
    assert tray.panel.call(*menu, "GetProperty", "is", [quit_id, "enabled"])[0].value is True
    assert tray.panel.call(*menu, "AboutToShowGroup", "ai", [[0, 424242]]) == [[], [424242]]
    scene.now += 60
    tray.panel.signals.clear()
    assert tray.panel.call(*menu, "AboutToShowGroup", "ai", [[0]]) == [[], []]
    assert tray.members() == ["ItemsPropertiesUpdated"]  # before the reply
    _revision, (_root, _props, children) = tray.layout()
    assert tray.panel.call(*menu, "EventGroup", "a(isvu)", [[
        [quit_id, "clicked", Variant("s", ""), 0], [424242, "clicked", Variant("s", ""), 0],
    ]]) == [[424242]]
    wait_for(lambda: scene.controls.calls, what="the click from the group")
    assert scene.controls.calls == [("quit",)]
    with pytest.raises(DBusError):
        tray.panel.call(*menu, "GetLayout", "iias", [424242, -1, []])
    props = tray.panel.call(tray.name, "/MenuBar", PROPS, "GetAll", "s", [MENU])[0]
    assert {k: v.value for k, v in props.items()} == {
        "Version": 3, "Status": "normal", "TextDirection": "ltr", "IconThemePath": []}


def test_a_click_on_an_id_from_the_layout_before_a_rebuild_reaches_its_action(tray, scene):
    _revision, (_root, _props, children) = tray.layout()
    ids = ids_by_path(children)
    items = scene.menu()
    waiting = next(i for i, item in enumerate(items) if item.label.startswith("Waiting"))
    run_now = ids[(waiting, 0, 0)]
    quit_id = ids[(len(items) - 1,)]
    scene.snapshot = replace(scene.snapshot, waiting=(), pending=0)  # it started meanwhile
    tray.change(tray.surface.menu_changed)
    wait_for(lambda: "LayoutUpdated" in tray.members(), what="the rebuilt layout")
    _revision, (_root, _props, children) = tray.layout()
    assert run_now not in ids_by_path(children).values()
    assert quit_id in ids_by_path(children).values()  # the same row, the same id
    tray.click(run_now)
    assert scene.controls.calls == [("run_now", "w1")]


def test_a_relabelled_row_keeps_its_id_and_only_its_new_label_is_sent(tray, scene):
    """waybar broke an open submenu (and once crashed) when the running row's id changed
    each second; GNOME shows a known row's new label only when told."""
    _revision, (_root, _props, children) = tray.layout()
    before = ids_by_path(children)
    tray.panel.signals.clear()
    scene.now += 60  # 0:42 becomes 1:42, "in 4 min" becomes "in 3 min"
    tray.change(tray.surface.menu_changed)
    wait_for(lambda: tray.members(), what="the change")
    _revision, (_root, _props, children) = tray.layout()
    assert ids_by_path(children) == before
    [(member, (updated, removed))] = tray.panel.signals
    assert member == "ItemsPropertiesUpdated" and removed == []
    labels = {node_id: props["label"].value for node_id, props in updated}
    assert "1:42" in labels[before[(0,)]]
    assert all(set(props) == {"label"} for _id, props in updated)


def test_a_host_that_reads_only_new_ids_and_told_changes_shows_the_menu_as_it_is(tray, scene):
    """GNOME's extension: the layout's types, then properties only of ids it has not
    seen; after that, what ItemsPropertiesUpdated says. After a failure and after a
    resume, what it shows must be the menu itself: "Retry all failed" clickable, the
    check mark gone, the rows in the layout's order."""
    host = CachingHost(tray)
    for snapshot in (QUIET, BUSY, replace(QUIET, paused=True), QUIET):
        scene.snapshot = snapshot
        tray.change(tray.surface.menu_changed)
        tray.panel.call(tray.name, "/MenuBar", PROPS, "Get", "ss", [MENU, "Version"])
        wait_for(lambda: host.shows() == expected_layout(scene.menu()), timeout=5,
                 what=f"the host to show the menu of {snapshot}")


def test_left_click_runs_the_default_item(tray, scene):
    tray.panel.call(tray.name, "/StatusNotifierItem", ITEM, "Activate", "ii", [5, 5])
    wait_for(lambda: scene.controls.calls, what="the default action")
    assert scene.controls.calls == [("retry_all_failed",)]
    scene.snapshot = QUIET
    tray.panel.call(tray.name, "/StatusNotifierItem", ITEM, "Activate", "ii", [5, 5])
    wait_for(lambda: len(scene.controls.calls) == 2, what="the default action")
    assert scene.controls.calls[1] == ("open_jobs",)


def test_the_activation_token_a_panel_gives_before_a_click_is_taken_once(tray, scene):
    """Plasma calls ProvideXdgActivationToken before each click; what the click opens
    passes the token on (a stale or a second use gets none)."""
    item = (tray.name, "/StatusNotifierItem", ITEM)
    tray.panel.call(*item, "ProvideXdgActivationToken", "s", ["kwin-token-1"])
    tray.panel.call(*item, "Activate", "ii", [5, 5])
    taken: list[str | None] = []
    tray.change(lambda: taken.append(tray.surface.take_activation_token()))
    tray.change(lambda: taken.append(tray.surface.take_activation_token()))
    wait_for(lambda: len(taken) == 2, what="the tokens")
    assert taken == ["kwin-token-1", None]


def test_an_activation_token_left_unused_goes_stale_and_an_empty_one_is_none():
    from sloth_tray.tray.sni import TOKEN_FRESH_FOR, StatusNotifierItem

    now = [100.0]
    item = StatusNotifierItem("sloth-tray", Appearance(Look.IDLE, "t"), lambda: None,
                              clock=lambda: now[0])
    item.activation_token = ("kwin-1", now[0])
    now[0] += TOKEN_FRESH_FOR + 0.5  # the click was long ago: its token is no good
    assert item.take_activation_token() is None
    item.activation_token = ("", now[0])  # Plasma on X11, without KWin
    assert item.take_activation_token() is None
    item.activation_token = ("kwin-2", now[0])
    assert item.take_activation_token() == "kwin-2"


def test_an_action_that_raises_is_logged_and_the_menu_keeps_working(tray, scene, caplog):
    scene.controls.failing.add("open_logs")
    _revision, (_root, _props, children) = tray.layout()
    by_key = {item.key: child.value[0] for item, child in zip(scene.menu(), children,
                                                               strict=True)}
    with caplog.at_level(logging.ERROR, logger="sloth_tray"):
        tray.click(by_key["open-logs"])
        tray.click(by_key["quit"])
    assert scene.controls.calls == [("open_logs",), ("quit",)]
    [record] = [r for r in caplog.records if r.exc_info]
    assert record.name == "sloth_tray" and "'Open logs'" in record.getMessage()
    assert "could not open anything" in str(record.exc_info[1])


# -- changes ------------------------------------------------------------------------


def test_a_new_state_signals_what_changed_and_nothing_else(tray, scene):
    same = scene.appearance()
    retitled = Appearance(same.look, same.title + " · 9 waiting", same.status)
    tray.change(lambda: tray.surface.show(same))
    tray.change(lambda: tray.surface.show(retitled))
    wait_for(lambda: "NewToolTip" in tray.members(), what="NewToolTip")
    assert tray.members() == ["NewTitle", "NewToolTip"]
    assert tray.prop("ToolTip")[2] == retitled.title

    tray.panel.signals.clear()
    scene.snapshot = QUIET  # the failures were retried and done
    tray.change(lambda: tray.surface.show(scene.appearance()))
    tray.change(tray.surface.menu_changed)
    wait_for(lambda: "LayoutUpdated" in tray.members(), what="LayoutUpdated")
    assert set(tray.members()) - {"ItemsPropertiesUpdated"} == {
        "NewIcon", "NewAttentionIcon", "NewTitle", "NewToolTip", "NewStatus", "LayoutUpdated"}
    assert ("NewStatus", ["Active"]) in tray.panel.signals
    revision, _tree = tray.layout()
    assert ("LayoutUpdated", [revision, 0]) in tray.panel.signals
    assert tray.prop("Status") == "Active"
    assert unpack_argb(tray.prop("IconPixmap")[0][2]) == render(Look.IDLE, 16).tobytes()
    _revision, (_root, _props, children) = tray.layout()
    assert plain(children) == expected_layout(scene.menu())


def test_opening_the_menu_shows_the_time_of_now(tray, scene):
    def status_label() -> str:
        _revision, (_root, _props, children) = tray.layout()
        return children[0].value[1]["label"].value

    assert "0:42" in status_label()
    tray.panel.signals.clear()
    assert tray.about_to_show() is False
    assert tray.members() == []  # nothing changed since the last build
    scene.now += 60
    assert tray.about_to_show() is False  # KDE skips the next LayoutUpdated after a True
    assert tray.members() == ["ItemsPropertiesUpdated"]  # sent before the reply
    assert "1:42" in status_label()


def test_shown_from_another_thread_the_change_is_made_on_the_surface_thread(tray, scene):
    applied_on = []
    update = tray.surface.item.update
    tray.surface.item.update = lambda appearance: (
        applied_on.append(threading.current_thread().name), update(appearance))
    scene.snapshot = QUIET
    tray.surface.show(scene.appearance())  # from this thread, not the surface's
    wait_for(lambda: "NewStatus" in tray.members(), what="NewStatus")
    assert applied_on == ["surface"]
    assert tray.prop("Status") == "Active"


# -- life -----------------------------------------------------------------------------


def test_stopped_before_it_runs_it_never_shows_up(bus_address, panel):
    surface = SniSurface(bus_address=bus_address)
    surface.stop()
    ready = threading.Event()
    surface.run(ready.set)  # returns at once
    assert not ready.is_set() and surface.bus_name is None


def test_when_the_session_bus_ends_run_returns_and_says_why(caplog):
    daemon = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--print-address=1"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        surface = SniSurface(bus_address=daemon.stdout.readline().strip())
        ready = threading.Event()
        thread = threading.Thread(target=surface.run, args=(ready.set,), name="surface")
        with caplog.at_level(logging.INFO, logger="sloth_tray"):
            thread.start()
            assert ready.wait(10)  # no watcher on this bus: shown as soon as one comes
            os.kill(daemon.pid, signal.SIGKILL)
            thread.join(10)
        assert not thread.is_alive()
        assert "no panel shows the tray icon yet" in caplog.text
        assert "the session D-Bus closed the connection" in caplog.text
    finally:
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.wait(10)


def test_without_a_session_bus_run_raises_one_sentence():
    surface = SniSurface(bus_address="unix:path=/nonexistent/bus")
    with pytest.raises(SlothError, match="could not connect to the session D-Bus at "
                                         "unix:path=/nonexistent/bus"):
        surface.run(lambda: None)


def test_a_panel_asking_for_everything_at_once_never_costs_the_connection(tray):
    """Replies larger than the socket's buffer, all at once: the kernel answers
    EAGAIN, which must mean "wait until it drains", never "the bus is gone"."""
    async def burst() -> list[Any]:
        calls = [busmod.call(tray.panel.bus, tray.name, "/StatusNotifierItem", PROPS, "GetAll",
                             "s", [ITEM]) for _ in range(40)]
        return await asyncio.gather(*calls)

    replies = tray.panel.do(burst(), timeout=30)
    assert len(replies) == 40 and all("IconPixmap" in reply[0] for reply in replies)
    assert tray.prop("Id") == "sloth-tray"  # the item still answers


def test_a_host_that_only_asks_is_given_30s_unless_the_test_knob_says_otherwise(caplog):
    """$SLOTH_TRAY_MENU_ASKED_FOR: what the desktop tests shorten the window with; a value
    that is not a number of seconds is one sentence in the log, and the 30 s stand."""
    from sloth_tray.tray.dbusmenu import ASKED_FOR_ENV, OPEN_AT_MOST, asked_for

    assert asked_for({}) == 30.0
    assert asked_for({ASKED_FOR_ENV: "4.5"}) == 4.5
    assert asked_for({ASKED_FOR_ENV: str(OPEN_AT_MOST)}) == OPEN_AT_MOST
    assert caplog.records == []
    for bad in ("", "soon", "5s", "0", "-1", "nan", "inf", "601", "4\x1b"):
        caplog.clear()
        assert asked_for({ASKED_FOR_ENV: bad}) == 30.0
        assert [record.getMessage() for record in caplog.records] == [
            f"SLOTH_TRAY_MENU_ASKED_FOR={printable(bad)} is not a number of seconds from 0 "
            "to 600: the menu keeps to 30 s"]


REFRESH = 0.4  # seconds: the open menu's refresh in the tests below (the app's: 1 s)


@pytest.fixture
def refresh(monkeypatch) -> float:
    """An open menu refreshed every REFRESH seconds instead of every second. The tests'
    waits and windows are counted in refresh periods, so they keep their proportions."""
    from sloth_tray.tray import dbusmenu

    monkeypatch.setattr(dbusmenu, "REFRESH_SECONDS", REFRESH)
    monkeypatch.setattr(presenter, "REFRESH_SECONDS", REFRESH)
    return REFRESH


@pytest.mark.slow
def test_an_open_menus_times_move_once_a_second_and_a_closed_one_costs_nothing(tray, scene,
                                                                               refresh):
    def event(name: str) -> None:
        tray.panel.call(tray.name, "/MenuBar", MENU, "Event", "isvu",
                        [0, name, Variant("s", ""), 0])

    def updates() -> int:
        return tray.members().count("ItemsPropertiesUpdated")

    event("opened")
    before = updates()
    scene.now += 60  # a running job's minute passes while the menu is open
    wait_for(lambda: updates() > before, timeout=5, what="the open menu to move on by itself")
    _revision, (_root, _props, children) = tray.layout()
    assert "1:42" in children[0].value[1]["label"].value

    event("closed")
    closed = len(tray.panel.signals)  # after the reply: all the close itself sent
    scene.now += 60  # a rebuild would have a new time to send
    # 2.5 refresh periods pass on the tray's own loop: a timer there fires only after
    # every tick due before it (a loop runs its timers in the order they are due).
    passed = threading.Event()
    tray.surface.post(lambda: asyncio.get_running_loop().call_later(
        2.5 * presenter.REFRESH_SECONDS, passed.set))
    assert passed.wait(10), "the tray's loop never came to the end of the periods"
    # One round trip: what the tray sent before it answers has reached the panel.
    tray.panel.call(tray.name, "/MenuBar", PROPS, "Get", "ss", [MENU, "Version"])
    assert tray.panel.signals[closed:] == [], "a closed menu was rebuilt"


@pytest.mark.slow
def test_a_host_that_only_asks_gets_moving_times_for_a_bounded_while(tray, scene,
                                                                     monkeypatch, refresh):
    """xfce4-panel and waybar open the root menu with AboutToShowGroup([0]) and never say
    "opened" (nor waybar "closed"): times move all the same, and stop ASKED_FOR seconds
    after the host last asked, the rows' ids unchanged."""
    from sloth_tray.tray import dbusmenu

    monkeypatch.setattr(dbusmenu, "ASKED_FOR", 3 * refresh)
    _revision, (_root, _props, children) = tray.layout()
    running = children[0].value[0]
    tray.panel.call(tray.name, "/MenuBar", MENU, "AboutToShowGroup", "ai", [[0]])
    tray.panel.signals.clear()
    scene.now += 60  # a minute passes while the menu is open: no call from the host
    wait_for(lambda: "ItemsPropertiesUpdated" in tray.members(), timeout=5,
             what="the open menu to move on by itself")
    [(_member, (updated, _removed))] = tray.panel.signals[:1]
    assert running in [node_id for node_id, _props in updated]
    started = time.monotonic()

    def quiet_for(seconds: float) -> bool:
        """No update in the last `seconds` (the menu stopped ticking)."""
        count = len(tray.panel.signals)
        scene.now += 1
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if len(tray.panel.signals) != count:
                return False
            time.sleep(0.1)
        return True

    wait_for(lambda: quiet_for(2.5 * refresh), timeout=15, what="the updates to stop")
    assert time.monotonic() - started < 3 * refresh + 2.5 * refresh + 2


@pytest.mark.slow
def test_a_host_that_never_says_closed_is_believed_for_a_bounded_while(tray, scene,
                                                                      monkeypatch, refresh):
    from sloth_tray.tray import dbusmenu

    monkeypatch.setattr(dbusmenu, "OPEN_AT_MOST", 3 * refresh)
    tray.panel.call(tray.name, "/MenuBar", MENU, "Event", "isvu",
                    [0, "opened", Variant("s", ""), 0])
    started = time.monotonic()

    def ticking() -> bool:
        count = tray.members().count("ItemsPropertiesUpdated")
        scene.now += 1
        deadline = time.monotonic() + 2.5 * refresh
        while time.monotonic() < deadline:
            if tray.members().count("ItemsPropertiesUpdated") != count:
                return True
            time.sleep(0.1)
        return False

    assert ticking()
    wait_for(lambda: not ticking(), timeout=15, what="the updates to stop")
    assert time.monotonic() - started < 3 * refresh + 2 * 2.5 * refresh + 2


@pytest.mark.slow
def test_a_submenu_left_open_keeps_its_times_moving_until_it_closes(tray, scene,
                                                                   monkeypatch, refresh):
    """waybar says "opened"/"closed" for submenus only."""
    from sloth_tray.tray import dbusmenu

    monkeypatch.setattr(dbusmenu, "ASKED_FOR", refresh)
    ids = ids_by_path(tray.layout()[1][2])
    items = scene.menu()
    waiting = ids[(next(i for i, item in enumerate(items) if item.key == "waiting"
                        or item.label.startswith("Waiting")),)]
    event = lambda name: tray.panel.call(  # noqa: E731
        tray.name, "/MenuBar", MENU, "Event", "isvu", [waiting, name, Variant("s", ""), 0])
    event("opened")
    for _ in range(3):  # past ASKED_FOR: "opened" is what keeps it going
        count = tray.members().count("ItemsPropertiesUpdated")
        scene.now += 60
        wait_for(lambda count=count: tray.members().count("ItemsPropertiesUpdated") > count,
                 timeout=5,
                 what="the open submenu's times to move")
    event("closed")
    count = len(tray.panel.signals)  # after the reply: the rows the close itself sent
    scene.now += 60  # a rebuild would have a new time to send
    # Past ASKED_FOR and 2.5 refresh periods on the tray's own loop: a timer there fires
    # only after every tick due before it (a loop runs its timers in the order due).
    passed = threading.Event()
    tray.surface.post(lambda: asyncio.get_running_loop().call_later(
        max(dbusmenu.ASKED_FOR, 2.5 * presenter.REFRESH_SECONDS), passed.set))
    assert passed.wait(10), "the tray's loop never came to the end of the periods"
    # One round trip: what the tray sent before it answers has reached the panel.
    tray.panel.call(tray.name, "/MenuBar", PROPS, "Get", "ss", [MENU, "Version"])
    assert tray.panel.signals[count:] == [], "a closed submenu was rebuilt"


def test_an_update_posted_after_stop_is_dropped_not_written_to_a_closing_bus(
        bus_address, caplog):
    """Quitting, the tray's last updates still arrive after stop(), while the loop lets
    go of the bus: written to the closing socket, one failed in epoll with a traceback
    in the log. They are dropped: the icon is leaving."""
    loop = busmod.BusLoop(bus_address)
    sent: list[Any] = []

    async def start(bus: MessageBus) -> None:
        return None

    caplog.set_level(logging.DEBUG, logger="sloth_tray")
    thread = threading.Thread(target=loop.run, args=(start,), name="bus")
    thread.start()
    try:
        wait_for(lambda: loop.bus is not None and loop.bus.connected, what="the bus")
        bus = loop.bus

        def quit_then_update() -> None:  # in this order on the loop, as a quit can race
            loop.stop()
            loop.post(lambda: sent.append(bus.send(Message.new_signal(
                "/StatusNotifierItem", "org.kde.StatusNotifierItem", "NewIcon"))))

        loop.post(quit_then_update)
        thread.join(10)
        assert not thread.is_alive()
    finally:
        loop.stop()
    assert sent == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_menu_and_an_item_leaving_the_bus_send_no_signal(scene):
    """A panel's call that comes in while the loop lets go of the bus (AboutToShow,
    racing a quit) must not emit on the closing socket: dbus-fast logs the failed
    send as "Service interface raised an exception", with a traceback."""
    from sloth_tray.tray.dbusmenu import DbusMenu
    from sloth_tray.tray.sni import StatusNotifierItem

    open_bus = [True]
    sent: list[str] = []
    menu = DbusMenu(scene.menu, can_send=lambda: open_bus[0])
    menu.LayoutUpdated = lambda *args: sent.append("LayoutUpdated")
    menu.ItemsPropertiesUpdated = lambda *args: sent.append("ItemsPropertiesUpdated")
    item = StatusNotifierItem("sloth-tray", scene.appearance(), lambda: None,
                              can_send=lambda: open_bus[0])
    item.NewIcon = lambda: sent.append("NewIcon")
    item.NewAttentionIcon = lambda: sent.append("NewAttentionIcon")
    assert menu.refresh() and sent == ["LayoutUpdated"]
    open_bus[0] = False
    scene.snapshot = Snapshot()
    assert menu.refresh()  # the layout changed: kept, and said to no one
    item.update(scene.appearance())
    assert sent == ["LayoutUpdated"] and item.appearance == scene.appearance()


def test_a_reply_that_meets_the_socket_we_closed_is_no_traceback_in_the_log(
        bus_address, caplog):
    """Quitting while a panel asks for the menu: dbus-fast still hands the calls it read
    to their handlers after our disconnect, and logs the reply that meets the closed
    socket (EBADF) with a traceback. Once the loop let go of the bus, that says nothing
    a user should read; any other failure still does."""
    import errno

    loop = busmod.BusLoop(bus_address)

    async def start(bus: MessageBus) -> None:
        return None

    thread = threading.Thread(target=loop.run, args=(start,), name="bus")
    thread.start()
    wait_for(lambda: loop.bus is not None and loop.bus.connected, what="the bus")
    loop.stop()
    thread.join(10)
    # dbus-fast says so from its reader, from the bus for a method call's handler, or
    # from the reply itself (to a panel's GetLayout, say): as each of them logs it.
    for name, said in (("dbus_fast.aio.message_reader", "Unexpected error processing message"),
                       ("dbus_fast.message_bus", "A message handler raised an exception"),
                       ("dbus_fast.send_reply", "Service interface raised an exception")):
        caplog.clear()
        caplog.set_level(logging.ERROR, logger=name)
        for code in (errno.EBADF, errno.EIO):
            try:
                raise OSError(code, os.strerror(code))
            except OSError:
                logging.getLogger(name).exception(said)
        assert [record.exc_info[1].errno for record in caplog.records] == [errno.EIO], name
