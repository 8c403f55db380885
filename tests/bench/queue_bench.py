"""Benchmark sloth_tray's Queue: full cycle throughput and latency at scale.

Run it by hand from the repository root (pytest does not collect tests/bench):

    python tests/bench/queue_bench.py                  # full run, a minute or two
    python tests/bench/queue_bench.py --quick          # fewer rounds, no 1M size
    python tests/bench/queue_bench.py --json out.json  # also write every number as JSON
    python tests/bench/queue_bench.py --dir /some/disk # put the temp databases there

What it measures:

1. Full cycle throughput: push + claim + complete per second, for Queue and
   for a bare SQLite lease loop written here (same PRAGMAs, one INSERT and two
   UPDATEs per job, each in autocommit, no events, no counts). Both run at
   synchronous=FULL (the Queue default) and NORMAL, in rounds, each round on a
   fresh temp database, the two implementations interleaved so machine noise
   hits both. Reported: the median cycles/s of each and the ratio queue/bare.
   engine_loop_cycles (measured by compare.py, not here) drives Queue as the
   daemon's loop does: push + the runner's `started` note + complete and the
   next claim in one batch().
2. Scale: with 10k, 100k and 1M done jobs in the table (plus a few pending
   ones not yet due), the median latency of claim() (at FULL and at NORMAL),
   status(), next_wakeup() and the tray's snapshot read (a tenth as many of
   those). Only the call itself is timed.

Fsync cost depends on the disk under the temp directory, so the machine
summary names that directory and its file system. Nothing is cached between
runs: every database lives in a temp directory that is deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import median
from typing import Any

from sloth_tray.daemon import procs, snapshot
from sloth_tray.store.queue import Queue

SYNCHRONOUS = ("FULL", "NORMAL")
OWNER = "bench"
LEASE_SECONDS = 60.0
BUSY_TIMEOUT = 5.0  # seconds; the Queue default
PENDING_LATER = 5  # pending jobs due in an hour, present during the scale runs


@dataclass(frozen=True)
class Settings:
    rounds: int  # full cycle rounds per implementation and synchronous setting
    jobs: int  # jobs per full cycle round
    sizes: tuple[int, ...]  # done jobs in the table for the scale runs
    claims: int  # timed claims per scale size and synchronous setting
    reads: int  # timed status() and next_wakeup() calls per scale size


FULL_RUN = Settings(rounds=5, jobs=2000, sizes=(10_000, 100_000, 1_000_000), claims=200,
                    reads=1000)
QUICK_RUN = Settings(rounds=3, jobs=300, sizes=(10_000, 100_000), claims=100, reads=300)
# compare.py --smoke: every code path once, in a second or two; its figures mean nothing.
SMOKE_RUN = Settings(rounds=1, jobs=30, sizes=(1_000,), claims=10, reads=10)


def log(message: str) -> None:
    """Progress goes to stderr, so stdout holds only the report."""
    print(message, file=sys.stderr, flush=True)


def temp_dir(base: str | None) -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="sloth-bench-", dir=base)


# -- the bare SQLite lease loop ----------------------------------------------

BARE_SCHEMA = (
    """CREATE TABLE jobs (
        id          INTEGER PRIMARY KEY,
        name        TEXT NOT NULL,
        state       TEXT NOT NULL,
        attempts    INTEGER NOT NULL DEFAULT 0,
        not_before  REAL NOT NULL,
        lease_owner TEXT,
        lease_until REAL
    )""",
    "CREATE INDEX jobs_due ON jobs(not_before) WHERE state = 'pending'",
)


class BareLoop:
    """The least a lease queue can do: one INSERT and two UPDATEs per job, autocommit."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute(f"PRAGMA synchronous = {synchronous}")
        for statement in BARE_SCHEMA:
            self.db.execute(statement)

    def push(self, name: str) -> int:
        cursor = self.db.execute(
            "INSERT INTO jobs(name, state, not_before) VALUES (?, 'pending', ?)",
            (name, time.time()),
        )
        return int(cursor.lastrowid or 0)

    def claim(self, owner: str) -> int | None:
        now = time.time()
        # fetchall() runs the statement to the end, so autocommit commits here.
        rows = self.db.execute(
            "UPDATE jobs SET state = 'running', lease_owner = ?, lease_until = ?, "
            "attempts = attempts + 1 "
            "WHERE id = (SELECT id FROM jobs WHERE state = 'pending' AND not_before <= ? "
            "ORDER BY not_before LIMIT 1) RETURNING id",
            (owner, now + LEASE_SECONDS, now),
        ).fetchall()
        return rows[0][0] if rows else None

    def complete(self, job_id: int, owner: str) -> bool:
        changed = self.db.execute(
            "UPDATE jobs SET state = 'done', lease_owner = NULL, lease_until = NULL "
            "WHERE id = ? AND lease_owner = ?",
            (job_id, owner),
        ).rowcount
        return changed == 1

    def close(self) -> None:
        self.db.close()


