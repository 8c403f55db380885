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
from conftest import BUSY, NOW, Recorder

from sloth_tray import presenter
from sloth_tray.overdue import OverdueJob

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
    from sloth_tray.pystray_surface import PystraySurface

    surface = PystraySurface()
    controls = Recorder()

    def build():
        return presenter.menu(BUSY_OVERDUE, controls, NOW, starts_at_login=starts_at_login)

    surface.set_menu(build)
    expected = Recorder()
    model = presenter.menu(BUSY_OVERDUE, expected, NOW, starts_at_login=starts_at_login)
    shown = tuple(surface.icon.menu.items)
    for path, item, entry in pairs(model, shown):
        assert str(entry.text) == item.label or item == presenter.SEPARATOR, path
        assert entry.enabled == item.enabled, item.label
        assert entry.checked == (item.checked if item.checked is not None else None), item.label
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
    assert all(isinstance(arg, str) for call in controls.calls for arg in call[1:])


def test_an_item_that_raises_is_logged_and_the_menu_goes_on(dummy_pystray, caplog):
    from sloth_tray.pystray_surface import PystraySurface

    surface = PystraySurface()

    broken = Recorder()
    broken.failing = {"quit"}
    surface.set_menu(lambda: presenter.menu(BUSY_OVERDUE, broken, NOW))
    quit_entry = tuple(surface.icon.menu.items)[-1]
    assert str(quit_entry.text) == "Quit"
    quit_entry(surface.icon)  # no exception reaches pystray
    assert "the menu item 'Quit' failed" in caplog.text
