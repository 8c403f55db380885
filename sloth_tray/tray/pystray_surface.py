"""pystray as a Surface: GTK's XEmbed icon on X11, macOS, Windows (never pystray's plain
X11 backend: see PLAIN_X11_REFUSED).
The ONLY module that imports pystray, and the one that says which backend it uses
(`backend_to_ask`).

pystray looks at how many parameters an action takes and passes the Icon (and
the MenuItem) accordingly; a `lambda job_id=job.id: ...` has one, so it got
the Icon as its job id. Every action reaches pystray here, wrapped in a
function of exactly (icon, item) that calls the model's action with nothing,
so no model action can ever see a toolkit object.

GTK's XEmbed backend is asked for before pystray is imported, unless
`PYSTRAY_BACKEND` says otherwise. Its GTK backends' own notifier, which blocks the UI
thread on D-Bus, is replaced by one that calls nothing, and its setup thread never
holds the exit.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import sys
from collections.abc import Callable, Mapping
from types import ModuleType

from sloth_tray.daemon import stopsignals
from sloth_tray.daemon.stopsignals import StopSignals
from sloth_tray.tray.icons import Look, render
from sloth_tray.tray.presenter import SEPARATOR, Item
from sloth_tray.tray.surface import Appearance, MenuBuilder

log = logging.getLogger("sloth_tray")

APP_NAME = "sloth-tray"
ICON_PIXELS = 64
PLAIN_X11_REFUSED = (
    "this desktop has no StatusNotifier host, and without PyGObject pystray would draw "
    "its plain X11 icon, which can freeze the app; install PyGObject into this "
    "environment for the GTK icon and menu")
BACKEND_VARIABLE = "PYSTRAY_BACKEND"  # pystray reads it once, when first imported
# pystray's menu items carry no icon: the badge a row has elsewhere (the overdue clock
# on a Schedules row) is said in its label instead, in words every menu font draws.
OVERDUE_MARK = "overdue"
ICON_WORDS = {Look.OVERDUE: OVERDUE_MARK}


def backend_to_ask(environ: Mapping[str, str], platform: str = sys.platform) -> str | None:
    """The pystray backend to ask for, or None for pystray's own choice. On Linux this
    surface runs only where no StatusNotifierWatcher is (tray.make_surface), so the
    tray is an XEmbed one (trayer, stalonetray): GTK's own icon there, whose left click
    is the default action. pystray would first pick appindicator, whose stand-in icon
    for a missing watcher opens the menu on a left click, and names its GtkStatusIcon
    once it is on screen, which GDK answers with a Gdk-CRITICAL. Elsewhere (the BSDs
    too, where nobody looked for a watcher) pystray chooses. The user's
    PYSTRAY_BACKEND always stands."""
    if environ.get(BACKEND_VARIABLE) or not platform.startswith("linux"):
        return None
    if not environ.get("DISPLAY"):
        return None  # no X display: no XEmbed tray to dock in either way
    return "gtk"


def import_pystray() -> ModuleType:
    """pystray, with the backend `backend_to_ask` names. The variable is set for the
    import alone, so that no job (they get the app's environment) inherits it."""
    wanted = backend_to_ask(os.environ)
    if wanted is None:
        import pystray

        return pystray
    if wanted == "gtk" and importlib.util.find_spec("gi") is None:
        raise RuntimeError(PLAIN_X11_REFUSED)  # what pystray would fall back to
    os.environ[BACKEND_VARIABLE] = wanted
    try:
        import pystray
    finally:
        del os.environ[BACKEND_VARIABLE]
    return pystray


class NoNotifications:
    """What pystray's GTK backends get in place of their own notifier, which asks the
    session bus for org.freedesktop.Notifications synchronously, with no deadline of
    its own, on the thread that is about to run the GTK loop: a Gio proxy made at
    start (it asks the bus to start the service and waits for it: D-Bus's 25 s
    activation timeout when the service never appears, as Plasma's does outside a
    Plasma session, after which the icon's start fails and its setup thread is never
    released) and a CloseNotification at the end. The app sends its notifications
    itself, off the UI thread and with deadlines (notify.py): this one calls nothing."""

    def notify(self, title: str, message: str, icon: str | None) -> None:
        pass

    def hide(self) -> None:
        pass


def without_pystray_notifications() -> None:
    """Give pystray's GTK backends `NoNotifications` (a pystray laid out otherwise is
    left as it is)."""
    try:
        from pystray._util import notify_dbus
    except ImportError:
        return
    notify_dbus.Notifier = NoNotifications


def guarded(action: Callable[[], None], label: str) -> Callable[[object, object], None]:
    """pystray's callback for a model action: two parameters, errors said as they are."""

    def call(icon: object, item: object) -> None:
        try:
            action()
        except Exception:
            log.exception("the menu item %r failed", label)

    return call


def labelled(item: Item) -> str:
    """The row's label, with its badge in words (ICON_WORDS) when it has one."""
    word = ICON_WORDS.get(item.icon) if item.icon is not None else None
    return f"{item.label} · {word}" if word else item.label


class PystraySurface:
    def __init__(self, stop_signals: tuple[int, ...] = ()) -> None:
        pystray = import_pystray()  # here, not at the top: it needs a display on Linux

        self.pystray = pystray
        self.name = pystray.Icon.__module__.rsplit("_", 1)[-1]  # gtk, appindicator, xorg, ...
        if self.name == "xorg":
            # pystray hands every change to its X thread over the one X connection and
            # waits; python-xlib can deadlock the two threads on it, and the app froze
            # with its icon (under load, a start in four). Headless is honest instead.
            raise RuntimeError(PLAIN_X11_REFUSED)
        if self.name in ("gtk", "appindicator"):
            from gi.repository import GLib

            GLib.set_prgname(APP_NAME)  # the window class, not "__main__.py"
            without_pystray_notifications()
        self._build: MenuBuilder = tuple
        self._stop_signals = stop_signals
        self._quit: Callable[[], None] = self.stop
        self._over = False  # run() has returned: a late setup must not start anything
        self.icon = pystray.Icon(APP_NAME, icon=render(Look.IDLE, ICON_PIXELS),
                                 title="sloth: starting", menu=pystray.Menu(self._items))
        self.has_default_action = bool(self.icon.HAS_DEFAULT_ACTION)

    # -- life --------------------------------------------------------------------

    def run(self, ready: Callable[[], None], on_signal: Callable[[], None] | None = None) -> None:
        """Block on the main thread until stop(); a stop signal calls `on_signal`."""
        self._quit = on_signal or self.stop

        def setup(icon) -> None:  # on a thread of pystray's
            if self._over:
                return
            icon.visible = True
            ready()

        with self._catching_signals():
            try:
                self.icon.run(setup=setup)
            except Exception as exc:
                log.warning("the tray icon failed: %s", exc)
            finally:
                self._over = True
                self._release_setup_thread()

    def _release_setup_thread(self) -> None:
        """pystray's setup thread is not a daemon and waits until the icon is marked
        ready; an icon whose start failed before that would hold the app's exit for
        good. Marked now, the thread finds `_over` and ends."""
        thread = getattr(self.icon, "_setup_thread", None)
        if thread is not None and thread.is_alive() and not getattr(self.icon, "_running",
                                                                   True):
            self.icon._mark_ready()
            thread.join(timeout=5)

    def stop(self) -> None:
        self.post(self.icon.stop)

    def _catching_signals(self) -> contextlib.AbstractContextManager:
        """GLib's own handlers on a GTK loop (it would hold Python's back); elsewhere
        the main thread sits in pystray's loop, so a thread of ours listens.

        On GTK they are added once the loop runs: pystray's start sets SIGINT back to
        its default (the process dies, its job left running) after anything added
        before it, and GLib installs its handler only for a signal's first source."""
        if self.name in ("gtk", "appindicator"):
            from gi.repository import GLib

            def add_handlers() -> bool:
                for sig in self._stop_signals:
                    GLib.unix_signal_add(GLib.PRIORITY_HIGH, sig, self._quit_from_signal, sig)
                return False  # once

            GLib.idle_add(add_handlers)  # the first thing the running loop does
            return contextlib.nullcontext()
        return StopSignals(lambda: self._quit(), self._stop_signals)

    def _quit_from_signal(self, sig: int) -> bool:
        stopsignals.note(sig)  # the exit status says which (Ctrl-C: 130)
        self._quit()
        return True  # keep the source; the loop is ending anyway

    def post(self, call: Callable[[], object]) -> None:
        if self.name in ("gtk", "appindicator"):
            from gi.repository import GLib

            GLib.idle_add(lambda: call() and False)
        elif self.name == "darwin":
            from PyObjCTools import AppHelper

            AppHelper.callAfter(call)
        else:  # win32 serialises updates on its own
            call()

    # -- what it shows -------------------------------------------------------------

    def show(self, appearance: Appearance) -> None:
        self.icon.icon = render(appearance.look, ICON_PIXELS)
        self.icon.title = appearance.title

    def set_menu(self, build: MenuBuilder) -> None:
        self._build = build
        self.menu_changed()

    def menu_changed(self) -> None:
        self.icon.update_menu()

    def take_activation_token(self) -> str | None:
        return None  # XEmbed, macOS and Windows give no token with a click

    def notify(self, title: str, message: str) -> None:
        """pystray's own notification (always with a title: darwin's crashes without);
        none from its GTK backends (see NoNotifications)."""
        if self.name in ("gtk", "appindicator"):
            raise RuntimeError("the GTK icon sends none of its own")
        self.icon.notify(message, title)

    def _items(self):
        """pystray calls this each time it shows the menu: fresh labels every time."""
        return tuple(self._convert(item) for item in self._build())

    def _convert(self, item: Item):
        if item == SEPARATOR:
            return self.pystray.Menu.SEPARATOR
        if item.submenu:
            action = self.pystray.Menu(*(self._convert(sub) for sub in item.submenu))
        elif item.action is not None:
            action = guarded(item.action, item.label)
        else:
            action = None
        checked = None if item.checked is None else (lambda _, value=item.checked: value)
        return self.pystray.MenuItem(labelled(item), action, enabled=item.enabled,
                                     checked=checked, default=item.default)
