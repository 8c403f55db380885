"""Fixtures of the tray tests alone."""

from __future__ import annotations

import pytest
from helpers.bus import start_private_bus


@pytest.fixture
def desktop(pids, tmp_path, monkeypatch):
    """A private session bus, the test's DBUS_SESSION_BUS_ADDRESS, with fake notification,
    portal and file manager services on it (tests/fake_desktop.py)."""
    from fake_desktop import Desktop  # here, not above: it needs dbus_fast, Linux's alone

    address = start_private_bus(pids, tmp_path, "session")
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", address)
    fake = Desktop(address)
    try:
        yield fake
    finally:
        fake.close()
