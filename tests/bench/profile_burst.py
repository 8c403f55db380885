"""Where a trivial job's daemon CPU goes, during a burst: a table, by stage.

A headless daemon (`python -m sloth_tray run --headless`, as compare.py's burst starts
it) is sampled by py-spy (`pip install py-spy`) while COUNT trivial scripts
(`#!/bin/sh` + `true`) are written into its jobs folder at once, until the queue records
them all done. Each sample (one thread's Python stack, not idle: py-spy counts a thread
in fsync or waiting on a lock as active, unless --gil) is put in the stage of
its deepest frame that names one (STAGES, leaf first); the table gives each stage's share
of the samples and, from the daemon's CPU time read in /proc over the same span, its ms
per job. Linux only (it reads /proc); run it from the repository root:

    python tests/bench/profile_burst.py [--count 300] [--rate 250] [--json]
        [--keep FILE]   # the raw collapsed stacks, for a flame graph or a closer look

The figures of one run vary with the machine's load: compare two builds by running this
on each, alternately, more than once.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))  # tests/bench is not a package

import drop_latency  # noqa: E402
from compare import (  # noqa: E402
    BURST_POLL,
    QueueWatch,
    burst_deadline,
    cpu_seconds,
    write_executable,
)
from drop_latency import Places, wait_for  # noqa: E402

# (stage, pattern on one frame "function (file:line)"), tried on each frame from the leaf
# up; the first frame that matches any names the sample's stage.
STAGES: list[tuple[str, str]] = [
    ("log", r"\(logging/|logfile\.py"),
    ("snapshot", r"daemon/snapshot\.py"),
    ("tray/listeners", r"sloth_tray/tray/|publish|_notify_listeners"),
    ("output capture", r"daemon/capture\.py"),
    ("spawn", r"subprocess\.py|daemon/procs\.py|daemon/jobenv\.py"),
    ("spool", r"store/spool\.py"),
    ("claim", r"claim|store/lanes\.py"),
    ("push", r"^push |store/rows\.py"),
    ("outcome", r"daemon/outcome\.py|^(complete|fail|_finish|batch) |store/steps\.py"),
    ("runner (waits, heartbeats)", r"daemon/runner\.py"),
    ("inbox", r"daemon/inbox\.py|watchdog/|daemon/lanefolders\.py|daemon/watch\.py"),
    ("store, other", r"sloth_tray/store/"),
    ("engine loop", r"daemon/engine\.py"),
]
FRAME = re.compile(r"^(?P<name>.*?) \((?P<file>[^:()]*)(?::\d+)?\)$")


def stage_of(stack: str) -> str:
    """The stage of one collapsed stack ("thread;frame;...;leaf")."""
    for frame in reversed(stack.split(";")):
        for stage, pattern in STAGES:
            if re.search(pattern, frame):
                return stage
    return "other"


def read_collapsed(path: Path) -> Counter[str]:
    """py-spy's raw output: one "stack count" per line."""
    counts: Counter[str] = Counter()
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            counts[stack] += int(count)
    return counts


def table(counts: Counter[str], cpu_ms_per_job: float) -> list[dict[str, float | str]]:
    by_stage: Counter[str] = Counter()
    for stack, count in counts.items():
        by_stage[stage_of(stack)] += count
    total = sum(by_stage.values()) or 1
    return [{"stage": stage, "samples": n, "share": n / total,
             "ms_per_job": cpu_ms_per_job * n / total}
            for stage, n in by_stage.most_common()]


def top_frames(counts: Counter[str], limit: int = 25) -> list[tuple[str, int]]:
    """The leaf frames seen most (self time)."""
    leaves: Counter[str] = Counter()
    for stack, count in counts.items():
        leaves[stack.rsplit(";", 1)[-1]] += count
    return leaves.most_common(limit)


def profile(count: int, rate: int, root: Path, keep: Path | None, gil: bool) -> dict:
    places = Places(home=root / "home", results=root / "results")
    places.results.mkdir(parents=True)
    daemon = drop_latency.start_daemon(places)
    spy = None
    try:
        drop_latency.wait_until_ready(daemon, places)
        raw = keep or root / "stacks.txt"
        spy = subprocess.Popen([shutil.which("py-spy") or str(Path(sys.executable).parent
                                                               / "py-spy"),
                                "record", "--pid", str(daemon.pid), "--rate", str(rate),
                                "--format", "raw", "--output", str(raw), "--nonblocking",
                                "--threads", *(["--gil"] if gil else [])],
                               stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
        time.sleep(1.0)  # py-spy attached before the first write
        watch = QueueWatch(places.db)
        try:
            before_done = sum(watch.states()[s] for s in ("done", "failed"))
            before = cpu_seconds(daemon.pid)
            first = time.time()
            for i in range(count):
                write_executable(places.jobs / f"burst-{i:04d}.sh")
            wait_for(lambda: True if sum(watch.states()[s] for s in ("done", "failed"))
                     - before_done >= count else None, burst_deadline(count),
                     f"the daemon's {count} jobs", daemon, every=BURST_POLL)
            after = cpu_seconds(daemon.pid)
            seconds = watch.last_done() - first
            failed = watch.states()["failed"]
        finally:
            watch.close()
        spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        _, err = spy.communicate(timeout=30)
        if not raw.exists():
            raise RuntimeError(f"py-spy wrote nothing: {err.decode(errors='replace').strip()}")
        counts = read_collapsed(raw)
    finally:
        if spy is not None and spy.poll() is None:
            spy.kill()
            spy.wait()
        drop_latency.stop_daemon(daemon)
    cpu_ms = 1000 * (after[0] - before[0]) / count
    return {"jobs": count, "failed": failed, "seconds": seconds, "jobs_per_s": count / seconds,
            "daemon_cpu_ms_per_job": cpu_ms, "rate_hz": rate, "gil_only": gil,
            "stages": table(counts, cpu_ms), "top_leaf_frames": top_frames(counts)}


def render(found: dict) -> str:
    lines = [f"{found['jobs']} trivial jobs in {found['seconds']:.2f} s "
             f"({found['jobs_per_s']:.0f} jobs/s), daemon CPU {found['daemon_cpu_ms_per_job']:.2f}"
             f" ms a job; py-spy at {found['rate_hz']} Hz"
             + (", GIL holder only" if found["gil_only"] else ", every thread on CPU or in I/O")
             , "",
             f"{'stage':28} {'samples':>8} {'share':>7} {'ms/job':>7}"]
    lines += [f"{s['stage']:28} {s['samples']:8} {100 * s['share']:6.1f}% {s['ms_per_job']:7.2f}"
              for s in found["stages"]]
    lines += ["", "leaf frames seen most:"]
    lines += [f"{n:6}  {frame}" for frame, n in found["top_leaf_frames"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--count", type=int, default=300, help="scripts in the burst")
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples a second")
    parser.add_argument("--json", action="store_true", help="the results as JSON")
    parser.add_argument("--gil", action="store_true",
                        help="sample only the thread holding the GIL: Python's own CPU, "
                             "without the waits in fsync, locks and SQLite's C code")
    parser.add_argument("--keep", type=Path, help="where py-spy's collapsed stacks go")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="sloth-profile-"))
    try:
        found = profile(args.count, args.rate, root, args.keep, args.gil)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(found, indent=2) if args.json else render(found))
    if os.environ.get("SLOTH_PROFILE_STRICT") and found["failed"]:
        sys.exit(f"{found['failed']} jobs failed")


if __name__ == "__main__":
    main()
