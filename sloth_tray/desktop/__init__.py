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
