"""The real tray on a real (virtual) desktop: Xvfb, a tray host (trayer), a private
D-Bus session and pystray's GTK backend (the one the app picks itself where no
StatusNotifierWatcher runs). Clicked with xdotool, looked at with screenshots.
Every process started here is killed by pid at the end."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.bus import start_private_bus
from helpers.display import grab, red_pixels, start_xvfb
from helpers.processes import alive, to_other_thread, wait_for
from PIL import ImageStat

from sloth_tray import instance
from sloth_tray.paths import locate
from sloth_tray.store.queue import Queue, State

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("Xvfb", "trayer", "xdotool", "xwininfo", "xdpyinfo", "dbus-daemon")


def missing(tools: tuple[str, ...] = TOOLS) -> str | None:
    """Why the tray's desktop tests cannot run here (None: they can): Linux, `tools`
    on PATH, PyGObject for pystray's GTK icon."""
    if not sys.platform.startswith("linux"):
        return "the desktop tests need Linux and X11"
    absent = [tool for tool in tools if shutil.which(tool) is None]
    if absent:
        return f"not installed: {', '.join(absent)} (.ci/run installs them)"
    try:
        import gi  # noqa: F401
    except ImportError:
        return "PyGObject is not installed (pip install 'pygobject<3.51')"
    return None


pytestmark = pytest.mark.skipif(missing() is not None, reason=missing() or "")


@pytest.fixture
def desktop(pids, tmp_path):
    """An X server with a tray host and a session bus; yields the environment, with
    PYSTRAY_BACKEND unset: the app picks pystray's backend itself."""
    display = start_xvfb(pids, "640x480x24")
    env = {**os.environ, "DISPLAY": display, "NO_AT_BRIDGE": "1"}
    env.pop("PYSTRAY_BACKEND", None)
    wait_for(lambda: subprocess.run(["xdpyinfo"], env=env, capture_output=True).returncode == 0,
             what="Xvfb to answer")
    pids.popen(["trayer", "--edge", "top", "--align", "right", "--widthtype", "pixel",
                "--width", "200", "--height", "32", "--transparent", "false",
                "--tint", "0x303030"], env=env, stdout=subprocess.DEVNULL,
               stderr=subprocess.DEVNULL)
    # A bus of the test's own that starts nothing by itself: the stock session bus would
    # start whatever notification service this machine has (Plasma's hangs without a
    # Plasma session, and the icon with it).
    env["DBUS_SESSION_BUS_ADDRESS"] = start_private_bus(pids, tmp_path, "session")
    wait_for(lambda: "panel" in tree(env), what="trayer's panel")
    return env


def tree(env) -> str:
    # Window names are whatever bytes their clients set (Latin-1 is common), not UTF-8.
    return subprocess.run(["xwininfo", "-root", "-tree"], env=env, capture_output=True,
                          text=True, errors="replace").stdout


def icon_box(env) -> tuple[str, int, int, int, int] | None:
    """(title, x, y, width, height) of our icon's window inside the tray."""
    for line in tree(env).splitlines():
        found = re.search(r'"(sloth:[^"]*)": \("sloth-tray".*?(\d+)x(\d+)\+-?\d+\+-?\d+\s+'
                          r"\+(-?\d+)\+(-?\d+)", line)  # ("sloth-tray" ...): the window class
        if found:
            title, w, h, x, y = found.groups()
            return title, int(x), int(y), int(w), int(h)
    return None


def click(env, x: int, y: int, button: int) -> None:
    subprocess.run(["xdotool", "mousemove", str(x), str(y), "click", str(button)], env=env,
                   check=True)


def key(env, *names: str) -> None:
    subprocess.run(["xdotool", "key", *names], env=env, check=True)


