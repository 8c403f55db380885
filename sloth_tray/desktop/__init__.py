"""What the Linux desktop offers over D-Bus, one module per service.

bus.py: the session bus and the asyncio loop it runs on. sni.py: the tray icon as a
StatusNotifierItem. dbusmenu.py: its menu (com.canonical.dbusmenu). Each is usable and
testable alone against a private bus; nothing here needs a compiler or PyGObject.
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
