"""The tray in a real StatusNotifier host: Xvfb, a private D-Bus session, xfce4-panel.

xfce4-panel's systray is an org.kde.StatusNotifierWatcher that draws the item's
icon and renders its dbusmenu as a real GTK menu, as KDE, GNOME with
AppIndicator, Cinnamon, MATE and waybar do. The app is installed as the README
says (no PyGObject needed on this path) and every menu item is clicked in the
panel's menu, by keyboard (the menu's own navigation, so no pixel guessing),
and each one's effect is checked. A fake notification server on the same bus
receives the failure notification, and its Retry button is pressed.
Every process started here is killed by pid at the end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.display import grab, red_pixels
from helpers.opener import recording_opener
from helpers.processes import alive, to_other_thread, wait_for
from xfce_host import registered_items

from sloth_tray.paths import locate
from sloth_tray.store.queue import Queue, State
from sloth_tray.tray.dbusmenu import ASKED_FOR_ENV

TOOLS = ("Xvfb", "xfce4-panel", "xdotool", "xdpyinfo", "dbus-daemon", "gdbus")
ICON = (11, 16)  # the first item of a 32 px panel at the top
SHOTS = os.environ.get("SLOTH_TRAY_SHOTS")  # a folder for the menu's screenshot, if wanted
ASKED_FOR_HERE = 5.0  # the app's dbusmenu.ASKED_FOR where a test waits it out


def missing() -> str | None:
    if not sys.platform.startswith("linux"):
        return "the desktop tests need Linux and X11"
    absent = [tool for tool in TOOLS if shutil.which(tool) is None]
    return f"not installed: {', '.join(absent)} (.ci/run installs them)" if absent else None


pytestmark = pytest.mark.skipif(missing() is not None, reason=missing() or "")

def xdotool(env, *args: str) -> None:
    subprocess.run(["xdotool", *args], env=env, check=True)


def screen_changes(env, act, what: str) -> None:
    """Do `act` (a key, a click), then wait until the screen shows it: a menu or
    submenu mapped, a row highlighted. GTK maps menus asynchronously, and a key
    sent before its menu is up would go elsewhere."""
    before = grab(env).tobytes()
    act()
    wait_for(lambda: grab(env).tobytes() != before, timeout=5, what=what)


def open_menu(env) -> None:
    """Right click on the icon, once the screen is back to the bare panel."""
    xdotool(env, "key", "Escape", "Escape", "Escape")
    xdotool(env, "mousemove", "400", "400")
    wait_for(lambda: grab(env, (0, 40, 300, 300)).getbbox() is None,
             what="every menu to close")
    xdotool(env, "mousemove", str(ICON[0]), str(ICON[1]))
    screen_changes(env, lambda: xdotool(env, "click", "3"), "the menu to open")


def choose(env, *keys: str) -> None:
    """Open the menu and walk it by keyboard: Down moves over enabled rows only,
    Right opens a submenu on its first enabled row, Up from the top is the last
    row, Return clicks."""
    open_menu(env)
    for key in keys:
        screen_changes(env, lambda key=key: xdotool(env, "key", key), f"the menu to take {key}")
    xdotool(env, "key", "Return")


# The menu's enabled rows, top to bottom, with one failed job and one waiting job
# (the status line and the error row inside a job's submenu are disabled).
FAILED_JOBS, RETRY_ALL, WAITING, PAUSE, OPEN_JOBS, OPEN_LOGS, AUTOSTART = range(1, 8)


def row(n: int) -> tuple[str, ...]:
    return ("Down",) * n


def history(home, job_id: str) -> list[str]:
    with Queue(home.db) as queue:
        return [event.kind for event in queue.history(job_id)]


def state(home, job_id: str) -> State:
    with Queue(home.db) as queue:
        return queue.get(job_id).state


def paused(home) -> bool:
    done = subprocess.run([sys.executable, "-m", "sloth_tray", "status", "--json",
                           "--home", str(home.root)], capture_output=True, text=True)
    return json.loads(done.stdout)["paused"]


def add(home, env, name: str, text: str, *extra: str) -> str:
    path = home.root.parent / f"{name}.sh"
    path.write_text(text)
    done = subprocess.run([sys.executable, "-m", "sloth_tray", "add", str(path), "--home",
                           str(home.root), *extra], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def start_app(home, panel, pids, **output) -> subprocess.Popen:
    """`sloth-tray run` in the panel, once its item is registered (output: DEVNULL
    unless the test reads it)."""
    app = pids.popen([sys.executable, "-m", "sloth_tray", "run", "--home", str(home.root)],
                     env=panel, **{"stdout": subprocess.DEVNULL,
                                   "stderr": subprocess.DEVNULL, **output})
    wait_for(lambda: "StatusNotifierItem" in registered_items(panel),
             what="the item to register with the panel")
    return app


def start_slow(home, panel, pids, tmp_path) -> tuple[str, int]:
    """A job that runs for minutes, once it runs: its id and its process's pid."""
    started = tmp_path / "started"
    job = add(home, panel, "slow", f"echo $$ > {started}\nsleep 300\n")
    child = pids.add(int(wait_for(lambda: started.exists() and started.read_text().strip(),
                                  what="the slow job to start")))
    return job, child


