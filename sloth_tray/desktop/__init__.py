"""The desktop session and the system, as seen from D-Bus and the environment.

This module (no imports of its own beyond the standard library's smallest) says
whether there is a display and a freedesktop desktop. bus.py: a bus connection and
the asyncio loop it runs on. system.py: UPower and NetworkManager on the system bus,
for the daemon's conditions. The tray's own D-Bus objects (the StatusNotifierItem,
its menu, notifications, the opener) live in sloth_tray/tray/. Nothing here needs a
compiler or PyGObject.
"""

import os
import stat
import sys
from urllib.parse import quote


def freedesktop() -> bool:
    """Whether this platform's desktop speaks the freedesktop.org D-Bus interfaces."""
    return sys.platform != "darwin" and os.name != "nt"


def display_available() -> bool:
    """Whether a tray icon could be shown at all (Linux needs an X or Wayland display).
    Asked before the tray is imported: a headless start never loads Pillow or pystray."""
    if not sys.platform.startswith("linux"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def session_address() -> str | None:
    """The session bus's address: the environment's, else the per-user socket systemd
    and dbus-broker make ($XDG_RUNTIME_DIR/bus), else None."""
    address = os.environ.get("DBUS_SESSION_BUS_ADDRESS")
    if address:
        return address
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        socket_path = os.path.join(runtime, "bus")
        try:
            if stat.S_ISSOCK(os.stat(socket_path).st_mode):
                return "unix:path=" + quote(socket_path, safe="-_/.")
        except OSError:
            pass
    return None
