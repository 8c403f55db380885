"""PyInstaller's entry script: the same as `python -m sloth_tray`."""

from sloth_tray.cli import main

raise SystemExit(main())
