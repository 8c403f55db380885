"""Real child processes: each one known by pid and killed by pid, waits on a condition
with a deadline, and the app started as a user starts it."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from sloth_tray import instance


class Pids:
    """Every process a test started or learned of; all are killed at teardown."""

    def __init__(self) -> None:
        self.pids: list[int] = []
        self.procs: list[subprocess.Popen] = []
        self.gentle: list[subprocess.Popen] = []  # SIGTERM first, then SIGKILL like all
        self.started: dict[int, str | None] = {}  # pid -> its start time, when added

    def add(self, pid: int) -> int:
        self.pids.append(pid)
        self.started.setdefault(pid, start_time(pid))
        return pid

    def popen(self, *args, **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(*args, **kwargs)
        self.procs.append(proc)
        self.add(proc.pid)
        return proc

    def _still_ours(self) -> list[int]:
        """The pids that still name the process they named when added: a pid that ended
        may have been given to another test's process since (three workers spawn
        thousands), whose tree must not be killed. Without /proc (macOS), every one."""
        if not os.path.isdir("/proc"):
            return list(self.pids)
        return [pid for pid in self.pids
                if self.started[pid] is not None and start_time(pid) == self.started[pid]]

    def cleanup(self) -> None:
        for proc in self.gentle:  # asked first, so that they tidy up after themselves
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass  # killed below with the rest
        # Each one's descendants too (an app's running job, a job's own children), read
        # before any kill: a child whose parent is killed first moves to init, and out
        # of reach.
        for pid in descendants(self._still_ours()):
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        for proc in self.procs:
            proc.wait(timeout=10)


def wait_for(predicate, timeout: float = 15.0, what: str = "the condition",
             every: float = 0.02):
    """Wait until predicate() is truthy, at most `timeout` seconds; returns its value.
    `every`: seconds between looks (longer where a look is itself costly)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def state(pid: int) -> str | None:
    """The process's state letter (/proc/<pid>/stat field 3: R, S, T, Z...); None once
    it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or the read
        return None


def start_time(pid: int) -> str | None:
    """When the process started, in clock ticks since boot (/proc/<pid>/stat field 22):
    with the pid, what names one process for good. None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def descendants(pids: list[int]) -> list[int]:
    """`pids` and every process below each of them (from each thread's children list),
    parents first."""
    found, queue = [], list(pids)
    while queue:
        pid = queue.pop(0)
        if pid in found:
            continue
        found.append(pid)
        with contextlib.suppress(OSError):  # gone meanwhile
            for tid in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError), \
                        open(f"/proc/{pid}/task/{tid}/children") as children:
                    queue += [int(child) for child in children.read().split()]
    return found


def jobs_running_in(folder: Path) -> dict[int, str]:
    """Every live process of a job whose home (SLOTH_HOME, which the app gives each job
    and its children inherit) lies in `folder`: its pid and command line."""
    inside = str(folder).encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as file:
                names = file.read().split(b"\0")
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                command = file.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or another user's
            continue
        homes = [name[len(b"SLOTH_HOME="):] for name in names if name.startswith(b"SLOTH_HOME=")]
        if homes and (homes[0] == inside or homes[0].startswith(inside + b"/")) \
                and alive(int(entry)):
            found[int(entry)] = command
    return found


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as gone)."""
    return state(pid) not in (None, "Z")


def stopped(pid: int) -> bool:
    """True once `pid` is stopped (SIGSTOP took effect)."""
    return state(pid) in ("T", "t")


def frozen_between_writes(proc: subprocess.Popen, db: Path) -> None:
    """SIGSTOP of the app at a moment it holds no write lock on the queue `db`.
    Frozen inside a commit (a lease's renewal, say), it would hold every other
    program's write up for as long as it stays frozen: a locked queue, which is a
    fault of its own, not the one a freeze past the lease is meant to show."""
    def between_writes() -> bool:
        proc.send_signal(signal.SIGSTOP)
        wait_for(lambda: stopped(proc.pid), what="the app to stop")
        with contextlib.closing(sqlite3.connect(db, timeout=0, isolation_level=None)) as probe:
            try:
                probe.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:  # locked: let that commit end, and again
                proc.send_signal(signal.SIGCONT)
                return False
            probe.execute("ROLLBACK")
        return True

    wait_for(between_writes, what="the app frozen between two writes")


def mapped(pid: int, fragment: str) -> bool:
    """Whether the process has a file whose path holds `fragment` mapped (a loaded
    extension module)."""
    with open(f"/proc/{pid}/maps") as maps:
        return fragment in maps.read()


def blocks(pid: int, tid: int, sig: int) -> bool:
    """Whether thread `tid` of `pid` blocks `sig` (its SigBlk mask)."""
    with open(f"/proc/{pid}/task/{tid}/status") as status:
        mask = next(line for line in status if line.startswith("SigBlk:")).split()[1]
    return bool(int(mask, 16) >> (sig - 1) & 1)


def to_other_thread(pid: int, sig: int) -> None:
    """Deliver `sig` to the newest thread of `pid` that is not its main thread and does
    not block it: the kernel may hand a signal sent to a process to any such thread
    (never to one that blocks it, as GLib's own threads do: sent there, it would wait
    for good)."""
    tid = max(int(t) for t in os.listdir(f"/proc/{pid}/task")
              if int(t) != pid and not blocks(pid, int(t), sig))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.tgkill(pid, tid, sig) != 0:
        raise OSError(ctypes.get_errno(), f"tgkill({pid}, {tid}, {sig}) failed")


def run_sloth(home, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`python -m sloth_tray ARGV --home HOME` in a child process, as a user's shell runs
    it; with `check`, it must succeed."""
    done = subprocess.run([sys.executable, "-m", "sloth_tray", *argv, "--home", str(home.root)],
                          capture_output=True, text=True, timeout=60)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def add_script(home, name: str, text: str, *extra: str) -> str:
    """A script written beside the home and queued with `sloth-tray add`: its job id."""
    path = home.root.parent / name
    path.write_text(text)
    return run_sloth(home, "add", str(path), *extra).stdout.strip()


def start_daemon(pids, home, *extra: str) -> subprocess.Popen:
    """A real `sloth-tray run --headless` on `home`, once it holds its lock."""
    proc = pids.popen([sys.executable, "-m", "sloth_tray", "run", "--headless",
                       "--home", str(home.root), *extra],
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: instance.pid_in(home.lock) == proc.pid or proc.poll() is not None,
             what="the daemon to take its lock")
    assert proc.poll() is None, proc.communicate()
    return proc
