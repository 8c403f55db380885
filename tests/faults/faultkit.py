"""Shared helpers of the fault suite: real daemons, real CLI calls, and cleanup by pid.

Imported by the test modules next to it as `from faultkit import ...`: pytest puts
this package-less folder on sys.path before it imports them (as it put tests/ there
when it imported tests/conftest.py, for `from helpers.processes import ...`).

Every process started here is known by pid and killed by pid, never by name:
- daemons are `pids.popen(...)` processes (the conftest `pids` fixture); once a
  daemon is reaped, `reap()` forgets its pid so the fixture's teardown can never
  signal a pid the kernel has handed to someone else meanwhile;
- the jobs' own processes (children of a daemon that was killed, strays) are
  found by a tag in their environment, inherited from the daemon, and killed
  by pid (`sweep()`), so a process that is not ours is never touched.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from helpers.processes import wait_for
from helpers.tagged import sweep as sweep_tagged
from helpers.tagged import tagged as tagged_with

from sloth_tray import instance
from sloth_tray.store.queue import Queue, State

TAG_ENV = "SLOTH_FAULT_SUITE_TAG"
CLI = [sys.executable, "-m", "sloth_tray"]


def new_tag() -> str:
    return uuid.uuid4().hex


def env_with(tag: str) -> dict[str, str]:
    """Our environment, tagged, and blind to this machine's sloth-tray settings: the
    module fixtures start daemons before conftest's autouse isolation applies."""
    env = {k: v for k, v in os.environ.items() if k not in ("SLOTH_TRAY_HOME", "SLOTH_TRAY_JOBS")}
    return env | {TAG_ENV: tag, "SLOTH_TRAY_CONFIG": "/nonexistent/sloth-tray-faults.toml"}


def start_daemon(pids, home, tag: str, log: Path, *extra: str,
                 up: bool = True) -> subprocess.Popen:
    """A real `sloth-tray run --headless`, its output in `log` (a pipe nobody reads
    could fill up and freeze it; give each start a log of its own). Returns once
    it holds the home's lock and, with `up`, once it says it runs (its jobs
    folder is watched from then on: a drop is taken at once, not after a scan)."""
    with open(log, "wb") as out:
        proc = pids.popen([*CLI, "run", "--headless", "--home", str(home.root), *extra],
                          stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env_with(tag))

    def ready() -> bool:
        return instance.pid_in(home.lock) == proc.pid or proc.poll() is not None

    wait_for(ready, timeout=20, what="the daemon to take its lock")
    assert proc.poll() is None, f"the daemon exited at start: {log_text(log)[-2000:]}"
    if up:
        wait_for(lambda: "running headless" in log_text(log) or proc.poll() is not None,
                 timeout=20, what="the daemon to say it runs")
        assert proc.poll() is None, f"the daemon exited at start: {log_text(log)[-2000:]}"
    return proc


def reap(pids, proc: subprocess.Popen, timeout: float = 20) -> int:
    """Wait for a process we signalled; then forget its pid (it may be reused)."""
    code = proc.wait(timeout=timeout)
    if proc.pid in pids.pids:
        pids.pids.remove(proc.pid)
    if proc in pids.procs:
        pids.procs.remove(proc)
    return code


def kill9(pids, proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    reap(pids, proc)


def cli(home, tag: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args, "--home", str(home.root)], capture_output=True,
                          text=True, timeout=timeout, env=env_with(tag),
                          stdin=subprocess.DEVNULL)


def tagged(tag: str) -> list[int]:
    """Pids of live processes that carry our tag (the jobs of our daemons)."""
    return tagged_with(tag, TAG_ENV)


def sweep(tag: str) -> int:
    """Kill, by pid, every process still carrying our tag. Returns how many."""
    return sweep_tagged(tag, TAG_ENV)


def jobs_with_history(db: Path) -> dict[str, tuple]:
    """{job id: (job, [event kinds])} read in one go."""
    with Queue(db) as queue:
        return {job.id: (job, [e.kind for e in queue.history(job.id)])
                for job in queue.jobs(limit=None)}


def unfinished(db: Path) -> int:
    with Queue(db) as queue:
        counts = queue.status()
    return counts[State.PENDING] + counts[State.RUNNING]


def log_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
