"""Process groups, per OS: start a child in its own group, stop the whole group,
and recognise a child of ours later without trusting a possibly reused pid.

Also the app's environment, cleaned for what it starts (`job_environment`).
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from sloth_tray import instance

WINDOWS = os.name == "nt"
RUN_TOKEN_ENV = "SLOTH_RUN_TOKEN"  # in every process of a run; names them after a crash


def new_token() -> str:
    """A run's token: random, never reused (os.urandom is what secrets reads)."""
    return os.urandom(8).hex()


# What the desktop gave the app's own start, good for one window: its start spent it.
SPENT_AT_START = ("XDG_ACTIVATION_TOKEN", "DESKTOP_STARTUP_ID")


def job_environment(base: Mapping[str, str], bundle: str | None = None) -> dict[str, str]:
    """The environment for a job: the app's, minus the activation token its start
    spent, and minus what a frozen bundle set up
    for itself (library paths, GTK's module dirs), which would make the job's
    programs load the bundle's libraries. PyInstaller keeps a variable it
    changed as <NAME>_ORIG."""
    bundle = bundle if bundle is not None else getattr(sys, "_MEIPASS", None)
    env = {name: value for name, value in base.items() if name not in SPENT_AT_START}
    if not bundle:
        return env
    for name in [n for n in env if n.startswith("_PYI")]:
        del env[name]
    for name, value in list(env.items()):
        if name.endswith("_ORIG") or bundle not in value:
            continue
        kept = [part for part in value.split(os.pathsep) if not part.startswith(bundle)]
        original = env.pop(f"{name}_ORIG", None)
        if original is not None:
            env[name] = original
        elif kept:
            env[name] = os.pathsep.join(kept)
        else:
            del env[name]
    return {name: value for name, value in env.items() if not name.endswith("_ORIG")}


def spawn_options() -> dict[str, Any]:
    """Popen keyword arguments that put the child in a new group of its own."""
    if WINDOWS:
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}  # new session, so pgid == pid


def has_ended(child: subprocess.Popen) -> bool:
    """Whether the child has exited, reaped or not. Popen.poll answers None while
    another thread holds Popen's waitpid lock, as the output watcher does while it
    reaps this very child: the kernel is asked then, without reaping (WNOWAIT)."""
    if child.poll() is not None:
        return True
    if not hasattr(os, "waitid"):
        return False  # Windows: there poll takes no lock, so its None is the answer
    try:
        return os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True  # reaped meanwhile, by the watcher a moment ago


