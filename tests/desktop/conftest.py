"""Fixtures of the desktop tests alone."""

from __future__ import annotations

import pytest
from xfce_host import start_panel


@pytest.fixture
def panel(pids, tmp_path):
    """Xvfb + a private session bus + xfce4-panel with only its systray; the environment."""
    return start_panel(pids, tmp_path)
