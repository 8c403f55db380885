"""Compare sloth-tray with its peers, every comparison in one run, on one machine.

Peers, from the `bench` extra: huey, persist-queue, litequeue. task-spooler's server
(`tsp`, or `ts` where it is installed under that name) joins the idle comparison when it
is installed, and is skipped with a note when it is not. Linux only (it reads /proc).

Run it from the repository root (pytest does not collect tests/bench):

    pip install -e '.[bench]'
    python tests/bench/compare.py              # full run, about 7 minutes
    python tests/bench/compare.py --quick      # about 2 minutes: 30 s idle window,
                                               # no 60 s idle, no 1M size, fewer rounds
    python tests/bench/compare.py --out DIR    # where results.json and chart.png go
                                               # (default tests/bench/results/, git-ignored)

What it measures (progress goes to stderr, the report to stdout):

1. Idle cost, with an empty queue: wake-ups per minute (voluntary + involuntary context
   switches of every thread) and CPU ms per minute (utime + stime) of the whole process
   tree, read from /proc over a 60 s window (30 s with --quick), after a 5 s settle.
   `python -m sloth_tray run --headless` vs huey's consumer on SQLite (default settings:
   its polling with backoff is the point) vs tsp's server, all four in parallel in the
   same window. The fourth is sloth-tray again with one job due in an hour, added before
   it starts: it must not start polling. Each figure is the median of consecutive 10 s
   sub-windows, scaled to a minute. RSS is sampled at the same moments.
2. Drop -> start latency after 1 s, 15 s and 60 s of idleness (no 60 s with --quick),
   3 times each, median: sloth-tray (a script written into the jobs folder, timed from
   close() to the script's first command, as tests/bench/drop_latency.py does) vs huey
   (a task enqueued by this process, timed from just before the enqueue call to the
   task's first line). Both clocks include the queue write. The two run in parallel.
3. Full cycle per second at synchronous=FULL (the Queue default): sloth's Queue (push +
   claim + complete) vs huey's SqliteStorage (enqueue + dequeue) vs persist-queue's
   SQLiteAckQueue (put + get + ack) vs litequeue (put + pop + done) vs the bare SQLite
   lease loop of tests/bench/queue_bench.py, rounds interleaved, median of rounds.
4. Scale: claim and status latency with 10k, 100k and 1M done jobs (no 1M with --quick),
   with queue_bench.py's own code; sloth-tray only, so no one is ahead there.
5. Memory: RSS of `run --headless`, idle (from 1.), and of the tray app when a display
   is available (skipped, with a note, when DISPLAY is unset).

Every ratio is peer / sloth-tray, both measured in this run. Every process started here
is stopped by pid in `finally` (SIGTERM, then SIGKILL) and every temp dir is removed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from statistics import median
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))  # tests/bench is not a package

import drop_latency  # noqa: E402
import queue_bench  # noqa: E402
from drop_latency import Places, read_text, wait_for  # noqa: E402
from queue_bench import log  # noqa: E402

PEER_PACKAGES = ("huey", "persist-queue", "litequeue")
SETTLE = 5.0  # seconds every idle subject gets after it is ready, before the window opens
SUB_WINDOW = 10.0  # seconds per idle sample; the figures are medians over these
REPEATS = 3  # drops per idle length and system
READY_TIMEOUT = 30.0
TASK_TIMEOUT = 40.0  # huey's worker sleeps up to 10 s between polls
STOP_TIMEOUT = 5.0
HUEY_POLLING = (0.1, 1.15, 10.0)  # huey_consumer's defaults: first delay, backoff, max delay
SYNCHRONOUS = "FULL"
SYNC_VALUES = {"OFF": 0, "NORMAL": 1, "FULL": 2, "EXTRA": 3}
HUEY_READY = "Huey consumer started"
TRAY_READY = " in the tray ("
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Mode:
    quick: bool
    idle_window: float  # seconds of the idle-cost window
    idles: tuple[float, ...]  # idle lengths before each drop
    queue: queue_bench.Settings  # cycle rounds/jobs and scale sizes


def mode_for(quick: bool) -> Mode:
    if quick:
        return Mode(True, 30.0, (1.0, 15.0), queue_bench.QUICK_RUN)
    return Mode(False, 60.0, (1.0, 15.0, 60.0), queue_bench.FULL_RUN)


# -- processes: started here, stopped here -------------------------------------------


class Reaper:
    """Every process the bench starts, stopped by pid in `finally`: SIGTERM, then SIGKILL."""

    def __init__(self) -> None:
        self.children: dict[int, subprocess.Popen | None] = {}

    def add(self, pid: int, popen: subprocess.Popen | None = None) -> None:
        self.children[pid] = popen

    def stop(self, pid: int) -> None:
        popen = self.children.pop(pid, None)
        if popen is not None and popen.poll() is not None:
            return  # already gone and reaped: its pid may belong to someone else now
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return
            if gone(pid, popen, STOP_TIMEOUT):
                return
            log(f"process {pid} outlived {sig.name}")

    def stop_all(self) -> None:
        for pid in reversed(list(self.children)):
            self.stop(pid)


def gone(pid: int, popen: subprocess.Popen | None, timeout: float) -> bool:
    if popen is not None:
        try:
            popen.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists():  # not our child: init reaps it
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLOTH_TRAY_")}
    env.update(extra)
    return env


# -- idle cost over /proc --------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    at: float  # time.monotonic() of the reading
    cpu_s: float  # utime + stime, every process in the tree
    switches: int  # voluntary + involuntary context switches, every thread in the tree
    rss_kib: int  # VmRSS, summed over the tree


def proc_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.read()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def proc_entries(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except (FileNotFoundError, ProcessLookupError):
        return []


def process_tree(root: int) -> list[int]:
    """root and its descendants, from each thread's `children` list."""
    pids, queue = [], [root]
    while queue:
        pid = queue.pop()
        pids.append(pid)
        for tid in proc_entries(f"/proc/{pid}/task"):
            queue += [int(c) for c in proc_text(f"/proc/{pid}/task/{tid}/children").split()]
    return pids