def test_the_icon_shows_a_failure_a_click_retries_and_quit_exits_cleanly(desktop, pids,
                                                                         tmp_path):
    """With PYSTRAY_BACKEND unset, as a user starts it: pystray's own first choice,
    appindicator, would draw an XEmbed icon whose left click opens the menu."""
    home = locate(tmp_path / "home").ensure()
    app = pids.popen([sys.executable, "-m", "sloth_tray", "run", "--home", str(home.root)],
                     env=desktop, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    title, x, y, w, h = wait_for(lambda: icon_box(desktop), what="the icon in the tray")
    assert title == "sloth: idle"
    box = (x, y, x + w, y + h)
    idle = grab(desktop, box)
    assert red_pixels(idle) == 0

    script = tmp_path / "disk_check.sh"
    script.write_text('#!/bin/sh\n# sloth: max_attempts=1\necho "disk check: 82% full" >&2\n'
                      "exit 1\n")
    os.rename(script, home.jobs / "disk_check.sh")
    wait_for(lambda: (icon_box(desktop) or ("",))[0] == "sloth: idle · 1 failed",
             what="the title to say a job failed")
    failed = wait_for(lambda: (lambda im: im if red_pixels(im) > 5 else None)(
        grab(desktop, box)), what="the failed badge to be drawn")
    assert failed.tobytes() != idle.tobytes()

    # The menu, open over the failed job (saved where SLOTH_TRAY_SHOTS says, if anywhere).
    click(desktop, x + w // 2, y + h // 2, 3)
    shot = wait_for(lambda: (lambda im: im if im.getbbox() and _menu_drawn(im, y + h) else
                             None)(grab(desktop)), what="the menu to open")
    if os.environ.get("SLOTH_TRAY_SHOTS"):
        shot.crop((180, 0, 640, 280)).save(Path(os.environ["SLOTH_TRAY_SHOTS"]) / "xembed.png")
    key(desktop, "Escape")

    with Queue(home.db) as queue:
        (job,) = queue.jobs()
        click(desktop, x + w // 2, y + h // 2, 1)  # the default action: retry all failed
        wait_for(lambda: "retried" in [e.kind for e in queue.history(job.id)],
                 what="the click to retry the job")
        wait_for(lambda: queue.get(job.id).state == State.FAILED, what="the rerun to end")

        # A per-job item: Failed jobs > disk_check > Retry, by the menu's own keys.
        click(desktop, x + w // 2, y + h // 2, 3)
        wait_for(lambda: _menu_drawn(grab(desktop), y + h), what="the menu to open")
        for name in ("Down", "Right", "Right"):
            before = grab(desktop).tobytes()
            key(desktop, name)
            wait_for(lambda before=before: grab(desktop).tobytes() != before,
                     what=f"the menu to take {name}")
        key(desktop, "Return")
        wait_for(lambda: [e.kind for e in queue.history(job.id)].count("retried") == 2,
                 what="the job's own Retry to retry it")
        wait_for(lambda: queue.get(job.id).state == State.FAILED, what="the rerun to end")

    wait_for(lambda: not _menu_drawn(grab(desktop), y + h), what="the menu to close")
    click(desktop, x + w // 2, y + h // 2, 3)
    wait_for(lambda: _menu_drawn(grab(desktop), y + h), what="the menu to open again")
    key(desktop, "Up", "Return")  # from no selection, Up lands on the last item: Quit
    assert app.wait(timeout=20) == 0
    log = app.stderr.read()
    assert "in the tray (gtk)" in log and "stopped" in log and "Traceback" not in log
    assert "no StatusNotifierWatcher on the session bus; using pystray" in log
    # GTK's complaints (libayatana-appindicator's XEmbed stand-in printed a Gdk-CRITICAL).
    assert "-CRITICAL" not in log and "-WARNING" not in log, log


def _menu_drawn(image, below: int) -> bool:
    """A GTK menu is a light box below the panel; the bare screen there is black."""
    area = image.crop((300, below + 5, 640, below + 60)).convert("L")
    return ImageStat.Stat(area).mean[0] > 100


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 0), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "Ctrl-C"])
def test_a_stop_signal_quits_the_tray_cleanly_and_releases_the_running_job(desktop, pids,
                                                                           tmp_path, sig,
                                                                           status):
    """Whichever thread the kernel gives the signal to; Ctrl-C exits 130, as a shell
    reports a program it stopped."""
    home = locate(tmp_path / "home").ensure()
    started = tmp_path / "started"
    (home.jobs / "long.sh").write_text(f"echo $$ > {started}\nsleep 300\n")
    app = pids.popen([sys.executable, "-m", "sloth_tray", "run", "--home", str(home.root)],
                     env=desktop, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    child = int(wait_for(lambda: started.exists() and started.read_text().strip(),
                         what="the job to start"))
    pids.add(child)
    wait_for(lambda: "sloth: running long" in tree(desktop), what="the title to say running")
    to_other_thread(app.pid, sig)
    assert app.wait(timeout=20) == status
    with Queue(home.db) as queue:
        (job,) = queue.jobs()
        assert (job.state, job.attempts) == (State.PENDING, 0)
        assert queue.history(job.id)[-1].kind == "released"


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 0), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "Ctrl-C"])
def test_a_stop_signal_while_the_tray_is_starting_quits_it_cleanly(desktop, pids, tmp_path,
                                                                   sig, status):
    """From the moment it holds its lock (`status` says it runs), before its icon is
    up: the start is finished, and the app quits as it would later. The script in the
    jobs folder is kept whatever the moment: still there, or queued, its lease given
    back (begun, then stopped, when the start took long enough to take it)."""
    home = locate(tmp_path / "home").ensure()
    started = tmp_path / "started"
    (home.jobs / "long.sh").write_text(f"echo $$ > {started}\nsleep 300\n")
    app = pids.popen([sys.executable, "-m", "sloth_tray", "run", "--home", str(home.root)],
                     env=desktop, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: instance.pid_in(home.lock) == app.pid or app.poll() is not None,
             what="the app to take its lock", every=0.0005)
    app.send_signal(sig)
    assert app.wait(timeout=20) == status
    assert "Traceback" not in app.stderr.read()
    assert instance.pid_in(home.lock) is None
    begun = started.read_text().strip() if started.exists() else ""
    if begun:
        assert not alive(pids.add(int(begun)))
    with Queue(home.db) as queue:
        kept = [(job.name, job.state, job.attempts) for job in queue.jobs()]
    still_dropped = (home.jobs / "long.sh").exists()
    assert kept == [("long", State.PENDING, 0)] or (kept == [] and still_dropped), kept