# -- full cycle throughput ---------------------------------------------------


def queue_cycles(path: Path, synchronous: str, jobs: int) -> float:
    """Seconds for `jobs` push + claim + complete cycles through Queue."""
    with Queue(path, synchronous=synchronous, lease_seconds=LEASE_SECONDS) as queue:
        start = time.perf_counter()
        for i in range(jobs):
            job_id = queue.push(f"job-{i}")
            job = queue.claim(OWNER)
            if job is None or job.id != job_id or not queue.complete(job.id, OWNER):
                raise RuntimeError(f"Queue lost job {job_id}")
        return time.perf_counter() - start


def engine_loop_cycles(path: Path, synchronous: str, jobs: int) -> float:
    """Seconds for `jobs` jobs through Queue as the daemon's loop drives it, back to back.

    Per job, as a lane's worker makes it back to back: the inbox pushes the next job
    (it arrives while this one runs); the runner notes `started` once it has spawned
    the child (pid, pgid, start time and the token the claim stored), and once the
    child has ended looks whether one of its steps recorded a wait; then the outcome
    (complete) and the next claim share one commit in batch(), the claim in a
    savepoint. The claim itself passes over paused lanes: the worker reads no pause.
    Three commits a job, two of which wait for the disk (the `started` note rides on
    the next one's fsync); the spawn itself and the engine's snapshot reads for the
    tray are not.
    """
    me = os.getpid()
    process = {"pid": me, "pgid": me, "start": procs.start_time(me)}  # read once: not queue work
    with Queue(path, synchronous=synchronous, lease_seconds=LEASE_SECONDS) as queue:
        start = time.perf_counter()
        expected = queue.push("job-0")
        job = queue.claim(OWNER, frozenset(), procs.new_token())  # the loop's first claim
        for i in range(jobs):
            if job is None or job.id != expected or not (job.child or {}).get("token"):
                raise RuntimeError(f"the engine loop lost job {expected}")
            following = queue.push(f"job-{i + 1}") if i + 1 < jobs else None
            token = job.child["token"]
            if not queue.started(job.id, OWNER, {**process, "token": token}):
                raise RuntimeError(f"the engine loop lost the lease of {job.id}")
            if queue.waited(job.id, token) is not None:
                raise RuntimeError(f"the engine loop found a wait in {job.id}, which has none")
            with queue.batch():
                if not queue.complete(job.id, OWNER):
                    raise RuntimeError(f"the engine loop could not complete {job.id}")
                with queue.savepoint():
                    job = queue.claim(OWNER, frozenset(), procs.new_token())
            expected = following
        if job is not None:
            raise RuntimeError(f"the engine loop claimed {job.id}, pushed by no one")
        return time.perf_counter() - start


def bare_cycles(path: Path, synchronous: str, jobs: int) -> float:
    """Seconds for `jobs` push + claim + complete cycles through the bare loop."""
    bare = BareLoop(path, synchronous)
    try:
        start = time.perf_counter()
        for i in range(jobs):
            job_id = bare.push(f"job-{i}")
            if bare.claim(OWNER) != job_id or not bare.complete(job_id, OWNER):
                raise RuntimeError(f"bare loop lost job {job_id}")
        return time.perf_counter() - start
    finally:
        bare.close()


# -- the rules' floor: the engine loop's writes in bare SQL ---------------------

RULES_SCHEMA = (*BARE_SCHEMA[:1], "ALTER TABLE jobs ADD COLUMN child TEXT",
                "ALTER TABLE jobs ADD COLUMN history TEXT NOT NULL DEFAULT '[]'",
                BARE_SCHEMA[1])
EVENT = "json_insert(history, '$[#]', json_array(:now, :kind, :note))"  # one appended