def status_field(text: str, key: str) -> int:
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def usage(root: int) -> Usage:
    cpu, switches, rss = 0.0, 0, 0
    for pid in process_tree(root):
        stat = proc_text(f"/proc/{pid}/stat")
        if not stat:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # fields[0] is field 3, the state
        cpu += (int(fields[11]) + int(fields[12])) / TICKS  # fields 14 and 15
        rss += status_field(proc_text(f"/proc/{pid}/status"), "VmRSS")
        for tid in proc_entries(f"/proc/{pid}/task"):
            text = proc_text(f"/proc/{pid}/task/{tid}/status")
            switches += status_field(text, "voluntary_ctxt_switches")
            switches += status_field(text, "nonvoluntary_ctxt_switches")
    return Usage(time.monotonic(), cpu, switches, rss)


def sample(pids: dict[str, int], window: float) -> dict[str, list[Usage]]:
    """A reading of every subject now and after each sub-window, all at the same moments."""
    readings = {name: [usage(pid)] for name, pid in pids.items()}
    start = time.monotonic()
    steps = max(round(window / SUB_WINDOW), 1)
    for step in range(1, steps + 1):
        time.sleep(max(start + step * window / steps - time.monotonic(), 0))
        for name, pid in pids.items():
            readings[name].append(usage(pid))
    return readings


def idle_summary(readings: list[Usage]) -> dict[str, Any]:
    pairs = list(zip(readings, readings[1:], strict=False))
    wakeups = [60 * (b.switches - a.switches) / (b.at - a.at) for a, b in pairs]
    cpu = [60_000 * (b.cpu_s - a.cpu_s) / (b.at - a.at) for a, b in pairs]
    first, last = readings[0], readings[-1]
    return {
        "wakeups_per_min": median(wakeups),
        "cpu_ms_per_min": median(cpu),
        "rss_mib": median(r.rss_kib for r in readings) / 1024,
        "sub_windows": {"wakeups_per_min": wakeups, "cpu_ms_per_min": cpu},
        "window_s": last.at - first.at,
        "window_wakeups": last.switches - first.switches,
        "window_cpu_ms": 1000 * (last.cpu_s - first.cpu_s),
    }


# -- the subjects: sloth-tray, huey's consumer, tsp's server ----------------------


@dataclass(frozen=True)
class Sloth:
    places: Places
    popen: subprocess.Popen


def start_sloth(base: Path, reaper: Reaper, delayed_job: bool = False) -> Sloth:
    """`python -m sloth_tray run --headless` on a home of its own, started as drop_latency does."""
    places = Places(home=base / "home", results=base / "results")
    places.results.mkdir(parents=True)
    if delayed_job:
        script = base / "later.sh"
        script.write_text("#!/bin/sh\necho later\n", encoding="utf-8")
        subprocess.run([sys.executable, "-m", "sloth_tray", "add", str(script), "--delay", "1h",
                        "--home", str(places.home)], check=True, env=clean_env(),
                       stdout=subprocess.DEVNULL, timeout=READY_TIMEOUT)
    daemon = drop_latency.start_daemon(places)
    reaper.add(daemon.pid, daemon)
    drop_latency.wait_until_ready(daemon, places)
    return Sloth(places, daemon)


def sloth_status(home: Path) -> dict[str, int]:
    out = subprocess.run([sys.executable, "-m", "sloth_tray", "status", "--json", "--home",
                          str(home)], check=True, env=clean_env(), capture_output=True,
                         text=True, timeout=READY_TIMEOUT).stdout
    return json.loads(out)


