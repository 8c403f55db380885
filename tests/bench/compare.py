"""Compare sloth-tray with its peers, every comparison in one run, on one machine.

Peers: huey, persist-queue and litequeue (the `bench` extra), and task-spooler's server
(`tsp`, or `ts` where it is installed under that name; left out, with a note, when it is
not installed). Linux only (it reads /proc).

Set up once, from the repository root (Debian or Ubuntu; root installs task-spooler with
apt-get, otherwise the script says what to run), then run it from the repository root
(pytest does not collect tests/bench):

    sh tests/bench/setup.sh [VENV]             # task-spooler + pip install -e '.[bench]'
                                               # into VENV (default .venv); idempotent
    python tests/bench/compare.py              # full run, about 8 minutes
    python tests/bench/compare.py --quick      # about 2 minutes: 30 s idle window,
                                               # no 60 s idle, no 1M size, fewer rounds,
                                               # a burst of 200 scripts, not 1,000
    python tests/bench/compare.py --out DIR    # where results.json and chart.png go
                                               # (default tests/bench/results/, git-ignored)
    python tests/bench/compare.py --json       # the results as JSON on stdout, not the table
    python tests/bench/compare.py --only burst,cli   # just these sections, at full size (or
                                               # with --quick/--smoke, at theirs): one row
                                               # measured again without the whole run
    python tests/bench/compare.py --only burst --burst-rounds 5   # 5 rounds of every
                                               # system's burst, not 3
    python tests/bench/compare.py --only latency --latency-repeats 9   # 9 drops per idle
                                               # length and system, not 3
    python tests/bench/compare.py --smoke      # CI (.ci/run): every section with tiny counts,
                                               # about 15 s, quiet; writes nothing unless --out

--smoke proves that every section still runs and yields its rows; its figures mean
nothing. It needs only what `pip install -e '.[test]'` installs: a peer that is not
installed (huey, persist-queue, litequeue, tsp) is skipped, and its rows say so instead
of a figure; so is the tray's RSS without a display. It exits non-zero, with one
sentence on stderr, unless every row of the table was produced (a figure or such a
reason in each): a section that fails leaves its rows missing and the sentence says why.
Every run, whatever its size, ends the same way when a row is missing.

How a job's end is known: from the queue (the Queue API on the daemon's queue.db, as
`sloth-tray show --json` and `list --json` read it), never from the wording of the app's
log; the daemon is ready once a probe script dropped into its jobs folder is recorded
done. The one log line still read is the tray's "in the tray (...)", which says whether
`run` showed an icon or fell back to headless: nothing machine-readable tells that.

What it measures (progress goes to stderr, the report to stdout):

1. Idle cost, with an empty queue: wake-ups per minute (voluntary + involuntary context
   switches of every thread) and CPU ms per minute (utime + stime) of the whole process
   tree, read from /proc over a 60 s window (30 s with --quick), after a 5 s settle.
   `python -m sloth_tray run --headless` vs huey's consumer on SQLite (default settings:
   its polling with backoff is the point) vs tsp's server, all five in parallel in the
   same window. The fourth is sloth-tray again with one job due in an hour, added before
   it starts: it must not start polling. The fifth is sloth-tray after a job that used
   steps (a `sloth-tray step` and a sloth_step.step()) ran to its end before the window:
   it must not either. Each figure is the median of consecutive 10 s sub-windows, scaled
   to a minute. RSS is sampled at the same moments.
2. Drop -> start latency after 1 s, 15 s and 60 s of idleness (no 60 s with --quick),
   3 times each, median: sloth-tray (a script written into the jobs folder, timed from
   close() to the script's first command, as tests/bench/drop_latency.py does) vs huey
   (a task enqueued by this process, timed from just before the enqueue call to the
   task's first line) vs tsp (`tsp /bin/sh script`, timed from just before the client
   starts to the script's first command) vs the durable floor (latency_floor.py: the
   least a Python queue that loses nothing does, inotify read directly, the script moved
   into a spool folder and its row committed at synchronous=FULL before its start, timed
   as sloth-tray is). Every clock includes the queue write. The four run in parallel.
3. Full cycle per second at synchronous=FULL (the Queue default), two sloth rows: the
   public API (push + claim + complete) and the daemon's engine loop (push + the runner's
   `started` note + complete and the next claim in one batch(); queue_bench.py's
   engine_loop_cycles), each against huey's SqliteStorage (enqueue + dequeue),
   persist-queue's SQLiteAckQueue (put + get + ack), litequeue (put + pop + done) and the
   bare SQLite lease loop of tests/bench/queue_bench.py, and the rules' floor (the engine
   loop's writes in bare SQL: each event appended to the history, the owner in each
   write's WHERE, 2 fsyncs a job); rounds interleaved, median.
4. Command-line start-up: whole-process wall time of `sloth-tray status --json` on a
   home its app runs on, installed as a person installs it (user_install.py: a wheel of
   this tree in a venv of its own, its console script), vs that venv's bare `python -c
   "import sqlite3, json"` and vs `tsp -l`,
   interleaved, median of 41 runs each; each ratio is the median of the rounds' own
   (a round runs every command once). Goal: sloth-tray at most 1.3 x the bare one.
   Interleaved with them, every other read-only command a person types (status, list,
   show, log, schedules, paths; the home after the command and before it), each a whole
   process on the same home, after a job with steps and output: the slowest one's row.
   Goal: at most 1.5 x the bare one.
5. Burst: 1,000 trivial scripts (200 with --quick) at once, timed until all are done,
   in jobs per second: sloth-tray (written straight into a running daemon's jobs folder,
   timed from the first write to the last job recorded done) vs the spawn floor (the same
   scripts run one after another by subprocess.run here, as sloth's runner starts them)
   vs huey (one task per script, each running it with subprocess.run in its consumer)
   vs tsp (`tsp /bin/sh script` each, one slot) vs the durable floor (the spawn floor's
   loop, each script first moved into a folder of its own and each outcome committed at
   synchronous=FULL: the least a queue that loses nothing does). All run the scripts one
   at a time, every system once a round (3 rounds; 1 with --quick or --smoke), every
   other round in reverse order; each ratio is the median of the rounds' own. Goal:
   sloth-tray at 0.8 of the floor or more. Then the RSS each app holds once its burst
   is over and it waits again (its CPU time still for three looks), sloth-tray's
   against huey's consumer and tsp's server: what a day's work leaves held.
6. Scale: claim and status latency with 10k, 100k and 1M done jobs (no 1M with --quick),
   with queue_bench.py's own code; sloth-tray only, so no one is ahead there.
7. Memory: RSS of `run --headless`, idle (from 1.), against huey's and tsp's and the
   memory floor's (latency_floor.py --watchdog, idle in the same window: a daemon with
   a SQLite queue, subprocess and watchdog's observer watching a folder, and none of
   sloth-tray's code), and of the tray app when a display is available (skipped, with
   a note, when DISPLAY is unset).
8. Steps, in a run holding its job's lease with no daemon (the job pushed and claimed
   with a run token on a Queue of the bench's, the run's environment as the runner sets
   it): run 1 records steps, run 2 (the job released and claimed again, as after a quit)
   finds them done. Whole processes, interleaved, median of 41 runs each (3 with
   --smoke): `sloth-tray step NAME -- true` skipped, vs `sloth-tray status --json` on the
   same home (goal: at most 1.3 x); the same for a NAME never run, vs `true` alone (goal:
   the step adds at most as much, 1.3 `status --json`). In this process, with the run's
   environment set: sloth_step.step() first time and skipped, 500 calls each (200 with
   --quick, 20 with --smoke), each a new name, the median call (goal for a skipped one:
   at most 1 ms). The queue is read afterwards: every step skipped or recorded by the
   run it should be.
9. Lanes (lanes_bench.py): drop -> start in a second lane while the first runs a long
   job, vs into an idle one-lane app (goal: at most 1.5 x); an idle app with three
   lanes, each having run a job: wake-ups a minute (goal: 0) and RSS against the same
   app with one lane (goal: at most 1 MiB more).
10. MCP (mcp_bench.py), over the server's own wire (JSON-RPC lines on a pipe): `sloth-tray
   mcp` from its start to the `initialize` reply, median of 5 (1 with --smoke; goal: at
   most 1.5 s, most of it the SDK's import); the `add_job` round trip, p50 and p99 of 300
   (100 with --quick, 20 with --smoke; goal: p50 at most 20 ms); then, with a `wait_job`
   in flight on a job due in an hour, the server's idle RSS and wake-ups a minute over
   the idle window (at most 45 s: a wait ends at 55 s; goal: 0); and the add_job round
   trip, p50 of 50 (5 with --smoke), on a home of 100,000 done jobs (1,000 with --smoke)
   whose app runs (the same goal). Skipped, and its rows say so, where the `mcp` extra is
   not installed.

Every ratio in the table is peer / sloth-tray, both measured in this run; the notes give
sloth / floor and sloth / bare interpreter for the two goals, and the steps rows' notes
theirs. Every process started here is stopped by pid in `finally` (SIGTERM, then
SIGKILL) and every temp dir is removed.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import io
import json
import math
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, redirect_stderr
from dataclasses import asdict, dataclass, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from statistics import median, quantiles
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))  # tests/bench is not a package

import drop_latency  # noqa: E402
import lanes_bench  # noqa: E402
import mcp_bench  # noqa: E402
import queue_bench  # noqa: E402
import user_install  # noqa: E402
from drop_latency import Places, read_text, wait_for  # noqa: E402
from queue_bench import log  # noqa: E402

from sloth_tray.for_jobs import sloth_step  # noqa: E402
from sloth_tray.paths import locate  # noqa: E402
from sloth_tray.store.queue import Job, Queue  # noqa: E402
from sloth_tray.store.states import State  # noqa: E402

PEER_PACKAGES = ("huey", "persist-queue", "litequeue")
READY_TIMEOUT = 30.0
SETTLE_LOOKS = 3  # settled_rss_mib: looks at an unchanged CPU time that make a process idle
TASK_TIMEOUT = 40.0  # huey's worker sleeps up to 10 s between polls
STOP_TIMEOUT = 5.0
HUEY_POLLING = (0.1, 1.15, 10.0)  # huey_consumer's defaults: first delay, backoff, max delay
SYNCHRONOUS = "FULL"
SYNC_VALUES = {"OFF": 0, "NORMAL": 1, "FULL": 2, "EXTRA": 3}
# The one line of the app's log the bench still reads: whether `run` showed a tray icon
# or fell back to headless, which no --json output and no queue state tells.
TRAY_READY = " in the tray ("
TICKS = os.sysconf("SC_CLK_TCK")
BURST_SCRIPT = "#!/bin/sh\ntrue\n"
BURST_SECONDS_PER_JOB = 0.2  # the deadline of a burst: generous, never a figure
BURST_POLL = 0.05  # seconds between looks at a burst's progress (light on 2 cores)
BURST_GOAL = 0.8  # sloth-tray's burst rate over the spawn floor's, at least
CLI_GOAL = 1.3  # `status --json` over a bare interpreter, at most
LOOKS_GOAL = 1.5  # every other read-only command over a bare interpreter, at most
STEP_SKIP_GOAL = 1.3  # a skipped `sloth-tray step` over `status --json`, whole processes, at most
STEP_FIRST_GOAL = 1.3  # what a first-time step adds to its command, in `status --json`s, at most
STEP_PYTHON_GOAL_US = 1000.0  # a skipped sloth_step.step() in a job's process, at most


@dataclass(frozen=True)
class Mode:
    name: str  # "full", "quick" or "smoke"
    idle_window: float  # seconds of the idle-cost window
    idles: tuple[float, ...]  # idle lengths before each drop
    queue: queue_bench.Settings  # cycle rounds/jobs and scale sizes
    burst: int  # scripts dropped at once
    settle: float = 5.0  # seconds every idle subject gets after it is ready, before the window
    sub_window: float = 10.0  # seconds per idle sample; the figures are medians over these
    repeats: int = 3  # drops per idle length and system
    cli_runs: int = 41  # whole-process runs per command, interleaved; the figure is the median
    step_calls: int = 500  # sloth_step.step() calls in one process, each kind; median
    burst_rounds: int = 1  # rounds of every system's burst; each figure the median round
    only: tuple[str, ...] = ()  # the sections to run (empty: every one)

    def runs(self, section: str) -> bool:
        return not self.only or section in self.only

    @property
    def quick(self) -> bool:
        return self.name != "full"

    @property
    def smoke(self) -> bool:
        return self.name == "smoke"


def mode_for(name: str) -> Mode:
    if name == "smoke":  # every section and every row, with tiny counts: it proves, not measures
        return Mode(name, 2.0, (0.5,), queue_bench.SMOKE_RUN, 10, settle=1.0, sub_window=1.0,
                    repeats=1, cli_runs=3, step_calls=20)
    if name == "quick":
        return Mode(name, 30.0, (1.0, 15.0), queue_bench.QUICK_RUN, 200, step_calls=200)
    return Mode(name, 60.0, (1.0, 15.0, 60.0), queue_bench.FULL_RUN, 1000, burst_rounds=3)


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

    def stop_all(self, root: Path) -> None:
        for pid in reversed(list(self.children)):
            self.stop(pid)
        # What our children left behind: a tsp client still waiting for its turn, a job
        # of a daemon that died. Every process whose command line names our temp dir.
        for pid in strays(root):
            self.stop(pid)


def strays(root: Path) -> list[int]:
    """Processes (not this one) whose command line names `root`, a temp dir of ours."""
    marker = os.fsencode(str(root))
    return [int(entry) for entry in proc_entries("/proc")
            if entry.isdigit() and int(entry) != os.getpid()
            and marker in proc_bytes(f"/proc/{entry}/cmdline")]


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


def proc_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:  # gone meanwhile
        return b""


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


def sample(pids: dict[str, int], window: float, sub_window: float) -> dict[str, list[Usage]]:
    """A reading of every subject now and after each sub-window, all at the same moments."""
    readings = {name: [usage(pid)] for name, pid in pids.items()}
    start = time.monotonic()
    steps = max(round(window / sub_window), 1)
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
        "sub_windows": {"wakeups_per_min": wakeups, "cpu_ms_per_min": cpu,
                        "rss_mib": [r.rss_kib / 1024 for r in readings]},
        "window_s": last.at - first.at,
        "window_wakeups": last.switches - first.switches,
        "window_cpu_ms": 1000 * (last.cpu_s - first.cpu_s),
    }


def settled_rss_mib(pid: int, what: str) -> float:
    """The process tree's RSS once it has gone idle after its work: read when its CPU
    time has not moved for SETTLE_LOOKS looks in a row, a tenth of a second apart."""
    readings = [usage(pid)]

    def idle() -> float | None:
        readings.append(usage(pid))
        last = readings[-SETTLE_LOOKS:]
        still = len(last) == SETTLE_LOOKS and len({r.cpu_s for r in last}) == 1
        return last[-1].rss_kib / 1024 if still else None

    return wait_for(idle, READY_TIMEOUT, f"{what} to go idle", every=0.1)


# -- the subjects: sloth-tray, huey's consumer, tsp's server ----------------------


@dataclass(frozen=True)
class Sloth:
    places: Places
    popen: subprocess.Popen
    steps_job: str | None = None  # the id of STEPS_JOB, when it was added


# A job that uses both kinds of step, as a job's script would: `sloth-tray step` is on a
# job's PATH and sloth_step on its PYTHONPATH (the app puts them there).
STEPS_JOB = """\
import subprocess