def rules_floor_cycles(path: Path, synchronous: str, jobs: int) -> float:
    """Seconds for `jobs` jobs through the least SQL that keeps the rules the engine loop
    keeps, shaped as it is, with no code around it: every transition appended to the
    job's history, a lease with its owner in the WHERE clause of each write, the runner's
    `started` note committed without its own fsync, the outcome and the next claim in
    one commit that waits for the disk. Two fsyncs a job, as huey's enqueue and dequeue;
    what the engine loop does beyond this floor is its own cost."""
    db = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute(f"PRAGMA synchronous = {synchronous}")
    for statement in RULES_SCHEMA:
        db.execute(statement)

    def push(name: str) -> int:
        now = time.time()
        return int(db.execute(
            "INSERT INTO jobs(name, state, not_before, history) "
            "VALUES (:name, 'pending', :now, json_array(json_array(:now, 'pushed', '')))",
            {"name": name, "now": now}).lastrowid or 0)

    def claim() -> int | None:
        now = time.time()
        rows = db.execute(
            f"UPDATE jobs SET state = 'running', lease_owner = :owner, lease_until = :until, "
            f"attempts = attempts + 1, history = {EVENT} WHERE id = (SELECT id FROM jobs "
            "WHERE state = 'pending' AND not_before <= :now ORDER BY not_before LIMIT 1) "
            "RETURNING id", {"owner": OWNER, "until": now + LEASE_SECONDS, "now": now,
                             "kind": "claimed", "note": OWNER}).fetchall()
        return rows[0][0] if rows else None

    def owned(job_id: int, change: str, kind: str, note: str) -> None:
        done = db.execute(f"UPDATE jobs SET {change}, history = {EVENT} WHERE id = :id AND "
                          "state = 'running' AND lease_owner = :owner",
                          {"id": job_id, "owner": OWNER, "now": time.time(), "kind": kind,
                           "note": note}).rowcount
        if done != 1:
            raise RuntimeError(f"the rules' floor lost the lease of job {job_id}")

    try:
        start = time.perf_counter()
        expected, job = push("job-0"), claim()
        for i in range(jobs):
            if job != expected:
                raise RuntimeError(f"the rules' floor lost job {expected}")
            following = push(f"job-{i + 1}") if i + 1 < jobs else None
            db.execute("PRAGMA synchronous = NORMAL")  # `started` rides on the next fsync
            owned(job, "child = '{\"pid\": 1}'", "started", "pid 1")
            db.execute(f"PRAGMA synchronous = {synchronous}")
            db.execute("BEGIN IMMEDIATE")
            owned(job, "state = 'done', lease_owner = NULL, lease_until = NULL", "completed", "")
            job = claim()
            db.execute("COMMIT")
            expected = following
        if job is not None:
            raise RuntimeError(f"the rules' floor claimed {job}, pushed by no one")
        return time.perf_counter() - start
    finally:
        db.close()


CycleRunner = Callable[[Path, str, int], float]
IMPLEMENTATIONS: dict[str, CycleRunner] = {"queue": queue_cycles, "bare": bare_cycles}


def cycles_per_second(run: CycleRunner, synchronous: str, jobs: int, base: str | None) -> float:
    with temp_dir(base) as tmp:
        return jobs / run(Path(tmp) / "bench.db", synchronous, jobs)


def measure_cycles(synchronous: str, settings: Settings, base: str | None) -> dict[str, Any]:
    rates: dict[str, list[float]] = {name: [] for name in IMPLEMENTATIONS}
    names = list(IMPLEMENTATIONS)
    for round_no in range(settings.rounds):
        # Alternate who goes first, so neither always runs on a warmer machine.
        order = names if round_no % 2 == 0 else names[::-1]
        for name in order:
            rate = cycles_per_second(IMPLEMENTATIONS[name], synchronous, settings.jobs, base)
            rates[name].append(rate)
            log(f"  cycle {synchronous:6} round {round_no + 1}/{settings.rounds} "
                f"{name:5} {rate:9.0f} cycles/s")
    queue_median = median(rates["queue"])
    bare_median = median(rates["bare"])
    return {
        "synchronous": synchronous,
        "jobs_per_round": settings.jobs,
        "queue_cycles_per_s": rates["queue"],
        "bare_cycles_per_s": rates["bare"],
        "queue_median": queue_median,
        "bare_median": bare_median,
        "ratio": queue_median / bare_median,
    }


# -- latency at scale --------------------------------------------------------


# The columns a finished job has filled in; the others keep their defaults (NULL).
DONE_COLUMNS = ("id", "name", "state", "attempts", "max_attempts", "not_before", "result",
                "created_at", "updated_at")


