"""The tray: Snapshots in, an icon, a tooltip and a menu out, on whatever Surface.

The surface's loop owns the main thread; the engine runs on a thread of its
own and publishes Snapshots; every change reaches the surface's thread through
`surface.post()`. The menu is built from the last Snapshot when it is about to
be shown, so its times are right when seen, and opening it never touches
SQLite. Nothing here ticks: a running job's elapsed time moves only in an open
menu, where the surface rebuilds it once a second (dbusmenu.py).
Which surface draws it (a StatusNotifierItem over D-Bus, or one of pystray's
backends) is chosen once, in `make_surface`; nothing else here knows.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from sloth_tray import autostart
from sloth_tray.daemon import stopsignals
from sloth_tray.daemon.app import Daemon
from sloth_tray.daemon.snapshot import FailedJob, Snapshot
from sloth_tray.daemon.stopsignals import STOP_SIGNALS
from sloth_tray.errors import SlothError
from sloth_tray.jobs.overdue import OverdueJob
from sloth_tray.store.reasons import Reason
from sloth_tray.tray import presenter
from sloth_tray.tray.announce import (
    Announcer,
    LaneBursts,
    Notice,
    Question,
    Questions,
    Withdraw,
    overdue_to_announce,
    retryable,
)
from sloth_tray.tray.surface import Appearance, Status, Surface

log = logging.getLogger("sloth_tray")

def make_surface() -> Surface:
    """A StatusNotifierItem where the session has a watcher for one (what KDE, GNOME
    with AppIndicator, Xfce, Cinnamon, MATE and waybar show) unless PYSTRAY_BACKEND
    asks for pystray; pystray's backends everywhere else (on X11 its GTK icon, for an
    XEmbed tray: pystray_surface.backend_to_ask)."""
    if sys.platform.startswith("linux") and not os.environ.get("PYSTRAY_BACKEND"):
        try:
            from sloth_tray.tray.sni import SniSurface, watcher_present

            if watcher_present():
                return SniSurface(stop_signals=STOP_SIGNALS)
            log.info("no StatusNotifierWatcher on the session bus; using pystray")
        except Exception as exc:  # no session bus, no dbus-fast: pystray it is
            log.info("no StatusNotifierItem host (%s); using pystray", exc)
    from sloth_tray.tray.pystray_surface import PystraySurface

    return PystraySurface(stop_signals=STOP_SIGNALS)


def make_notifier(surface: Surface):
    """Desktop notifications: org.freedesktop.Notifications on Linux (with buttons),
    the surface's own elsewhere."""
    if sys.platform.startswith("linux"):
        try:
            from sloth_tray.tray.notify import Notifier

            return Notifier()
        except Exception as exc:
            log.info("no desktop notifications (%s)", exc)
    from sloth_tray.tray.notify import CallbackNotifier

    return CallbackNotifier(getattr(surface, "notify", None))


