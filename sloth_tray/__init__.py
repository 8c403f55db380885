"""sloth-tray: run dropped scripts as jobs under leases, from the tray."""

__version__ = "0.1.0"