HUEY_MODULE = '''\
import time

from huey import SqliteHuey

huey = SqliteHuey("bench", filename={filename!r})


@huey.task()
def stamp(path):
    started = time.time()
    with open(path, "w") as out:
        out.write(repr(started) + "\\n")
'''


@dataclass
class HueyConsumer:
    module: str  # importable from `directory`
    directory: Path
    popen: subprocess.Popen

    @property
    def stderr(self) -> Path:
        return self.directory / "consumer.stderr"


def start_huey(base: Path, module: str, reaper: Reaper) -> HueyConsumer:
    """`huey_consumer module.huey`, default settings, on a SQLite file of its own."""
    base.mkdir(parents=True)
    (base / f"{module}.py").write_text(HUEY_MODULE.format(filename=str(base / "huey.db")))
    path = os.pathsep.join(p for p in (str(base), os.environ.get("PYTHONPATH")) if p)
    with open(base / "consumer.stderr", "wb") as stderr:
        popen = subprocess.Popen([sys.executable, "-m", "huey.bin.huey_consumer", f"{module}.huey"],
                                 cwd=base, env=clean_env(PYTHONPATH=path),
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=stderr)
    reaper.add(popen.pid, popen)
    consumer = HueyConsumer(module, base, popen)

    def ready() -> bool | None:
        return True if HUEY_READY in (read_text(consumer.stderr) or "") else None

    wait_for(ready, READY_TIMEOUT, "huey's consumer to start", popen)
    return consumer