def done_rows(count: int, now: float) -> Iterator[tuple[Any, ...]]:
    """Finished jobs, as claim() and complete() would have left them.

    Ids are distinct 12-hex strings spread like random ones: i times an odd
    constant is a bijection modulo 2**48.
    """
    for i in range(count):
        job_id = f"{(i * 0x9E3779B97F4A7C15) % 2**48:012x}"
        at = now - count + i
        yield (job_id, f"old-{i}", "done", 1, 5, at, "", at, at)


def fill_done(path: Path, count: int) -> None:
    """Bulk insert `count` done jobs in one transaction; the triggers keep counts right."""
    columns = ", ".join(DONE_COLUMNS)
    placeholders = ", ".join("?" * len(DONE_COLUMNS))
    db = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT)
    try:
        # A big page cache for this connection only: the random ids make the
        # primary key index too large for the default 2 MB cache at 1M rows.
        db.execute("PRAGMA cache_size = -262144")  # KiB, so 256 MB
        db.execute("BEGIN IMMEDIATE")
        db.executemany(f"INSERT INTO jobs({columns}) VALUES ({placeholders})",
                       done_rows(count, time.time()))
        db.execute("COMMIT")
    finally:
        db.close()


def check_done(queue: Queue, expected: int) -> None:
    done = queue.status()["done"]
    if done != expected:
        raise RuntimeError(f"status() says {done} done jobs, expected {expected}")


def claim_latencies(queue: Queue, claims: int) -> list[float]:
    """Push one due job, time claim() alone, complete it; microseconds per claim."""
    latencies = []
    for i in range(claims):
        job_id = queue.push(f"now-{i}")
        start = time.perf_counter()
        job = queue.claim(OWNER)
        latencies.append((time.perf_counter() - start) * 1e6)
        if job is None or job.id != job_id or not queue.complete(job.id, OWNER):
            raise RuntimeError(f"claim did not hand out the due job {job_id}")
    return latencies


def call_latencies(call: Callable[[], object], calls: int) -> list[float]:
    latencies = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        latencies.append((time.perf_counter() - start) * 1e6)
    return latencies


SCALE_ROUNDS = 10  # turns each size takes at its claims and reads, interleaved


