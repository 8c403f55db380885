"""Benchmark drop -> start latency: a script written into the jobs folder, to its job running.

Run it by hand from the repository root (pytest does not collect tests/bench):

    python tests/bench/drop_latency.py                   # 60 s idle, then 50 drops (~2 min)
    python tests/bench/drop_latency.py --idle 5 --drops 20
    python tests/bench/drop_latency.py --json out.json   # also write every number as JSON
    python tests/bench/drop_latency.py --keep            # keep the temp home (logs, queue.db)

What it measures: the real daemon (`python -m sloth_tray run --headless`) runs as a
child process with a temporary home. Once it is ready (the lock file holds its pid and
a probe script dropped into the jobs folder is recorded done), it is left idle for `--idle`
seconds; the goal is the latency of an app that has sat idle for a minute. Then scripts
are dropped one at a time, as the README says to drop one: each is written under a dot
name in the jobs folder (ignored) and renamed to its own name (taken at once: a file
written in place is taken only a quiet second after its writer's last close), and the
wall time is read right after the rename. Each script is `#!/bin/sh` and its first
command writes `date +%s%N` to a result file of its own; the latency of a drop is that
timestamp minus the rename timestamp ("close" below). So it includes the job's own
start-up (sh, then date), which is measured separately as the "spawn floor": the same
script started directly by this process. After each drop the bench waits for the
result file and for the queue to record the job as done (the Queue API on queue.db:
the app's log is for people, and its wording changes), then pauses a short gap, so
drops never overlap.

Reported: p50, p90, p99 and max in milliseconds (nearest-rank percentiles: with 50
drops, p99 is the max), the first drop (the one after the long idle) on its own, and
the machine. The goal (from the issue): p50 <= 50 ms and p99 <= 250 ms. From each
job's history in queue.db (read after the daemon has stopped) it also shows where the
time goes: when the job was pushed, claimed and recorded as started, relative to close.

The daemon is always stopped (SIGTERM, then SIGKILL if it lingers) and the temp home
removed, unless --keep.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median
from typing import Any, TypeVar

from sloth_tray import instance
from sloth_tray.store.queue import Job, Queue
from sloth_tray.store.states import State

GOAL_P50_MS = 50.0
GOAL_P99_MS = 250.0
READY_TIMEOUT = 30.0  # seconds for the daemon to start watching
DROP_TIMEOUT = 30.0  # seconds for one dropped script to run and be recorded as done
STOP_TIMEOUT = 10.0  # seconds between SIGTERM and SIGKILL
POLL = 0.002  # seconds between looks at a result file (the latency is not affected)
OUTCOME_POLL = 0.02  # seconds between looks at the queue for a job's end (after its start)
NEWEST = 20  # jobs read, newest first, to find the one just dropped
FLOOR_RUNS = 5
PROBE = "bench-ready"  # the script dropped to tell that the daemon is ready

T = TypeVar("T")


def log(message: str) -> None:
    """Progress goes to stderr, so stdout holds only the report."""
    print(message, file=sys.stderr, flush=True)


# -- waiting -----------------------------------------------------------------


class DaemonDied(RuntimeError):
    pass


def wait_for(condition: Callable[[], T | None], timeout: float, what: str,
             daemon: subprocess.Popen | None = None, every: float = POLL) -> T:
    """Poll `condition` every `every` seconds until it returns something other than None,
    or fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value is not None:
            return value
        if daemon is not None and daemon.poll() is not None:
            raise DaemonDied(f"the daemon exited ({daemon.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(every)


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None


# -- the daemon ----------------------------------------------------------------


@dataclass(frozen=True)
class Places:
    home: Path
    results: Path

    @property
    def jobs(self) -> Path:
        return self.home / "jobs"

    @property
    def lock(self) -> Path:
        return self.home / "sloth-tray.lock"

    @property
    def db(self) -> Path:
        return self.home / "queue.db"

    @property
    def app_log(self) -> Path:
        return self.home / "logs" / "sloth-tray.log"

    @property
    def daemon_stderr(self) -> Path:
        return self.results / "daemon.stderr"


def start_daemon(places: Places) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("SLOTH_TRAY_HOME", "SLOTH_TRAY_JOBS")}
    with open(places.daemon_stderr, "wb") as stderr:  # the child keeps its own copy of the fd
        return subprocess.Popen(
            [sys.executable, "-m", "sloth_tray", "run", "--headless", "--home", str(places.home)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr, env=env)


def wait_until_ready(daemon: subprocess.Popen, places: Places) -> float:
    """Seconds until the daemon holds its lock, watches the jobs folder and runs its jobs.

    Told by the queue, never by the wording of a log line: once the lock holds the
    daemon's pid (taken before anything is watched) a probe script is written into the
    jobs folder, and the daemon is ready when the queue records that job done. The inbox
    watches the folder before it scans it, so a probe it took either way was taken by a
    watching daemon, and the job's end says the engine runs too.
    """
    started = time.monotonic()

    def locked() -> bool | None:
        ours = instance.pid_in(places.lock) == daemon.pid
        return True if ours and places.jobs.is_dir() else None

    wait_for(locked, READY_TIMEOUT, "the daemon to take its lock", daemon)
    write_script(places.jobs / f"{PROBE}.sh", "#!/bin/sh\ntrue\n")
    with JobWatch(places.db) as jobs:
        outcome = wait_for(lambda: jobs.outcome(PROBE), READY_TIMEOUT,
                           "the daemon to run its first job", daemon, every=OUTCOME_POLL)
    if outcome != "done":
        raise RuntimeError(f"the readiness probe ended {outcome}, not done; see {places.app_log}")
    return time.monotonic() - started


def stop_daemon(daemon: subprocess.Popen) -> None:
    """SIGTERM, wait, then SIGKILL: the daemon never outlives the bench."""
    if daemon.poll() is not None:
        return
    daemon.send_signal(signal.SIGTERM)
    try:
        daemon.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        log(f"the daemon ignored SIGTERM for {STOP_TIMEOUT:g} s; killing it")
        daemon.kill()
        daemon.wait(timeout=STOP_TIMEOUT)


class JobWatch:
    """Each job's end, told by the queue (the Queue API on the daemon's queue.db), never
    by the app's log: the log is for people, and its wording changes."""

    def __init__(self, db: Path) -> None:
        self.queue = Queue(db)

    def job(self, name: str) -> Job | None:
        """The newest job named `name` (a dropped file's stem), if the queue has it."""
        return next((job for job in self.queue.jobs(limit=NEWEST) if job.name == name), None)

    def outcome(self, name: str) -> str | None:
        """How the job `name` ended: its state once final (`done`, `failed`, `cancelled`),
        `retrying` once an attempt failed and it waits for the next; else None."""
        job = self.job(name)
        if job is None or job.state is State.RUNNING:
            return None
        if job.state is State.PENDING:  # not run yet, or waiting to be tried again
            return "retrying" if job.last_error else None
        return job.state.value

    def close(self) -> None:
        self.queue.close()

    def __enter__(self) -> JobWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- dropping ----------------------------------------------------------------------


@dataclass
class Drop:
    index: int
    name: str
    close_ns: int
    start_ns: int
    latency_ms: float
    # from the job's history, milliseconds after close (filled in after the daemon stops)
    stages_ms: dict[str, float] = field(default_factory=dict)


def script_text(result: Path) -> str:
    return f"#!/bin/sh\ndate +%s%N > {shlex.quote(str(result))}\n"


def write_script(path: Path, text: str) -> int:
    """Written under a dot name beside `path`, then renamed to it; the wall time (ns)
    right after the rename."""
    draft = path.with_name(f".{path.name}.draft")
    with open(draft, "w", encoding="utf-8") as file:
        file.write(text)
    os.rename(draft, path)
    return time.time_ns()


def read_timestamp(path: Path) -> int | None:
    """The child's `date +%s%N`, once it is fully written (date writes it in one go)."""
    text = read_text(path)
    if text is None or not text.endswith("\n"):
        return None
    value = text.strip()
    if not value.isdigit():
        raise RuntimeError(f"{path} holds {value!r}, not nanoseconds (is `date` GNU date?)")
    return int(value)


def drop_one(index: int, places: Places, daemon: subprocess.Popen, jobs: JobWatch) -> Drop:
    name = f"drop-{index:03d}"
    result = places.results / f"{name}.ns"
    close_ns = write_script(places.jobs / f"{name}.sh", script_text(result))
    start_ns = wait_for(lambda: read_timestamp(result), DROP_TIMEOUT, f"{name} to start", daemon)
    outcome = wait_for(lambda: jobs.outcome(name), DROP_TIMEOUT, f"{name} to finish", daemon,
                       every=OUTCOME_POLL)
    if outcome != "done":
        job = jobs.job(name)
        why = job.last_error if job is not None and job.last_error else "no error recorded"
        raise RuntimeError(f"{name} ended {outcome}, not done: {why}")
    return Drop(index, name, close_ns, start_ns, (start_ns - close_ns) / 1e6)


def drop_all(count: int, gap: float, places: Places, daemon: subprocess.Popen) -> list[Drop]:
    drops = []
    with JobWatch(places.db) as jobs:
        for index in range(1, count + 1):
            drop = drop_one(index, places, daemon, jobs)
            drops.append(drop)
            log(f"  {drop.name}: {drop.latency_ms:8.1f} ms")
            if index < count:
                time.sleep(gap)  # an idle gap, so the next drop meets a daemon at rest
    return drops


def spawn_floor(places: Places) -> list[float]:
    """Milliseconds from Popen to `date` in the same script, started directly by us."""
    floors = []
    for i in range(FLOOR_RUNS):
        script = places.results / f"floor-{i}.sh"
        result = places.results / f"floor-{i}.ns"
        script.write_text(script_text(result), encoding="utf-8")
        before = time.time_ns()
        subprocess.run(["/bin/sh", str(script)], check=True, stdin=subprocess.DEVNULL)
        stamp = read_timestamp(result)
        if stamp is None:
            raise RuntimeError(f"the spawn floor script did not write {result}")
        floors.append((stamp - before) / 1e6)
    return floors


# -- where the time went: each job's history ------------------------------------------------

STAGES = ("pushed", "claimed", "started")


def add_stages(drops: list[Drop], db: Path) -> None:
    """Milliseconds from close to the pushed, claimed and started events of each job."""
    by_name = {drop.name: drop for drop in drops}
    with Queue(db) as queue:
        for job in queue.jobs():
            drop = by_name.get(job.name)
            if drop is None:
                continue
            for event in queue.history(job.id):
                if event.kind in STAGES and event.kind not in drop.stages_ms:
                    drop.stages_ms[event.kind] = (event.at * 1e9 - drop.close_ns) / 1e6


# -- numbers and report ---------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest rank: the smallest value with at least p % of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(math.ceil(p / 100 * len(ordered)), 1) - 1]


def summary(values: Sequence[float]) -> dict[str, float]:
    return {"n": len(values), "p50": percentile(values, 50), "p90": percentile(values, 90),
            "p99": percentile(values, 99), "max": max(values)}


def machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }


