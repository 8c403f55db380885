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
from typing import Annotated, Any

import pytest
from conftest import BUSY, NOW, Recorder, wait_for

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("dbus-daemon") is None,
    reason="needs Linux and dbus-daemon (apt-get install dbus)")

from dbus_fast import DBusError, Message, MessageType, Variant  # noqa: E402
from dbus_fast.aio import MessageBus  # noqa: E402
from dbus_fast.annotations import DBusBool, DBusInt32, DBusSignature, DBusStr  # noqa: E402
from dbus_fast.service import (  # noqa: E402
    PropertyAccess,
    ServiceInterface,
    dbus_method,
    dbus_property,
    dbus_signal,
)

from sloth_tray import presenter  # noqa: E402
from sloth_tray.desktop import bus as busmod  # noqa: E402
from sloth_tray.desktop.sni import (  # noqa: E402
    ICON_SIZES,
    SniSurface,
    argb32,
    watcher_present,
)
from sloth_tray.engine import Snapshot  # noqa: E402
from sloth_tray.errors import SlothError  # noqa: E402
from sloth_tray.icons import Look, render  # noqa: E402
from sloth_tray.surface import Appearance, Status  # noqa: E402

WATCHER = "org.kde.StatusNotifierWatcher"
ITEM = "org.kde.StatusNotifierItem"
MENU = "com.canonical.dbusmenu"
PROPS = "org.freedesktop.DBus.Properties"
Strs = Annotated[list[str], DBusSignature("as")]

QUIET = Snapshot(done=3)


class FakeWatcher(ServiceInterface):
    """What a panel exports: items tell it their bus name."""

    def __init__(self) -> None:
        super().__init__(WATCHER)
        self.items: list[str] = []

    @dbus_method()
    def RegisterStatusNotifierItem(self, service: DBusStr):
        self.items.append(service)

    @dbus_property(access=PropertyAccess.READ)
    def RegisteredStatusNotifierItems(self) -> Strs:
        return list(self.items)

    @dbus_property(access=PropertyAccess.READ)
    def IsStatusNotifierHostRegistered(self) -> DBusBool:
        return True

    @dbus_property(access=PropertyAccess.READ)
    def ProtocolVersion(self) -> DBusInt32:
        return 0

    @dbus_signal()
    def StatusNotifierItemRegistered(self, service: str) -> DBusStr:
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
        name = f"{ITEM}-{os.getpid()}-1"
        assert surface.bus_name == name
        assert panel.watcher.items[-1] == name  # already when ready() ran
        assert panel.owned(name)
        assert threading.active_count() == threads_before + 1  # the one that calls run()
    finally:
        surface.stop()
        thread.join(10)
    assert not thread.is_alive()
    assert not panel.owned(name), "a stopped item must leave the panel at once"
    surface.post(lambda: None)  # after the end: dropped, not an error


def test_a_restarted_panel_gets_the_item_again(tray, panel):
    count = panel.watcher.items.count(tray.name)
    panel.drop_watcher_name()
    panel.take_watcher_name()
    wait_for(lambda: panel.watcher.items.count(tray.name) == count + 1,
             what="the item to register with the new watcher")