def tsp_binary() -> str | None:
    """task-spooler's client: `tsp` on Debian, `ts` upstream (not moreutils' `ts`)."""
    if found := shutil.which("tsp"):
        return found
    found = shutil.which("ts")
    if found is None:
        return None
    try:
        out = subprocess.run([found, "-V"], capture_output=True, text=True, timeout=5,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return found if "task spooler" in (out.stdout + out.stderr).lower() else None


def socket_owner(socket: Path, comm: str) -> int | None:
    """The pid of the process named `comm` that holds the unix socket bound to `socket`."""
    inodes = [f.split()[6] for f in proc_text("/proc/net/unix").splitlines()[1:]
              if len(f.split()) >= 8 and f.split()[7] == str(socket)]
    if not inodes:
        return None
    target = f"socket:[{inodes[0]}]"
    for entry in proc_entries("/proc"):
        if not entry.isdigit() or proc_text(f"/proc/{entry}/comm").strip() != comm:
            continue
        for fd in proc_entries(f"/proc/{entry}/fd"):
            try:
                if os.readlink(f"/proc/{entry}/fd/{fd}") == target:
                    return int(entry)
            except OSError:
                continue
    return None


def start_tsp(binary: str, base: Path, reaper: Reaper) -> int:
    """tsp starts its server on first use; `-S 1` is that use. Returns the server's pid."""
    base.mkdir(parents=True)
    socket = base / "ts.sock"
    env = clean_env(TS_SOCKET=str(socket), TMPDIR=str(base))
    subprocess.run([binary, "-S", "1"], env=env, check=True, timeout=READY_TIMEOUT,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
    comm = Path(binary).name[:15]
    pid = wait_for(lambda: socket_owner(socket, comm), READY_TIMEOUT, "tsp's server")
    reaper.add(pid)
    return pid


# -- 1. idle cost and memory --------------------------------------------------------


def measure_idle(mode: Mode, root: Path, reaper: Reaper, notes: list[str]) -> dict[str, Any]:
    log(f"idle cost: starting the subjects, then {SETTLE:g} s settle and a "
        f"{mode.idle_window:g} s window")
    sloth = start_sloth(root / "idle-sloth", reaper)
    later = start_sloth(root / "idle-sloth-later", reaper, delayed_job=True)
    huey = start_huey(root / "idle-huey", "bench_huey_idle", reaper)
    pids = {"sloth": sloth.popen.pid, "sloth_job_1h": later.popen.pid, "huey": huey.popen.pid}
    binary = tsp_binary()
    if binary is None:
        notes.append("tsp: task-spooler is not installed (apt-get install task-spooler): "
                     "skipped in the idle comparison")
    else:
        pids["tsp"] = start_tsp(binary, root / "idle-tsp", reaper)
    time.sleep(SETTLE)
    readings = sample(pids, mode.idle_window)
    for name, pid in pids.items():
        if not Path(f"/proc/{pid}").exists():
            raise RuntimeError(f"{name} ({pid}) exited during the idle window")
    results: dict[str, Any] = {name: idle_summary(r) for name, r in readings.items()}
    results["sloth_job_1h"]["status_after"] = sloth_status(later.places.home)
    results["tsp_binary"] = binary
    for name, summary in results.items():
        if isinstance(summary, dict) and "wakeups_per_min" in summary:
            log(f"  {name:13} {summary['wakeups_per_min']:8.1f} wake-ups/min "
                f"{summary['cpu_ms_per_min']:8.1f} CPU ms/min {summary['rss_mib']:6.1f} MiB")
    for pid in pids.values():
        reaper.stop(pid)
    return results


def measure_tray(root: Path, reaper: Reaper, notes: list[str]) -> dict[str, Any] | None:
    """RSS of the tray app, idle; None (with a note) without a display."""
    if not os.environ.get("DISPLAY"):
        notes.append("tray RSS: skipped, DISPLAY is unset (no X display to show an icon on)")
        return None
    places = Places(home=root / "tray" / "home", results=root / "tray" / "results")
    places.results.mkdir(parents=True)
    with open(places.daemon_stderr, "wb") as stderr:
        popen = subprocess.Popen([sys.executable, "-m", "sloth_tray", "run", "--home",
                                  str(places.home)], env=clean_env(), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=stderr)
    reaper.add(popen.pid, popen)

    def started() -> str | None:
        text = read_text(places.app_log) or ""
        if TRAY_READY in text:
            return "tray"
        return "headless" if drop_latency.READY_LINE in text else None

    how = wait_for(started, READY_TIMEOUT, "the tray app to start", popen)
    if how != "tray":
        notes.append("tray RSS: skipped, the app could not show an icon and ran headless "
                     f"(see {places.app_log.name})")
        reaper.stop(popen.pid)
        return None
    time.sleep(SETTLE)
    rss = []
    for _ in range(5):
        rss.append(usage(popen.pid).rss_kib / 1024)
        time.sleep(1.0)
    reaper.stop(popen.pid)
    return {"rss_mib": median(rss), "samples_mib": rss}


# -- 2. drop -> start latency -----------------------------------------------------------


def sloth_latencies(mode: Mode, root: Path, reaper: Reaper) -> list[dict[str, float]]:
    sloth = start_sloth(root / "latency-sloth", reaper)
    app_log = drop_latency.AppLog(sloth.places.app_log)
    trials = []
    for index, idle in enumerate(idle_plan(mode), start=1):
        time.sleep(idle)  # the point of the bench: the daemon sits idle this long
        drop = drop_latency.drop_one(index, sloth.places, sloth.popen, app_log)
        trials.append({"idle_s": idle, "latency_ms": drop.latency_ms})
        log(f"  sloth after {idle:4g} s idle: {drop.latency_ms:9.1f} ms")
    reaper.stop(sloth.popen.pid)
    return trials


def idle_plan(mode: Mode) -> list[float]:
    return [idle for _ in range(REPEATS) for idle in mode.idles]


@contextmanager
def importable(directory: Path, module: str) -> Iterator[Any]:
    sys.path.insert(0, str(directory))
    try:
        yield importlib.import_module(module)
    finally:
        sys.path.remove(str(directory))
        loaded = sys.modules.pop(module, None)
        if loaded is not None:
            loaded.huey.storage.close()


def read_stamp(path: Path) -> float | None:
    text = read_text(path)
    return float(text) if text and text.endswith("\n") else None


def huey_latencies(mode: Mode, root: Path, reaper: Reaper) -> list[dict[str, float]]:
    consumer = start_huey(root / "latency-huey", "bench_huey_latency", reaper)
    trials = []
    with importable(consumer.directory, consumer.module) as tasks:
        for index, idle in enumerate(idle_plan(mode), start=1):
            time.sleep(idle)
            stamp = consumer.directory / f"stamp-{index:03d}"
            enqueued = time.time()  # before the call: its INSERT is part of the latency
            tasks.stamp(str(stamp))
            started = wait_for(lambda s=stamp: read_stamp(s), TASK_TIMEOUT,
                               f"huey task {index} to start", consumer.popen)
            latency = (started - enqueued) * 1000
            trials.append({"idle_s": idle, "latency_ms": latency})
            log(f"  huey  after {idle:4g} s idle: {latency:9.1f} ms")
    reaper.stop(consumer.popen.pid)
    return trials


def by_idle(trials: list[dict[str, float]]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[float]] = {}
    for trial in trials:
        groups.setdefault(f"{trial['idle_s']:g}", []).append(trial["latency_ms"])
    return {idle: {"median_ms": median(values), "runs_ms": values}
            for idle, values in groups.items()}


def huey_next_poll(idle: float) -> tuple[float, float]:
    """(seconds from `idle` to the worker's next poll, its poll interval then), by huey's
    default schedule: a poll right after its last task, then sleeps growing x1.15 to 10 s."""
    first, backoff, cap = HUEY_POLLING
    at, delay, interval = 0.0, first, first
    while at <= idle:
        interval = min(delay, cap)
        at += interval
        delay *= backoff
    return at - idle, interval


def measure_latency(mode: Mode, root: Path, reaper: Reaper) -> dict[str, Any]:
    log(f"drop -> start latency: idle {', '.join(f'{i:g}' for i in mode.idles)} s, "
        f"{REPEATS} times each; sloth and huey in parallel")
    floor_places = Places(home=root / "floor" / "home", results=root / "floor" / "results")
    floor_places.results.mkdir(parents=True)
    floors = drop_latency.spawn_floor(floor_places)
    with ThreadPoolExecutor(max_workers=2) as pool:
        sloth = pool.submit(sloth_latencies, mode, root, reaper)
        huey = pool.submit(huey_latencies, mode, root, reaper)
        sloth_trials, huey_trials = sloth.result(), huey.result()
    schedule = {f"{idle:g}": dict(zip(("next_poll_s", "interval_s"), huey_next_poll(idle),
                                      strict=True)) for idle in mode.idles}
    return {"spawn_floor_ms": median(floors), "sloth": by_idle(sloth_trials),
            "huey": by_idle(huey_trials), "huey_schedule": schedule}


# -- 3. full cycle per second -----------------------------------------------------------


def check_synchronous(conn: Any, expected: str, who: str) -> None:
    value = conn.execute("PRAGMA synchronous").fetchone()[0]
    if value != SYNC_VALUES[expected]:
        raise RuntimeError(f"{who} runs at synchronous={value}, not {expected}")


def huey_cycles(path: Path, synchronous: str, jobs: int) -> float:
    """Seconds for `jobs` enqueue + dequeue through huey's SqliteStorage."""
    from huey.storage import SqliteStorage

    storage = SqliteStorage(name="bench", filename=str(path), fsync=True)
    try:
        storage.conn.execute(f"PRAGMA synchronous = {synchronous}")
        check_synchronous(storage.conn, synchronous, "huey")
        start = time.perf_counter()
        for i in range(jobs):
            data = f"job-{i}".encode()
            storage.enqueue(data)
            if bytes(storage.dequeue() or b"") != data:
                raise RuntimeError(f"huey lost job {i}")
        return time.perf_counter() - start
    finally:
        storage.close()


def persist_cycles(path: Path, synchronous: str, jobs: int) -> float:
    """Seconds for `jobs` put + get + ack through persist-queue's SQLiteAckQueue."""
    from persistqueue import SQLiteAckQueue

    queue = SQLiteAckQueue(str(path.parent), db_file_name=path.name, auto_resume=False)
    try:
        for conn in {id(c): c for c in (queue._putter, queue._getter)}.values():
            conn.execute(f"PRAGMA synchronous = {synchronous}")  # no public knob
            check_synchronous(conn, synchronous, "persist-queue")
        start = time.perf_counter()
        for i in range(jobs):
            queue.put(f"job-{i}")
            item = queue.get(block=False, raw=True)
            if item["data"] != f"job-{i}" or queue.ack(item) is None:
                raise RuntimeError(f"persist-queue lost job {i}")
        return time.perf_counter() - start
    finally:
        queue.close()


def litequeue_cycles(path: Path, synchronous: str, jobs: int) -> float:
    """Seconds for `jobs` put + pop + done through litequeue."""
    from litequeue import LiteQueue

    queue = LiteQueue(str(path))
    try:
        queue.conn.execute(f"PRAGMA synchronous = {synchronous}")  # its __init__ sets NORMAL
        check_synchronous(queue.conn, synchronous, "litequeue")
        start = time.perf_counter()
        for i in range(jobs):
            queue.put(f"job-{i}")
            message = queue.pop()
            if message is None or message.data != f"job-{i}":
                raise RuntimeError(f"litequeue lost job {i}")
            queue.done(message.message_id)
        return time.perf_counter() - start
    finally:
        queue.conn.close()


CYCLES: dict[str, queue_bench.CycleRunner] = {
    "sloth": queue_bench.queue_cycles,
    "huey": huey_cycles,
    "persist-queue": persist_cycles,
    "litequeue": litequeue_cycles,
    "bare loop": queue_bench.bare_cycles,
}

CYCLE_NOTES = {
    "sloth": "push + claim + complete: 3 transactions, each appending to the job's history; "
             "Queue(synchronous='FULL'), its default",
    "huey": "enqueue + dequeue: 2 transactions (dequeue deletes the row: no lease, no "
            "completion); SqliteStorage(fsync=True) is its own knob for FULL (it knows only "
            "FULL or OFF), read back as 2",
    "persist-queue": "put + get + ack: 3 commits; no synchronous option (SQLite's default, "
                     "FULL, applies): set on its private _putter/_getter connection and "
                     "read back as 2",
    "litequeue": "put + pop + done: 3 statements; its constructor forces NORMAL: set back to "
                 "FULL on queue.conn after construction and read back as 2",
    "bare loop": "queue_bench.py's BareLoop: 1 INSERT + 2 UPDATEs, autocommit, "
                 "PRAGMA synchronous=FULL",
}


def measure_cycles(mode: Mode, root: Path) -> dict[str, Any]:
    settings = mode.queue
    log(f"full cycle at synchronous={SYNCHRONOUS}: {settings.rounds} rounds x "
        f"{settings.jobs} jobs, {len(CYCLES)} implementations interleaved")
    names = list(CYCLES)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for round_no in range(settings.rounds):
        shift = round_no % len(names)  # who goes first moves each round
        for name in names[shift:] + names[:shift]:
            rate = queue_bench.cycles_per_second(CYCLES[name], SYNCHRONOUS, settings.jobs,
                                                 str(root))
            rates[name].append(rate)
            log(f"  round {round_no + 1}/{settings.rounds} {name:13} {rate:9.0f} cycles/s")
    medians = {name: median(values) for name, values in rates.items()}
    return {"synchronous": SYNCHRONOUS, "jobs_per_round": settings.jobs,
            "rounds": settings.rounds, "runs": rates, "median": medians,
            "ratio_vs_sloth": {n: medians[n] / medians["sloth"] for n in names},
            "what": CYCLE_NOTES}


# -- 4. scale ---------------------------------------------------------------------------


def measure_scale(mode: Mode, root: Path) -> list[dict[str, Any]]:
    log(f"scale: {', '.join(f'{n:,}' for n in mode.queue.sizes)} done jobs")
    return [queue_bench.measure_scale(done, mode.queue, str(root)) for done in mode.queue.sizes]


# -- the table ---------------------------------------------------------------------------


@dataclass
class Row:
    section: str
    measure: str
    unit: str
    sloth: float | None
    peer: str = "-"
    peer_value: float | None = None
    better: str = ""  # "lower" or "higher"; empty: nothing to compare with
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.sloth is None or self.peer_value is None or self.sloth == 0:
            return None
        return self.peer_value / self.sloth

    @property
    def ahead(self) -> str:
        if not self.better or self.sloth is None or self.peer_value is None:
            return "n/a"
        if self.sloth == self.peer_value:
            return "tie"
        lower = self.sloth < self.peer_value
        return "yes" if lower == (self.better == "lower") else "NO"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio_peer_over_sloth": self.ratio, "sloth_ahead": self.ahead}


def number(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit in ("cycles/s", "us"):
        return f"{value:,.0f}"
    return f"{value:,.1f}"


def idle_rows(idle: dict[str, Any]) -> list[Row]:
    rows = []
    peers = [(name, label) for name, label in (("huey", "huey consumer"), ("tsp", "tsp server"))
             if name in idle]
    for key, label, unit in (("wakeups_per_min", "wake-ups", "/min"),
                             ("cpu_ms_per_min", "CPU", "ms/min")):
        for subject, when in (("sloth", "empty queue"), ("sloth_job_1h", "job 1h ahead")):
            for peer, peer_label in peers:
                rows.append(Row("idle", f"{label}, {when}", unit, idle[subject][key], peer_label,
                                idle[peer][key], "lower"))
    later, empty = idle["sloth_job_1h"], idle["sloth"]
    polls = later["wakeups_per_min"] > empty["wakeups_per_min"] + 1
    rows.append(Row("idle", "job 1h ahead vs empty", "/min", later["wakeups_per_min"],
                    "sloth, empty", empty["wakeups_per_min"], "",
                    "starts polling!" if polls else "no polling"))
    return rows


def latency_rows(latency: dict[str, Any]) -> list[Row]:
    return [Row("latency", f"drop->start after {idle} s idle", "ms", s["median_ms"], "huey",
                latency["huey"][idle]["median_ms"], "lower")
            for idle, s in latency["sloth"].items()]


def cycle_rows(cycles: dict[str, Any]) -> list[Row]:
    medians = cycles["median"]
    return [Row("queue", f"full cycle at {cycles['synchronous']}", "cycles/s", medians["sloth"],
                name, medians[name], "higher") for name in medians if name != "sloth"]


def scale_rows(scale: list[dict[str, Any]]) -> list[Row]:
    rows = []
    base = scale[0]
    for s in scale:
        growth = s["claim_us"][SYNCHRONOUS] / base["claim_us"][SYNCHRONOUS]
        rows.append(Row("scale", f"claim ({SYNCHRONOUS}) @ {s['done']:,} done", "us",
                        s["claim_us"][SYNCHRONOUS], note=f"x{growth:.2f} vs {base['done']:,}"))
        growth = s["status_us"] / base["status_us"]
        rows.append(Row("scale", f"status() @ {s['done']:,} done", "us", s["status_us"],
                        note=f"x{growth:.2f} vs {base['done']:,}"))
    return rows


def memory_rows(idle: dict[str, Any], tray: dict[str, Any] | None) -> list[Row]:
    rows = [Row("memory", "RSS, run --headless idle", "MiB", idle["sloth"]["rss_mib"], label,
                idle[name]["rss_mib"], "lower")
            for name, label in (("huey", "huey consumer"), ("tsp", "tsp server")) if name in idle]
    if tray is None:
        rows.append(Row("memory", "RSS, tray app idle", "MiB", None, note="skipped (see notes)"))
    else:
        rows.append(Row("memory", "RSS, tray app idle", "MiB", tray["rss_mib"]))
    return rows


def ratio_text(row: Row) -> str:
    if row.ratio is not None:
        return f"{row.ratio:.2f}"
    if row.sloth == 0 and row.peer_value:
        return "inf"  # sloth-tray at zero, the peer not
    return "-"


def render(rows: list[Row]) -> str:
    header = ["section", "measure", "unit", "sloth-tray", "peer", "peer value", "peer/sloth",
              "sloth ahead", "note"]
    cells = [[r.section, r.measure, r.unit, number(r.sloth, r.unit), r.peer,
              number(r.peer_value, r.unit), ratio_text(r),
              r.ahead, r.note] for r in rows]
    widths = [max(len(row[i]) for row in [header, *cells]) for i in range(len(header))]
    right = {3, 5, 6}

    def line(row: list[str]) -> str:
        parts = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        return "  ".join(parts).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, cells)])