def test_with_neither_a_statusnotifier_host_nor_pygobject_it_runs_headless_and_says_why(
        desktop, pids, tmp_path):
    """pystray's plain X11 icon can deadlock its X thread against ours (python-xlib
    on one connection): the app runs its jobs headless instead, and says what to
    install. A stop signal to any thread still quits it cleanly."""
    home = locate(tmp_path / "home").ensure()
    started = tmp_path / "started"
    (home.jobs / "long.sh").write_text(f"echo $$ > {started}\nsleep 300\n")
    app = pids.popen([sys.executable, "-m", "sloth_tray", "run", "--home", str(home.root)],
                     env={**desktop, "PYSTRAY_BACKEND": "xorg"}, stdout=subprocess.DEVNULL,
                     stderr=subprocess.PIPE, text=True)
    pids.add(int(wait_for(lambda: started.exists() and started.read_text().strip(),
                          what="the job to start")))
    assert "sloth:" not in tree(desktop)  # no icon
    to_other_thread(app.pid, signal.SIGTERM)
    assert app.wait(timeout=20) == 0
    err = app.stderr.read()
    assert "cannot show a tray icon (this desktop has no StatusNotifier host" in err
    assert "install PyGObject" in err and "running headless" in err
    with Queue(home.db) as queue:
        assert queue.history(queue.jobs()[0].id)[-1].kind == "released"
