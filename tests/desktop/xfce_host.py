"""xfce4-panel with only its systray, on an Xvfb and a private session bus of its own:
the StatusNotifier host of the *_panel.py tests (its `panel` fixture is in conftest.py
here). Every process it starts is one of the test's `pids`, killed by pid."""

from __future__ import annotations

import os
import subprocess

from helpers.display import start_xvfb
from helpers.processes import wait_for

PANEL_XML = """<?xml version="1.0" encoding="UTF-8"?>
<channel name="xfce4-panel" version="1.0">
  <property name="configver" type="int" value="2"/>
  <property name="panels" type="array">
    <value type="int" value="1"/>
    <property name="panel-1" type="empty">
      <property name="position" type="string" value="p=6;x=0;y=0"/>
      <property name="length" type="uint" value="100"/>
      <property name="position-locked" type="bool" value="true"/>
      <property name="size" type="uint" value="32"/>
      <property name="plugin-ids" type="array"><value type="int" value="1"/></property>
    </property>
  </property>
  <property name="plugins" type="empty">
    <property name="plugin-1" type="string" value="systray"/>
  </property>
</channel>
"""


def registered_items(env) -> str:
    return subprocess.run(
        ["gdbus", "call", "--session", "--dest", "org.kde.StatusNotifierWatcher",
         "--object-path", "/StatusNotifierWatcher", "--method",
         "org.freedesktop.DBus.Properties.Get", "org.kde.StatusNotifierWatcher",
         "RegisteredStatusNotifierItems"], env=env, capture_output=True, text=True).stdout


def start_panel(pids, tmp_path) -> dict[str, str]:
    """Xvfb + a private session bus + xfce4-panel with only its systray; the environment."""
    display = start_xvfb(pids, "800x600x24")
    config = tmp_path / "panel-config"
    (config / "xfce4/xfconf/xfce-perchannel-xml").mkdir(parents=True)
    (config / "xfce4/xfconf/xfce-perchannel-xml/xfce4-panel.xml").write_text(PANEL_XML)
    env = {**os.environ, "DISPLAY": display, "NO_AT_BRIDGE": "1",
           "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(config)}
    env.pop("PYSTRAY_BACKEND", None)
    wait_for(lambda: subprocess.run(["xdpyinfo"], env=env, capture_output=True).returncode == 0,
             what="Xvfb to answer")
    # xfconfd is started by the bus and takes the bus's environment: HOME and
    # XDG_CONFIG_HOME must be the test's before the bus starts.
    bus = pids.popen(["dbus-daemon", "--session", "--nofork", "--print-address=1"], env=env,
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    env["DBUS_SESSION_BUS_ADDRESS"] = bus.stdout.readline().strip()
    pids.popen(["xfce4-panel", "--disable-wm-check"], env=env, stdout=subprocess.DEVNULL,
               stderr=subprocess.DEVNULL)
    wait_for(lambda: "@as" in registered_items(env) or "[" in registered_items(env),
             what="xfce4-panel's StatusNotifierWatcher")
    return env
