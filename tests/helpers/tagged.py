"""Processes a test started, known by a tag in their environment: a job's, a step's
COMMAND's, whatever they forked. What still carries the tag at the end is killed by pid."""

from __future__ import annotations

import os
import signal
from pathlib import Path

TAG_ENV = "SLOTH_STEPS_TEST_TAG"


def tagged(tag: str) -> list[int]:
    """The processes still carrying the tag."""
    needle = f"{TAG_ENV}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def sweep(tag: str) -> None:
    """Kill (by pid, SIGCONT then SIGKILL) every process still carrying the tag."""
    for pid in tagged(tag):
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
