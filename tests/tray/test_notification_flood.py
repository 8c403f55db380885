"""Notifications as a user meets them: a real daemon and tray, its Notifier on a private
D-Bus with a fake notification server that counts what it is asked to show."""

from __future__ import annotations

import os
import shutil
import sys
import threading
from pathlib import Path

import pytest
from helpers.processes import wait_for

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("dbus-daemon") is None,
    reason="needs Linux and dbus-daemon")

from sloth_tray.daemon.app import Daemon  # noqa: E402
from sloth_tray.paths import locate  # noqa: E402
from sloth_tray.store.queue import Queue, State  # noqa: E402

BAD_HEADER = "#!/bin/sh\n# sloth: retries=3\necho never\n"
FAILS = "#!/bin/sh\n# sloth: max_attempts=1\necho 'disk full' >&2\nexit 1\n"


class Headless:
    """A Surface with nothing to draw: `post` runs the call at once, one at a time."""

    name = "headless-test"
    has_default_action = False

    def __init__(self) -> None:
        self._stopped = threading.Event()
        self._one_at_a_time = threading.Lock()

    def run(self, ready, on_signal=None) -> None:
        ready()
        self._stopped.wait()

    def stop(self) -> None:
        self._stopped.set()

    def post(self, call) -> None:
        with self._one_at_a_time:
            call()

    def show(self, appearance) -> None:
        pass

    def set_menu(self, build) -> None:
        pass

    def menu_changed(self) -> None:
        pass


class Running:
    """A daemon and its tray on threads of their own, with what it opened."""

    def __init__(self, home) -> None:
        from sloth_tray.tray.tray import Tray

        self.home = home
        self.opened: list[Path] = []
        self.daemon = Daemon(home).__enter__()
        self.tray = Tray(self.daemon, surface=Headless(), opener=self.opened.append)
        self.thread = threading.Thread(target=self.tray.run, name="tray")
        self.thread.start()
        wait_for(lambda: self.tray._snapshot is not None, what="the first snapshot")

    def failed(self) -> int:
        snapshot = self.tray._snapshot
        return snapshot.failed_count if snapshot else 0

    def stop(self) -> None:
        self.tray.quit()
        self.thread.join(timeout=30)
        if self.tray.notifier is not None:
            self.tray.notifier.close()
        self.daemon.__exit__()