def test_an_item_started_before_any_panel_shows_up_when_a_panel_starts(
        bus_address, panel, scene):
    panel.drop_watcher_name()
    assert not watcher_present(bus_address)
    count = len(panel.watcher.items)
    surface, thread = start(bus_address, panel, scene)  # ready() all the same
    try:
        assert len(panel.watcher.items) == count
        panel.take_watcher_name()
        wait_for(lambda: panel.watcher.items[count:] == [surface.bus_name],
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
    pixmaps = values["IconPixmap"]
    assert [(w, h) for w, h, _ in pixmaps] == [(size, size) for size in ICON_SIZES]
    for width, height, data in pixmaps:
        assert len(data) == width * height * 4
        assert unpack_argb(data) == render(Look.FAILED, width).tobytes()
    assert list(map(list, values["AttentionIconPixmap"])) == list(map(list, pixmaps))


def test_argb32_puts_alpha_first():
    from PIL import Image

    assert argb32(Image.new("RGBA", (1, 1), (10, 20, 30, 40))) == bytes([40, 10, 20, 30])


def expected_layout(items: tuple[presenter.Item, ...]) -> list[tuple[dict, list]]:
    """The tree a host should see for the presenter's items (ids left out)."""
    tree = []
    for item in items:
        if item == presenter.SEPARATOR:
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
    names = {call[0] for call in scene.controls.calls}
    assert names == {name for name in vars(presenter.Controls) if not name.startswith("_")}
    assert scene.controls.threads == {"surface"}

    scene.snapshot = QUIET  # "Retry all failed" is there, greyed out: a click does nothing
    assert tray.about_to_show() is True
    before = len(scene.controls.calls)
    click_everything(tray, scene)
    assert ("retry_all_failed",) not in scene.controls.calls[before:]


def test_the_group_calls_of_dbusmenu_answer_like_the_single_ones(tray, scene):
    _revision, (_root, _props, children) = tray.layout()
    quit_id = ids_by_path(children)[(len(scene.menu()) - 1,)]
    menu = (tray.name, "/MenuBar", MENU)
    [[[node_id, props]]] = tray.panel.call(*menu, "GetGroupProperties", "aias",
                                           [[quit_id], ["label"]])
    assert (node_id, {k: v.value for k, v in props.items()}) == (quit_id, {"label": "Quit"})
    assert tray.panel.call(*menu, "GetProperty", "is", [quit_id, "enabled"])[0].value is True
    assert tray.panel.call(*menu, "AboutToShowGroup", "ai", [[0, 424242]]) == [[], [424242]]
    scene.now += 60
    assert tray.panel.call(*menu, "AboutToShowGroup", "ai", [[0]]) == [[0], []]
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
    scene.now += 60  # "in 4 min" becomes "in 3 min": new labels, new ids
    tray.change(tray.surface.menu_changed)
    wait_for(lambda: "LayoutUpdated" in tray.members(), what="the rebuilt layout")
    _revision, (_root, _props, children) = tray.layout()
    assert run_now not in ids_by_path(children).values()
    assert ids_by_path(children)[(len(items) - 1,)] == quit_id  # same label path, same id
    tray.click(run_now)
    assert scene.controls.calls == [("run_now", "w1")]


def test_left_click_runs_the_default_item(tray, scene):
    tray.panel.call(tray.name, "/StatusNotifierItem", ITEM, "Activate", "ii", [5, 5])
    wait_for(lambda: scene.controls.calls, what="the default action")
    assert scene.controls.calls == [("retry_all_failed",)]
    scene.snapshot = QUIET
    tray.panel.call(tray.name, "/StatusNotifierItem", ITEM, "Activate", "ii", [5, 5])
    wait_for(lambda: len(scene.controls.calls) == 2, what="the default action")
    assert scene.controls.calls[1] == ("open_jobs",)


def test_an_action_that_raises_is_logged_and_the_menu_keeps_working(tray, scene, caplog):
    scene.controls.failing.add("open_logs")
    _revision, (_root, _props, children) = tray.layout()
    by_label = {props["label"].value: child_id for child_id, props, _kids in
                (child.value for child in children) if "label" in props}
    with caplog.at_level(logging.ERROR, logger="sloth_tray"):
        tray.click(by_label["Open logs"])
        tray.click(by_label["Quit"])
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
    assert set(tray.members()) == {"NewIcon", "NewAttentionIcon", "NewTitle", "NewToolTip",
                                   "NewStatus", "LayoutUpdated"}
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
    assert tray.about_to_show() is False  # nothing changed since the last build
    scene.now += 60
    assert tray.about_to_show() is True
    assert "1:42" in status_label()
    assert "LayoutUpdated" in tray.members()
    assert tray.about_to_show() is False


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


def test_an_open_menus_times_move_once_a_second_and_a_closed_one_costs_nothing(tray, scene):
    def event(name: str) -> None:
        tray.panel.call(tray.name, "/MenuBar", MENU, "Event", "isvu",
                        [0, name, Variant("s", ""), 0])

    def updates() -> int:
        return tray.members().count("LayoutUpdated")

    event("opened")
    before = updates()
    scene.now += 60  # a running job's minute passes while the menu is open
    wait_for(lambda: updates() > before, timeout=5, what="the open menu to move on by itself")
    _revision, (_root, _props, children) = tray.layout()
    assert "1:42" in children[0].value[1]["label"].value

    event("closed")
    closed = updates()
    scene.now += 60
    time.sleep(2.5 * presenter.REFRESH_SECONDS)  # the scenario: time passes, menu closed
    assert updates() == closed, "a closed menu was rebuilt"


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
    from sloth_tray.desktop.dbusmenu import DbusMenu
    from sloth_tray.desktop.sni import StatusNotifierItem

    open_bus = [True]
    sent: list[str] = []
    menu = DbusMenu(scene.menu, can_send=lambda: open_bus[0])
    menu.LayoutUpdated = lambda *args: sent.append("LayoutUpdated")
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