def table(header: list[str], rows: list[list[str]]) -> str:
    """Plain text: first column left aligned, the others right aligned."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([cells[0].ljust(widths[0]), *rest])

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def results_of(drops: list[Drop], floors: list[float], settings: dict[str, Any],
               ready_seconds: float) -> dict[str, Any]:
    latencies = [drop.latency_ms for drop in drops]
    overall = summary(latencies)
    return {
        "machine": machine(),
        "settings": settings,
        "ready_seconds": ready_seconds,
        "spawn_floor_ms": {"runs": floors, "median": median(floors)},
        "all": overall,
        "after_first": summary(latencies[1:]) if len(latencies) > 1 else None,
        "first_ms": latencies[0],
        "goals": {
            "p50_ms": GOAL_P50_MS, "p99_ms": GOAL_P99_MS,
            "p50_met": overall["p50"] <= GOAL_P50_MS, "p99_met": overall["p99"] <= GOAL_P99_MS,
        },
        "drops": [asdict(drop) for drop in drops],
    }


def stage_rows(drops: list[Drop]) -> list[list[str]]:
    rows = []
    labels = {"pushed": "pushed (inbox took it)", "claimed": "claimed (engine woke)",
              "started": "started (after Popen)"}
    for stage in STAGES:
        values = [d.stages_ms[stage] for d in drops if stage in d.stages_ms]
        if values:
            rows.append([labels[stage], ms(percentile(values, 50)), ms(percentile(values, 90)),
                         ms(max(values)), ms(drops[0].stages_ms.get(stage))])
    latencies = [d.latency_ms for d in drops]
    rows.append(["child ran date", ms(percentile(latencies, 50)), ms(percentile(latencies, 90)),
                 ms(max(latencies)), ms(latencies[0])])
    return rows


def report(results: dict[str, Any], drops: list[Drop]) -> str:
    info, settings, goals = results["machine"], results["settings"], results["goals"]
    header = ["drops", "n", "p50 ms", "p90 ms", "p99 ms", "max ms"]

    def row(label: str, s: dict[str, float]) -> list[str]:
        return [label, str(s["n"]), *(ms(s[k]) for k in ("p50", "p90", "p99", "max"))]

    rows = [row("all", results["all"])]
    if results["after_first"]:
        rows.append(row(f"2..{len(drops)}", results["after_first"]))
    first = results["first_ms"]
    rows.append([f"first, after {settings['idle']:g} s idle", "1", *[ms(first)] * 4])
    verdict = {True: "met", False: "NOT met"}
    lines = [
        f"Machine: {info['platform']} ({info['processor']}), {info['cpu_count']} CPUs, "
        f"Python {info['python']}",
        f"Daemon ready in {results['ready_seconds']:.2f} s; idle {settings['idle']:g} s, then "
        f"{settings['drops']} drops {settings['gap']:g} s apart",
        f"Spawn floor (sh + date started directly, median of {FLOOR_RUNS}): "
        f"{results['spawn_floor_ms']['median']:.1f} ms",
        "",
        "Drop -> start latency (close() of the script to `date` in the job)",
        table(header, rows),
        "",
        f"Goal p50 <= {GOAL_P50_MS:g} ms: {verdict[goals['p50_met']]} "
        f"({results['all']['p50']:.1f} ms)",
        f"Goal p99 <= {GOAL_P99_MS:g} ms: {verdict[goals['p99_met']]} "
        f"({results['all']['p99']:.1f} ms)",
        "",
        "Where the time goes: ms after close() (job history in queue.db)",
        table(["stage", "p50", "p90", "max", "first"], stage_rows(drops)),
    ]
    return "\n".join(lines)


# -- main -------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=float, default=60.0, metavar="SECONDS",
                        help="how long the daemon sits idle before the first drop (default 60)")
    parser.add_argument("--drops", type=int, default=50, metavar="N",
                        help="scripts dropped, one after another (default 50)")
    parser.add_argument("--gap", type=float, default=0.2, metavar="SECONDS",
                        help="idle pause after each job is done (default 0.2)")
    parser.add_argument("--json", metavar="OUT", type=Path, help="write all numbers here")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temp home (logs, queue.db) and print where it is")
    args = parser.parse_args(argv)
    if args.drops < 1:
        parser.error("--drops must be at least 1")
    return args


def measure(args: argparse.Namespace, places: Places) -> tuple[dict[str, Any], list[Drop]]:
    floors = spawn_floor(places)
    log(f"spawn floor: {median(floors):.1f} ms; starting the daemon in {places.home}")
    daemon = start_daemon(places)
    try:
        ready_seconds = wait_until_ready(daemon, places)
        log(f"daemon {daemon.pid} ready in {ready_seconds:.2f} s; idle for {args.idle:g} s")
        time.sleep(args.idle)  # the point of the bench, not a wait for readiness
        if daemon.poll() is not None:
            raise DaemonDied(f"the daemon exited ({daemon.returncode}) while idle")
        drops = drop_all(args.drops, args.gap, places, daemon)
    except (DaemonDied, TimeoutError, RuntimeError):
        tail = (read_text(places.daemon_stderr) or "").splitlines()[-20:]
        log("daemon stderr (last lines):\n" + "\n".join(tail))
        raise
    finally:
        stop_daemon(daemon)
    add_stages(drops, places.home / "queue.db")
    settings = {"idle": args.idle, "drops": args.drops, "gap": args.gap}
    return results_of(drops, floors, settings, ready_seconds), drops


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="sloth-drop-bench-"))
    places = Places(home=root / "home", results=root / "results")
    places.results.mkdir()
    try:
        results, drops = measure(args, places)
    finally:
        if args.keep:
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(report(results, drops))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"\nJSON written to {args.json}")


if __name__ == "__main__":
    main()