def machine_line(info: dict[str, Any]) -> str:
    return (f"Machine: {info['platform']} ({info['processor']}), {info['cpu_count']} CPUs, "
            f"Python {info['python']}, SQLite {info['sqlite']}; temp files on "
            f"{info['temp_dir_fs']}")


def huey_schedule_note(schedule: dict[str, dict[str, float]]) -> str:
    idles = "/".join(schedule)
    waits = "/".join(f"{1000 * s['next_poll_s']:.0f}" for s in schedule.values())
    intervals = "/".join(f"{s['interval_s']:.1f}" for s in schedule.values())
    return (f"- latency, huey: its worker backs off on a fixed schedule from its last task, so "
            f"every repeat of an idle length meets the same point of it; that schedule puts "
            f"its next poll after {idles} s idle {waits} ms away, with polls {intervals} s "
            "apart by then: a drop at a random moment waits half that interval on average")


def report(results: dict[str, Any], rows: list[Row]) -> str:
    latency = results["latency"]
    versions = ", ".join(f"{k} {v}" for k, v in results["peers"].items())
    lines = [
        machine_line(results["machine"]),
        f"Peers: {versions}",
        f"Mode: {'quick' if results['mode']['quick'] else 'full'}; "
        f"total {results['seconds']:.0f} s",
        "",
        render(rows),
        "",
        "Notes:",
        f"- idle: median of {SUB_WINDOW:g} s sub-windows over {results['mode']['idle_window']:g} s "
        f"after a {SETTLE:g} s settle; the job due in 1 h was still "
        f"{results['idle']['sloth_job_1h']['status_after']['pending']} pending afterwards",
        f"- latency: median of {REPEATS} drops per idle length; sloth's includes starting "
        f"/bin/sh + date (spawn floor {latency['spawn_floor_ms']:.1f} ms), huey's task is a "
        "function call in its worker thread",
        huey_schedule_note(latency["huey_schedule"]),
        *(f"- cycle, {name}: {what}" for name, what in results["cycles"]["what"].items()),
        *(f"- {note}" for note in results["notes"]),
    ]
    return "\n".join(lines)


