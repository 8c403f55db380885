"""No desktop or system service can stop the app: every one it calls hangs, or dies
mid-call, on real private buses, and the app still draws its icon, runs what is
dropped, outlives the bus's activation timeout and quits within seconds of SIGTERM.

"hung": each service is activatable and its program only sleeps (Plasma's
notification service outside a Plasma session does exactly this), so every call
waits for the bus's activation timeout, set short here (START_TIMEOUT_MS) so
that "after it" is seconds away. "dying": each service is a real one on the bus
(broken_service.py) that exits the moment a call reaches it, without replying.
Both face the app with every session service it calls (notifications, the
portal, the file manager) and every system one (UPower, NetworkManager) at once;
the log says which one answered how. Run for pystray's GTK icon (trayer, XEmbed),
the StatusNotifierItem (xfce4-panel) and headless; the StatusNotifierWatcher
itself hangs, and freezes, in tests of its own.

Every process started here (the bus's sleeping services too, by the pid they
write) is killed by pid at the end.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.bus import start_private_bus
from helpers.display import grab, start_xvfb
from helpers.opener import recording_opener
from helpers.processes import wait_for
from test_lanes_panel import click, menu
from test_tray_desktop import icon_box
from test_tray_desktop import missing as tray_missing
from xfce_host import PANEL_XML, registered_items

from sloth_tray.paths import locate

TOOLS = ("Xvfb", "trayer", "xfce4-panel", "xwininfo", "xdpyinfo", "dbus-daemon", "gdbus")
HERE = Path(__file__).resolve().parent
START_TIMEOUT_MS = 2000  # the bus's service_start_timeout (25 s on a stock bus)
STOP_WITHIN = 5.0  # seconds from SIGTERM to the app's exit

NOTIFICATIONS = "org.freedesktop.Notifications"
PORTAL = "org.freedesktop.portal.Desktop"
FILE_MANAGER = "org.freedesktop.FileManager1"
WATCHER = "org.kde.StatusNotifierWatcher"
SESSION_SERVICES = (NOTIFICATIONS, PORTAL, FILE_MANAGER)
SYSTEM_SERVICES = ("org.freedesktop.UPower", "org.freedesktop.NetworkManager")
XFCONF = Path("/usr/share/dbus-1/services/org.xfce.Xfconf.service")


def missing() -> str | None:
    return tray_missing(TOOLS)


pytestmark = pytest.mark.skipif(missing() is not None, reason=missing() or "")


class Services:
    """Private buses whose services hang or die; the sleeping programs the buses
    started are killed by the pid each one wrote."""

    def __init__(self, pids, folder: Path) -> None:
        self.pids = pids
        self.folder = folder
        self.hung_pids = folder / "hung.pids"
        self.hang = folder / "hang.sh"
        self.hang.write_text(f'#!/bin/sh\necho $$ >> "{self.hung_pids}"\nexec sleep 600\n')
        self.hang.chmod(0o755)

    def bus(self, kind: str, how: str, names: tuple[str, ...], *,
            also: tuple[Path, ...] = (), env: dict[str, str] | None = None) -> str:
        """A bus where each of `names` hangs or dies (`how`); `also`: service files of
        real services it may start (xfconfd for the panel). Its address."""
        services = self.folder / f"{kind}-services"
        services.mkdir()
        for real in also:
            shutil.copy(real, services)
        if how == "hung":
            for name in names:
                (services / f"{name}.service").write_text(
                    f"[D-BUS Service]\nName={name}\nExec={self.hang}\n")
        extra = (f"\n  <servicedir>{services}</servicedir>"
                 f'\n  <limit name="service_start_timeout">{START_TIMEOUT_MS}</limit>')
        address = start_private_bus(self.pids, self.folder, kind, extra=extra, env=env)
        if how == "dying":
            for name in names:
                self.broken("die", address, name)
        return address

    def broken(self, how: str, address: str, *names: str) -> None:
        service = self.pids.popen([sys.executable, str(HERE / "broken_service.py"), how,
                                   address, *names], stdout=subprocess.PIPE, text=True)
        assert service.stdout.readline().strip() == "ready", f"{names} did not start"

    def kill_hung(self) -> None:
        """Handed to `pids`, which kills them with the rest."""
        if self.hung_pids.exists():
            for pid in self.hung_pids.read_text().split():
                self.pids.add(int(pid))


@pytest.fixture
def services(pids, tmp_path):
    made = Services(pids, tmp_path)
    try:
        yield made
    finally:
        made.kill_hung()


def base_env(tmp_path: Path) -> dict[str, str]:
    bin_dir, _ = recording_opener(tmp_path)  # the desktop's last opener, recording
    env = {**os.environ, "NO_AT_BRIDGE": "1", "HOME": str(tmp_path),
           "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    for name in ("PYSTRAY_BACKEND", "DISPLAY", "WAYLAND_DISPLAY", "XDG_CURRENT_DESKTOP"):
        env.pop(name, None)
    return env


def with_display(pids, env: dict[str, str]) -> dict[str, str]:
    env = {**env, "DISPLAY": start_xvfb(pids, "640x480x24")}
    wait_for(lambda: subprocess.run(["xdpyinfo"], env=env, capture_output=True).returncode == 0,
             what="Xvfb to answer")
    return env


def start_app(pids, env, home, log: Path, *extra: str) -> subprocess.Popen:
    with open(log, "wb") as out:
        return pids.popen([sys.executable, "-m", "sloth_tray", "run", "--home",
                           str(home.root), *extra], env=env, stdin=subprocess.DEVNULL,
                          stdout=out, stderr=out)


def drop(home, name: str, text: str) -> None:
    """A whole file renamed into the jobs folder, as a user's file manager moves it."""
    staged = home.root.parent / name
    staged.write_text(text)
    os.rename(staged, home.jobs / name)


