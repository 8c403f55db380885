"""Processes a test started, known by a tag in their environment: a job's, a step's
COMMAND's, whatever they forked. What still carries the tag at the end is killed by pid."""

from __future__ import annotations

import os
import signal
from pathlib import Path

TAG_ENV = "SLOTH_STEPS_TEST_TAG"


def carrying(entry: str) -> list[int]:
    """The live processes (but this one) whose environment holds `entry` (NAME=value)."""
    needle = entry.encode()
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                if needle in (proc / "environ").read_bytes().split(b"\0"):
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def tagged(tag: str, env: str = TAG_ENV) -> list[int]:
    """The processes still carrying the tag (in `env`)."""
    return carrying(f"{env}={tag}")


def sweep(tag: str, env: str = TAG_ENV) -> int:
    """Kill (by pid, SIGCONT then SIGKILL) every process still carrying the tag; how
    many."""
    killed = 0
    for pid in tagged(tag, env):
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
        killed += 1
    return killed