def measure_scale(sizes: tuple[int, ...], settings: Settings,
                  base: str | None) -> list[dict[str, Any]]:
    """Claim, status() and the tray's snapshot latencies with `sizes` done jobs in the
    table, a file each, all filled first and then timed in turns (SCALE_ROUNDS of
    them, the first size moving each turn): what the disk and the machine do meanwhile
    falls on every size alike, so the growth from the smallest is the table's own, not
    the minutes'. A claim at FULL waits for the disk, whose noise from one minute to the
    next is larger than the growth being measured."""
    with temp_dir(base) as tmp:
        paths = {done: Path(tmp) / f"scale-{done}.db" for done in sizes}
        results = {done: {"done": done, "claim_us": {}, "claim_runs_us": {}} for done in sizes}
        for done, path in paths.items():
            Queue(path).close()  # schema, indexes and triggers, exactly as the app makes them
            start = time.perf_counter()
            fill_done(path, done)
            results[done]["fill_seconds"] = time.perf_counter() - start
            log(f"  scale {done:>9,} done jobs: filled in {results[done]['fill_seconds']:.1f} s")
        expected = {done: done for done in sizes}  # done jobs in each file
        for synchronous in SYNCHRONOUS:
            queues = {done: Queue(path, synchronous=synchronous) for done, path in paths.items()}
            try:
                for done, queue in queues.items():
                    check_done(queue, expected[done])
                    if synchronous == SYNCHRONOUS[0]:
                        for i in range(PENDING_LATER):
                            queue.push(f"later-{i}", delay=3600)
                claims = in_turns(queues, claim_latencies, settings.claims)
                for done, queue in queues.items():
                    expected[done] += settings.claims
                    check_done(queue, expected[done])
                    results[done]["claim_us"][synchronous] = median(claims[done])
                    results[done]["claim_runs_us"][synchronous] = claims[done]
                    log(f"  scale {done:>9,} claim at {synchronous}: "
                        f"{median(claims[done]):.0f} us")
            finally:
                for queue in queues.values():
                    queue.close()
        queues = {done: Queue(path) for done, path in paths.items()}
        try:
            statuses = in_turns(queues, lambda queue, n: call_latencies(queue.status, n),
                                settings.reads)
            wakeups = in_turns(queues, lambda queue, n: call_latencies(queue.next_wakeup, n),
                               settings.reads)
            snapshots = in_turns(queues, lambda queue, n: call_latencies(
                lambda: snapshot.read(queue, (), frozenset()), n), max(1, settings.reads // 10))
        finally:
            for queue in queues.values():
                queue.close()
        for done in sizes:
            results[done]["status_runs_us"] = statuses[done]
            results[done]["status_us"] = median(statuses[done])
            results[done]["next_wakeup_us"] = median(wakeups[done])
            results[done]["snapshot_runs_us"] = snapshots[done]
            results[done]["snapshot_us"] = median(snapshots[done])
        return [results[done] for done in sizes]


def in_turns(queues: dict[int, Queue], timed: Callable[[Queue, int], list[float]],
             calls: int) -> dict[int, list[float]]:
    """`calls` timings of each queue, made in SCALE_ROUNDS turns: each turn times a
    share of them on every queue, the one that goes first moving each turn."""
    found: dict[int, list[float]] = {done: [] for done in queues}
    order = list(queues)
    for turn in range(SCALE_ROUNDS):
        share = calls * (turn + 1) // SCALE_ROUNDS - calls * turn // SCALE_ROUNDS
        shift = turn % len(order)
        for done in order[shift:] + order[:shift]:
            found[done] += timed(queues[done], share)
    return found


# -- machine and report ------------------------------------------------------


def file_system(path: str) -> str:
    """The file system type holding `path` (Linux only; '?' elsewhere)."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "?"
    best, kind = "", "?"
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1]
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best):
            best, kind = point, fields[2]
    return kind


def machine(base: str | None) -> dict[str, Any]:
    directory = os.path.realpath(base or tempfile.gettempdir())
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "cpu_count": os.cpu_count(),
        "temp_dir": directory,
        "temp_dir_fs": file_system(directory),
    }


def table(header: list[str], rows: list[list[str]]) -> str:
    """Plain text: first column left aligned, the others right aligned."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest])

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def report(results: dict[str, Any]) -> str:
    info = results["machine"]
    settings = results["settings"]
    lines = [
        f"Machine: {info['platform']} ({info['processor']}), {info['cpu_count']} CPUs, "
        f"Python {info['python']}, SQLite {info['sqlite']}",
        f"Temp databases in {info['temp_dir']} ({info['temp_dir_fs']})",
        "",
        f"Full cycle: push + claim + complete, median of {settings['rounds']} rounds "
        f"x {settings['jobs']} jobs",
    ]
    rows = [
        [c["synchronous"], f"{c['queue_median']:,.0f}", f"{c['bare_median']:,.0f}",
         f"{c['ratio']:.3f}"]
        for c in results["cycle"]
    ]
    lines.append(table(["synchronous", "queue cycles/s", "bare cycles/s", "queue/bare"], rows))
    lines.append("")
    for c in results["cycle"]:
        lines.append(f"queue/bare ratio at {c['synchronous']}: {c['ratio']:.3f}")
    lines += [
        "",
        f"Scale: median latency in microseconds ({settings['claims']} claims per setting, "
        f"{settings['reads']} reads)",
    ]
    rows = [
        [f"{s['done']:,}", f"{s['fill_seconds']:.1f}",
         *(f"{s['claim_us'][sync]:,.0f}" for sync in SYNCHRONOUS),
         f"{s['status_us']:,.1f}", f"{s['next_wakeup_us']:,.1f}"]
        for s in results["scale"]
    ]
    header = ["done jobs", "fill s", *(f"claim {sync}" for sync in SYNCHRONOUS), "status",
              "next_wakeup"]
    lines.append(table(header, rows))
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer rounds and claims, and skip the 1M size")
    parser.add_argument("--json", metavar="OUT", type=Path, help="write all numbers here")
    parser.add_argument("--dir", metavar="DIR",
                        help="where the temp databases go (default: the system temp dir)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    settings = QUICK_RUN if args.quick else FULL_RUN
    results: dict[str, Any] = {
        "machine": machine(args.dir),
        "settings": {**asdict(settings), "quick": args.quick},
        "cycle": [],
        "scale": [],
    }
    started = time.perf_counter()
    for synchronous in SYNCHRONOUS:
        results["cycle"].append(measure_cycles(synchronous, settings, args.dir))
    results["scale"] = measure_scale(settings.sizes, settings, args.dir)
    results["seconds"] = time.perf_counter() - started

    print(report(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"\nJSON written to {args.json}")


if __name__ == "__main__":
    main()
