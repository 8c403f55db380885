"""What draws the tray: one interface, whichever toolkit or protocol is behind it.

The tray (tray.py) decides what to show from Snapshots and the presenter's
menu model; a Surface only shows it. Two kinds exist: a StatusNotifierItem
with a dbusmenu over D-Bus (sni.py and dbusmenu.py: KDE, GNOME with AppIndicator,
Xfce, Cinnamon, MATE, waybar), and pystray's backends (XEmbed on X11, macOS,
Windows). The rest of the app cannot tell which one it has.

Rules every Surface keeps:
- `run` blocks the calling (main) thread until `stop`; `post` is the one way
  other threads reach the surface's thread.
- The menu is a callable: the surface calls it each time the menu is about to
  be shown (so times in labels are right when seen) and after `menu_changed`.
- An Item's action is called with no arguments, on the surface's thread; the
  action never sees a toolkit object. A failing action is logged as what it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from sloth_tray.tray.icons import Look
from sloth_tray.tray.presenter import Item

MenuBuilder = Callable[[], tuple[Item, ...]]


class Status(StrEnum):
    """The item's urgency, as StatusNotifierItem names it."""

    ACTIVE = "Active"
    NEEDS_ATTENTION = "NeedsAttention"  # a job failed for good and waits for the user


@dataclass(frozen=True)
class Appearance:
    look: Look
    title: str  # the one-line summary: tooltip and title
    status: Status = Status.ACTIVE


class Surface(Protocol):
    name: str  # "sni", "gtk", "appindicator", "xorg", "darwin", "win32"
    has_default_action: bool  # a left click runs the menu's default item

    def run(self, ready: Callable[[], None],
            on_signal: Callable[[], None] | None = None) -> None:
        """Show the icon and block until stop(); `ready` runs once it is shown.
        The stop signals given to the constructor call `on_signal` (default: stop)
        on the surface's own thread."""

    def stop(self) -> None: ...

    def post(self, call: Callable[[], object]) -> None:
        """Run `call` on the surface's thread."""

    def show(self, appearance: Appearance) -> None:
        """Icon, tooltip and status; on the surface's thread."""

    def set_menu(self, build: MenuBuilder) -> None: ...

    def menu_changed(self) -> None:
        """The menu's model changed: rebuild it (for hosts that cache it)."""

    def take_activation_token(self) -> str | None:
        """The desktop's activation token for the click being handled, if the host gave
        one (what the click opens passes it on, to be let to take the focus); once."""