def start_time(pid: int) -> str | None:
    """A token that differs between two processes that had the same pid."""
    if sys.platform.startswith("linux"):
        return instance.start_time(pid)
    if WINDOWS:
        return None
    try:
        out = subprocess.run(["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True,
                             text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None


def describe(proc: subprocess.Popen, token: str) -> dict[str, Any]:
    """What to remember about a just-started child. Its start time only where a crash's
    leftovers are found by that (kill_orphan): on Linux the token finds them, and the
    read of /proc, just as the child execs, was a seventh of a lane worker's time in a
    burst of trivial jobs."""
    child = {"pid": proc.pid, "pgid": proc.pid, "token": token}
    if not FINDS_RUNS_BY_ENVIRONMENT:
        child["start"] = start_time(proc.pid)
    return child


def terminate_group(proc: subprocess.Popen) -> None:
    """Ask the child's whole group (grandchildren too) to stop: SIGTERM."""
    if WINDOWS:
        proc.send_signal(signal.CTRL_BREAK_EVENT)
    else:
        _signal_group(proc.pid, signal.SIGTERM)


def kill_group(proc: subprocess.Popen) -> None:
    """Stop the child's whole group now: SIGKILL."""
    if WINDOWS:
        subprocess.run(["taskkill", "/T", "/F", "/PID", str(proc.pid)], capture_output=True)
    else:
        _signal_group(proc.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone


FINDS_RUNS_BY_ENVIRONMENT = sys.platform.startswith("linux")  # /proc/<pid>/environ


def _environments(since: int | None = None) -> Iterator[tuple[int, list[bytes]]]:
    """(pid, environment entries) of every process we may read, but our own; with
    `since`, only of those whose pid was handed out from `since` on."""
    last = _last_pid() if since is not None else None
    if since is not None and last is not None and 0 <= last - since < FEW_PIDS:
        # Each pid handed out since, looked up by its number: a listing of /proc
        # names every process on the machine, and a short run's are a handful.
        pids: list[int] = list(range(since, last + 1))
    else:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
        if since is not None and last is not None:
            pids = [pid for pid in pids if handed_out_since(pid, since, last)]
    for pid in pids:
        if pid == os.getpid():
            continue
        environ = _environment(pid)
        if environ is not None:
            yield pid, environ.split(b"\0")


EXEC_WAIT = 0.05  # seconds at most to read again an environment that reads empty
PF_KTHREAD = 0x00200000  # /proc/<pid>/stat's flags: a kernel thread (it has none)


def _environment(pid: int) -> bytes | None:
    """The process's environment, None when it is gone or not ours to read. A process
    inside an exec reads empty for a moment, until the kernel has set up its new
    program's: a stray forked just before its run ended often is. An empty one is read
    again, for at most EXEC_WAIT (a process started with no environment at all, or a
    kernel thread, costs a sweep that long at most, or nothing)."""
    deadline = None
    while True:
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                entries = environ.read()
        except OSError:
            return None
        if entries or _kernel_thread(pid):
            return entries
        now = time.monotonic()
        if deadline is None:
            deadline = now + EXEC_WAIT
        elif now >= deadline:
            return entries
        time.sleep(0.001)


def _kernel_thread(pid: int) -> bool:
    fields = _stat_fields(pid)
    if not fields:
        return True  # gone, or unreadable: nothing to wait for
    return bool(int(fields[6]) & PF_KTHREAD)  # field 9: flags


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command's name (field 3 on, at index 0):
    the name, in parentheses, may hold spaces and ')'."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()  # the name need not be UTF-8
    except OSError:
        return None
    return stat.rsplit(b")", 1)[1].decode("ascii", "replace").split()


FEW_PIDS = 256  # pids handed out since a run's spawn looked up one by one, at most
PID_MAX_FOR_SINCE = 32768  # below this, pids may wrap around twice within a short run


def _last_pid() -> int | None:
    """The pid the kernel handed out last in our pid namespace; None where that cannot
    be read, or where pid_max is so low that a short run may see the pids wrap twice
    (then every process is looked at). Read at each run's end, through the bare file
    descriptor: a text file opened costs three times as much."""
    if not _pids_wrap_rarely():
        return None
    try:
        fd = os.open("/proc/sys/kernel/ns_last_pid", os.O_RDONLY | os.O_CLOEXEC)
        try:
            return int(os.read(fd, 32))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return None


@functools.cache
def _pids_wrap_rarely() -> bool:
    """pid_max is at least PID_MAX_FOR_SINCE. A setting of the machine, read once: read
    at every run's end, it cost as much as the rest of the look for strays."""
    try:
        with open("/proc/sys/kernel/pid_max") as pid_max:
            return int(pid_max.read()) >= PID_MAX_FOR_SINCE
    except (OSError, ValueError):
        return False


def handed_out_since(pid: int, first: int, last: int) -> bool:
    """Whether `pid` lies in first..last, the pids handed out since `first`. Pids are
    handed out in increasing order and wrap at pid_max: then last < first."""
    if first <= last:
        return first <= pid <= last
    return pid >= first or pid <= last


def _kill(pid: int) -> bool:
    """SIGKILL to `pid`; whether it was there to get it."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def _kill_all(pids: Iterator[int]) -> int:
    return sum(_kill(pid) for pid in pids)


def kill_runs_of(home: Path) -> dict[str, list[int]]:
    """Linux: kill every process that any run of this home started (each carries
    a run token and the home in its environment). Only for start-up, under the
    home's instance lock, when none of them can still be supervised.

    The pids killed, by their run's token: a run found so had started, whatever its
    job's row says (the app may have died between the spawn and its `started` note)."""
    marker = f"SLOTH_HOME={home}".encode()
    prefix = f"{RUN_TOKEN_ENV}=".encode()
    found: dict[str, list[int]] = {}
    for pid, environ in _environments():
        token = next((entry[len(prefix):] for entry in environ if entry.startswith(prefix)),
                     None)
        if token is not None and marker in environ and _kill(pid):
            found.setdefault(os.fsdecode(token), []).append(pid)
    return found


def kill_strays(token: str, since: int | None = None) -> int:
    """Linux: kill every process that carries the run's token (strays that left its
    group). `since`: the run's first pid, for a run so short that the pids handed
    out since cannot have wrapped around more than once: only those are read, not
    every process's environment (what made a burst of tiny jobs slow)."""
    if not FINDS_RUNS_BY_ENVIRONMENT:
        return 0
    needle = f"{RUN_TOKEN_ENV}={token}".encode()
    return _kill_all(pid for pid, environ in _environments(since) if needle in environ)


def kill_orphan(child: dict[str, Any]) -> int:
    """Kill what is left of a run whose daemon died, where processes cannot be found by
    their environment (not Linux: there kill_runs_of does it). Returns how many were
    signalled. The group is killed only if its leader is the very process we started
    (same pid and same start time)."""
    pid = child.get("pid")
    if not WINDOWS and pid and child.get("start") and start_time(pid) == child["start"]:
        try:
            os.killpg(child.get("pgid", pid), signal.SIGKILL)
            return 1
        except ProcessLookupError:
            pass
    return 0
