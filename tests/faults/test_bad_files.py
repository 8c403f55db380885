"""Fault 4: a matrix of bad job files, all dropped into the jobs folder of one
running daemon (log cap lowered to 1 MiB by a config file, to keep CI fast).

Invariant: each ends as a failed job with a clear sentence, or done (its log
capped); the daemon stays up and runs a normal job afterwards. The drops run
once (module fixture); each test below checks one of them.
"""

from __future__ import annotations

import os
import random
import signal
import sys

import pytest
from faultkit import jobs_with_history, log_text, new_tag, reap, start_daemon, sweep, unfinished
from helpers.processes import Pids, alive, wait_for

from sloth_tray.paths import locate
from sloth_tray.store.queue import State

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")

CAP = 1024 * 1024  # log_cap = "1MiB" in the config file
GIB = 1024 * 1024 * 1024
HUGE = 50 * 1024 * 1024
NOT_RUNNABLE = "add a #! line or name it .py or .sh"


def files(root) -> dict[str, tuple[bytes, bytes | None]]:
    """{case: (file name as bytes, content)}."""
    rng = random.Random(4)
    return {
        "empty file": (b"empty.sh", b""),
        "binary garbage": (b"garbage.bin", b"\x00\x7fELF" + rng.randbytes(4096)),
        "no #! and an unknown extension": (b"notes.txt", b"echo hi\n"),
        "an unknown extension, a valid script": (b"valid.xyz", b"#!/bin/sh\necho valid ran\n"),
        "a 50 MB script": (b"huge.sh", None),  # written apart: see drop()
        "a non-UTF-8 file name": (b"caf\xe9.sh", b"echo latin-1 name ran\n"),
        "a missing interpreter": (b"interp.py", b"#!/nonexistent/python\nprint(1)\n"),
        "an endless loop with timeout=1": (
            b"spin.sh", b"# sloth: timeout=1 max_attempts=1\nwhile :; do :; done\n"),
        "a fork that outlives its parent": (
            b"fork.sh", f"sleep 300 &\necho $! > {root}/stray\necho parent done\n".encode()),
        # 512 Mi lines of "y": each chunk the daemon reads holds 32 Ki of them.
        "1 GiB of output": (b"yes.sh", f"yes | head -c {GIB}\necho the end\n".encode()),
    }


