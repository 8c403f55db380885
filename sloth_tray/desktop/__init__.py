"""What the Linux desktop offers over D-Bus, one module per service.

bus.py: the session bus and the asyncio loop it runs on. sni.py: the tray icon as a
StatusNotifierItem. dbusmenu.py: its menu (com.canonical.dbusmenu). Each is usable and
testable alone against a private bus; nothing here needs a compiler or PyGObject.
"""

import os
import sys


def freedesktop() -> bool:
    """Whether this platform's desktop speaks the freedesktop.org D-Bus interfaces."""
    return sys.platform != "darwin" and os.name != "nt"


def display_available() -> bool:
    """Whether a tray icon could be shown at all (Linux needs an X or Wayland display).
    Asked before the tray is imported: a headless start never loads Pillow or pystray."""
    if not sys.platform.startswith("linux"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