class Tray:
    """The icon and its menu, in front of a running Daemon. presenter.Controls."""

    def __init__(self, daemon: Daemon, *, notifications: bool = True,
                 surface: Surface | None = None,
                 opener: Callable[[Path], None] | None = None) -> None:
        self.daemon = daemon
        self.engine = daemon.engine
        self.home = daemon.home
        self.surface = surface or make_surface()
        self.backend = self.surface.name
        self.notifier = make_notifier(self.surface) if notifications else None
        self.opener = opener or self._open
        self._snapshot: Snapshot | None = None
        # Touched on the surface's thread only. A failure since recovery began is this
        # start's news: a run cut short by a crash, its lease taken back just now.
        self._announcer = Announcer(since=self.engine.recovered_at)
        self._clock = time.monotonic  # a burst's gap: never moved by a clock set back
        self.revealer: Callable[[Path], None] = self._reveal
        self._overdue_announced: set[tuple[str, float]] = set()  # (name, last success)
        self._questions = Questions()  # the surface's thread only, as the announcer
        # A lane done with a burst of jobs, followed only when the user asked to be told
        self._lane_bursts = LaneBursts() if daemon.settings["notify_lane_emptied"] else None
        self._engine_thread = threading.Thread(target=self._run_engine, name="engine")
        self.surface.set_menu(self._menu_items)

    # -- life --------------------------------------------------------------------

    def run(self) -> None:
        """Block on the main thread until Quit (or a stop signal)."""
        try:
            self.surface.run(self._ready, on_signal=self.quit)
        finally:
            self.engine.stop()
            if self._engine_thread.ident:
                self._engine_thread.join()

    def _ready(self) -> None:
        if stopsignals.stopped_by() is not None:  # one came while it was starting
            self.quit()
            return
        self.engine.subscribe(self._on_snapshot)
        self._engine_thread.start()
        if self.daemon.first_run:
            self._tell("sloth-tray is ready",
                       f"Drop scripts into {self.home.jobs} and they run one at a time.")

    def _run_engine(self) -> None:
        try:
            self.engine.run()
        except SlothError as exc:
            log.error("%s", exc)
        finally:
            self.surface.stop()

    def _on_snapshot(self, snapshot: Snapshot) -> None:  # engine or action thread
        self.surface.post(lambda: self._show(snapshot))

    # -- the surface's thread ---------------------------------------------------------

    def _show(self, snapshot: Snapshot) -> None:
        before, self._snapshot = self._snapshot, snapshot
        self._show_state(snapshot)
        for change in self._announcer.failures(before, snapshot, self._clock()):
            self._announce(change)
        for asked in self._questions.update(snapshot):
            self._ask(asked)
        for late in overdue_to_announce(before, snapshot):
            self._announce_overdue(late)
        for done in self._lane_bursts.update(snapshot) if self._lane_bursts else ():
            self._tell(done.title, done.body)

    def _show_state(self, snapshot: Snapshot) -> None:
        attention = (snapshot.failed_count > 0 or snapshot.asking_count > 0
                     or snapshot.problem is not None)
        self.surface.show(Appearance(
            presenter.look(snapshot), presenter.title(snapshot, time.time()),
            Status.NEEDS_ATTENTION if attention else Status.ACTIVE))
        self.surface.menu_changed()

    def _menu_items(self) -> tuple[presenter.Item, ...]:
        return presenter.menu(self._snapshot or Snapshot(), self, time.time(),
                              has_default_action=self.surface.has_default_action,
                              starts_at_login=self._starts_at_login(),
                              jobs_folder=presenter.tilde(str(self.home.jobs),
                                                          str(Path.home())))

    # -- telling the user ------------------------------------------------------------

    def _announce(self, change: Notice | Withdraw) -> None:
        """One notification per burst of failures, updated in place (announce.py)."""
        if self.notifier is None:
            if isinstance(change, Notice) and change.first:
                log.info("%s: %s", change.title, change.body)
            return
        if isinstance(change, Withdraw):
            self.notifier.withdraw(change.key)
            return

        def closed(key: str = change.key) -> None:  # the notifier's thread
            self.surface.post(lambda: self._announcer.closed(key))

        self.notifier.notify(change.title, change.body, change.actions,
                             on_action=lambda action: self._act(change, action),
                             key=change.key, on_closed=closed)

    def _ask(self, change: Question | Withdraw) -> None:
        """A job's question with its choices as buttons; withdrawn once not asked."""
        if self.notifier is None:
            if isinstance(change, Question):
                log.info("%s: %s", change.title, change.body)
            return
        if isinstance(change, Withdraw):
            self.notifier.withdraw(change.key)
            return

        def clicked(action: str, question: Question = change) -> None:  # its own thread
            choice = question.choice(action)
            if choice is not None:
                self.answer(question.job.id, choice, question.job.key)

        self.notifier.notify(change.title, change.body, change.actions,
                             on_action=clicked, key=change.key)

    def _act(self, notice: Notice, action: str) -> None:
        """A notification's button (on a thread of its own): the keys are announce.py's."""
        job = notice.jobs[0]
        if action in ("retry", "run-again"):  # run again: a step cut short runs again
            self.retry(job.id)
        elif action == "mark-done" and job.unsure_step is not None:
            self.retry(job.id, job.unsure_step)
        elif action == "retry-all":
            for each in retryable(notice.jobs):
                self.retry(each.id)
        elif action == "log":
            self.show_log(job.id)
        elif action == "remove":
            self.cancel(job.id)
        elif action == "show-script":
            self._show_script(job)
        elif action == "show-logs":
            self.opener(self.home.logs)
        elif action == "show-scripts":
            self.opener(self.home.spool)

    def _show_script(self, job: FailedJob) -> None:
        """Its copy in the spool, shown in its folder; the jobs folder when it is gone."""
        script = Path(job.script) if job.script else None
        if script is not None and os.path.lexists(script):
            self.revealer(script)
        else:
            self.opener(self.home.jobs)

    def _reveal(self, path: Path) -> None:
        """Selected in its folder, never opened: opening a script may run it. On a
        thread of its own: a menu's click runs this on the surface's thread, and the
        portal or the file manager may take their deadline to answer."""
        from sloth_tray.tray.opener import reveal_path

        reveal_path(path, notifier=self.notifier)

    def _announce_overdue(self, job: OverdueJob) -> None:
        """Once per overdue spell: again only after a success and a new delay."""
        key = (job.name, job.since)
        if key in self._overdue_announced:
            return
        self._overdue_announced.add(key)
        self._tell("sloth-tray: a job is overdue",
                   presenter.overdue_label(job, time.time()))

    def _tell(self, title: str, message: str, **buttons) -> None:
        if self.notifier is None:
            log.info("%s: %s", title, message)
            return
        self.notifier.notify(title, message, **buttons)

    def _open(self, path: Path) -> None:
        """On the surface's thread, in the click's action: the token the panel gave
        for this click lets the window that opens take the focus."""
        from sloth_tray.tray.opener import open_path

        take_token = getattr(self.surface, "take_activation_token", None)
        open_path(path, notifier=self.notifier,
                  activation_token=take_token() if take_token else None)

    # -- what the menu does (presenter.Controls) ---------------------------------------

    def retry(self, job_id: str, step_done: str | None = None) -> None:
        """Run it again; `step_done`: a person's word that that step happened."""
        self.engine.retry(job_id, step_done)

    def retry_all_failed(self, lane: str | None = None) -> None:
        """Every failed job, or those of `lane`."""
        if lane is None:
            self.engine.retry_all_failed()
        else:
            self.engine.retry_all_failed(lane)

    def answer(self, job_id: str, choice: str, question: str) -> None:
        """A choice clicked for the question `question` (AskingJob.key)."""
        self.engine.answer(job_id, choice, question)

    def cancel(self, job_id: str) -> None:
        self.engine.cancel(job_id)

    def cancel_failed_runs(self, series: str) -> None:
        self.engine.cancel_failed_runs(series)

    def stop(self, job_id: str) -> None:
        """The running job: cancelled, which takes its lease; the runner, nudged,
        stops it at once. A repeating job's series goes on."""
        self.engine.stop_run(job_id)

    def run_now(self, job_id: str) -> None:
        self.engine.run_now(job_id)

    def pause_series(self, key: str, paused: bool) -> None:
        """The Schedules submenu's Pause this schedule / Resume."""
        self.engine.pause_series(key, paused)

    def show_log(self, job_id: str) -> None:
        """Its last run's log, opened; for a bad header, which stopped it before any
        run, its script shown in its folder (what there is to fix)."""
        failed = {job.id: job for job in (self._snapshot or Snapshot()).failed_jobs}
        if job_id in failed and failed[job_id].reason == Reason.BAD_HEADER:
            self._show_script(failed[job_id])
            return
        logs = sorted(self.home.job_logs(job_id).glob("*.log"),
                      key=lambda p: int(p.stem) if p.stem.isdigit() else 0)
        self.opener(logs[-1] if logs else self._empty_log(job_id) or self.home.logs)

    def _empty_log(self, job_id: str) -> Path | None:
        """A run that printed nothing left no log: an empty one is made for its last run,
        which says so where the logs folder would leave the user searching. None when
        the job has not run (or is gone)."""
        from sloth_tray.daemon.capture import make_log

        try:
            job = self.engine.queue.get(job_id)
        except SlothError:
            return None
        if not job.runs:
            return None
        path = self.home.job_logs(job.id, job.name) / f"{job.runs}.log"
        return path if make_log(path) else None

    def toggle_pause(self) -> None:
        if self.engine.paused:
            self.engine.resume()
        else:
            self.engine.pause()

    def pause(self, lane: str | None = None) -> None:
        """Start nothing new in `lane`, or in any lane (running jobs finish)."""
        if lane is None:
            self.engine.pause()
        else:
            self.engine.pause(lane)

    def resume(self, lane: str | None = None) -> None:
        """`lane` starts jobs again; with none, every lane, those paused one by one too."""
        if lane is None:
            self.engine.resume()
        else:
            self.engine.resume(lane)

    def open_jobs(self) -> None:
        self.opener(self.home.jobs)

    def open_lane(self, lane: str) -> None:
        """The folder whose drops go to `lane`; the jobs folder should it be gone (a
        lane is known while it has jobs, after its folder went)."""
        folder = self.home.lane_folder(lane)
        self.opener(folder if folder.is_dir() else self.home.jobs)

    def open_logs(self) -> None:
        self.opener(self.home.logs)

    def _app_location(self) -> dict:
        """Where this app lives (home, and the jobs folder and config when chosen),
        so that the app started at login runs the same queue."""
        return autostart.app_location(self.home, self.daemon.settings)

    def _starts_at_login(self) -> bool:
        try:
            return autostart.status(**self._app_location()).enabled
        except SlothError:
            return False

    def toggle_autostart(self) -> None:
        change = autostart.disable if self._starts_at_login() else autostart.enable
        try:
            change(**self._app_location())
        except SlothError as exc:
            log.warning("%s", exc)
        self.surface.menu_changed()

    def quit(self) -> None:
        """Clean: the engine stops, a running job's lease is released, then the icon goes
        (at once when the engine never started: nothing else would end the surface)."""
        self.engine.stop()
        if self._engine_thread.ident is None:
            self.surface.stop()