# -- the chart ------------------------------------------------------------------------

COLOURS = {"sloth-tray": (46, 125, 50), "sloth-tray, job 1h ahead": (129, 199, 132),
           "huey": (198, 40, 40), "tsp": (21, 101, 192)}
Series = list[tuple[str, float]]  # (series label, value), one bar each


def font(size: int) -> Any:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow without FreeType sizes
        return ImageFont.load_default()


def draw_panel(draw: Any, box: tuple[int, int, int, int], title: str,
               groups: list[tuple[str, Series]], unit: str) -> None:
    """Grouped bars on a linear axis from 0, each bar labelled with its value."""
    left, top, right, bottom = box
    draw.text((left, top), title, fill="black", font=font(18))
    plot_top, plot_bottom = top + 60, bottom - 30
    peak = max((v for _, series in groups for _, v in series), default=0) or 1.0
    legend_x = left
    for label in dict.fromkeys(label for _, series in groups for label, _ in series):
        draw.rectangle((legend_x, top + 30, legend_x + 12, top + 42), fill=COLOURS[label])
        draw.text((legend_x + 16, top + 28), label, fill="black", font=font(13))
        legend_x += 30 + int(draw.textlength(label, font=font(13)))
    slot = (right - left) / max(len(groups), 1)
    for g, (group_label, series) in enumerate(groups):
        bar = min(70.0, (slot - 30) / max(len(series), 1))
        x = left + g * slot + (slot - bar * len(series)) / 2
        for label, value in series:
            height = max((plot_bottom - plot_top - 20) * value / peak, 2)  # 0 stays visible
            draw.rectangle((x, plot_bottom - height, x + bar - 6, plot_bottom),
                           fill=COLOURS[label])
            text = f"{value:,.1f}"
            width = draw.textlength(text, font=font(12))
            draw.text((x + (bar - 6 - width) / 2, plot_bottom - height - 16), text,
                      fill="black", font=font(12))
            x += bar
        width = draw.textlength(group_label, font=font(13))
        draw.text((left + g * slot + (slot - width) / 2, plot_bottom + 6), group_label,
                  fill="black", font=font(13))
    draw.line((left, plot_bottom, right, plot_bottom), fill="black", width=1)
    draw.text((right - draw.textlength(unit, font=font(12)), top + 4), unit, fill="gray",
              font=font(12))