def drop(home, staging, name: bytes, content: bytes | None) -> None:
    """Write the file aside, then rename it in: taken whole, at once."""
    path = os.path.join(bytes(staging), name)
    with open(path, "wb") as file:
        if content is None:  # 50 MB of comments, then one command
            comment = b"# " + b"c" * 1021 + b"\n"
            for _ in range(HUGE // len(comment)):
                file.write(comment)
            file.write(b"echo huge done\n")
        else:
            file.write(content)
    os.rename(path, os.path.join(bytes(home.jobs), name))


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-files")
    home = locate(root / "home").ensure()
    staging = root / "staging"
    staging.mkdir()
    config = root / "config.toml"
    config.write_text('log_cap = "1MiB"\n')
    tag = new_tag()
    pids = Pids()
    cases = files(root)
    try:
        daemon = start_daemon(pids, home, tag, root / "daemon.log", "--config", str(config))
        for name, content in cases.values():
            drop(home, staging, name, content)
        wait_for(lambda: len(jobs_with_history(home.db)) == len(cases)
                 and unfinished(home.db) == 0, timeout=60, what="every bad file to end")
        # (60 s: 1 GiB of `yes` takes ~3 s here; reading it a line at a time in Python,
        # as the runner once did, took 6 minutes, and this deadline says so.)
        assert daemon.poll() is None, log_text(root / "daemon.log")[-3000:]
        peak_kib = int(next(line.split()[1] for line in
                            open(f"/proc/{daemon.pid}/status") if line.startswith("VmHWM")))
        drop(home, staging, b"final.sh", b"echo still here\n")
        wait_for(lambda: any(job.name == "final" and job.state == State.DONE
                             for job, _ in jobs_with_history(home.db).values()),
                 what="the final job to run")
        jobs = {job.name: (job, kinds) for job, kinds in jobs_with_history(home.db).values()}
        stray = int((root / "stray").read_text())
        daemon.send_signal(signal.SIGTERM)
        yield {"home": home, "jobs": jobs, "cases": cases, "stray": stray,
               "peak_kib": peak_kib, "exit": reap(pids, daemon),
               "out": log_text(root / "daemon.log")}
    finally:
        sweep(tag)
        pids.cleanup()


def job(matrix, case: str):
    name = os.fsdecode(matrix["cases"][case][0])
    name = os.fsencode(name).decode("utf-8", "replace")  # as the spool names it
    job, kinds = matrix["jobs"][name.rsplit(".", 1)[0]]
    assert kinds.count("claimed") <= 1 and "reclaimed" not in kinds, kinds
    return job


FAILED = {
    "empty file": "empty.sh is empty: there is nothing to run (write the script elsewhere, "
                  "then move it into the jobs folder)",
    "binary garbage": f"don't know how to run garbage.bin: {NOT_RUNNABLE}",
    "no #! and an unknown extension": f"don't know how to run notes.txt: {NOT_RUNNABLE}",
    "a missing interpreter":
        "cannot start the job: /nonexistent/python was not found (is it installed?)",
    "an endless loop with timeout=1": "timed out after 1s",
}
DONE = {
    "an unknown extension, a valid script": "valid ran",
    "a 50 MB script": "huge done",
    "a non-UTF-8 file name": "latin-1 name ran",
    "a fork that outlives its parent": "parent done",
    "1 GiB of output": "the end",
}


@pytest.mark.parametrize("case", sorted(FAILED))
def test_an_unrunnable_file_fails_for_good_with_its_sentence(matrix, case):
    failed = job(matrix, case)
    assert failed.state == State.FAILED
    assert failed.last_error == FAILED[case]


@pytest.mark.parametrize("case", sorted(DONE))
def test_a_runnable_oddity_is_done(matrix, case):
    done = job(matrix, case)
    assert (done.state, done.result) == (State.DONE, DONE[case])


def test_the_non_utf8_name_is_kept_readable(matrix):
    assert job(matrix, "a non-UTF-8 file name").name == "caf\ufffd"


def test_the_fork_left_behind_is_stopped(matrix):
    wait_for(lambda: not alive(matrix["stray"]), timeout=5, what="the stray sleep to die")


def test_1_gib_of_output_is_capped_with_the_dropped_bytes_marker(matrix):
    noisy = job(matrix, "1 GiB of output")
    log = matrix["home"].job_logs(noisy.id) / "1.log"
    total = GIB + len(b"the end\n")
    marker = f"\n[sloth-tray: output past {CAP} bytes was dropped: {total - CAP} bytes]\n"
    assert log.stat().st_size == CAP + len(marker)
    with open(log, "rb") as file:
        file.seek(-len(marker), os.SEEK_END)
        assert file.read() == marker.encode()
    assert matrix["peak_kib"] < 200 * 1024, f"the daemon peaked at {matrix['peak_kib']} KiB"


def test_a_non_utf8_name_is_logged_without_a_logging_error(matrix):
    assert "Logging error" not in matrix["out"]
    assert "queued caf" in log_text(matrix["home"].logs / "sloth-tray.log")


def test_the_daemon_stays_up_and_runs_a_final_job(matrix):
    final, kinds = matrix["jobs"]["final"]
    assert (final.state, final.result) == (State.DONE, "still here")
    assert matrix["exit"] == 0
    assert "Traceback" not in matrix["out"]
    failed = sum(job(matrix, case).state == State.FAILED for case in matrix["cases"])
    print(f"\nbad job files: {len(matrix['cases'])} drops, {failed} failed with their "
          f"sentence, {len(matrix['cases']) - failed} done (1 GiB of output capped at "
          f"{CAP // 1024} KiB, daemon peak {matrix['peak_kib'] // 1024} MiB), "
          "daemon up, final job done")
