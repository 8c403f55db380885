"""The desktop's opener, recording instead of opening: what the tray asks it to show."""

from __future__ import annotations

from pathlib import Path


def recording_opener(folder: Path) -> tuple[Path, Path]:
    """An `xdg-open` in folder/bin that appends each path it is asked to open to
    folder/opened: (the bin folder to put first on PATH, the record)."""
    bin_dir, opened = folder / "bin", folder / "opened"
    bin_dir.mkdir()
    (bin_dir / "xdg-open").write_text(f'#!/bin/sh\necho "$1" >> "{opened}"\n')
    (bin_dir / "xdg-open").chmod(0o755)
    return bin_dir, opened