def idle_groups(idle: dict[str, Any], key: str) -> list[tuple[str, Series]]:
    """One bar per subject, named under it."""
    names = {"sloth": "sloth-tray", "sloth_job_1h": "sloth-tray, job 1h ahead", "huey": "huey",
             "tsp": "tsp"}
    return [(label, [(label, idle[name][key])]) for name, label in names.items() if name in idle]


def draw_chart(results: dict[str, Any], path: Path) -> None:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (1000, 1140), "white")
    draw = ImageDraw.Draw(image)
    idle, latency = results["idle"], results["latency"]
    draw.text((30, 14), "sloth-tray vs peers: " + machine_line(results["machine"])[9:],
              fill="black", font=font(13))
    draw_panel(draw, (30, 50, 970, 380), "Idle wake-ups per minute (empty queue; lower is better)",
               idle_groups(idle, "wakeups_per_min"), "wake-ups / min")
    draw_panel(draw, (30, 410, 970, 740), "Idle CPU per minute (lower is better)",
               idle_groups(idle, "cpu_ms_per_min"), "CPU ms / min")
    groups = [(f"after {idle_s} s idle", [("sloth-tray", s["median_ms"]),
                                          ("huey", latency["huey"][idle_s]["median_ms"])])
              for idle_s, s in latency["sloth"].items()]
    draw_panel(draw, (30, 770, 970, 1120), f"Drop -> start latency, median of {REPEATS} "
               "(lower is better)", groups, "ms")
    image.save(path)


