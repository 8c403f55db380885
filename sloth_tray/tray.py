"""The pystray adapter: Snapshot -> icon, title, menu. The ONLY module that imports pystray.

pystray's loop owns the main thread. The engine runs on a thread of its own and
publishes Snapshots; every change to the icon reaches the UI thread through
`post()`, the one helper that crosses threads. The menu is built from the last
Snapshot: opening it never touches SQLite.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from sloth_tray import autostart, presenter, procs
from sloth_tray.app import STOP_SIGNALS, Daemon
from sloth_tray.engine import Snapshot
from sloth_tray.errors import SlothError
from sloth_tray.icons import render

log = logging.getLogger("sloth_tray")

APP_NAME = "sloth-tray"
NO_MENU_HINT = (
    "this tray has no menu (pystray fell back to its plain X11 backend): a click retries "
    "every failed job. For the full menu install PyGObject into this environment "
    "(pip install PyGObject) or use your distribution's python3-gi with a virtualenv "
    "made with --system-site-packages"
)


def display_available() -> bool:
    """Whether a tray icon could be shown at all (Linux needs an X or Wayland display)."""
    if not sys.platform.startswith("linux"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def open_path(path: Path) -> None:
    """Show a folder or file in the desktop's own app."""
    if sys.platform == "darwin":
        subprocess.Popen(["open", str(path)])
    elif os.name == "nt":
        os.startfile(str(path))  # noqa: S606 - the desktop's own opener
    else:
        subprocess.Popen(["xdg-open", str(path)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True,
                         env=procs.job_environment(os.environ))


class Tray:
    """The icon and its menu, in front of a running Daemon."""

    def __init__(self, daemon: Daemon, *, notifications: bool = True,
                 opener: Callable[[Path], None] = open_path) -> None:
        import pystray  # here, not at the top: it needs a display to import on Linux

        self.pystray = pystray
        self.daemon = daemon
        self.engine = daemon.engine
        self.home = daemon.home
        self.notifications = notifications
        self.opener = opener
        self.backend = pystray.Icon.__module__.rsplit("_", 1)[-1]  # gtk, appindicator, ...
        if self.backend in ("gtk", "appindicator"):
            from gi.repository import GLib

            GLib.set_prgname(APP_NAME)  # the window class, not "__main__.py"
        self._snapshot: Snapshot | None = None
        self._announced: set[tuple[str, float]] = set()
        self.icon = pystray.Icon(APP_NAME, icon=render(presenter.Look.IDLE, 64),
                                 title="sloth: starting",
                                 menu=pystray.Menu(self._menu_items))
        self._engine_thread = threading.Thread(target=self._run_engine, name="engine")

    # -- life --------------------------------------------------------------------

    def run(self) -> None:
        """Block on the main thread until Quit (or SIGTERM / SIGINT)."""
        try:
            self.icon.run(setup=self._setup)
        except Exception as exc:
            if not self._engine_thread.is_alive() and self._engine_thread.ident:
                # pystray's GTK teardown asks the session's notification service to
                # hide a notification and raises when there is no such service.
                log.debug("tray teardown: %s", exc)
            else:
                raise
        self.engine.stop()
        self._engine_thread.join()

    def _setup(self, icon) -> None:
        icon.visible = True
        if not icon.HAS_MENU:
            log.warning("%s", NO_MENU_HINT)
        self._catch_signals()
        self.engine.subscribe(self._on_snapshot)
        self._engine_thread.start()
        if self.daemon.first_run:
            self._tell(f"Drop scripts into {self.home.jobs} and they run one at a time.",
                       "sloth-tray is ready")

    def _run_engine(self) -> None:
        try:
            self.engine.run()
        except SlothError as exc:
            log.error("%s", exc)
        finally:
            self.post(self.icon.stop)

    def _catch_signals(self) -> None:
        if self.backend in ("gtk", "appindicator"):
            from gi.repository import GLib  # the GTK loop would hold Python's handlers back

            for sig in STOP_SIGNALS:
                GLib.unix_signal_add(GLib.PRIORITY_HIGH, sig, self._quit_from_signal)
        else:
            for sig in STOP_SIGNALS:
                signal.signal(sig, lambda *_: self.quit())

    def _quit_from_signal(self) -> bool:
        self.quit()
        return True  # keep the source; the loop is ending anyway

    # -- crossing threads ----------------------------------------------------------

    def post(self, call: Callable[[], object]) -> None:
        """Run `call` on the UI thread: the one way other threads reach the icon."""
        if self.backend in ("gtk", "appindicator"):
            from gi.repository import GLib

            GLib.idle_add(lambda: call() and False)
        elif self.backend == "darwin":
            from PyObjCTools import AppHelper

            AppHelper.callAfter(call)
        else:  # win32 and xorg serialise updates on their own
            call()

    def _on_snapshot(self, snapshot: Snapshot) -> None:  # engine or action thread
        self.post(lambda: self._show(snapshot))

    # -- the UI thread ---------------------------------------------------------------

    def _show(self, snapshot: Snapshot) -> None:
        before, self._snapshot = self._snapshot, snapshot
        now = time.time()
        self.icon.icon = render(presenter.look(snapshot), 64)
        self.icon.title = presenter.title(snapshot, now)
        if self.icon.HAS_MENU:
            self.icon.update_menu()
        for job in presenter.failures_to_announce(before, snapshot):
            self._announce(job)

    def _announce(self, job) -> None:
        key = (job.id, job.at)
        if key in self._announced or not self.notifications:
            return
        self._announced.add(key)
        self._tell(f"{job.name}: {job.error}", "sloth-tray: a job failed")

    def _tell(self, message: str, title: str) -> None:
        """A desktop notification where the backend has them (always with a title:
        pystray's darwin notify crashes without one)."""
        if not (self.notifications and self.icon.HAS_NOTIFICATION):
            return
        try:
            self.icon.notify(message, title)
        except Exception:  # no notification service on this desktop: the log has it
            log.info("%s: %s", title, message)

    def _menu_items(self):
        items = presenter.menu(self._snapshot or Snapshot(), self, time.time(),
                               has_default_action=self.icon.HAS_DEFAULT_ACTION,
                               starts_at_login=self._starts_at_login(),
                               jobs_folder=presenter.tilde(str(self.home.jobs),
                                                           str(Path.home())))
        if not self.icon.HAS_MENU:  # xorg: only the default action exists, and it retries
            return (self.pystray.MenuItem("Retry all failed", self.retry_all_failed,
                                          default=True),)
        return tuple(self._convert(item) for item in items)

    def _convert(self, item: presenter.Item):
        if item is presenter.SEPARATOR:
            return self.pystray.Menu.SEPARATOR
        action = self.pystray.Menu(*(self._convert(sub) for sub in item.submenu)) \
            if item.submenu else item.action
        checked = None if item.checked is None else (lambda _, value=item.checked: value)
        return self.pystray.MenuItem(item.label, action, enabled=item.enabled,
                                     checked=checked, default=item.default)

    # -- what the menu does (presenter.Controls) ---------------------------------------

    def retry(self, job_id: str) -> None:
        self.engine.retry(job_id)

    def retry_all_failed(self) -> None:
        self.engine.retry_all_failed()

    def cancel(self, job_id: str) -> None:
        self.engine.cancel(job_id)

    def run_now(self, job_id: str) -> None:
        self.engine.run_now(job_id)

    def show_log(self, job_id: str) -> None:
        logs = sorted(self.home.job_logs(job_id).glob("*.log"),
                      key=lambda p: int(p.stem) if p.stem.isdigit() else 0)
        self.opener(logs[-1] if logs else self.home.logs)

    def toggle_pause(self) -> None:
        if self.engine.paused:
            self.engine.resume()
        else:
            self.engine.pause()

    def open_jobs(self) -> None:
        self.opener(self.home.jobs)

    def open_logs(self) -> None:
        self.opener(self.home.logs)

    def _starts_at_login(self) -> bool:
        try:
            return autostart.status().enabled
        except SlothError:
            return False

    def toggle_autostart(self) -> None:
        try:
            (autostart.disable if self._starts_at_login() else autostart.enable)()
        except SlothError as exc:
            log.warning("%s", exc)
        self.icon.update_menu()

    def quit(self) -> None:
        """Clean: the engine stops, a running job's lease is released, then the icon goes."""
        self.engine.stop()