def test_every_menu_item_works_in_a_real_statusnotifier_panel(panel, pids, tmp_path):
    from fake_desktop import Desktop

    services = Desktop(panel["DBUS_SESSION_BUS_ADDRESS"])
    notifications = services.notifications(["actions", "body"])
    bin_dir, opened = recording_opener(tmp_path)  # the desktop's opener
    env = {**panel, "PATH": f"{bin_dir}:{panel['PATH']}",
           "XDG_CONFIG_HOME": str(tmp_path / "user-config")}
    home = locate(tmp_path / "home").ensure()
    app = pids.popen([sys.executable, "-m", "sloth_tray", "run", "--home", str(home.root)],
                     env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: "StatusNotifierItem" in registered_items(panel),
                 what="the item to register with the panel")
        icon_box = (0, 0, 32, 32)
        wait_for(lambda: grab(panel, icon_box).getbbox() and red_pixels(grab(panel, icon_box))
                 == 0, what="the idle sloth in the panel")

        failing = add(home, env, "disk_check", '# sloth: max_attempts=1\n'
                      'echo "disk check: 82% full" >&2\nexit 1\n')
        waiting = add(home, env, "tidy_downloads", "echo tidy\n", "--delay", "1h")
        wait_for(lambda: red_pixels(grab(panel, icon_box)) > 10,
                 what="the icon to show the failure")
        def failure_notices() -> list[int]:
            return [number for number, sent in enumerate(notifications.sent, start=101)
                    if "disk_check" in sent["body"]]

        wait_for(failure_notices, what="the failure's notification")
        [notice] = failure_notices()  # one per failure, never repeated
        assert notifications.sent[notice - 101]["actions"] == ["retry", "Retry",
                                                               "log", "Show log"]

        open_menu(panel)
        if SHOTS:
            grab(panel, (0, 0, 260, 290)).save(Path(SHOTS) / "sni-menu.png")

        # The notification's Retry button.
        services.call(notifications.ActionInvoked, notice, "retry")
        wait_for(lambda: history(home, failing).count("retried") == 1,
                 what="the notification's Retry to retry the job")
        wait_for(lambda: state(home, failing) == State.FAILED, what="the job to fail again")

        choose(panel, *row(FAILED_JOBS), "Right", "Right")  # Failed jobs > disk_check > Retry
        wait_for(lambda: history(home, failing).count("retried") == 2, what="Retry")
        wait_for(lambda: state(home, failing) == State.FAILED, what="the job to fail again")

        choose(panel, *row(RETRY_ALL))
        wait_for(lambda: history(home, failing).count("retried") == 3, what="Retry all failed")
        wait_for(lambda: state(home, failing) == State.FAILED, what="the job to fail again")

        choose(panel, *row(FAILED_JOBS), "Right", "Right", "Down")  # ... > Show log
        wait_for(lambda: opened.exists() and f"{home.job_logs(failing)}/" in opened.read_text(),
                 what="Show log to open the job's log")

        choose(panel, *row(OPEN_JOBS))
        wait_for(lambda: str(home.jobs) in opened.read_text(), what="Open jobs folder")
        choose(panel, *row(OPEN_LOGS))
        wait_for(lambda: opened.read_text().splitlines()[-1] == str(home.logs),
                 what="Open logs")

        choose(panel, *row(PAUSE))
        wait_for(lambda: paused(home), what="Pause")
        choose(panel, *row(PAUSE))
        wait_for(lambda: not paused(home), what="Resume")

        entry = tmp_path / "user-config" / "autostart" / "sloth-tray.desktop"
        choose(panel, *row(AUTOSTART))
        wait_for(entry.exists, what="Start at login to write the autostart entry")
        assert str(home.root) in entry.read_text()
        choose(panel, *row(AUTOSTART))
        wait_for(lambda: not entry.exists(), what="Start at login to remove it again")

        choose(panel, *row(WAITING), "Right", "Right")  # Waiting > tidy_downloads > Run now
        wait_for(lambda: state(home, waiting) == State.DONE, what="Run now to run the job")
        assert "hurried" in history(home, waiting)

        choose(panel, *row(FAILED_JOBS), "Right", "Right", "Down", "Down")  # ... > Cancel
        wait_for(lambda: state(home, failing) == State.CANCELLED, what="Cancel")

        choose(panel, "Up")  # Quit: the last row, however many rows above are enabled now
        assert app.wait(timeout=20) == 0
        log = app.stderr.read()
        assert "in the tray (sni)" in log and "Traceback" not in log
    finally:
        services.close()