# -- main ---------------------------------------------------------------------------------


def peer_versions() -> dict[str, str]:
    versions, missing = {}, []
    for package in PEER_PACKAGES:
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            missing.append(package)
    if missing:
        sys.exit(f"missing peers: {', '.join(missing)}; install the bench extra: "
                 "pip install -e '.[bench]'")
    return versions


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="30 s idle window, no 60 s idle drops, no 1M size, fewer rounds")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results", metavar="DIR",
                        help="where results.json and chart.png go (default tests/bench/results)")
    return parser.parse_args(argv)


def run_all(mode: Mode, root: Path, reaper: Reaper, results: dict[str, Any]) -> None:
    notes: list[str] = results["notes"]
    results["idle"] = measure_idle(mode, root, reaper, notes)
    results["latency"] = measure_latency(mode, root, reaper)
    results["cycles"] = measure_cycles(mode, root)
    results["scale"] = measure_scale(mode, root)
    results["tray"] = measure_tray(root, reaper, notes)


def on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # so `finally` stops the children and removes temp dirs


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not sys.platform.startswith("linux"):
        sys.exit("compare.py reads /proc: Linux only")
    mode = mode_for(args.quick)
    results: dict[str, Any] = {"peers": peer_versions(), "notes": [],
                               "mode": {**asdict(mode), "queue": asdict(mode.queue)}}
    signal.signal(signal.SIGTERM, on_sigterm)
    root = Path(tempfile.mkdtemp(prefix="sloth-compare-"))
    results["machine"] = queue_bench.machine(str(root))
    reaper = Reaper()
    started = time.monotonic()
    try:
        run_all(mode, root, reaper, results)
    finally:
        reaper.stop_all()
        shutil.rmtree(root, ignore_errors=True)
    results["seconds"] = time.monotonic() - started
    rows = [*idle_rows(results["idle"]), *latency_rows(results["latency"]),
            *cycle_rows(results["cycles"]), *scale_rows(results["scale"]),
            *memory_rows(results["idle"], results["tray"])]
    results["table"] = [row.as_dict() for row in rows]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    draw_chart(results, args.out / "chart.png")
    print(report(results, rows))
    print(f"\nJSON: {args.out / 'results.json'}\nChart: {args.out / 'chart.png'}")


if __name__ == "__main__":
    main()