def ran(tmp_path: Path, name: str, header: str = "") -> str:
    """A script that leaves a mark when it runs; `header`: its `# sloth:` line."""
    return f"#!/bin/sh\n{header}touch {tmp_path / 'ran' / name}\n"


def has_run(tmp_path: Path, name: str) -> bool:
    return (tmp_path / "ran" / name).exists()


def text(log: Path) -> str:
    return log.read_text(errors="replace")


def stops_on_sigterm(app: subprocess.Popen, log: Path) -> float:
    """SIGTERM, then the seconds until it exited (cleanly, with nothing held)."""
    began = time.monotonic()
    app.send_signal(signal.SIGTERM)
    try:
        status = app.wait(timeout=STOP_WITHIN + 10)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running {STOP_WITHIN + 10:g} s after SIGTERM:\n"
                             f"{text(log)}") from None
    took = time.monotonic() - began
    assert status == 0, text(log)
    assert took < STOP_WITHIN, f"{took:.1f} s from SIGTERM to exit\n{text(log)}"
    return took


def survives(app, home, tmp_path: Path, log: Path, *, drawn, system: bool = True,
             notifications: bool = True) -> None:
    """What every run here must show: drawn (`drawn()` is true), a dropped script run,
    the services' failures said in the log once the activation timeout has passed,
    still up and still running drops after it, and a quick clean stop."""
    (tmp_path / "ran").mkdir()
    wait_for(lambda: drawn() or app.poll() is not None, what="the icon to be drawn")
    assert app.poll() is None, text(log)
    drop(home, "plain.sh", ran(tmp_path, "plain"))
    drop(home, "fails.sh", "#!/bin/sh\n# sloth: max_attempts=1\nexit 1\n")  # a notification
    if system:
        drop(home, "on_ac.sh", ran(tmp_path, "on_ac", "# sloth: require=ac\n"))
    wait_for(lambda: has_run(tmp_path, "plain") or app.poll() is not None,
             what="the dropped script to run")
    assert app.poll() is None, text(log)
    # Each service's failure is said once it is known: past the activation timeout.
    if system:
        for name in SYSTEM_SERVICES:
            wait_for(lambda name=name: f"{name} is not on the system bus" in text(log),
                     what=f"the log to say {name} failed")
        wait_for(lambda: has_run(tmp_path, "on_ac"), what="the require=ac job to run")
    if notifications:
        wait_for(lambda: "notification" in text(log).split("WARNING", 1)[-1],
                 timeout=30, what="the log to say the notifications failed")
    assert app.poll() is None, text(log)
    drop(home, "later.sh", ran(tmp_path, "later"))
    wait_for(lambda: has_run(tmp_path, "later"), what="a drop after the timeout to run")
    assert drawn(), "the icon went away"
    took = stops_on_sigterm(app, log)
    assert "Traceback" not in text(log), text(log)
    print(f"SIGTERM to exit: {took:.2f} s")