def test_a_cli_retry_while_a_job_runs_shows_in_the_panel_within_a_second(panel, pids,
                                                                         tmp_path):
    home = locate(tmp_path / "home").ensure()
    start_app(home, panel, pids)
    icon_box = (0, 0, 32, 32)
    failing = add(home, panel, "disk_check", "# sloth: max_attempts=1\nexit 1\n")
    wait_for(lambda: state(home, failing) == State.FAILED, what="the job to fail")
    started = tmp_path / "started"
    add(home, panel, "slow", f"touch {started}\nsleep 60\n")
    wait_for(started.exists, what="the slow job to start")
    wait_for(lambda: red_pixels(grab(panel, icon_box)) > 10, what="the failure on the icon")

    done = subprocess.run([sys.executable, "-m", "sloth_tray", "retry", failing, "--home",
                           str(home.root)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    # The slow job still runs: before, the red badge stayed until it ended.
    wait_for(lambda: red_pixels(grab(panel, icon_box)) == 0, timeout=1.0,
             what="the retried failure to leave the icon while the other job runs")
    assert state(home, failing) == State.PENDING


@pytest.mark.parametrize("how, status", [("a stop signal to any thread", 0),
                                         ("Ctrl-C to any thread", 130),
                                         ("Quit in the menu", 0)])
def test_a_quit_while_a_job_runs_gives_the_job_back_and_stops_it(panel, pids, tmp_path, how,
                                                                  status):
    home = locate(tmp_path / "home").ensure()
    app = start_app(home, panel, pids, stderr=subprocess.PIPE, text=True)
    slow, child = start_slow(home, panel, pids, tmp_path)
    if how == "Quit in the menu":
        choose(panel, "Up")  # Quit: the last row
    else:
        to_other_thread(app.pid, signal.SIGINT if how.startswith("Ctrl-C") else signal.SIGTERM)
    assert app.wait(timeout=20) == status
    assert (state(home, slow), history(home, slow)[-1]) == (State.PENDING, "released")
    assert not alive(child)
    assert "Traceback" not in app.stderr.read()


def menu_signals(log: Path) -> int:
    """dbusmenu signals the app sent so far, as dbus-monitor wrote them down."""
    return log.read_text().count("interface=com.canonical.dbusmenu") if log.exists() else 0


def app_layout(env, bus_name: str) -> list:
    """The app's menu as xfce4-panel fetches it: (id, label) of the root's rows."""
    out = subprocess.run(["gdbus", "call", "--session", "--dest", bus_name, "--object-path",
                          "/MenuBar", "--method", "com.canonical.dbusmenu.GetLayout", "0", "1",
                          "['label']"], env=env, capture_output=True, text=True).stdout
    return re.findall(r"\((\d+), \{(?:'label': <'([^']*)'>)?\}, @av \[\]\)", out)


def test_an_open_menu_moves_its_times_under_the_same_ids_and_goes_quiet_once_closed(
        panel, pids, tmp_path):
    """xfce4-panel opens the root menu with AboutToShowGroup([0]) and never says
    "opened" or "closed" for it: the running time moves on screen all the same, the
    row keeps its id, and once the menu is closed the app stops sending within the
    window a host's question buys (dbusmenu.ASKED_FOR, shortened here to ASKED_FOR_HERE
    seconds: the same window, not 30 s of waiting)."""
    home = locate(tmp_path / "home").ensure()
    start_app(home, {**panel, ASKED_FOR_ENV: str(ASKED_FOR_HERE)}, pids)
    [bus_name] = re.findall(r"(:[0-9.]+)/StatusNotifierItem", registered_items(panel))
    log = tmp_path / "monitor.log"
    with open(log, "w") as out:
        pids.popen(["dbus-monitor", "--session",
                    "type='signal',interface='com.canonical.dbusmenu'"], env=panel,
                   stdout=out, stderr=subprocess.DEVNULL)
    start_slow(home, panel, pids, tmp_path)

    def running_row() -> tuple[str, str]:
        return next(row for row in app_layout(panel, bus_name) if row[1].startswith("Running"))

    open_menu(panel)
    first_row = (0, 40, 300, 62)  # the status line, just below the 32 px panel
    node_id, label = running_row()
    shown = grab(panel, first_row).tobytes()
    wait_for(lambda: grab(panel, first_row).tobytes() != shown, timeout=5,
             what="the running time to move in the open menu")
    assert running_row()[0] == node_id and running_row()[1] != label

    xdotool(panel, "key", "Escape")
    closed = time.monotonic()

    def quiet_for(seconds: float) -> bool:
        count = menu_signals(log)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if menu_signals(log) != count:
                return False
            time.sleep(0.2)
        return True

    wait_for(lambda: quiet_for(3.0), timeout=ASKED_FOR_HERE + 15, what="the menu to go quiet")
    assert time.monotonic() - closed < ASKED_FOR_HERE + 3.0 + 3.0


def test_the_running_jobs_show_log_and_stop_and_a_waiting_jobs_cancel(panel, pids,
                                                                     tmp_path):
    bin_dir, opened = recording_opener(tmp_path)  # the desktop's opener
    env = {**panel, "PATH": f"{bin_dir}:{panel['PATH']}"}
    home = locate(tmp_path / "home").ensure()
    start_app(home, env, pids)
    slow, child = start_slow(home, panel, pids, tmp_path)
    waiting = add(home, panel, "later", "echo later\n", "--delay", "1h")
    # The running line is the first enabled row: Running slow > Stop, Show log
    choose(panel, "Down", "Right", "Down")
    wait_for(lambda: opened.exists() and f"{home.job_logs(slow)}/1.log" in opened.read_text(),
             what="Show log to open the running job's log")
    choose(panel, "Down", "Right")
    wait_for(lambda: state(home, slow) == State.CANCELLED, what="Stop to stop the job")
    wait_for(lambda: not alive(child), what="the job's process to end")
    # Nothing runs or failed now, so Waiting is the first enabled row:
    # Waiting > later > Cancel (after Run now)
    choose(panel, "Down", "Right", "Right", "Down")
    wait_for(lambda: state(home, waiting) == State.CANCELLED, what="Cancel on a waiting job")


def test_a_failing_series_is_one_row_whose_retry_latest_and_cancel_all_work(panel, pids,
                                                                            tmp_path):
    """A repeating job failing every run is one row under Failed jobs; its submenu's
    Retry latest retries the newest failed run, Cancel all cancels every failed run."""
    home = locate(tmp_path / "home").ensure()
    start_app(home, panel, pids)
    add(home, panel, "tidy", "# sloth: every=1s max_attempts=1\nexit 1\n")

    def failed() -> list:
        with Queue(home.db) as queue:
            return queue.jobs(State.FAILED)

    # three: after Retry latest, two are left, still one row (one alone is a plain row)
    wait_for(lambda: len(failed()) >= 3, what="three failed runs of the series")
    done = subprocess.run([sys.executable, "-m", "sloth_tray", "pause", "--home",
                           str(home.root)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: paused(home), what="the pause")
    runs = failed()
    latest = max(runs, key=lambda job: job.updated_at)
    # Paused, nothing runs: Failed jobs is the first enabled row; its first row is the
    # series; the series' first row is Retry latest, then Cancel all.
    choose(panel, "Down", "Right", "Right")
    wait_for(lambda: "retried" in history(home, latest.id), what="Retry latest")
    assert [job.id for job in failed()] == [job.id for job in runs if job.id != latest.id]
    choose(panel, "Down", "Right", "Right", "Down")
    wait_for(lambda: failed() == [], what="Cancel all")
    assert {state(home, job.id) for job in runs if job.id != latest.id} == {State.CANCELLED}