from sloth_step import step

subprocess.run(["sloth-tray", "step", "shell", "--", "echo", "from the shell step"], check=True)
print(step("python", lambda: "from the python step"))
"""
STEPS_JOB_STEPS = ("shell", "python")


def sloth_add(places: Places, script: Path, *options: str) -> str:
    """`sloth-tray add` before the daemon starts; the job's id."""
    out = subprocess.run([sys.executable, "-m", "sloth_tray", "add", str(script), *options,
                          "--home", str(places.home)], check=True, env=clean_env(),
                         capture_output=True, text=True, timeout=READY_TIMEOUT).stdout
    return out.strip()


def start_sloth(base: Path, reaper: Reaper, delayed_job: bool = False,
                steps_job: bool = False) -> Sloth:
    """`python -m sloth_tray run --headless` on a home of its own, started as drop_latency does.
    `delayed_job`: with one job due in an hour, added before it starts. `steps_job`: with
    STEPS_JOB added before it starts, and run to its end before this returns."""
    places = Places(home=base / "home", results=base / "results")
    places.results.mkdir(parents=True)
    if delayed_job:
        script = base / "later.sh"
        script.write_text("#!/bin/sh\necho later\n", encoding="utf-8")
        sloth_add(places, script, "--delay", "1h")
    steps_id = None
    if steps_job:
        script = base / "steps.py"
        script.write_text(STEPS_JOB, encoding="utf-8")
        steps_id = sloth_add(places, script)
    daemon = drop_latency.start_daemon(places)
    reaper.add(daemon.pid, daemon)
    drop_latency.wait_until_ready(daemon, places)
    if steps_id is not None:  # due before the probe, so ended by now; told by the queue
        found = steps_job_after(places, steps_id)
        if found["state"] != "done" or found["steps"] != dict.fromkeys(STEPS_JOB_STEPS, "done"):
            raise RuntimeError(f"the job with steps ended {found}, not done with its steps "
                               f"done; see {places.app_log}")
    return Sloth(places, daemon, steps_id)


def steps_job_after(places: Places, job_id: str) -> dict[str, Any]:
    """The job's state, its error and its steps' states, read from the queue."""
    with Queue(places.db) as queue:
        job = queue.get(job_id)
        steps = {step["name"]: step["state"] for step in queue.steps(job_id)}
    return {"id": job_id, "state": job.state.value, "last_error": job.last_error, "steps": steps}


def sloth_status(home: Path) -> dict[str, int]:
    out = subprocess.run([sys.executable, "-m", "sloth_tray", "status", "--json", "--home",
                          str(home)], check=True, env=clean_env(), capture_output=True,
                         text=True, timeout=READY_TIMEOUT).stdout
    return json.loads(out)


