"""The pystray surface (the GTK icon on a bare X11 tray, macOS, Windows) without a
display: pystray's dummy backend holds the menu it was given, and every item of it is
invoked as pystray invokes a click. Each must do what the presenter's item does, with
nothing of pystray's reaching the model's actions (a `lambda job_id=job.id: ...` once
got the Icon as its job id)."""

from __future__ import annotations

import importlib
import sys
from dataclasses import replace

import pytest
from helpers.controls import Recorder
from helpers.snapshots import BUSY, NOW
from test_lanes_menu import LANES

from sloth_tray.daemon.snapshot import AskingJob
from sloth_tray.jobs.overdue import OverdueJob
from sloth_tray.tray import presenter

BUSY_OVERDUE = replace(BUSY, overdue=(OverdueJob("nightly", NOW - 3 * 86400,
                                          "failing: rsync: connection refused"),))


@pytest.fixture
def dummy_pystray(monkeypatch):
    """pystray with its dummy backend: it picks its backend when first imported."""
    for name in [m for m in sys.modules if m == "pystray" or m.startswith("pystray.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setenv("PYSTRAY_BACKEND", "dummy")
    pystray = importlib.import_module("pystray")
    # The dummy backend draws nothing and has no native menu to refresh.
    monkeypatch.setattr(pystray.Icon, "_update_menu", lambda self: None, raising=False)
    yield pystray
    for name in [m for m in sys.modules if m == "pystray" or m.startswith("pystray.")]:
        sys.modules.pop(name)


def pairs(model: tuple, shown: tuple, path=()):
    """(path, the presenter's item, pystray's item), depth first."""
    assert len(model) == len(shown), [item.label for item in model]
    for index, (item, entry) in enumerate(zip(model, shown, strict=True)):
        yield (*path, index), item, entry
        if item.submenu:
            yield from pairs(item.submenu, tuple(entry.submenu.items), (*path, index))


@pytest.mark.parametrize("starts_at_login", [False, True])
def test_every_item_pystray_shows_does_what_the_presenters_item_does(dummy_pystray,
                                                                    starts_at_login):
    from sloth_tray.tray.pystray_surface import PystraySurface

    surface = PystraySurface()
    controls = Recorder()
    expected = Recorder()
    # LANES: the rows only lanes have; and a job's question, its choices as items
    asked = replace(LANES, asking_count=1, asking=(AskingJob(
        "q1", "feed-check", "ask", 1, "Post it?", ("yes", "no"), NOW - 5),))
    for snapshot in (BUSY_OVERDUE, asked):

        def build(snapshot=snapshot):
            return presenter.menu(snapshot, controls, NOW, starts_at_login=starts_at_login)

        surface.set_menu(build)
        model = presenter.menu(snapshot, expected, NOW, starts_at_login=starts_at_login)
        shown = tuple(surface.icon.menu.items)
        for path, item, entry in pairs(model, shown):
            assert str(entry.text) == item.label or item == presenter.SEPARATOR, path
            assert entry.enabled == item.enabled, item.label
            assert entry.checked == (item.checked if item.checked is not None else None), \
                item.label
            if item.submenu or item == presenter.SEPARATOR:
                continue
            if item.action is not None and item.enabled:
                item.action()  # what the click must do, recorded apart
                entry(surface.icon)  # pystray's click: it passes the Icon (and the item)
            assert controls.calls == expected.calls, f"after a click on {item.label!r}"
    called = {call[0] for call in controls.calls}
    assert called == {name for name in vars(presenter.Controls) if not name.startswith("_")}
    # Each job's own item was given that job's id, never a pystray object.
    assert ("retry", "f1") in controls.calls and ("run_now", "w1") in controls.calls
    assert all(isinstance(arg, str | bool) for call in controls.calls for arg in call[1:])


def test_an_item_that_raises_is_logged_and_the_menu_goes_on(dummy_pystray, caplog):
    from sloth_tray.tray.pystray_surface import PystraySurface

    surface = PystraySurface()

    broken = Recorder()
    broken.failing = {"quit"}
    surface.set_menu(lambda: presenter.menu(BUSY_OVERDUE, broken, NOW))
    quit_entry = tuple(surface.icon.menu.items)[-1]
    assert str(quit_entry.text).startswith("Quit")  # it may name the job it stops
    quit_entry(surface.icon)  # no exception reaches pystray
    assert f"the menu item {str(quit_entry.text)!r} failed" in caplog.text


def test_an_overdue_schedules_row_says_so_in_its_label_where_pystray_draws_no_icon(
        dummy_pystray):
    """pystray's menu items carry no icon: the amber clock an overdue series' row has
    in a StatusNotifier menu is a word in its label here, on that row alone."""
    from sloth_tray.daemon.snapshot import Schedule
    from sloth_tray.tray.pystray_surface import OVERDUE_MARK, PystraySurface

    assert "icon" not in dummy_pystray.MenuItem.__init__.__code__.co_varnames
    shot = replace(BUSY, schedules=(
        Schedule("/spool/a/feed.sh", "feed", "every 10m", "s1", NOW - 900, overdue=True),
        Schedule("/spool/b/inbox.sh", "inbox", "every 2m", "s2", NOW + 60)))
    surface = PystraySurface()
    surface.set_menu(lambda: presenter.menu(shot, Recorder(), NOW))
    model = presenter.menu(shot, Recorder(), NOW)
    [section] = [item for item in model if item.key == "schedules"]
    [entry] = [entry for entry in surface.icon.menu.items
               if str(entry.text) == section.label]
    feed, inbox = section.submenu
    shown_feed, shown_inbox = entry.submenu.items
    assert feed.icon is not None and inbox.icon is None
    assert str(shown_feed.text) == f"{feed.label} · {OVERDUE_MARK}"
    assert str(shown_inbox.text) == inbox.label
    # Its own submenu's rows are as the model has them.
    assert [str(sub.text) for sub in shown_feed.submenu.items] == \
        [sub.label for sub in feed.submenu]


# -- which backend pystray is asked for ------------------------------------------------

@pytest.mark.parametrize(("platform", "environ", "asked"), [
    # No StatusNotifierWatcher (or this surface would not be made): GTK's own XEmbed icon,
    # whose left click is the default action. pystray's first choice, appindicator,
    # would stand in with an icon whose left click opens the menu.
    ("linux", {"DISPLAY": ":0"}, "gtk"),
    ("linux", {"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0"}, "gtk"),
    # The user's choice stands, whatever it is.
    ("linux", {"DISPLAY": ":0", "PYSTRAY_BACKEND": "appindicator"}, None),
    ("linux", {"DISPLAY": ":0", "PYSTRAY_BACKEND": "xorg"}, None),
    # No X display: no XEmbed tray to dock in; pystray's own choice.
    ("linux", {"WAYLAND_DISPLAY": "wayland-0"}, None),
    # Where nobody looked for a watcher first, appindicator may well have one.
    ("freebsd14", {"DISPLAY": ":0"}, None),
    ("darwin", {"DISPLAY": ":0"}, None),
    ("win32", {}, None),
])
def test_on_x11_pystray_is_asked_for_gtk_unless_the_user_chose(platform, environ, asked):
    from sloth_tray.tray.pystray_surface import backend_to_ask

    assert backend_to_ask(environ, platform) == asked


@pytest.fixture
def fake_pystray(tmp_path, monkeypatch):
    """A `pystray` that remembers which backend it was asked for when imported, and a
    PyGObject (`gi`) beside it for the GTK backend."""
    package = tmp_path / "fake" / "pystray"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import os\nASKED = os.environ.get('PYSTRAY_BACKEND')\n")
    (tmp_path / "fake" / "gi").mkdir()
    (tmp_path / "fake" / "gi" / "__init__.py").write_text("")
    for name in [m for m in sys.modules if m == "pystray" or m.startswith("pystray.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(package.parent))
    monkeypatch.delenv("PYSTRAY_BACKEND", raising=False)
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setattr(sys, "platform", "linux")
    yield
    sys.modules.pop("pystray", None)


def test_gtk_is_asked_for_while_pystray_imports_and_no_job_inherits_the_variable(
        fake_pystray, monkeypatch):
    import os

    from sloth_tray.tray.pystray_surface import import_pystray

    pystray = import_pystray()
    assert pystray.ASKED == "gtk"
    assert "PYSTRAY_BACKEND" not in os.environ  # jobs get the app's environment


def test_the_users_backend_reaches_pystray_untouched(fake_pystray, monkeypatch):
    import os

    from sloth_tray.tray.pystray_surface import import_pystray

    monkeypatch.setenv("PYSTRAY_BACKEND", "appindicator")
    assert import_pystray().ASKED == "appindicator"
    assert os.environ["PYSTRAY_BACKEND"] == "appindicator"


def test_without_pygobject_it_says_what_to_install_rather_than_draw_the_plain_x11_icon(
        fake_pystray, monkeypatch):
    from sloth_tray.tray.pystray_surface import PLAIN_X11_REFUSED, import_pystray

    monkeypatch.setitem(sys.modules, "gi", None)  # what `import gi` finds: nothing
    with pytest.raises(RuntimeError) as refused:
        import_pystray()
    assert str(refused.value) == PLAIN_X11_REFUSED
    assert "pystray" not in sys.modules