# -- pystray's GTK icon in an XEmbed tray (trayer) ---------------------------------------


@pytest.mark.parametrize("how", ["hung", "dying"])
def test_the_gtk_icon_in_an_xembed_tray_outlives_every_service_that_hangs_or_dies(
        how, services, pids, tmp_path):
    env = with_display(pids, base_env(tmp_path))
    pids.popen(["trayer", "--edge", "top", "--align", "right", "--widthtype", "pixel",
                "--width", "200", "--height", "32", "--transparent", "false",
                "--tint", "0x303030"], env=env, stdout=subprocess.DEVNULL,
               stderr=subprocess.DEVNULL)
    env["DBUS_SESSION_BUS_ADDRESS"] = services.bus("session", how, SESSION_SERVICES)
    env["DBUS_SYSTEM_BUS_ADDRESS"] = services.bus("system", how, SYSTEM_SERVICES)
    home = locate(tmp_path / "home").ensure()
    log = tmp_path / "app.log"
    app = start_app(pids, env, home, log)

    def drawn() -> bool:  # a real icon, not the 1-pixel stub of a tray never set up
        box = icon_box(env)
        return box is not None and box[3] >= 16 and box[0].startswith("sloth:")

    survives(app, home, tmp_path, log, drawn=drawn)
    assert "in the tray (gtk)" in text(log)


# -- a StatusNotifierItem in a panel that shows them (xfce4-panel) -------------------------


def row_labelled(row, label: str):
    """The first row labelled `label` anywhere in the menu, or None."""
    if row.label == label:
        return row
    return next(filter(None, (row_labelled(sub, label) for sub in row.rows)), None)


def answered_quickly(env, item: str):
    """The menu, read as a panel reads it when it opens; within a second."""
    began = time.monotonic()
    shown = menu(env, item)
    assert time.monotonic() - began < 1.0, "the menu took a second or more to answer"
    return shown