@pytest.fixture
def app(desktop, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    running = Running(locate(tmp_path / "home").ensure())
    try:
        yield running
    finally:
        running.stop()


def drop(home, name: str, text: str) -> None:
    """A whole file appears in the jobs folder at once, as a save from an editor does."""
    staged = home.root.parent / f"staged-{name}"
    staged.write_text(text)
    os.rename(staged, home.jobs / name)


def shown(server) -> list[dict]:
    """The failure notifications that came up on screen: an update in place is no new
    one, and the first start's welcome is not about failures."""
    return [sent for sent in server.sent
            if sent["replaces_id"] == 0 and sent["summary"] != "sloth-tray is ready"]


def settled(server, title: str, jobs: int) -> bool:
    """The newest thing sent says `title`, or the server was sent one per job."""
    return bool(server.sent) and (server.sent[-1]["summary"] == title
                                  or len(shown(server)) >= jobs)


def notice_id(server, notice: dict) -> int:
    """The id the fake server gave `notice` (a new one counts on from 101)."""
    return 101 + [sent for sent in server.sent if sent["replaces_id"] == 0].index(notice)


def test_a_burst_of_60_failures_gives_at_most_2_notifications(desktop, app):
    server = desktop.notifications(["actions", "body"])
    for number in range(60):
        drop(app.home, f"bad{number:02}.sh", BAD_HEADER)
    wait_for(lambda: app.failed() == 60, timeout=60, what="60 failed jobs")
    wait_for(lambda: settled(server, "sloth-tray: 60 jobs failed", 60), what="the count of 60")
    assert len(shown(server)) <= 2, [sent["body"] for sent in shown(server)][:5]
    # A header fails again on every retry until it is fixed: its script comes first.
    assert server.sent[-1]["actions"] == ["show-scripts", "Show scripts",
                                          "retry-all", "Retry all"]


def test_one_retry_all_of_9_failing_jobs_gives_at_most_2_notifications(desktop, app):
    server = desktop.notifications(["actions", "body"])
    for number in range(9):
        drop(app.home, f"fails{number}.sh", FAILS)
    wait_for(lambda: app.failed() == 9, timeout=60, what="9 failed jobs")
    wait_for(lambda: settled(server, "sloth-tray: 9 jobs failed", 9), what="the first 9")
    before = len(shown(server))
    app.tray.retry_all_failed()
    with Queue(app.home.db) as queue:  # a reader of its own, as the CLI is
        wait_for(lambda: sum(job.runs == 2 for job in queue.jobs(State.FAILED)) == 9,
                 timeout=60, what="all 9 to fail again")
    wait_for(lambda: settled(server, "sloth-tray: 9 jobs failed", before + 9)
             and len(shown(server)) > before, what="the second 9")
    assert len(shown(server)) - before <= 2, [sent["body"] for sent in shown(server)]


def test_a_failure_notification_is_withdrawn_once_its_job_is_retried(desktop, app):
    server = desktop.notifications(["actions", "body"])
    drop(app.home, "fails.sh", FAILS)
    wait_for(lambda: app.failed() == 1, timeout=30, what="the failure")
    [notice] = wait_for(lambda: shown(server), what="its notification")
    assert notice["summary"] == "sloth-tray: a job failed"
    app.tray.retry(app.tray._snapshot.failed_jobs[0].id)
    wait_for(lambda: server.closed, what="the notification to be withdrawn")
    assert server.closed == [notice_id(server, notice)]


def test_notifications_carry_the_apps_own_icon(desktop, app):
    server = desktop.notifications(["actions", "body"])
    drop(app.home, "now.sh", FAILS)
    [notice] = wait_for(lambda: shown(server), timeout=30, what="the notification")
    assert notice["app_icon"].startswith("file://")
    assert Path(notice["app_icon"].removeprefix("file://")).read_bytes()[:8] == \
        b"\x89PNG\r\n\x1a\n"
    assert "desktop-entry" not in notice["hints"]  # pip installs no desktop entry to name


def test_show_script_shows_the_spooled_copy_of_a_bad_header_in_its_folder(desktop, app):
    server = desktop.notifications(["actions", "body"])
    revealed: list[Path] = []
    app.tray.revealer = revealed.append
    drop(app.home, "bad.sh", BAD_HEADER)
    [notice] = wait_for(lambda: shown(server), timeout=30, what="the notification")
    assert notice["actions"] == ["show-script", "Show script", "remove", "Remove"]
    desktop.call(server.ActionInvoked, notice_id(server, notice), "show-script")
    wait_for(lambda: revealed, what="the script to be shown")
    [script] = revealed
    assert script.parent.parent == app.home.spool and script.name == "bad.sh"
    assert app.opened == []  # never opened: a script opened may be run


def test_the_menu_shows_a_bad_headers_script_not_a_log_it_never_wrote(desktop, app):
    """A bad header fails the drop before anything runs: its row offers the script."""
    revealed: list[Path] = []
    app.tray.revealer = revealed.append
    drop(app.home, "bad.sh", BAD_HEADER)
    wait_for(lambda: app.tray._snapshot and app.tray._snapshot.failed_jobs,
             what="the failed job in the tray")
    items = app.tray._menu_items()
    (row,) = next(item for item in items if item.key == "failed").submenu
    show = next(item for item in row.submenu if item.key == "show-script")
    assert show.label == "Show script"
    show.action()
    wait_for(lambda: revealed, what="the script to be shown")
    assert revealed[0].name == "bad.sh" and app.opened == []


SILENT_FAILS = "#!/bin/sh\n# sloth: max_attempts=1\nexit 3\n"


def test_show_log_of_a_run_that_printed_nothing_opens_its_empty_log(desktop, app):
    """A run that printed nothing leaves no file; the menu's Show log still opens that
    run's log, empty, never the folder of every log."""
    drop(app.home, "quiet.sh", SILENT_FAILS)
    wait_for(lambda: app.tray._snapshot and app.tray._snapshot.failed_jobs,
             what="the failed job in the tray")
    (failed,) = app.tray._snapshot.failed_jobs
    log = app.home.job_logs(failed.id, "quiet") / "1.log"
    assert not log.exists()
    (row,) = next(item for item in app.tray._menu_items() if item.key == "failed").submenu
    next(item for item in row.submenu if item.key == "show-log").action()
    wait_for(lambda: app.opened, what="Show log to open something")
    assert app.opened == [log] and log.read_bytes() == b""


def cut_short_by_a_crash(home, script: str) -> str:
    """A job whose run was in step "send" (started with --ask) when its app died: its
    lease still held by the dead app, its step still running. Its id."""
    from sloth_tray.for_jobs import sloth_step

    path = home.spool / "invoice.sh"
    path.write_text(script)
    with Queue(home.db) as queue:
        job_id = queue.push("invoice", script=str(path))
        assert queue.claim("dead-app:1", token="t1").id == job_id
        assert queue.started(job_id, "dead-app:1", {"token": "t1", "pid": 999999})
        run = sloth_step.Run(str(home.db), job_id, "t1", "dead-app:1")
        db = sloth_step.connection(str(home.db))
        assert sloth_step.begin(db, run, "send", ask=True, kind="shell",
                                now=queue.clock()).action == "run"
    return job_id


def test_a_step_cut_short_by_a_crash_is_news_at_the_next_start_and_answered_there(
        desktop, tmp_path, monkeypatch):
    """Taken back as the app starts, the job fails for a person's word: though it is in
    the first snapshot, it is told, and the notification's Mark done answers it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    server = desktop.notifications(["actions", "body"])
    home = locate(tmp_path / "home").ensure()
    sent = tmp_path / "sent"
    job_id = cut_short_by_a_crash(
        home, f"#!/bin/sh\nsloth-tray step send --ask -- touch {sent}\necho after\n")
    app = Running(home)
    try:
        [notice] = wait_for(lambda: shown(server), timeout=30, what="the notification")
        assert notice["summary"] == "sloth-tray: a step was cut short"
        assert notice["body"] == ('invoice: step "send" was cut short, so it may or may not '
                                  "have happened. Did it happen?")
        assert notice["actions"] == ["mark-done", 'Mark "send" done', "run-again",
                                     'Run "send" again', "log", "Show log"]
        desktop.call(server.ActionInvoked, notice_id(server, notice), "mark-done")
        with Queue(home.db) as queue:
            wait_for(lambda: queue.get(job_id).state == State.DONE, timeout=30,
                     what="the job to run again and end")
            [step] = queue.steps(job_id)
            assert (step["state"], step["marked_at"] is not None) == ("done", True)
        assert not sent.exists(), "the step marked done ran again"
        wait_for(lambda: server.closed, what="the notification to be withdrawn")
    finally:
        app.stop()