HUEY_MODULE = '''\
import subprocess
import time

from huey import SqliteHuey

huey = SqliteHuey("bench", filename={filename!r})


@huey.task()
def stamp(path):
    started = time.time()
    with open(path, "w") as out:
        out.write(repr(started) + "\\n")


@huey.task()
def run_script(script, marker):
    # As sloth-tray's runner starts a job: its own session, output read through pipes.
    done = subprocess.run(["/bin/sh", script], stdin=subprocess.DEVNULL, capture_output=True,
                          start_new_session=True)
    with open(marker, "w") as out:  # the time, then the exit status: the bench checks it
        out.write(repr(time.time()) + " " + str(done.returncode) + "\\n")
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
    # Ready once it has run a task (told by the task's own file, not by the consumer's
    # log): its worker's backoff then starts from that task, as sloth's from its probe.
    probe = base / "ready-stamp"
    with importable(base, module) as tasks:
        tasks.stamp(str(probe))
    wait_for(lambda: read_stamp(probe), READY_TIMEOUT, "huey's consumer to run a task", popen)
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


def tsp_env(base: Path) -> dict[str, str]:
    """A private server: its socket and its output files in `base`, nothing in /tmp."""
    return clean_env(TS_SOCKET=str(base / "ts.sock"), TMPDIR=str(base))


def start_tsp(binary: str, base: Path, reaper: Reaper) -> int:
    """tsp starts its server on first use; `-S 1` is that use. Returns the server's pid."""
    base.mkdir(parents=True)
    subprocess.run([binary, "-S", "1"], env=tsp_env(base), check=True, timeout=READY_TIMEOUT,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)
    comm = Path(binary).name[:15]
    pid = wait_for(lambda: socket_owner(base / "ts.sock", comm), READY_TIMEOUT, "tsp's server")
    reaper.add(pid)
    return pid


def tsp_add(binary: str, base: Path, script: Path) -> int:
    """Queue `/bin/sh script` (one client process, which returns once it is queued)."""
    out = subprocess.run([binary, "/bin/sh", str(script)], env=tsp_env(base), check=True,
                         capture_output=True, text=True, timeout=READY_TIMEOUT,
                         stdin=subprocess.DEVNULL)
    return int(out.stdout)


def tsp_wait(binary: str, base: Path, job: int, timeout: float) -> None:
    """Block until job `job` has finished (`tsp -w`), and check it exited 0."""
    done = subprocess.run([binary, "-w", str(job)], env=tsp_env(base), timeout=timeout,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"tsp job {job} exited {done.returncode}")


def tsp_states(binary: str, base: Path) -> dict[str, int]:
    """How many jobs `tsp -l` lists in each state (queued, running, finished...); a job
    that finished with another exit code than 0 counts as `failed`."""
    out = subprocess.run([binary, "-l"], env=tsp_env(base), check=True, capture_output=True,
                         text=True, timeout=READY_TIMEOUT, stdin=subprocess.DEVNULL).stdout
    states: dict[str, int] = {}
    for line in out.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3:
            state = "failed" if fields[1] == "finished" and fields[3] != "0" else fields[1]
            states[state] = states.get(state, 0) + 1
    return states


# -- 1. idle cost and memory --------------------------------------------------------


def measure_idle(mode: Mode, root: Path, reaper: Reaper, tsp: str | None,
                 peers: set[str]) -> dict[str, Any]:
    log(f"idle cost: starting the subjects, then {mode.settle:g} s settle and a "
        f"{mode.idle_window:g} s window")
    sloth = start_sloth(root / "idle-sloth", reaper)
    later = start_sloth(root / "idle-sloth-later", reaper, delayed_job=True)
    stepped = start_sloth(root / "idle-sloth-steps", reaper, steps_job=True)
    pids = {"sloth": sloth.popen.pid, "sloth_job_1h": later.popen.pid,
            "sloth_after_steps": stepped.popen.pid}
    if "huey" in peers:
        pids["huey"] = start_huey(root / "idle-huey", "bench_huey_idle", reaper).popen.pid
    if tsp is not None:
        pids["tsp"] = start_tsp(tsp, root / "idle-tsp", reaper)
    # The memory floor: latency_floor.py, its folder watched by watchdog as sloth-tray's is
    pids[MEMORY_FLOOR] = start_floor(root / "idle-floor", reaper, watchdog=True)[0].pid
    time.sleep(mode.settle)
    readings = sample(pids, mode.idle_window, mode.sub_window)
    for name, pid in pids.items():
        if not Path(f"/proc/{pid}").exists():
            raise RuntimeError(f"{name} ({pid}) exited during the idle window")
    results: dict[str, Any] = {name: idle_summary(r) for name, r in readings.items()}
    results["sloth_job_1h"]["status_after"] = sloth_status(later.places.home)
    results["sloth_after_steps"]["job_after"] = steps_job_after(stepped.places,
                                                                stepped.steps_job or "")
    results["tsp_binary"] = tsp
    for name, summary in results.items():
        if isinstance(summary, dict) and "wakeups_per_min" in summary:
            log(f"  {name:17} {summary['wakeups_per_min']:8.1f} wake-ups/min "
                f"{summary['cpu_ms_per_min']:8.1f} CPU ms/min {summary['rss_mib']:6.1f} MiB")
    for pid in pids.values():
        reaper.stop(pid)
    return results


def measure_tray(mode: Mode, root: Path, reaper: Reaper,
                 notes: list[str]) -> dict[str, Any] | None:
    """RSS of the tray app, idle; None (with a note) without a display."""
    if not os.environ.get("DISPLAY"):
        notes.append(f"tray RSS: skipped, {NO_DISPLAY} (no X display to show an icon on)")
        return None
    places = Places(home=root / "tray" / "home", results=root / "tray" / "results")
    places.results.mkdir(parents=True)
    with open(places.daemon_stderr, "wb") as stderr:
        popen = subprocess.Popen([sys.executable, "-m", "sloth_tray", "run", "--home",
                                  str(places.home)], env=clean_env(), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=stderr)
    reaper.add(popen.pid, popen)
    drop_latency.wait_until_ready(popen, places)  # the queue says it runs jobs
    if TRAY_READY not in (read_text(places.app_log) or ""):  # logged before it runs any
        notes.append("tray RSS: skipped, the app could not show an icon and ran headless "
                     f"(see {places.app_log.name})")
        reaper.stop(popen.pid)
        return None
    time.sleep(mode.settle)
    rss = []
    for _ in range(5):
        rss.append(usage(popen.pid).rss_kib / 1024)
        time.sleep(1.0)
    reaper.stop(popen.pid)
    return {"rss_mib": median(rss), "samples_mib": rss}


# -- 2. drop -> start latency -----------------------------------------------------------


def sloth_latencies(mode: Mode, root: Path, reaper: Reaper) -> list[dict[str, float]]:
    sloth = start_sloth(root / "latency-sloth", reaper)
    trials = []
    with drop_latency.JobWatch(sloth.places.db) as jobs:  # each job's end, from the queue
        for index, idle in enumerate(idle_plan(mode), start=1):
            time.sleep(idle)  # the point of the bench: the daemon sits idle this long
            drop = drop_latency.drop_one(index, sloth.places, sloth.popen, jobs)
            trials.append({"idle_s": idle, "latency_ms": drop.latency_ms})
            log(f"  sloth after {idle:4g} s idle: {drop.latency_ms:9.1f} ms")
    reaper.stop(sloth.popen.pid)
    return trials


def start_floor(base: Path, reaper: Reaper, *, watchdog: bool = False
                ) -> tuple[subprocess.Popen, Path]:
    """latency_floor.py's daemon, watching its folder (with watchdog's observer when
    `watchdog`): it and its jobs folder."""
    jobs, ready = base / "jobs", base / "ready"
    jobs.mkdir(parents=True)
    floor = subprocess.Popen([sys.executable, str(BENCH_DIR / "latency_floor.py"),
                              *(["--watchdog"] if watchdog else []), str(jobs),
                              str(base / "spool"), str(ready)], stdin=subprocess.DEVNULL)
    reaper.add(floor.pid, floor)
    wait_for(lambda: True if ready.exists() else None, READY_TIMEOUT,
             "the floor's daemon to watch its folder", floor)
    return floor, jobs


def floor_latencies(mode: Mode, root: Path, reaper: Reaper) -> list[dict[str, float]]:
    """The durable floor (latency_floor.py) after the same idle times, dropped into as
    sloth-tray is; a quarter second behind the others, so its drops meet theirs less."""
    base = root / "latency-floor"
    floor, jobs = start_floor(base, reaper)
    results = base / "results"
    results.mkdir()
    time.sleep(0.25)
    trials = []
    for index, idle in enumerate(idle_plan(mode), start=1):
        time.sleep(idle)
        result = results / f"drop-{index:03d}.ns"
        dropped = drop_latency.write_script(jobs / f"drop-{index:03d}.sh",
                                            drop_latency.script_text(result))
        started = wait_for(lambda r=result: drop_latency.read_timestamp(r), TASK_TIMEOUT,
                           f"durable floor drop {index} to start", floor)
        latency = (started - dropped) / 1e6
        trials.append({"idle_s": idle, "latency_ms": latency})
        log(f"  floor after {idle:4g} s idle: {latency:9.1f} ms")
    reaper.stop(floor.pid)
    return trials


def idle_plan(mode: Mode) -> list[float]:
    return [idle for _ in range(mode.repeats) for idle in mode.idles]


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


def read_marker(path: Path) -> tuple[float, int] | None:
    """A huey burst task's marker once whole: (when it ended, its script's exit status)."""
    text = read_text(path)
    if not text or not text.endswith("\n"):
        return None
    at, status = text.split()
    return float(at), int(status)


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


def tsp_latencies(mode: Mode, root: Path, reaper: Reaper, binary: str) -> list[dict[str, float]]:
    base = root / "latency-tsp"
    server = start_tsp(binary, base, reaper)
    trials = []
    for index, idle in enumerate(idle_plan(mode), start=1):
        script = base / f"drop-{index:03d}.sh"
        result = base / f"drop-{index:03d}.ns"
        script.write_text(drop_latency.script_text(result), encoding="utf-8")
        time.sleep(idle)
        before = time.time_ns()  # before the client starts: queueing is part of the latency
        job = tsp_add(binary, base, script)
        started = wait_for(lambda r=result: drop_latency.read_timestamp(r), TASK_TIMEOUT,
                           f"tsp job {index} to start")
        tsp_wait(binary, base, job, TASK_TIMEOUT)  # finished: drops never overlap
        latency = (started - before) / 1e6
        trials.append({"idle_s": idle, "latency_ms": latency})
        log(f"  tsp   after {idle:4g} s idle: {latency:9.1f} ms")
    reaper.stop(server)
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


def measure_latency(mode: Mode, root: Path, reaper: Reaper, tsp: str | None,
                    peers: set[str]) -> dict[str, Any]:
    log(f"drop -> start latency: idle {', '.join(f'{i:g}' for i in mode.idles)} s, "
        f"{mode.repeats} times each; sloth{', huey' if 'huey' in peers else ''}"
        f"{' and tsp' if tsp else ''} in parallel")
    floor_places = Places(home=root / "floor" / "home", results=root / "floor" / "results")
    floor_places.results.mkdir(parents=True)
    floors = drop_latency.spawn_floor(floor_places)
    with ThreadPoolExecutor(max_workers=4) as pool:
        sloth = pool.submit(sloth_latencies, mode, root, reaper)
        huey = pool.submit(huey_latencies, mode, root, reaper) if "huey" in peers else None
        peer = pool.submit(tsp_latencies, mode, root, reaper, tsp) if tsp else None
        durable = pool.submit(floor_latencies, mode, root, reaper)
        sloth_trials = sloth.result()
        huey_trials = huey.result() if huey else None
        tsp_trials = peer.result() if peer else None
        floor_trials = durable.result()
    schedule = {f"{idle:g}": dict(zip(("next_poll_s", "interval_s"), huey_next_poll(idle),
                                      strict=True)) for idle in mode.idles}
    results = {"spawn_floor_ms": median(floors), "spawn_floor_runs_ms": floors,
               "sloth": by_idle(sloth_trials), "durable floor": by_idle(floor_trials),
               "huey_schedule": schedule, "repeats": mode.repeats}
    if huey_trials is not None:
        results["huey"] = by_idle(huey_trials)
    if tsp_trials is not None:
        results["tsp"] = by_idle(tsp_trials)
    return results


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
    "sloth engine loop": queue_bench.engine_loop_cycles,
    "huey": huey_cycles,
    "persist-queue": persist_cycles,
    "litequeue": litequeue_cycles,
    "bare loop": queue_bench.bare_cycles,
    "rules floor": queue_bench.rules_floor_cycles,
}

SLOTH_CYCLES = {"sloth": "API", "sloth engine loop": "engine loop"}  # name: label in the table

CYCLE_NOTES = {
    "sloth": "the API cycle, push + claim + complete: 3 transactions, each appending to the "
             "job's history; Queue(synchronous='FULL'), its default",
    "sloth engine loop": "the daemon's loop back to back, queue_bench.engine_loop_cycles: "
                         "push (the inbox, while the job before runs) + started (the "
                         "runner's note after its spawn: pid, pgid, start time, token) + "
                         "complete and the next claim in one batch(): 3 commits a job, 2 "
                         "of which wait for the disk as huey's 2 do (`started` rides on the "
                         "next fsync; the loop made 5 before), and 1 write more than the "
                         "API cycle "
                         "(`started`); the runner's look for a step's wait is in, the "
                         "spawn and the tray's snapshot reads are not",
    "huey": "enqueue + dequeue: 2 transactions (dequeue deletes the row: no lease, no "
            "completion, no `started`: less work than either sloth row); "
            "SqliteStorage(fsync=True) is its own knob for FULL (it knows only "
            "FULL or OFF), read back as 2",
    "persist-queue": "put + get + ack: 3 commits; no synchronous option (SQLite's default, "
                     "FULL, applies): set on its private _putter/_getter connection and "
                     "read back as 2",
    "litequeue": "put + pop + done: 3 statements; its constructor forces NORMAL: set back to "
                 "FULL on queue.conn after construction and read back as 2",
    "bare loop": "queue_bench.py's BareLoop: 1 INSERT + 2 UPDATEs, autocommit, "
                 "PRAGMA synchronous=FULL",
    "rules floor": "queue_bench.rules_floor_cycles: the engine loop's writes in bare SQL, "
                   "nothing around them: push, `started` without its own fsync, the "
                   "outcome and the next claim in one commit; each appends its event to "
                   "the job's history, each write holds the lease's owner in its WHERE: "
                   "2 fsyncs a job, as huey's; the engine loop's cost beyond it is its own",
}


def measure_cycles(mode: Mode, root: Path, peers: set[str]) -> dict[str, Any]:
    settings = mode.queue
    names = [name for name in CYCLES if name not in PEER_PACKAGES or name in peers]
    log(f"full cycle at synchronous={SYNCHRONOUS}: {settings.rounds} rounds x "
        f"{settings.jobs} jobs, {len(names)} implementations interleaved")
    rates: dict[str, list[float]] = {name: [] for name in names}
    for round_no in range(settings.rounds):
        shift = round_no % len(names)  # who goes first moves each round
        for name in names[shift:] + names[:shift]:
            rate = queue_bench.cycles_per_second(CYCLES[name], SYNCHRONOUS, settings.jobs,
                                                 str(root))
            rates[name].append(rate)
            log(f"  round {round_no + 1}/{settings.rounds} {name:17} {rate:9.0f} cycles/s")
    medians = {name: median(values) for name, values in rates.items()}
    return {"synchronous": SYNCHRONOUS, "jobs_per_round": settings.jobs,
            "rounds": settings.rounds, "runs": rates, "median": medians,
            "ratio_vs_sloth": {n: medians[n] / medians["sloth"] for n in names},
            "ratio_vs_sloth_engine_loop": {n: medians[n] / medians["sloth engine loop"]
                                           for n in names},
            "what": CYCLE_NOTES}


# -- 4. command-line start-up -------------------------------------------------------------


def wall_ms(command: list[str], env: dict[str, str]) -> float:
    """Whole-process wall time of `command`, output read through pipes, in ms."""
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, timeout=READY_TIMEOUT,
                          stdin=subprocess.DEVNULL)
    took = (time.perf_counter() - start) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: "
                           f"{done.stderr.decode(errors='replace').strip()}")
    return took


def measure_cli(mode: Mode, root: Path, reaper: Reaper, tsp: str | None) -> dict[str, Any]:
    log(f"command-line start-up: {mode.cli_runs} runs of each command, interleaved")
    # On a home its app runs on, as a user's is: `status` then says so, which a home
    # no app ever ran on (no lock file) answers without a look.
    # A job that ran with steps and output gives show and log something to read.
    app = start_sloth(root / "cli-sloth", reaper, steps_job=True)
    home = app.places.home
    # As a person installs it and types it: the console script of a wheel in a venv of
    # its own, held against that venv's bare interpreter (user_install.py says why not
    # the checkout's editable install).
    installed = user_install.install(root / "cli-install")
    sloth = [installed.script]
    commands = {
        "sloth": ([*sloth, "status", "--json", "--home", str(home)], clean_env()),
        "bare": ([installed.python, "-c", "import sqlite3, json"], clean_env()),
    }
    # Every other look a person types, each as a whole process, on the same home
    commands |= {f"look: {name}": ([*sloth, *words], clean_env())
                 for name, words in read_only_commands(app).items()}
    server = None
    if tsp is not None:
        server = start_tsp(tsp, root / "cli-tsp", reaper)
        commands["tsp"] = ([tsp, "-l"], tsp_env(root / "cli-tsp"))
    for command, env in commands.values():
        wall_ms(command, env)  # warm-up, not counted
    times: dict[str, list[float]] = {name: [] for name in commands}
    names = list(commands)
    for run in range(mode.cli_runs):
        shift = run % len(names)  # who goes first moves each run
        for name in names[shift:] + names[:shift]:
            times[name].append(wall_ms(*commands[name]))
    if server is not None:
        reaper.stop(server)
    reaper.stop(app.popen.pid)
    medians = {name: median(values) for name, values in times.items()}
    # Each command against the bare interpreter of the same round, the pair's ratio, then
    # the median of those: the machine's pace drifts from minute to minute by more than
    # the gap measured, and a round's commands run within a second of each other.
    over_bare = {name: round_ratios(times[name], times["bare"]) for name in names
                 if name != "bare"}
    ratio = median(over_bare["sloth"])
    slowest = max((name for name in medians if name.startswith("look: ")),
                  key=lambda name: median(over_bare[name]))
    looks_ratio = median(over_bare[slowest])
    log("  " + ", ".join(f"{name} {value:.1f} ms" for name, value in medians.items())
        + f"; sloth/bare {ratio:.2f}, slowest look/bare {looks_ratio:.2f}")
    return {"runs": mode.cli_runs, "commands": {name: c for name, (c, _) in commands.items()},
            "installed": "a wheel of this tree in a venv of its own (user_install.py)",
            "runs_ms": times, "median_ms": medians,
            "over_bare": {name: spread(values) for name, values in over_bare.items()},
            "sloth_over_bare": ratio,
            "goal_sloth_over_bare": CLI_GOAL, "goal_met": ratio <= CLI_GOAL,
            "slowest_look": slowest.removeprefix("look: "),
            "slowest_look_over_bare": looks_ratio, "goal_look_over_bare": LOOKS_GOAL,
            "looks_goal_met": looks_ratio <= LOOKS_GOAL}


def round_ratios(values: list[float], bare: list[float]) -> list[float]:
    """A command's time over the bare interpreter's in each round, round by round."""
    return [value / base for value, base in zip(values, bare, strict=True)]


def read_only_commands(app: Sloth) -> dict[str, list[str]]:
    """The read-only commands as people type them, by their words with H for the home
    and ID for the job: the home after the command, and before it as the usage line
    shows it; `show` and `log` of the job that ran with steps."""
    lines = ["status --home H", "list --home H", "list --json --home H", "show ID --home H",
             "log ID --home H", "schedules --home H", "paths --home H",
             "--home H status --json", "--home H list"]
    said = {"H": str(app.places.home), "ID": app.steps_job or ""}
    return {line: [said.get(word, word) for word in line.split()] for line in lines}


# -- 5. burst: many scripts at once ----------------------------------------------------


def write_executable(path: Path) -> Path:
    """The burst's script, executable from its creation on, written under a dot name
    beside `path` and renamed to it, as the README says to drop a file: the daemon takes
    a file renamed in at once (one written in place, a quiet second after its close)."""
    draft = path.with_name(f".{path.name}.draft")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o755)
    with open(fd, "w", encoding="utf-8") as file:
        file.write(BURST_SCRIPT)
    os.rename(draft, path)
    return path


def burst_scripts(folder: Path, count: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [write_executable(folder / f"burst-{i:04d}.sh") for i in range(count)]


def burst_deadline(count: int) -> float:
    return max(60.0, count * BURST_SECONDS_PER_JOB)


def rate(count: int, seconds: float) -> dict[str, float]:
    return {"jobs": count, "seconds": seconds, "jobs_per_s": count / seconds}


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(the process's own CPU, all threads; its reaped children's), from /proc."""
    stat = proc_text(f"/proc/{pid}/stat")
    fields = stat[stat.rindex(")") + 2:].split()  # fields[0] is field 3
    return ((int(fields[11]) + int(fields[12])) / TICKS,  # utime + stime
            (int(fields[13]) + int(fields[14])) / TICKS)  # cutime + cstime


def cpu_per_job(before: tuple[float, float], after: tuple[float, float],
                count: int) -> dict[str, float]:
    return {"own_ms": 1000 * (after[0] - before[0]) / count,
            "children_ms": 1000 * (after[1] - before[1]) / count}


def run_as_a_job(script: Path) -> None:
    """`script` run as sloth's runner starts a job: its own session, output through pipes."""
    subprocess.run(["/bin/sh", str(script)], stdin=subprocess.DEVNULL, capture_output=True,
                   start_new_session=True, check=True)


def floor_burst(count: int, folder: Path) -> dict[str, Any]:
    """The same scripts run one after another by this process, as sloth's runner starts a
    job (its own session, output read through pipes): the least any runner can take."""
    scripts = burst_scripts(folder, count)
    before = cpu_seconds(os.getpid())
    start = time.perf_counter()
    for script in scripts:
        run_as_a_job(script)
    seconds = time.perf_counter() - start
    # This process's own CPU counts every thread of the bench: none other is busy now.
    return {**rate(count, seconds), "cpu": cpu_per_job(before, cpu_seconds(os.getpid()), count)}


def durable_floor_burst(count: int, folder: Path) -> dict[str, Any]:
    """The floor's loop plus the least a runner that loses nothing must do for each job,
    done as cheaply as it can be: the drop moved into a folder of its own (a mkdir, a
    link, an unlink: the file is the queue's own copy, whatever happens to the dropped
    one) and its outcome in one commit at synchronous=FULL in WAL mode (one fsync), one
    row updated. A durable queue that keeps each script does no less; tsp does neither
    (its queue is in memory). The jobs run as the floor's do."""
    scripts = burst_scripts(folder / "drops", count)
    spool = folder / "spool"
    spool.mkdir()
    db = sqlite3.connect(folder / "floor.db", isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        db.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, state TEXT NOT NULL)")
        db.executemany("INSERT INTO jobs (state) VALUES ('pending')", [()] * count)
        before = cpu_seconds(os.getpid())
        start = time.perf_counter()
        for number, script in enumerate(scripts, start=1):
            own = spool / str(number)
            own.mkdir()
            placed = own / script.name
            os.link(script, placed)
            os.unlink(script)
            run_as_a_job(placed)
            db.execute("UPDATE jobs SET state = 'done' WHERE id = ?", (number,))  # its commit
        seconds = time.perf_counter() - start
    finally:
        db.close()
    return {**rate(count, seconds), "cpu": cpu_per_job(before, cpu_seconds(os.getpid()), count)}


class QueueWatch:
    """The daemon's queue, through the Queue API (never its log): counts, failures and
    each job's history. Reads only; in WAL mode they never hold the daemon up."""

    def __init__(self, path: Path, ignore: str = drop_latency.PROBE) -> None:
        self.queue = Queue(path)
        self.ignore = ignore  # the readiness probe's job: done before the burst began

    def states(self) -> dict[str, int]:
        return self.queue.status()

    def jobs(self) -> list[Job]:
        return [job for job in self.queue.jobs() if job.name != self.ignore]

    def errors(self, limit: int = 3) -> list[str]:
        return [f"{job.name}: {job.last_error or '?'}"
                for job in self.queue.jobs(State.FAILED, limit=limit)]

    def last_done(self) -> float:
        return max(job.updated_at for job in self.jobs())

    def timeline(self) -> list[dict[str, float]]:
        """Each job's first push, claim, start and completion (wall times), by claim."""
        jobs = []
        for job in self.jobs():
            stamps = {"pushed": job.created_at}
            for event in self.queue.history(job.id):
                stamps.setdefault(event.kind, event.at)
            jobs.append(stamps)
        return sorted(jobs, key=lambda s: s.get("claimed", math.inf))

    def close(self) -> None:
        self.queue.close()


def stage_ms(timeline: list[dict[str, float]], first_write: float) -> dict[str, Any]:
    """Where a burst's time went, from the jobs' histories: medians in ms."""
    def med(values: list[float]) -> float | None:
        return 1000 * median(values) if values else None

    pairs = list(zip(timeline, timeline[1:], strict=False))
    periods = [b["claimed"] - a["claimed"] for a, b in pairs]
    last_push = max(j["pushed"] for j in timeline)
    # The inbox's pushes contend with the loop for the write lock and the GIL at first.
    pushing = [b["claimed"] - a["claimed"] for a, b in pairs if b["claimed"] <= last_push]
    after = [b["claimed"] - a["claimed"] for a, b in pairs if a["claimed"] > last_push]
    gaps = [b["claimed"] - a["completed"] for a, b in pairs if "completed" in a]
    return {
        "inbox_last_push_s": last_push - first_write,
        "first_claim_s": min(j["claimed"] for j in timeline) - first_write,
        "claim_to_started_ms": med([j["started"] - j["claimed"] for j in timeline
                                    if "started" in j]),
        "started_to_completed_ms": med([j["completed"] - j["started"] for j in timeline
                                        if "started" in j and "completed" in j]),
        "completed_to_next_claim_ms": med(gaps),
        "claim_to_next_claim_ms": med(periods),
        "claim_to_next_claim_mean_ms": 1000 * sum(periods) / len(periods) if periods else None,
        "claim_to_next_claim_while_pushing_ms": med(pushing),
        "claim_to_next_claim_after_pushing_ms": med(after),
        # a claim stamped within 1 ms of the outcome before it was made in its batch
        "claimed_with_outcome": sum(1 for gap in gaps if 0 <= gap < 0.001),
    }


def sloth_burst(count: int, root: Path, reaper: Reaper) -> dict[str, Any]:
    """`count` scripts written straight into a running daemon's jobs folder; timed from
    the first write to the last job recorded done (its updated_at, the daemon's clock)."""
    sloth = start_sloth(root / "burst-sloth", reaper)
    watch = QueueWatch(sloth.places.db)
    try:
        ended_before = sum(watch.states()[state] for state in ("done", "failed"))  # the probe
        before = cpu_seconds(sloth.popen.pid)
        first_write = time.time()
        for i in range(count):
            write_executable(sloth.places.jobs / f"burst-{i:04d}.sh")
        written = time.time() - first_write

        def ended() -> dict[str, int] | None:
            states = watch.states()
            ended = states["done"] + states["failed"] - ended_before
            return states if ended >= count else None

        states = wait_for(ended, burst_deadline(count), f"sloth's {count} jobs", sloth.popen,
                          every=BURST_POLL)
        seen = time.time() - first_write
        cpu = cpu_per_job(before, cpu_seconds(sloth.popen.pid), count)
        if states.get("failed"):
            raise RuntimeError(f"{states['failed']} of sloth's burst jobs failed, e.g. "
                               + "; ".join(watch.errors()))
        last_done = watch.last_done()
        stages = stage_ms(watch.timeline(), first_write)
    finally:
        watch.close()
    rss_after = settled_rss_mib(sloth.popen.pid, "sloth's app after its burst")
    reaper.stop(sloth.popen.pid)
    return {**rate(count, last_done - first_write), "written_s": written, "seen_done_s": seen,
            "stages": stages, "cpu": cpu, "rss_after_mib": rss_after}


def huey_burst(count: int, root: Path, reaper: Reaper) -> dict[str, Any]:
    """One task per script, enqueued at once by this process; each runs its script with
    subprocess.run in the consumer's worker and then writes a marker with the time."""
    consumer = start_huey(root / "burst-huey", "bench_huey_burst", reaper)
    scripts = burst_scripts(consumer.directory / "scripts", count)
    markers = consumer.directory / "markers"
    markers.mkdir()

    def ran() -> bool | None:
        return True if len(os.listdir(markers)) >= count else None

    with importable(consumer.directory, consumer.module) as tasks:
        synchronous = tasks.huey.storage.conn.execute("PRAGMA synchronous").fetchone()[0]
        first = time.time()
        for i, script in enumerate(scripts):
            tasks.run_script(str(script), str(markers / f"{i:04d}"))
        enqueued = time.time() - first
        wait_for(ran, burst_deadline(count), f"huey's {count} tasks", consumer.popen,
                 every=BURST_POLL)
        seen = time.time() - first
    ends = [wait_for(lambda m=m: read_marker(m), READY_TIMEOUT, f"marker {m.name}")
            for m in markers.iterdir()]
    rss_after = settled_rss_mib(consumer.popen.pid, "huey's consumer after its burst")
    reaper.stop(consumer.popen.pid)
    failed = [status for _, status in ends if status != 0]
    if failed:
        raise RuntimeError(f"{len(failed)} of huey's burst scripts exited non-zero "
                           f"(e.g. {failed[0]})")
    stamps = [at for at, _ in ends]
    return {**rate(count, max(stamps) - first), "enqueued_s": enqueued, "seen_done_s": seen,
            "synchronous": synchronous, "rss_after_mib": rss_after}


def tsp_burst(count: int, root: Path, reaper: Reaper, binary: str) -> dict[str, Any]:
    """`tsp /bin/sh script` for each (one client process each, one slot); timed from the
    first client to `tsp -w` on the last job returning."""
    base = root / "burst-tsp"
    server = start_tsp(binary, base, reaper)
    scripts = burst_scripts(base / "scripts", count)
    start = time.perf_counter()
    jobs = [tsp_add(binary, base, script) for script in scripts]
    enqueued = time.perf_counter() - start
    tsp_wait(binary, base, jobs[-1], burst_deadline(count))  # one slot: the others ran before
    seconds = time.perf_counter() - start
    states = tsp_states(binary, base)
    rss_after = settled_rss_mib(server, "tsp's server after its burst")
    reaper.stop(server)
    if states.get("finished", 0) != count:
        raise RuntimeError(f"tsp's burst ended with {states}, not {count} finished")
    return {**rate(count, seconds), "enqueued_s": enqueued, "rss_after_mib": rss_after}


def measure_burst(mode: Mode, root: Path, reaper: Reaper, tsp: str | None,
                  peers: set[str]) -> dict[str, Any]:
    """Every system's burst once a round, rounds in turn: each peer's figure is the median
    of its rounds, and each ratio to sloth is read within a round, between runs seconds
    apart, so that the machine's drift (its speed varies by half from hour to hour) moves
    both sides of a ratio alike."""
    count = mode.burst
    systems: dict[str, Callable[[Path], dict[str, Any]]] = {
        "floor": lambda folder: floor_burst(count, folder / "burst-floor"),
        "sloth": lambda folder: sloth_burst(count, folder, reaper),
        "durable floor": lambda folder: durable_floor_burst(count, folder / "burst-durable"),
    }
    if "huey" in peers:
        systems["huey"] = lambda folder: huey_burst(count, folder, reaper)
    if tsp is not None:
        systems["tsp"] = lambda folder: tsp_burst(count, folder, reaper, tsp)
    names = list(systems)
    log(f"burst: {count:,} scripts at once, one at a time; {mode.burst_rounds} round(s) of "
        f"{', '.join(names)}, every other round in reverse")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for round_no in range(mode.burst_rounds):
        # Reversed every other round: no system always runs first, or right after sloth.
        for name in names if round_no % 2 == 0 else reversed(names):
            runs[name].append(systems[name](root / f"burst-round-{round_no + 1}"))
            log(f"  round {round_no + 1}/{mode.burst_rounds} {name:14s}"
                f"{runs[name][-1]['jobs_per_s']:8.0f} jobs/s")
    results: dict[str, Any] = {"jobs": count, "script": BURST_SCRIPT,
                               "rounds": mode.burst_rounds}
    for name in names:
        # The median run stands for the system (sloth's stages and CPU with it).
        ranked = sorted(runs[name], key=lambda run: run["jobs_per_s"])
        results[name] = {**ranked[len(ranked) // 2], "runs": runs[name]}
    # sloth's rate over each peer's, round by round: above 1, sloth ran more jobs a second.
    results["round_ratios"] = {
        name: [own["jobs_per_s"] / theirs["jobs_per_s"]
               for own, theirs in zip(runs["sloth"], runs[name], strict=True)]
        for name in names if name != "sloth"}
    results["sloth_over_floor"] = median(results["round_ratios"]["floor"])
    results["goal_sloth_over_floor"] = BURST_GOAL
    results["goal_met"] = results["sloth_over_floor"] >= BURST_GOAL
    return results


# -- 6. scale ---------------------------------------------------------------------------


def measure_scale(mode: Mode, root: Path) -> list[dict[str, Any]]:
    log(f"scale: {', '.join(f'{n:,}' for n in mode.queue.sizes)} done jobs")
    return queue_bench.measure_scale(mode.queue.sizes, mode.queue, str(root))


# -- 8. steps ---------------------------------------------------------------------------


def sloth_command() -> list[str]:
    """The `sloth-tray` a job runs: the console script of this interpreter's environment,
    which the app puts at the end of every job's PATH (daemon/jobenv.py); else
    `python -m sloth_tray`."""
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        script = Path(folder) / "sloth-tray"
        if script.is_file():
            return [str(script)]
    return [sys.executable, "-m", "sloth_tray"]


class HeldRun:
    """A run of a job holding its lease, with no daemon: the job claimed with a run token
    on a Queue of the bench's, as the engine claims it. `env` is what the runner hands
    the job's process (sloth_step.Run.from_environment reads it)."""

    def __init__(self, queue: Queue, job_id: str, owner: str, token: str) -> None:
        job = queue.claim(owner, token=token)
        if job is None or job.id != job_id:
            raise RuntimeError(f"claimed {job and job.id}, not the steps job {job_id}")
        self.queue, self.job, self.owner, self.token = queue, job_id, owner, token
        self.env = {sloth_step.QUEUE_ENV: str(queue.path.absolute()), sloth_step.JOB_ENV: job_id,
                    sloth_step.TOKEN_ENV: token, sloth_step.OWNER_ENV: owner}

    @property
    def run(self) -> sloth_step.Run:
        return sloth_step.Run.from_environment(self.env)

    def release(self) -> None:
        """The run ends (as a quit ends it): the job is due again, for the next run."""
        if not self.queue.release(self.job, self.owner):
            raise RuntimeError(f"run {self.token} no longer held job {self.job}")


@contextmanager
def job_environment(env: dict[str, str]) -> Iterator[None]:
    """This process inside a job's run (its environment), its stderr (where a step says
    it was skipped) into /dev/null, as a job's goes into its log."""
    before = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        with open(os.devnull, "w") as null, redirect_stderr(null):
            yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def timed_calls(names: list[str], fn: Any) -> list[float]:
    """µs of each sloth_step.step(name, fn), in this process."""
    took = []
    for name in names:
        start = time.perf_counter_ns()
        sloth_step.step(name, fn)
        took.append((time.perf_counter_ns() - start) / 1000)
    return took


def not_again() -> None:
    raise RuntimeError("a step recorded done ran again")


def measure_steps(mode: Mode, root: Path) -> dict[str, Any]:
    """Steps, in a run holding its job's lease: run 1 records them, run 2 (the same job,
    released and claimed again, as after a quit) skips them.

    Whole processes, interleaved, median of mode.cli_runs each: `sloth-tray step NAME --
    true` skipped (NAME done in run 1) and first-time (NAME new), `sloth-tray status
    --json` on the same home, and `true` alone. In this process: sloth_step.step() first
    time (run 1) and skipped (run 2), mode.step_calls each, a new name each call."""
    runs, calls = mode.cli_runs, mode.step_calls
    log(f"steps: {runs} runs of each command, interleaved; {calls} step() calls in-process")
    home = root / "steps" / "home"
    home.parent.mkdir(parents=True)
    locate(home).ensure()  # `status` only reads: it makes nothing
    sloth = sloth_command()
    status = (sloth + ["status", "--json", "--home", str(home)], clean_env())
    wall_ms(*status)  # the warm-up
    doorbell = {sloth_step.DOORBELL_ENV: str(home / "doorbell" / "ring")}
    count = runs + 1  # the first call of each command is a warm-up, not counted
    with Queue(home / "queue.db") as queue:
        job_id = queue.push("steps")
        first = HeldRun(queue, job_id, "bench-run-1", "bench-token-1")
        db = sloth_step.connection(first.env[sloth_step.QUEUE_ENV])
        try:
            for index in range(count):  # what run 2's skipped shell steps find done
                name = f"shell-{index}"
                decision = sloth_step.start(db, first.run, name, ask=False, kind="shell")
                if decision.action != "run" or not sloth_step.end(
                        db, first.run, name, decision.occurrence, ok=True, output=b"",
                        exit_code=0):
                    raise RuntimeError(f"run 1 could not record step {name}")
            with job_environment(first.env | doorbell):
                python_first = timed_calls([f"python-{i}" for i in range(calls + 1)],
                                           lambda: {"done": True})[1:]
            first.release()
            second = HeldRun(queue, job_id, "bench-run-2", "bench-token-2")
            with job_environment(second.env | doorbell):
                python_skip = timed_calls([f"python-{i}" for i in range(calls + 1)],
                                          not_again)[1:]
            env = clean_env(**second.env, **doorbell)
            commands = {
                "status": lambda i: status,
                "skipped": lambda i: (sloth + ["step", f"shell-{i}", "--", "true"], env),
                "first": lambda i: (sloth + ["step", f"new-{i}", "--", "true"], env),
                "bare": lambda i: (["true"], env),
            }
            times: dict[str, list[float]] = {name: [] for name in commands}
            names = list(commands)
            for index in range(count):
                shift = index % len(names)  # who goes first moves each run
                for name in names[shift:] + names[:shift]:
                    took = wall_ms(*commands[name](index))
                    if index:
                        times[name].append(took)
            steps = {step["name"]: step for step in queue.steps(job_id)}
        finally:
            db.close()
    # Told by the queue: run 2 skipped what run 1 recorded, and recorded its new steps.
    wrong = [name for name, step in steps.items() if step["state"] != "done"
             or step["run"] != (2 if name.startswith("new-") else 1)]
    if wrong or len(steps) != 2 * count + calls + 1:  # shell-*, new-*, python-*
        raise RuntimeError(f"the steps were not recorded as run 1 then run 2 should: "
                           f"{len(steps)} steps, e.g. {[steps[n] for n in wrong[:2]]}")
    medians = {name: median(values) for name, values in times.items()}
    added = medians["first"] - medians["bare"]
    python = {"first_us": median(python_first), "skipped_us": median(python_skip),
              "runs_us": {"first": python_first, "skipped": python_skip}}
    skip_ratio = medians["skipped"] / medians["status"]
    log(f"  {', '.join(f'{name} {value:.1f} ms' for name, value in medians.items())}; "
        f"skipped/status {skip_ratio:.2f}; in-process: first {python['first_us']:.0f} us, "
        f"skipped {python['skipped_us']:.0f} us")
    return {
        "runs": runs, "calls": calls, "command": sloth,
        "runs_ms": times, "median_ms": medians,
        "skipped_over_status": skip_ratio, "goal_skipped_over_status": STEP_SKIP_GOAL,
        "first_added_ms": added, "first_added_over_status": added / medians["status"],
        "goal_first_added_over_status": STEP_FIRST_GOAL,
        "python": python, "goal_python_skipped_us": STEP_PYTHON_GOAL_US,
        "goal_met": {"skipped": skip_ratio <= STEP_SKIP_GOAL,
                     "first": added / medians["status"] <= STEP_FIRST_GOAL,
                     "python": python["skipped_us"] <= STEP_PYTHON_GOAL_US},
    }


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
    skip: str = ""  # why this machine cannot have the figures (a peer not installed, ...)
    runs: list[float] | None = None  # every figure the sloth value is the median (or one) of
    peer_runs: list[float] | None = None  # the same for the peer's value
    # sloth's figure over the peer's, the median of rounds' own ratios, where runs were
    # taken in rounds: it decides who is ahead (medians of drifting runs can disagree)
    round_ratio: float | None = None

    @property
    def spread(self) -> dict[str, float] | None:
        return spread(self.runs)

    @property
    def peer_spread(self) -> dict[str, float] | None:
        return spread(self.peer_runs)

    @property
    def ratio(self) -> float | None:
        if self.sloth is None or self.peer_value is None or self.sloth == 0:
            return None
        return self.peer_value / self.sloth

    @property
    def ahead(self) -> str:
        if not self.better or self.sloth is None or self.peer_value is None:
            return "n/a"
        if self.round_ratio is not None:
            if self.round_ratio == 1:
                return "tie"
            lower = self.round_ratio < 1
        elif self.sloth == self.peer_value:
            return "tie"
        else:
            lower = self.sloth < self.peer_value
        return "yes" if lower == (self.better == "lower") else "NO"

    def as_dict(self) -> dict[str, Any]:
        fields = {k: v for k, v in asdict(self).items() if k not in ("runs", "peer_runs")}
        return {**fields, "sloth_spread": self.spread, "peer_spread": self.peer_spread,
                "ratio_peer_over_sloth": self.ratio, "sloth_ahead": self.ahead}


IQR_FROM = 8  # from this many figures on, the table's spread is the IQR, not min-max


def spread(values: list[float] | None) -> dict[str, float] | None:
    """How far a figure's runs ranged: n, min, quartiles, max (None: no runs kept)."""
    if not values:
        return None
    ordered = sorted(values)
    q1, _, q3 = (quantiles(ordered, n=4, method="inclusive") if len(ordered) > 1
                 else [ordered[0]] * 3)
    return {"n": len(ordered), "min": ordered[0], "q1": q1, "median": median(ordered), "q3": q3,
            "max": ordered[-1]}


def spread_text(found: dict[str, float] | None, unit: str) -> str:
    """`min-max (n)`, or `IQR q1-q3 (n)` once there are IQR_FROM figures or more."""
    if found is None:
        return "-"
    if found["n"] == 1:
        return "one run"
    low, high, kind = ((found["q1"], found["q3"], "IQR ") if found["n"] >= IQR_FROM
                       else (found["min"], found["max"], ""))
    return f"{kind}{number(low, unit)}-{number(high, unit)} (n={found['n']})"


def number(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit in ("cycles/s", "us", "jobs/s"):
        return f"{value:,.0f}"
    return f"{value:,.1f}"


IDLE_PEERS = {"huey": "huey consumer", "tsp": "tsp server"}  # name: label in the table
# latency_floor.py --watchdog, idle: the interpreter, SQLite, subprocess and a watchdog
# observer with its watch, none of sloth-tray's own code
MEMORY_FLOOR = "memory floor"
CYCLE_PEERS = ("huey", "persist-queue", "litequeue", "bare loop", "rules floor")
LATENCY_PEERS = ("huey", "tsp", "durable floor")
MEASURE_CLI = "status --json, whole process"
MEASURE_LOOKS = "slowest read-only command, whole process"
MEASURE_IDLE_STEPS = "after a job with steps vs empty"
STEP_ROWS = (("skipped shell step, whole process", "status --json"),
             ("first-time shell step, whole process", "`true` alone"),
             ("skipped Python step, in-process", "-"),
             ("first-time Python step, in-process", "-"))


def skipped(reason: str) -> str:
    return f"skipped: {reason}"


def peer_row(row: Row, section: dict[str, Any], name: str, absent: dict[str, str],
             value: Any, runs: Any = None) -> Row:
    """`row` with the peer's value (and `runs(peer)`, the figures it is the median of), or,
    for a peer this machine lacks, the reason why not."""
    if name in absent:
        row.skip = absent[name]
        row.note = skipped(absent[name])
    elif name in section:
        row.peer_value = value(section[name])
        row.peer_runs = runs(section[name]) if runs else [row.peer_value]
    return row


def idle_rows(idle: dict[str, Any], absent: dict[str, str]) -> list[Row]:
    rows = []
    for key, label, unit in (("wakeups_per_min", "wake-ups", "/min"),
                             ("cpu_ms_per_min", "CPU", "ms/min")):
        for subject, when in (("sloth", "empty queue"), ("sloth_job_1h", "job 1h ahead")):
            for peer, peer_label in IDLE_PEERS.items():
                rows.append(peer_row(Row("idle", f"{label}, {when}", unit, idle[subject][key],
                                         peer_label, better="lower",
                                         runs=idle[subject]["sub_windows"][key]),
                                     idle, peer, absent, lambda p, k=key: p[k],
                                     lambda p, k=key: p["sub_windows"][k]))
    later, empty = idle["sloth_job_1h"], idle["sloth"]
    polls = later["wakeups_per_min"] > empty["wakeups_per_min"] + 1
    rows.append(Row("idle", "job 1h ahead vs empty", "/min", later["wakeups_per_min"],
                    "sloth, empty", empty["wakeups_per_min"], "",
                    "starts polling!" if polls else "no polling",
                    runs=later["sub_windows"]["wakeups_per_min"],
                    peer_runs=empty["sub_windows"]["wakeups_per_min"]))
    stepped = idle["sloth_after_steps"]
    polls = stepped["wakeups_per_min"] > empty["wakeups_per_min"] + 1
    rows.append(Row("idle", MEASURE_IDLE_STEPS, "/min", stepped["wakeups_per_min"],
                    "sloth, empty", empty["wakeups_per_min"], "",
                    "starts polling!" if polls else "no polling",
                    runs=stepped["sub_windows"]["wakeups_per_min"],
                    peer_runs=empty["sub_windows"]["wakeups_per_min"]))
    return rows


def latency_measure(idle: float) -> str:
    return f"drop->start after {idle:g} s idle"


def latency_rows(latency: dict[str, Any], absent: dict[str, str]) -> list[Row]:
    return [peer_row(Row("latency", latency_measure(float(idle)), "ms", s["median_ms"], peer,
                         better="lower", runs=s["runs_ms"]),
                     latency, peer, absent, lambda p, i=idle: p[i]["median_ms"],
                     lambda p, i=idle: p[i]["runs_ms"])
            for idle, s in latency["sloth"].items() for peer in LATENCY_PEERS]


def cli_rows(cli: dict[str, Any], absent: dict[str, str]) -> list[Row]:
    medians, runs = cli["median_ms"], cli["runs_ms"]
    verdict = "met" if cli["goal_met"] else "NOT met"
    return [Row("cli", MEASURE_CLI, "ms", medians["sloth"], "bare interpreter", medians["bare"],
                "lower", f"sloth/bare {cli['sloth_over_bare']:.2f}x"
                f"{ratio_spread(cli, 'sloth')} (goal <= {cli['goal_sloth_over_bare']:g}x: "
                f"{verdict})",
                runs=runs["sloth"], peer_runs=runs["bare"]),
            peer_row(Row("cli", MEASURE_CLI, "ms", medians["sloth"], "tsp -l", better="lower",
                         runs=runs["sloth"]),
                     medians, "tsp", absent, lambda p: p, lambda p: runs["tsp"]),
            Row("cli", MEASURE_LOOKS, "ms", medians[f"look: {cli['slowest_look']}"],
                "bare interpreter", medians["bare"], "lower",
                f"slowest: `{cli['slowest_look']}`, sloth/bare "
                f"{cli['slowest_look_over_bare']:.2f}x"
                f"{ratio_spread(cli, 'look: ' + cli['slowest_look'])} (goal <= "
                f"{cli['goal_look_over_bare']:g}x: "
                f"{'met' if cli['looks_goal_met'] else 'NOT met'})",
                runs=runs[f"look: {cli['slowest_look']}"], peer_runs=runs["bare"])]


def ratio_spread(cli: dict[str, Any], name: str) -> str:
    """`, rounds' IQR 1.21-1.37x`: how stable a command's ratio to the bare one is."""
    found = cli.get("over_bare", {}).get(name)
    if not found:
        return ""
    return f", rounds' IQR {found['q1']:.2f}-{found['q3']:.2f}x"


# Each system the burst is timed against, as its rows name it.
BURST_PEERS = {"floor": "spawn floor", "durable floor": "durable floor", "huey": "huey",
               "tsp": "tsp"}
# The app's memory once the burst is over and it waits again, against the peers' servers
# after theirs: what a day's work leaves held (the idle RSS row is read before any).
MEASURE_BURST_RSS = "RSS, idle after the burst"


def burst_measure(count: int) -> str:
    return f"burst, {count:,} scripts"


def burst_rows(burst: dict[str, Any], absent: dict[str, str]) -> list[Row]:
    measure = burst_measure(burst["jobs"])
    sloth = burst["sloth"]["jobs_per_s"]
    runs = [r["jobs_per_s"] for r in burst["sloth"]["runs"]]
    verdict = "met" if burst["goal_met"] else "NOT met"
    rows = []
    for peer, label in BURST_PEERS.items():
        row = peer_row(Row("burst", measure, "jobs/s", sloth, label, better="higher",
                           runs=runs), burst, peer, absent, lambda p: p["jobs_per_s"],
                       lambda p: [r["jobs_per_s"] for r in p["runs"]])
        if peer in burst["round_ratios"]:
            row.round_ratio = median(burst["round_ratios"][peer])
            row.note = round_ratio_note(burst["round_ratios"][peer], peer)
            if peer == "floor":
                row.note += f" (goal >= {burst['goal_sloth_over_floor']:g}: {verdict})"
        rows.append(row)
    for peer, label in IDLE_PEERS.items():
        rows.append(peer_row(
            Row("burst", MEASURE_BURST_RSS, "MiB", burst["sloth"]["rss_after_mib"], label,
                better="lower", runs=[r["rss_after_mib"] for r in burst["sloth"]["runs"]]),
            burst, peer, absent, lambda p: p["rss_after_mib"],
            lambda p: [r["rss_after_mib"] for r in p["runs"]]))
    return rows


def round_ratio_note(ratios: list[float], peer: str) -> str:
    """sloth's rate over the peer's, read round by round: the median, and the range."""
    if len(ratios) < 2:
        return f"sloth/{peer} {median(ratios):.2f}"
    return f"sloth/{peer} {median(ratios):.2f} by round ({min(ratios):.2f}-{max(ratios):.2f})"


def cycle_measure(label: str) -> str:
    return f"full cycle at {SYNCHRONOUS}, {label}"


def cycle_rows(cycles: dict[str, Any], absent: dict[str, str]) -> list[Row]:
    """Each sloth row (the API cycle, the engine loop) against every peer; then the two
    sloth rows against each other."""
    medians, runs = cycles["median"], cycles["runs"]
    rows = [peer_row(Row("queue", cycle_measure(label), "cycles/s", medians[sloth], name,
                         better="higher", runs=runs[sloth]), medians, name, absent,
                     lambda p: p, lambda p, n=name: runs[n])
            for sloth, label in SLOTH_CYCLES.items() for name in CYCLE_PEERS]
    rows.append(Row("queue", cycle_measure("engine loop"), "cycles/s",
                    medians["sloth engine loop"], "sloth, API", medians["sloth"], "",
                    "+ the runner's `started` note", runs=runs["sloth engine loop"],
                    peer_runs=runs["sloth"]))
    return rows


def scale_measures(done: int) -> tuple[str, str, str]:
    return (f"claim ({SYNCHRONOUS}) @ {done:,} done", f"status() @ {done:,} done",
            f"tray snapshot @ {done:,} done")


def scale_rows(scale: list[dict[str, Any]]) -> list[Row]:
    rows = []
    base = scale[0]
    for s in scale:
        claim, status, snapshot = scale_measures(s["done"])
        growth = s["claim_us"][SYNCHRONOUS] / base["claim_us"][SYNCHRONOUS]
        rows.append(Row("scale", claim, "us", s["claim_us"][SYNCHRONOUS],
                        note=f"x{growth:.2f} vs {base['done']:,}",
                        runs=s["claim_runs_us"][SYNCHRONOUS]))
        growth = s["status_us"] / base["status_us"]
        rows.append(Row("scale", status, "us", s["status_us"],
                        note=f"x{growth:.2f} vs {base['done']:,}", runs=s["status_runs_us"]))
        growth = s["snapshot_us"] / base["snapshot_us"]
        rows.append(Row("scale", snapshot, "us", s["snapshot_us"],
                        note=f"x{growth:.2f} vs {base['done']:,}", runs=s["snapshot_runs_us"]))
    return rows


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def step_rows(steps: dict[str, Any]) -> list[Row]:
    """A step against what it is held to: a skipped one against `status --json` (both whole
    processes), a first one against its command alone, Python's against a millisecond."""
    medians, met, python = steps["median_ms"], steps["goal_met"], steps["python"]
    runs, python_runs = steps["runs_ms"], python["runs_us"]
    (skipped, status), (first, bare), (py_skipped, _), (py_first, _) = STEP_ROWS
    return [
        Row("steps", skipped, "ms", medians["skipped"], status, medians["status"], "",
            f"skipped/status {steps['skipped_over_status']:.2f}x (goal <= "
            f"{steps['goal_skipped_over_status']:g}x: {verdict(met['skipped'])})",
            runs=runs["skipped"], peer_runs=runs["status"]),
        Row("steps", first, "ms", medians["first"], bare, medians["bare"], "",
            f"adds {steps['first_added_ms']:.1f} ms, {steps['first_added_over_status']:.2f} "
            f"of a status --json (goal <= about {steps['goal_first_added_over_status']:g}: "
            f"{verdict(met['first'])})", runs=runs["first"], peer_runs=runs["bare"]),
        Row("steps", py_skipped, "us", python["skipped_us"],
            note=f"goal <= {steps['goal_python_skipped_us']:,.0f} us: {verdict(met['python'])}",
            runs=python_runs["skipped"]),
        Row("steps", py_first, "us", python["first_us"],
            note="its start and its end, each committed with an fsync",
            runs=python_runs["first"]),
    ]


MEASURE_RSS, MEASURE_TRAY = "RSS, run --headless idle", "RSS, tray app idle"

LANE_ROWS = (("drop->start, 2nd lane while the 1st runs a long job", "one lane, idle"),
             ("wake-ups/min, idle, 3 lanes", "-"),
             ("RSS, run --headless idle, 3 lanes", "1 lane"))


def measure_lanes(mode: Mode, root: Path, reaper: Reaper) -> dict[str, Any]:
    """Lanes (lanes_bench.py): a drop into a second lane while the first runs a long job,
    against one into an idle one-lane app; an idle three-lane app's wake-ups and RSS."""
    trials = 1 if mode.smoke else mode.repeats * 2 + 1
    log(f"lanes: {trials} drops each way, interleaved; then two idle apps, "
        f"{mode.idle_window:g} s window")
    latency = lanes_bench.latencies(trials, root / "lanes", reaper, log)
    apps = lanes_bench.idle_apps(root / "lanes", reaper)
    time.sleep(mode.settle)
    readings = sample({label: daemon.pid for label, (_, daemon) in apps.items()},
                      mode.idle_window, mode.sub_window)
    for _, daemon in apps.values():
        reaper.stop(daemon.pid)
    idle = lanes_bench.idle_rows_data({label: idle_summary(r) for label, r in readings.items()})
    return {"latency": latency, "idle": idle}


def lane_rows(lanes: dict[str, Any]) -> list[Row]:
    (second, one), (wakeups, _), (rss, one_lane) = LANE_ROWS
    latency, idle = lanes["latency"], lanes["idle"]
    trials, apps = latency["trials"], idle["summaries"]
    three, one_app = apps["3 lanes"]["sub_windows"], apps["1 lane"]["sub_windows"]
    return [
        Row("lanes", second, "ms", latency["second_lane_ms"], one, latency["one_lane_ms"], "",
            f"second/one {latency['ratio']:.2f}x (goal <= {latency['goal']:g}x: "
            f"{verdict(latency['met'])})", runs=trials["second_lane_ms"],
            peer_runs=trials["one_lane_ms"]),
        Row("lanes", wakeups, "/min", idle["wakeups_per_min"],
            note=f"goal 0: {verdict(idle['met']['wakeups'])}", runs=three["wakeups_per_min"]),
        Row("lanes", rss, "MiB", idle["rss_3_mib"], one_lane, idle["rss_1_mib"], "",
            f"{idle['rss_more_mib']:+.2f} MiB (goal <= +{idle['goal_rss_mib']:g} MiB: "
            f"{verdict(idle['met']['rss'])})", runs=three["rss_mib"],
            peer_runs=one_app["rss_mib"]),
    ]


def memory_rows(idle: dict[str, Any], absent: dict[str, str]) -> list[Row]:
    rows = [peer_row(Row("memory", MEASURE_RSS, "MiB", idle["sloth"]["rss_mib"], label,
                         better="lower", runs=idle["sloth"]["sub_windows"]["rss_mib"]),
                     idle, name, absent, lambda p: p["rss_mib"],
                     lambda p: p["sub_windows"]["rss_mib"])
            for name, label in {**IDLE_PEERS, MEMORY_FLOOR: MEMORY_FLOOR}.items()]
    return rows


def tray_row(tray: dict[str, Any] | None, tray_skipped: str) -> Row:
    if tray is None:
        return Row("memory", MEASURE_TRAY, "MiB", None, note=skipped(tray_skipped),
                   skip=tray_skipped)
    return Row("memory", MEASURE_TRAY, "MiB", tray["rss_mib"], runs=tray["samples_mib"])


MCP_ROWS = ("start -> initialize reply", "add_job round trip, p50", "add_job round trip, p99",
            "RSS, idle", "wake-ups/min, idle, a wait_job in flight",
            "add_job round trip, p50, deep queue, app running")
# The deep queue's done jobs (1,000 with --smoke): each tool call once read the whole
# file (30 ms per 100,000 jobs); a server reads it once now, while the app runs.
MCP_DEEP_DONE = 100_000
NO_MCP = "the mcp extra is not installed (pip install -e '.[mcp]')"


def measure_mcp(mode: Mode, root: Path, reaper: Reaper) -> dict[str, Any]:
    """`sloth-tray mcp`: start, add_job, and idle with a wait in flight (mcp_bench.py)."""
    if importlib.util.find_spec("mcp") is None:
        return {"skipped": NO_MCP}
    starts, adds = (1, 20) if mode.smoke else (5, 100 if mode.quick else 300)
    log(f"mcp: {starts} starts, {adds} add_job calls, then idle with a wait in flight")
    found, wire = mcp_bench.measure(root / "mcp", reaper, starts=starts, adds=adds)
    try:
        time.sleep(mode.settle)
        window = min(mode.idle_window, 45.0)
        idle = idle_summary(sample({"mcp": wire.pid}, window,
                                   min(mode.sub_window, window))["mcp"])
    finally:
        reaper.stop(wire.pid)
    deep = measure_mcp_deep(root / "mcp-deep", reaper, done=1_000 if mode.smoke else MCP_DEEP_DONE,
                            adds=5 if mode.smoke else 50)
    return found | {"idle": idle, "deep": deep, "met": found["met"] | {
        "wakeups": idle["window_wakeups"] == 0,
        "deep_add_p50": deep["add_p50_ms"] <= found["goals"]["add_p50_ms"]}}


def measure_mcp_deep(base: Path, reaper: Reaper, *, done: int, adds: int) -> dict[str, Any]:
    """add_job round trips on a home of `done` finished jobs whose app runs, as a user's
    does after months: the server's cost must not grow with the queue."""
    base.mkdir(parents=True)
    home = locate(base / "home").ensure()
    Queue(home.db).close()  # its schema, as the app makes it
    queue_bench.fill_done(home.db, done)
    log(f"mcp: {adds} add_job calls on {done:,} done jobs, the app running")
    app = start_sloth(base, reaper)
    try:
        times = mcp_bench.add_round_trips(home.root, clean_env(), reaper, adds, key="deep")
    finally:
        reaper.stop(app.popen.pid)
    return {"done": done, "adds": adds, "add_p50_ms": median(times), "add_runs_ms": times}


def mcp_rows(found: dict[str, Any]) -> list[Row]:
    if "skipped" in found:
        return [Row("mcp", measure, "ms", None, note=skipped(found["skipped"]),
                    skip=found["skipped"]) for measure in MCP_ROWS]
    start, p50, p99, rss, wakeups, deep_p50 = MCP_ROWS
    goals, met, idle, deep = found["goals"], found["met"], found["idle"], found["deep"]
    return [
        Row("mcp", start, "ms", found["start_ms"],
            note=f"goal <= {goals['start_ms']:,.0f} ms: {verdict(met['start'])}",
            runs=found["start_runs"]),
        Row("mcp", p50, "ms", found["add_p50_ms"],
            note=f"goal <= {goals['add_p50_ms']:g} ms: {verdict(met['add_p50'])}",
            runs=found["add_runs_ms"]),
        Row("mcp", p99, "ms", found["add_p99_ms"], note=f"of {found['adds']} calls",
            runs=found["add_runs_ms"]),
        Row("mcp", rss, "MiB", idle["rss_mib"], runs=idle["sub_windows"]["rss_mib"]),
        Row("mcp", wakeups, "/min", idle["wakeups_per_min"],
            runs=idle["sub_windows"]["wakeups_per_min"],
            note=f"{idle['window_wakeups']} in {idle['window_s']:.0f} s "
                 f"(goal 0: {verdict(met['wakeups'])})"),
        Row("mcp", deep_p50, "ms", deep["add_p50_ms"], runs=deep["add_runs_ms"],
            note=f"{deep['done']:,} done jobs; goal <= {goals['add_p50_ms']:g} ms: "
                 f"{verdict(met['deep_add_p50'])}"),
    ]


def table_rows(results: dict[str, Any]) -> list[Row]:
    """The rows of every section that produced results (a failed section has none)."""
    absent = results["absent"]
    builders = {
        "idle": lambda r: idle_rows(r, absent),
        "latency": lambda r: latency_rows(r, absent),
        "cycles": lambda r: cycle_rows(r, absent),
        "cli": lambda r: cli_rows(r, absent),
        "burst": lambda r: burst_rows(r, absent),
        "scale": scale_rows,
        "steps": step_rows,
        "lanes": lane_rows,
        "mcp": mcp_rows,
    }
    rows = [row for key, build in builders.items() if key in results
            for row in build(results[key])]
    if "idle" in results:
        rows += memory_rows(results["idle"], absent)
    if "tray" in results:
        rows.append(tray_row(results["tray"], results.get("tray_skipped", "")))
    return rows


# The section measured (SECTIONS) each table section's rows come from, where not its own.
ROW_SOURCE = {"queue": "cycles", "memory": "idle"}


def expected_rows(mode: Mode) -> list[tuple[str, str, str]]:
    """(section, measure, peer) of every row a run in `mode` must produce, from the mode
    alone (its --only sections): a section that failed, or a row a change forgot, shows up
    missing."""
    return [row for row in every_row(mode)
            if mode.runs("tray" if row[1] == MEASURE_TRAY else ROW_SOURCE.get(row[0], row[0]))]


def every_row(mode: Mode) -> list[tuple[str, str, str]]:
    rows = [("idle", f"{label}, {when}", peer)
            for label in ("wake-ups", "CPU") for when in ("empty queue", "job 1h ahead")
            for peer in IDLE_PEERS.values()]
    rows.append(("idle", "job 1h ahead vs empty", "sloth, empty"))
    rows.append(("idle", MEASURE_IDLE_STEPS, "sloth, empty"))
    rows += [("latency", latency_measure(idle), peer)
             for idle in mode.idles for peer in LATENCY_PEERS]
    rows += [("queue", cycle_measure(label), peer)
             for label in SLOTH_CYCLES.values() for peer in CYCLE_PEERS]
    rows.append(("queue", cycle_measure("engine loop"), "sloth, API"))
    rows += [("cli", MEASURE_CLI, peer) for peer in ("bare interpreter", "tsp -l")]
    rows.append(("cli", MEASURE_LOOKS, "bare interpreter"))
    rows += [("burst", burst_measure(mode.burst), peer)
             for peer in ("spawn floor", "durable floor", "huey", "tsp")]
    rows += [("burst", MEASURE_BURST_RSS, peer) for peer in IDLE_PEERS.values()]
    rows += [("scale", measure, "-") for done in mode.queue.sizes
             for measure in scale_measures(done)]
    rows += [("memory", MEASURE_RSS, peer) for peer in (*IDLE_PEERS.values(), MEMORY_FLOOR)]
    rows.append(("memory", MEASURE_TRAY, "-"))
    rows += [("steps", measure, peer) for measure, peer in STEP_ROWS]
    rows += [("lanes", measure, peer) for measure, peer in LANE_ROWS]
    rows += [("mcp", measure, "-") for measure in MCP_ROWS]
    return rows


def produced(row: Row) -> bool:
    """A row is produced when it holds its figures, or says why this machine cannot have
    them (a peer not installed, no display): never silently empty."""
    if row.skip:
        return True
    return row.sloth is not None and (row.peer == "-" or row.peer_value is not None)


def missing_rows(mode: Mode, rows: list[Row]) -> list[str]:
    """`section: measure vs peer` of each expected row not produced, in table order."""
    made = {(r.section, r.measure, r.peer) for r in rows if produced(r)}
    return [f"{section}: {measure}" + ("" if peer == "-" else f" vs {peer}")
            for section, measure, peer in expected_rows(mode)
            if (section, measure, peer) not in made]


def ratio_text(row: Row) -> str:
    if row.ratio is not None:
        return f"{row.ratio:.2f}"
    if row.sloth == 0 and row.peer_value:
        return "inf"  # sloth-tray at zero, the peer not
    return "-"


def render(rows: list[Row]) -> str:
    header = ["section", "measure", "unit", "sloth-tray", "spread", "peer", "peer value",
              "peer spread", "peer/sloth", "sloth ahead", "note"]
    cells = [[r.section, r.measure, r.unit, number(r.sloth, r.unit),
              spread_text(r.spread, r.unit), r.peer, number(r.peer_value, r.unit),
              spread_text(r.peer_spread, r.unit), ratio_text(r), r.ahead, r.note] for r in rows]
    widths = [max(len(row[i]) for row in [header, *cells]) for i in range(len(header))]
    right = {3, 6, 8}

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
    mode = results["mode"]
    versions = ", ".join(f"{k} {v}" for k, v in results["peers"].items()) or "none installed"
    smoke = " (tiny counts: it proves every row is produced; the figures mean nothing)"
    lines = [
        machine_line(results["machine"]),
        f"Peers: {versions}",
        f"Mode: {mode['name']}{smoke if mode['name'] == 'smoke' else ''}; "
        f"total {results['seconds']:.0f} s",
        "",
        render(rows),
        "",
        "Notes:",
    ]
    if "idle" in results:
        lines.append(
            f"- idle: median of {mode['sub_window']:g} s sub-windows over "
            f"{mode['idle_window']:g} s after a {mode['settle']:g} s settle; the job due in "
            f"1 h was still {results['idle']['sloth_job_1h']['status_after']['pending']} "
            "pending afterwards; the job with steps (a `sloth-tray step` and a "
            "sloth_step.step(), run before the window) ended "
            f"{results['idle']['sloth_after_steps']['job_after']['state']}")
    if "latency" in results:
        latency = results["latency"]
        lines += [
            f"- latency: median of {latency['repeats']} drops per idle length; sloth's and "
            f"tsp's include starting /bin/sh + date (spawn floor "
            f"{latency['spawn_floor_ms']:.1f} ms), huey's task is a function call in its "
            "worker thread; tsp's clock starts before its client process "
            "(`tsp /bin/sh script`), which queues the job and keeps it in memory; the "
            "durable floor (latency_floor.py) reads inotify itself, moves the script into "
            "a spool folder, commits its row at synchronous=FULL and starts it: what any "
            "queue that loses nothing in a crash must do before the start",
            huey_schedule_note(latency["huey_schedule"]),
        ]
    if "cycles" in results:
        lines += [f"- cycle, {name}: {what}" for name, what in results["cycles"]["what"].items()
                  if name in results["cycles"]["median"]]
    if "cli" in results:
        lines.append(cli_note(results["cli"]))
    if "burst" in results:
        lines += burst_notes(results["burst"])
    if "steps" in results:
        lines.append(steps_note(results["steps"]))
    if "lanes" in results:
        lines.append("- lanes: drops renamed into a lane's folder, each start the job's own "
                     "clock; one lane: an idle app with the jobs folder alone; second lane: "
                     "an app whose main lane runs a long job; each drop after 1 s at rest. "
                     "Idle: a 1-lane and a 3-lane app, each lane having run a job and "
                     "holding one due in an hour")
    lines += [f"- {note}" for note in results["notes"]]
    lines += [f"- {section}: FAILED, {why}" for section, why in results["failed"].items()]
    return "\n".join(lines)


def cli_note(cli: dict[str, Any]) -> str:
    tsp = " vs `tsp -l` on an empty private server" if "tsp" in cli["median_ms"] else ""
    return (f"- cli: whole-process wall time, median of {cli['runs']} interleaved runs each, "
            "output read through pipes: `sloth-tray status --json --home H`, installed from a "
            "wheel of this tree into a venv of its own (user_install.py), on a home its app "
            "runs on, after a job with steps and output, vs that venv's `python -c "
            f"\"import sqlite3, json\"`{tsp}; each ratio is the median of the rounds' own; "
            "every other read-only command, interleaved with them: "
            + ", ".join(f"`{name.removeprefix('look: ')}` {ms:.1f} ms"
                        for name, ms in cli["median_ms"].items() if name.startswith("look: ")))


def command_text(command: list[str]) -> str:
    """`sloth-tray`, or `python -m sloth_tray`: the command without its folder."""
    return " ".join([Path(command[0]).name, *command[1:]])


def steps_note(steps: dict[str, Any]) -> str:
    return (f"- steps: a run holding its job's lease with no daemon (the job claimed with a run "
            "token on a Queue of the bench's; the run's environment as the runner sets it); "
            "run 1 records the steps, run 2 (released and claimed again, as after a quit) "
            f"skips them. Whole processes, median of {steps['runs']} interleaved runs each: "
            f"`{command_text(steps['command'])} step NAME -- true` with "
            "NAME done in run 1 (skipped) and new (first time, `true` runs), `status --json` "
            "on the same home, `true` alone. In this process: sloth_step.step() over "
            f"{steps['calls']} new names, run 1 (first time) then run 2 (skipped: its "
            "function is never called), each call's median; the queue says every step was "
            "skipped or recorded as it should")


def burst_notes(burst: dict[str, Any]) -> list[str]:
    count, floor = burst["jobs"], burst["floor"]
    rounds = burst["rounds"]
    lines = [
        f"- burst: {count:,} scripts `#!/bin/sh` + `true`, run one at a time by everyone, "
        + ("every system once, in one round. " if rounds == 1 else
           f"every system once a round, {rounds} rounds (every other one in reverse order); "
           "each figure is a system's median round, each sloth/peer ratio the median of "
           "the rounds' own ratios. ")
        + "sloth: written straight into a running daemon's jobs folder, timed from the first "
        "write to the last job recorded done; floor: subprocess.run(['/bin/sh', script]) in "
        "a loop here, in a session of its own with output through pipes as sloth's runner "
        "starts a job"
        + ("" if "huey" not in burst else
           "; huey: one task per script, enqueued at once, its worker running the script the "
           "same way, timed to the last task's marker (its queue at synchronous="
           f"{burst['huey']['synchronous']}, the default: 0 off, 1 normal, 2 full)"),
    ]
    if "durable floor" in burst:
        durable = burst["durable floor"]
        lines.append(
            f"- burst, durable floor: the floor's loop, each script first moved into a "
            f"folder of its own (mkdir, link, unlink) and each outcome committed at "
            f"synchronous=FULL in WAL mode, one row: {durable['jobs_per_s']:,.0f} jobs/s, "
            f"{durable['cpu']['own_ms']:.2f} ms CPU a job in the loop; no queue that keeps "
            "its own copy of each script and each outcome durably does less")
    if "tsp" in burst:
        lines.append(f"- burst, tsp: `tsp /bin/sh script` for each (one client process per "
                     f"job; queueing them all took {burst['tsp']['enqueued_s']:.2f} s of "
                     f"{burst['tsp']['seconds']:.2f} s), one slot, timed to `tsp -w` on the last")
    stages = burst["sloth"]["stages"]
    sloth = burst["sloth"]

    def ms(key: str, digits: int = 1) -> str:
        value = stages[key]
        return "-" if value is None else f"{value:.{digits}f} ms"

    floor_cpu = floor["cpu"]
    lines.append(
        f"- burst, CPU per job: sloth's daemon {sloth['cpu']['own_ms']:.2f} ms (all its "
        f"threads; {sloth['cpu']['children_ms']:.2f} ms in the jobs' processes), the floor's "
        f"loop {floor_cpu['own_ms']:.2f} ms ({floor_cpu['children_ms']:.2f} ms in the "
        "scripts' processes)")
    lines.append(
        f"- burst, where sloth's {sloth['seconds']:.2f} s went (medians, from the jobs' "
        f"histories): claim -> started {ms('claim_to_started_ms')} (the batch's commit, the "
        f"spawn), started -> completed {ms('started_to_completed_ms')} (the note's commit; "
        f"the child runs and exits, its output is read), completed -> next claim "
        f"{ms('completed_to_next_claim_ms', 2)}, claim to next claim "
        f"{ms('claim_to_next_claim_ms')} (mean {ms('claim_to_next_claim_mean_ms')}; "
        f"{ms('claim_to_next_claim_while_pushing_ms')} while the inbox was still pushing, "
        f"{ms('claim_to_next_claim_after_pushing_ms')} after); "
        f"{stages['claimed_with_outcome']} of {count - 1} "
        f"claims made with the outcome before them; the inbox pushed its last script "
        f"{stages['inbox_last_push_s']:.2f} s after the first write (written in "
        f"{sloth['written_s']:.2f} s), the first claim came after "
        f"{stages['first_claim_s']:.3f} s")
    return lines


# -- the chart ------------------------------------------------------------------------

COLOURS = {"sloth-tray": (46, 125, 50), "sloth-tray, job 1h ahead": (129, 199, 132),
           "huey": (198, 40, 40), "tsp": (21, 101, 192), "spawn floor": (117, 117, 117),
           "durable floor": (158, 158, 158)}
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

    image = Image.new("RGB", (1000, 1510), "white")
    draw = ImageDraw.Draw(image)
    idle, latency = results["idle"], results["latency"]
    draw.text((30, 14), "sloth-tray vs peers: " + machine_line(results["machine"])[9:],
              fill="black", font=font(13))
    draw_panel(draw, (30, 50, 970, 380), "Idle wake-ups per minute (empty queue; lower is better)",
               idle_groups(idle, "wakeups_per_min"), "wake-ups / min")
    draw_panel(draw, (30, 410, 970, 740), "Idle CPU per minute (lower is better)",
               idle_groups(idle, "cpu_ms_per_min"), "CPU ms / min")
    groups = [(f"after {idle_s} s idle",
               [("sloth-tray", s["median_ms"]),
                *((peer, latency[peer][idle_s]["median_ms"]) for peer in LATENCY_PEERS
                  if peer in latency)])
              for idle_s, s in latency["sloth"].items()]
    draw_panel(draw, (30, 770, 970, 1120), f"Drop -> start latency, median of "
               f"{latency['repeats']} "
               "(lower is better)", groups, "ms")
    burst = results["burst"]
    bars = [("sloth-tray", burst["sloth"]["jobs_per_s"]),
            ("spawn floor", burst["floor"]["jobs_per_s"]),
            *((peer, burst[peer]["jobs_per_s"]) for peer in ("durable floor", "huey", "tsp")
              if peer in burst)]
    draw_panel(draw, (30, 1150, 970, 1490), f"Burst: {burst['jobs']:,} scripts at once, run "
               "one at a time (higher is better)", [(label, [(label, value)])
                                                      for label, value in bars], "jobs / s")
    image.save(path)


# -- main ---------------------------------------------------------------------------------


NOT_INSTALLED = {
    "huey": "huey not installed (sh tests/bench/setup.sh)",
    "persist-queue": "persist-queue not installed (sh tests/bench/setup.sh)",
    "litequeue": "litequeue not installed (sh tests/bench/setup.sh)",
    "tsp": "task-spooler not installed (sh tests/bench/setup.sh as root)",
}
NO_DISPLAY = "DISPLAY is unset"


def peer_versions(mode: Mode) -> dict[str, str]:
    """The installed peers' versions. A full or quick run needs every Python peer; a smoke
    run goes on without those missing, and their rows say so."""
    versions, missing = {}, []
    for package in PEER_PACKAGES:
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            missing.append(package)
    if missing and not mode.smoke:
        sys.exit(f"missing peers: {', '.join(missing)}; install the bench extra: "
                 "pip install -e '.[bench]'")
    return versions


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="30 s idle window, no 60 s idle drops, no 1M size, fewer rounds")
    size.add_argument("--smoke", action="store_true",
                      help="every section with tiny counts, quietly (CI: well under 90 s); "
                           "fails with one sentence unless every row of the table is "
                           "produced; peers not installed are skipped, and say so")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="where results.json and chart.png go (default tests/bench/results; "
                             "with --smoke, nowhere unless given)")
    parser.add_argument("--json", action="store_true",
                        help="print the results as JSON (the table among them), not the table")
    parser.add_argument("--only", metavar="SECTION[,SECTION]", type=sections_given,
                        default=(), help="run just these sections, at the size the mode says "
                        f"(full without --quick/--smoke): {', '.join(SECTIONS)}")
    parser.add_argument("--burst-rounds", type=int, default=None, metavar="N",
                        help="rounds of the burst section, each running every system's "
                             "burst once (sloth's on a fresh daemon); each figure is the "
                             "median round (default: the mode's, 3 in full, else 1)")
    parser.add_argument("--latency-repeats", type=int, default=None, metavar="N",
                        help="drops per idle length and system in the latency section "
                             "(and 2N+1 each way in the lanes section); the figure is the "
                             "median (default: the mode's, 3 in full)")
    args = parser.parse_args(argv)
    if args.burst_rounds is not None and args.burst_rounds < 1:
        parser.error("--burst-rounds takes a whole number of at least 1")
    if args.latency_repeats is not None and args.latency_repeats < 1:
        parser.error("--latency-repeats takes a whole number of at least 1")
    if args.out is None and not args.smoke:
        args.out = BENCH_DIR / "results"
    return args


SECTIONS = ("idle", "latency", "cycles", "cli", "burst", "scale", "tray", "steps", "lanes",
            "mcp")


def sections_given(text: str) -> tuple[str, ...]:
    """--only's value: known section names, comma-separated, each once, in SECTIONS order."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in SECTIONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{', '.join(unknown) or 'nothing'} is not a section; the sections are "
            f"{', '.join(SECTIONS)}")
    return tuple(name for name in SECTIONS if name in names)


def run_all(mode: Mode, root: Path, reaper: Reaper, results: dict[str, Any]) -> None:
    """Every section in turn; one that fails leaves its rows out, says why in
    results["failed"], and the next one runs."""
    notes: list[str] = results["notes"]
    absent: dict[str, str] = results["absent"]
    tsp = results["tsp_binary"] = tsp_binary()
    if tsp is None:
        absent["tsp"] = NOT_INSTALLED["tsp"]
        notes.append("tsp: task-spooler is not installed (sh tests/bench/setup.sh, or "
                     "apt-get install task-spooler): left out of idle, latency, cli and burst")
    peers = {name for name in PEER_PACKAGES if name in results["peers"]}
    absent.update({name: NOT_INSTALLED[name] for name in PEER_PACKAGES if name not in peers})
    sections = {
        "idle": lambda: measure_idle(mode, root, reaper, tsp, peers),
        "latency": lambda: measure_latency(mode, root, reaper, tsp, peers),
        "cycles": lambda: measure_cycles(mode, root, peers),
        "cli": lambda: measure_cli(mode, root, reaper, tsp),
        "burst": lambda: measure_burst(mode, root, reaper, tsp, peers),
        "scale": lambda: measure_scale(mode, root),
        "tray": lambda: measure_tray(mode, root, reaper, notes),
        "steps": lambda: measure_steps(mode, root),
        "lanes": lambda: measure_lanes(mode, root, reaper),
        "mcp": lambda: measure_mcp(mode, root, reaper),
    }
    for name, measure in sections.items():
        if not mode.runs(name):
            continue
        try:
            results[name] = measure()
        except Exception as exc:  # the section's rows go missing, and the run says why
            results["failed"][name] = f"{type(exc).__name__}: {exc}"
            log(f"{name}: failed: {exc}")
    if "tray" in results and results["tray"] is None:
        results["tray_skipped"] = (NO_DISPLAY if not os.environ.get("DISPLAY")
                                   else "the app could not show an icon and ran headless")


def on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # so `finally` stops the children and removes temp dirs


def byte_compile_sloth() -> None:
    """An editable install (this tree) has no bytecode until something writes it, and
    PYTHONDONTWRITEBYTECODE stops Python from doing so: every start would compile
    sloth_tray again, costing time and memory that an installed copy (pip compiles
    at install time) never pays, and the peers, installed, do not either."""
    import compileall

    import sloth_tray

    compileall.compile_dir(Path(sloth_tray.__file__).parent, quiet=1)


def incomplete(mode: Mode, rows: list[Row], failed: dict[str, str]) -> str | None:
    """One sentence saying which rows the run did not produce and why, or None."""
    missing = missing_rows(mode, rows)
    if not missing:
        return None
    why = "; ".join(f"the {name} section failed ({reason})" for name, reason in failed.items())
    some = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    only = f" --only {','.join(mode.only)}" if mode.only else ""
    return (f"compare.py --{mode.name}{only}: {len(missing)} of {len(expected_rows(mode))} rows "
            f"were not produced ({some})" + (f": {why}." if why else "."))


def charted(results: dict[str, Any]) -> bool:
    """The chart is drawn from idle, latency and burst: when all three ran, and none failed."""
    return not results["failed"] and all(k in results for k in ("idle", "latency", "burst"))


def measure(mode: Mode, results: dict[str, Any], out: Path | None) -> list[Row]:
    """Run every section, then write results.json and the chart into `out` (into the run's
    temp dir when None, so a smoke run draws them too, and leaves nothing behind)."""
    byte_compile_sloth()
    root = Path(tempfile.mkdtemp(prefix="sloth-compare-"))
    results["machine"] = queue_bench.machine(str(root))
    reaper = Reaper()
    started = time.monotonic()
    try:
        run_all(mode, root, reaper, results)
        results["seconds"] = time.monotonic() - started
        rows = table_rows(results)
        results["table"] = [row.as_dict() for row in rows]
        results["missing_rows"] = missing_rows(mode, rows)
        target = out or root / "results"
        target.mkdir(parents=True, exist_ok=True)
        (target / "results.json").write_text(json.dumps(results, indent=2) + "\n")
        if charted(results):
            draw_chart(results, target / "chart.png")
    finally:
        reaper.stop_all(root)
        shutil.rmtree(root, ignore_errors=True)
    return rows


def in_bytecode() -> None:
    """sloth-tray's modules compiled before anything is timed, as an installed package
    has them (pip compiles what it installs; an editable checkout is compiled by its
    first run). Where PYTHONDONTWRITEBYTECODE is set, every command timed would
    otherwise compile each module it loads, and the peers' installed code would not."""
    import compileall

    import sloth_tray

    compileall.compile_dir(Path(sloth_tray.__file__).parent, quiet=2)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not sys.platform.startswith("linux"):
        sys.exit("compare.py reads /proc: Linux only")
    mode = replace(mode_for("smoke" if args.smoke else "quick" if args.quick else "full"),
                   only=args.only)
    if args.burst_rounds is not None:
        mode = replace(mode, burst_rounds=args.burst_rounds)
    if args.latency_repeats is not None:
        mode = replace(mode, repeats=args.latency_repeats)
    results: dict[str, Any] = {"peers": peer_versions(mode), "notes": [], "absent": {},
                               "failed": {}, "mode": {**asdict(mode), "queue": asdict(mode.queue)}}
    signal.signal(signal.SIGTERM, on_sigterm)
    in_bytecode()
    if mode.smoke:  # quiet: progress is not wanted; a failure says it in one sentence
        try:
            with redirect_stderr(io.StringIO()):
                rows = measure(mode, results, args.out)
                text = json.dumps(results, indent=2) if args.json else report(results, rows)
        except Exception as exc:  # outside any section: the table, the chart, the files
            sys.exit(f"compare.py --smoke: {type(exc).__name__}: {exc}")
    else:
        rows = measure(mode, results, args.out)
        text = json.dumps(results, indent=2) if args.json else report(results, rows)
    print(text)
    if args.out is not None and not args.json:
        chart = f"\nChart: {args.out / 'chart.png'}" if charted(results) else ""
        print(f"\nJSON: {args.out / 'results.json'}{chart}")
    problem = incomplete(mode, rows, results["failed"])
    if problem:
        sys.exit(problem)


if __name__ == "__main__":
    main()