@pytest.mark.parametrize("how", ["hung", "dying"])
def test_the_statusnotifier_item_outlives_every_service_that_hangs_or_dies(
        how, services, pids, tmp_path):
    env = with_display(pids, base_env(tmp_path))
    config = tmp_path / "panel-config"
    (config / "xfce4/xfconf/xfce-perchannel-xml").mkdir(parents=True)
    (config / "xfce4/xfconf/xfce-perchannel-xml/xfce4-panel.xml").write_text(PANEL_XML)
    env["XDG_CONFIG_HOME"] = str(config)
    # xfconfd is started by the bus, with the bus's environment.
    env["DBUS_SESSION_BUS_ADDRESS"] = services.bus("session", how, SESSION_SERVICES,
                                                   also=(XFCONF,), env=env)
    env["DBUS_SYSTEM_BUS_ADDRESS"] = services.bus("system", how, SYSTEM_SERVICES)
    pids.popen(["xfce4-panel", "--disable-wm-check"], env=env, stdout=subprocess.DEVNULL,
               stderr=subprocess.DEVNULL)
    wait_for(lambda: "[" in registered_items(env), what="xfce4-panel's StatusNotifierWatcher")
    bare = grab(env, (0, 0, 40, 32)).tobytes()
    home = locate(tmp_path / "home").ensure()
    log = tmp_path / "app.log"
    app = start_app(pids, env, home, log)

    def item() -> str | None:
        found = re.search(r"'(:[\d.]+)/StatusNotifierItem'", registered_items(env))
        return found[1] if found else None

    def drawn() -> bool:
        return item() is not None and grab(env, (0, 0, 40, 32)).tobytes() != bare

    # A bad header's "Show script" shows the script in its folder: the portal and the
    # file manager are asked first, and the menu must answer meanwhile.
    wait_for(drawn, what="the item in the panel")
    drop(home, "bad.sh", "#!/bin/sh\n# sloth: nonsense=1\n")
    show_script = wait_for(lambda: row_labelled(menu(env, item()), "Show script"),
                           what="the bad header's row")
    click(env, item(), show_script)
    click(env, item(), row_labelled(answered_quickly(env, item()), "Open jobs folder"))
    answered_quickly(env, item())
    wait_for(lambda: (tmp_path / "opened").exists()
             and str(home.jobs) in (tmp_path / "opened").read_text(),
             what="the jobs folder to open once the portal and file manager failed")
    survives(app, home, tmp_path, log, drawn=drawn)
    assert "(sni)" in text(log)
    assert str(home.spool) in (tmp_path / "opened").read_text()  # the script's folder


# -- headless -------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["hung", "dying"])
def test_headless_outlives_system_services_that_hang_or_die(how, services, pids, tmp_path):
    env = base_env(tmp_path)
    env["DBUS_SESSION_BUS_ADDRESS"] = services.bus("session", how, SESSION_SERVICES)
    env["DBUS_SYSTEM_BUS_ADDRESS"] = services.bus("system", how, SYSTEM_SERVICES)
    home = locate(tmp_path / "home").ensure()
    log = tmp_path / "app.log"
    app = start_app(pids, env, home, log, "--headless")
    survives(app, home, tmp_path, log, drawn=lambda: "running headless" in text(log),
             notifications=False)


# -- the StatusNotifierWatcher itself ---------------------------------------------------


@pytest.mark.parametrize("how", ["hung", "frozen"])
def test_a_statusnotifier_watcher_that_hangs_or_freezes_holds_up_neither_jobs_nor_quit(
        how, services, pids, tmp_path):
    """hung: activatable, never appears; frozen: owned, never answers (a stopped
    panel). Either way no icon can be shown: the jobs run all the same, and SIGTERM
    still quits."""
    env = with_display(pids, base_env(tmp_path))
    names = (WATCHER, *SESSION_SERVICES)
    if how == "hung":
        env["DBUS_SESSION_BUS_ADDRESS"] = services.bus("session", "hung", names)
    else:
        env["DBUS_SESSION_BUS_ADDRESS"] = address = services.bus("session", "-", ())
        services.broken("freeze", address, *names)
    env["DBUS_SYSTEM_BUS_ADDRESS"] = services.bus("system", "hung", SYSTEM_SERVICES)
    home = locate(tmp_path / "home").ensure()
    log = tmp_path / "app.log"
    app = start_app(pids, env, home, log)
    (tmp_path / "ran").mkdir()
    drop(home, "plain.sh", ran(tmp_path, "plain"))
    wait_for(lambda: has_run(tmp_path, "plain") or app.poll() is not None,
             what="the dropped script to run")
    assert app.poll() is None, text(log)
    if how == "hung":  # before the watcher's activation timed out; said after it
        assert WATCHER not in text(log), text(log)
        wait_for(lambda: WATCHER in text(log), what="the log to say the watcher failed")
        assert app.poll() is None, text(log)
    # frozen: the registration still waits for its answer, and the quit does not
    stops_on_sigterm(app, log)
    assert "Traceback" not in text(log), text(log)
