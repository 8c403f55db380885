"""A scratch folder for a model's example: in memory where the system has one.

A Hypothesis model makes and removes a home per example, thousands in a run. On a
virtual disk each folder made and removed costs about half a millisecond of
metadata writes, a third of such a test's time, and the model checks the queue's
and the spool's rules, not the disk. Tests about file systems (other devices, a
full disk, a read-only home) make their folders where they say, not here.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

MEMORY = Path("/dev/shm")  # tmpfs on Linux


def scratch_folder(prefix: str) -> Path:
    """A new folder of this user's, in memory if /dev/shm takes one, else in the
    system's temporary folder."""
    where = str(MEMORY) if MEMORY.is_dir() and os.access(MEMORY, os.W_OK | os.X_OK) else None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=where))
