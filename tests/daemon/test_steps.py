"""Durable steps end to end: real jobs calling `sloth-tray step` and `sloth_step.step`
under a real runner (`sloth-tray work --once`, or a `sloth-tray run --headless`
daemon), retried, refused and shown through the real command line.

The side effects a step has are lines appended to files: counting them says how
often each step really ran. Every process is known by pid (the `pids` fixture) or,
for a job's own processes, by a tag in its environment, and killed in `finally`.
The crash, freeze and quit cases are in tests/faults/test_steps_faults.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.processes import wait_for
from helpers.tagged import TAG_ENV

from sloth_tray.paths import locate

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")

CLI = [sys.executable, "-m", "sloth_tray"]
SLOTH = str(Path(sys.executable).with_name("sloth-tray"))  # the command pip made
OUTPUT_CAP = 1024 * 1024  # sloth_step.OUTPUT_CAP, as the interface promises it
RUN_ENV = ("SLOTH_RUN_TOKEN", "SLOTH_LEASE_OWNER", "SLOTH_QUEUE", "SLOTH_JOB_ID")


# -- helpers ------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path):
    return locate(tmp_path / "home").ensure()


def environment(tag: str | None = None, **changes: str) -> dict[str, str]:
    """Ours without any run's variables (the test may itself run inside a job), tagged."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLOTH_") or k == "SLOTH_TRAY_CONFIG"}
    if tag:
        env[TAG_ENV] = tag
    return env | changes


def with_step_module(env: dict[str, str]) -> dict[str, str]:
    """`env` with sloth_step's folder at the end of PYTHONPATH, as a job's has it."""
    from sloth_tray.daemon.jobenv import step_module_folder

    return env | {"PYTHONPATH": os.pathsep.join(
        filter(None, [env.get("PYTHONPATH"), step_module_folder()]))}


def sloth(home, *argv: str, tag: str | None = None, check: bool = True,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*CLI, *argv, "--home", str(home.root)], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL,
                          env=env or environment(tag))
    if check:
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return done


def step_call(*argv: str, env: dict[str, str], **kwargs) -> subprocess.CompletedProcess:
    """`sloth-tray step ...` as a job's shell runs it (no --home: the run names its queue)."""
    if "input" not in kwargs:
        kwargs["stdin"] = subprocess.DEVNULL
    return subprocess.run([SLOTH, "step", *argv], capture_output=True, timeout=60, env=env,
                          **kwargs)


def add(home, name: str, text: str, *extra: str, tag: str | None = None) -> str:
    path = home.root.parent / name
    path.write_text(text)
    return sloth(home, "add", str(path), *extra, tag=tag).stdout.strip()


def work(home, tag: str | None = None) -> str:
    """`sloth-tray work --once`: every job due now runs; its lines."""
    return sloth(home, "work", "--once", tag=tag).stdout


def show(home, job_id: str) -> dict:
    return json.loads(sloth(home, "show", job_id, "--json").stdout)


def steps(home, job_id: str) -> list[dict]:
    return show(home, job_id)["steps"]


def states(home, job_id: str) -> list[tuple[str, int, str, int]]:
    """(name, occurrence, state, run) of each step, in the order they first started."""
    return [(s["name"], s["occurrence"], s["state"], s["run"]) for s in steps(home, job_id)]


def run_log(home, job_id: str, run: int) -> str:
    return (home.job_logs(job_id) / f"{run}.log").read_text(errors="replace")


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def start_daemon(pids, home, log: Path, *extra: str, env: dict[str, str]) -> subprocess.Popen:
    """A real `sloth-tray run --headless`, its output in `log`, once it says it runs."""
    with open(log, "wb") as out:
        daemon = pids.popen([*CLI, "run", "--headless", "--home", str(home.root), *extra],
                            stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env)
    wait_for(lambda: "running headless" in log.read_text(errors="replace")
             or daemon.poll() is not None, timeout=20, what="the daemon to start")
    assert daemon.poll() is None, log.read_text(errors="replace")
    return daemon


def quit_daemon(daemon: subprocess.Popen, log: Path) -> None:
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(timeout=20) == 0, log.read_text(errors="replace")
    assert "Traceback" not in log.read_text(errors="replace")


def step_rows(home, job_id: str) -> int:
    with sqlite3.connect(home.db) as db:
        return db.execute("SELECT count(*) FROM steps WHERE job = ?", (job_id,)).fetchone()[0]


# -- a retry skips what happened ------------------------------------------------------


@pytest.mark.slow
def test_an_automatic_retry_skips_done_steps_and_writes_their_output_again(home, tmp_path,
                                                                           pids, tag):
    effects, flag = tmp_path / "effects", tmp_path / "flag"
    job_id = add(home, "upload.sh", f"""#!/bin/sh
# sloth: max_attempts=2
got=$(sloth-tray step fetch -- sh -c 'echo fetched >> {effects}; echo "payload-$$"') || exit 9
echo "got $got"
sloth-tray step upload -- sh -c 'echo upload >> {effects}; test -e {flag}' || {{
    touch {flag}; echo "upload failed" >&2; exit 1; }}
echo "finished $got"
""", tag=tag)
    log = tmp_path / "daemon.log"
    daemon = start_daemon(pids, home, log, env=environment(tag))
    wait_for(lambda: show(home, job_id)["state"] == "done", timeout=20,
             what="the job to fail once, back off and succeed")
    quit_daemon(daemon, log)

    job = show(home, job_id)
    assert job["attempts"] == 2 and job["runs"] == 2
    assert lines(effects) == ["fetched", "upload", "upload"]  # fetch ran once
    first, second = run_log(home, job_id, 1), run_log(home, job_id, 2)
    payload = next(line for line in first.splitlines() if line.startswith("got ")).split()[1]
    assert payload.startswith("payload-") and "upload failed" in first
    # The second run skipped fetch, said so, and got its recorded output again.
    assert re.search(r"^sloth-tray: step fetch skipped \(done \d{4}-\d\d-\d\d "
                     r"\d\d:\d\d:\d\d, run 1\)$", second, re.MULTILINE), second
    assert f"got {payload}" in second
    assert job["result"] == f"finished {payload}"
    assert states(home, job_id) == [("fetch", 1, "done", 1), ("upload", 1, "done", 2)]
    upload = steps(home, job_id)[1]
    assert upload["exit_code"] == 0 and upload["ended_at"] >= upload["started_at"]


def test_the_same_name_twice_is_two_occurrences_both_skipped_and_keys_hold(home, tmp_path):
    keys, flag = tmp_path / "keys", tmp_path / "flag"
    job_id = add(home, "twice.sh", f"""#!/bin/sh
# sloth: max_attempts=1
for n in 1 2; do
    sloth-tray step page -- sh -c 'echo "page $SLOTH_STEP_KEY" >> {keys}; echo page-out' || exit 9
done
sloth-tray step last -- sh -c 'echo "last $SLOTH_STEP_KEY" >> {keys}; test -e {flag}' || {{
    touch {flag}; exit 1; }}
echo "outside ${{SLOTH_STEP_KEY:-none}}"
""")
    assert "fail" in work(home)
    assert states(home, job_id) == [("page", 1, "done", 1), ("page", 2, "done", 1),
                                    ("last", 1, "failed", 1)]
    sloth(home, "retry", job_id)
    assert work(home).startswith("ok")

    recorded = [line.split() for line in lines(keys)]
    assert [name for name, _ in recorded] == ["page", "page", "last", "last"]
    page1, page2, last1, last2 = (key for _, key in recorded)
    assert last1 == last2, "a step's key is the same on every run"
    assert len({page1, page2, last1}) == 3, "each step (and occurrence) has a key of its own"
    assert all(len(key) == 32 and key.isalnum() for key in (page1, page2, last1))
    log = run_log(home, job_id, 2)
    assert log.count("sloth-tray: step page skipped (done ") == 2
    assert log.count("page-out") == 2  # both occurrences' output written again
    assert "outside none" in log  # the key is the step's own, never the script's
    assert states(home, job_id) == [("page", 1, "done", 1), ("page", 2, "done", 1),
                                    ("last", 1, "done", 2)]


def test_two_steps_at_once_from_one_job_are_both_recorded(home, tmp_path):
    effects, flag = tmp_path / "effects", tmp_path / "flag"
    job_id = add(home, "fanout.sh", f"""#!/bin/sh
# sloth: max_attempts=1
sloth-tray step left -- sh -c 'sleep 0.3; echo left >> {effects}; echo L' > {tmp_path}/l &
sloth-tray step right -- sh -c 'sleep 0.3; echo right >> {effects}; echo R' > {tmp_path}/r &
sloth-tray step same -- sh -c 'sleep 0.3; echo same >> {effects}' &
sloth-tray step same -- sh -c 'sleep 0.3; echo same >> {effects}' &
wait
test -e {flag} || {{ touch {flag}; exit 1; }}
""")
    work(home)
    assert sorted(lines(effects)) == ["left", "right", "same", "same"]
    assert sorted(states(home, job_id)) == [("left", 1, "done", 1), ("right", 1, "done", 1),
                                            ("same", 1, "done", 1), ("same", 2, "done", 1)]
    sloth(home, "retry", job_id)
    assert work(home).startswith("ok")
    assert sorted(lines(effects)) == ["left", "right", "same", "same"]  # none ran again
    assert (tmp_path / "l").read_text() == "L\n" and (tmp_path / "r").read_text() == "R\n"
    assert run_log(home, job_id, 2).count(" skipped (done ") == 4


def test_each_run_of_a_recurring_job_runs_its_steps_afresh(home, tmp_path, pids, tag):
    effects = tmp_path / "effects"
    add(home, "tick.sh", f"""#!/bin/sh
# sloth: every=1s
sloth-tray step tick -- sh -c 'echo "$SLOTH_JOB_ID $SLOTH_STEP_KEY" >> {effects}'
""", tag=tag)
    log = tmp_path / "daemon.log"
    daemon = start_daemon(pids, home, log, env=environment(tag))
    wait_for(lambda: len(lines(effects)) >= 2, what="two runs of the series")
    (first, first_key), (second, second_key) = (line.split() for line in lines(effects)[:2])
    wait_for(lambda: show(home, second)["state"] == "done", what="the second run to end")
    quit_daemon(daemon, log)
    assert first != second and first_key != second_key  # two jobs: nothing carried over
    for job_id in (first, second):
        assert states(home, job_id) == [("tick", 1, "done", 1)]


# -- what shows the steps, and what forgets them ------------------------------------------


def test_show_lists_the_steps_and_prints_a_steps_recorded_output(home, tmp_path):
    job_id = add(home, "report.sh", """#!/bin/sh
# sloth: max_attempts=1
sloth-tray step header -- printf 'a\\000b\\nno newline at the end'
sloth-tray step rows -- echo one
sloth-tray step rows -- echo two
sloth-tray step broken -- sh -c 'echo half; exit 4'
exit 0
""")
    work(home)
    listed = steps(home, job_id)
    assert [(s["name"], s["occurrence"], s["state"], s["exit_code"], s["output_size"])
            for s in listed] == [("header", 1, "done", 0, 25), ("rows", 1, "done", 0, 4),
                                 ("rows", 2, "done", 0, 4), ("broken", 1, "failed", 4, 5)]
    assert all({"run", "started_at", "ended_at"} <= set(s) and s["run"] == 1 for s in listed)
    text = sloth(home, "show", job_id).stdout
    assert "\nsteps\n" in text
    assert "header" in text and "rows #2" in text and "failed (exit 4)" in text

    header = subprocess.run([*CLI, "show", job_id, "--step", "header", "--home",
                             str(home.root)], capture_output=True, timeout=60,
                            env=environment())
    assert header.returncode == 0 and header.stdout == b"a\x00b\nno newline at the end"
    assert sloth(home, "show", job_id, "--step", "rows").stdout == "two\n"  # the last
    assert sloth(home, "show", job_id, "--step", "rows", "--occurrence", "1").stdout == "one\n"
    broken = sloth(home, "show", job_id, "--step", "broken", check=False)
    assert broken.returncode == 1 and broken.stdout == ""
    assert broken.stderr.count("\n") == 1 and "failed" in broken.stderr
    unknown = sloth(home, "show", job_id, "--step", "nope", check=False)
    assert unknown.returncode == 1 and unknown.stderr.count("\n") == 1
    assert '"nope"' in unknown.stderr and '"header"' in unknown.stderr


@pytest.mark.slow
def test_retry_from_and_fresh_forget_steps_of_done_and_cancelled_jobs(home, tmp_path):
    effects = tmp_path / "effects"
    script = "#!/bin/sh\n# sloth: max_attempts=1\n" + "".join(
        f"sloth-tray step {name} -- sh -c 'echo {name} >> {effects}' || exit 9\n"
        for name in ("a", "b", "c"))
    done_id = add(home, "abc.sh", script)
    work(home)
    assert lines(effects) == ["a", "b", "c"]

    sloth(home, "retry", done_id)  # a done job retried: every step is skipped
    work(home)
    assert lines(effects) == ["a", "b", "c"]
    sloth(home, "retry", done_id, "--from", "b")
    assert [s["name"] for s in steps(home, done_id)] == ["a"]
    work(home)
    assert lines(effects) == ["a", "b", "c", "b", "c"]
    sloth(home, "retry", done_id, "--fresh")
    assert steps(home, done_id) == []
    work(home)
    assert lines(effects) == ["a", "b", "c", "b", "c", "a", "b", "c"]
    assert show(home, done_id)["state"] == "done"
    unknown = sloth(home, "retry", done_id, "--from", "zzz", check=False)
    assert unknown.returncode == 1 and unknown.stderr.count("\n") == 1
    assert '"zzz"' in unknown.stderr
    assert show(home, done_id)["state"] == "done"  # nothing changed
    both = sloth(home, "retry", done_id, "--from", "a", "--fresh", check=False)
    assert both.returncode == 2 and both.stderr.count("\n") == 1

    effects.unlink()
    cancelled_id = add(home, "abc2.sh", script + "exit 1\n")
    work(home)
    assert show(home, cancelled_id)["state"] == "failed"
    sloth(home, "cancel", cancelled_id)
    sloth(home, "retry", cancelled_id, "--from", "c")
    assert [s["name"] for s in steps(home, cancelled_id)] == ["a", "b"]
    work(home)
    assert lines(effects) == ["a", "b", "c", "c"]
    sloth(home, "cancel", cancelled_id, check=False)  # failed again (exit 1): cancel it
    assert show(home, cancelled_id)["state"] == "cancelled"
    sloth(home, "retry", cancelled_id, "--fresh")
    work(home)
    assert lines(effects) == ["a", "b", "c", "c", "a", "b", "c"]


def test_step_done_naming_no_cut_step_is_refused_naming_the_step_that_asks(home, tmp_path):
    """`--step-done` is a person's word about a step cut short: naming a done step (or
    none the job has) must not count as the word that lets the asking step run again."""
    effects, flag = tmp_path / "effects", tmp_path / "flag"
    job_id = add(home, "pay.sh", f"""#!/bin/sh
# sloth: max_attempts=1 timeout=4
sloth-tray step prepare -- sh -c 'echo prepare >> {effects}' || exit 9
sloth-tray step charge --ask -- sh -c 'echo charge >> {effects}
    test -e {flag} || exec sleep 60' || exit 9
sloth-tray step after -- sh -c 'echo after >> {effects}' || exit 9
""")
    work(home)  # the timeout cuts charge short: the job asks
    job = show(home, job_id)
    assert (job["state"], job["reason"]) == ("failed", "step_unsure")
    assert lines(effects) == ["prepare", "charge"]
    before = (states(home, job_id), [e["kind"] for e in show(home, job_id)["history"]])

    for name in ("prepare", "nope"):
        refused = sloth(home, "retry", job_id, "--step-done", name, check=False)
        assert refused.returncode == 2, (name, refused)
        assert refused.stdout == "" and refused.stderr.count("\n") == 1, (name, refused)
        assert f'"{name}"' in refused.stderr and '"charge"' in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
        assert (states(home, job_id), [e["kind"] for e in show(home, job_id)["history"]]) \
            == before, f"--step-done {name} changed the job"
        assert show(home, job_id)["state"] == "failed"
        work(home)
        assert lines(effects) == ["prepare", "charge"], "charge ran without a person's word"

    sloth(home, "retry", job_id, "--step-done", "charge")  # the word that it happened
    assert work(home).startswith("ok")
    assert lines(effects) == ["prepare", "charge", "after"]

    # A job with no step cut short: nothing to mark, and it says so.
    refused = sloth(home, "retry", job_id, "--step-done", "prepare", check=False)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused
    assert "cut short" in refused.stderr
    assert show(home, job_id)["state"] == "done"


def test_prune_removes_a_jobs_steps_with_it(home, tmp_path):
    kept_id = add(home, "kept.sh", "#!/bin/sh\n# sloth: max_attempts=1\n"
                  "sloth-tray step s -- true\nexit 1\n")
    gone_id = add(home, "gone.sh", "#!/bin/sh\nsloth-tray step s -- true\n"
                  "sloth-tray step t -- true\n")
    work(home)
    assert (step_rows(home, kept_id), step_rows(home, gone_id)) == (1, 2)
    assert "removed 1 finished job" in sloth(home, "prune", "--older-than", "0s").stdout
    assert (step_rows(home, kept_id), step_rows(home, gone_id)) == (1, 0)


# -- refusals and edge cases ------------------------------------------------------------


def test_a_call_from_a_run_that_is_over_runs_nothing_and_records_nothing(home, tmp_path,
                                                                        pids, tag):
    first_env, go, marker = tmp_path / "first-env", tmp_path / "go", tmp_path / "marker"
    saved = " ".join(f'"${name}"' for name in RUN_ENV)
    job_id = add(home, "twice.sh", f"""#!/bin/sh
# sloth: max_attempts=1
if [ ! -e {first_env} ]; then
    sloth-tray step early -- true
    printf '%s\\n' {saved} > {first_env}
    exit 1
fi
while [ ! -e {go} ]; do sleep 0.05; done
""", tag=tag)
    work(home, tag)
    assert show(home, job_id)["state"] == "failed"
    run1 = dict(zip(RUN_ENV, lines(first_env), strict=True))
    stale = with_step_module(environment(tag, **run1))

    def refused_everywhere(now: str) -> None:
        done = step_call("late", "--", "touch", str(marker), env=stale)
        assert done.returncode == 125, (now, done)
        assert done.stdout == b"" and done.stderr.count(b"\n") == 1, (now, done)
        assert b"is over" in done.stderr and b'"late"' in done.stderr, (now, done)
        python = subprocess.run(
            [sys.executable, "-c", "from sloth_step import step, StepRefused\n"
             f"try: step('late', open, {str(marker)!r}, 'w')\n"
             "except StepRefused as exc: print('refused:', exc)\n"],
            capture_output=True, text=True, timeout=60, env=stale)
        assert python.returncode == 0 and python.stdout.startswith("refused: "), (now, python)
        assert not marker.exists(), f"a stale run's step ran ({now})"
        assert [s["name"] for s in steps(home, job_id)] == ["early"], now

    refused_everywhere("with its job failed")
    sloth(home, "retry", job_id)
    log = tmp_path / "daemon.log"
    daemon = start_daemon(pids, home, log, env=environment(tag))
    try:
        wait_for(lambda: show(home, job_id)["runs"] == 2 and show(home, job_id)["child"]
                 and "pid" in show(home, job_id)["child"], what="the second run to start")
        refused_everywhere("while a later run holds the job")
        go.touch()
        wait_for(lambda: show(home, job_id)["state"] == "done", what="the second run to end")
    finally:
        go.touch()
    quit_daemon(daemon, log)
    assert step_rows(home, job_id) == 1


def test_outside_a_job_the_helpers_just_run(tmp_path):
    env = environment()
    for closed in (">&-", "2>&-"):  # a closed stream is the command's business
        done = subprocess.run(["sh", "-c", f'"$@" {closed}', "sh", SLOTH, "step", "x", "--",
                               "sh", "-c", "exit 5"], capture_output=True, timeout=60, env=env)
        assert (done.returncode, done.stdout, done.stderr) == (5, b"", b""), closed
    done = step_call("x", "--", "sh", "-c", "echo out; echo err >&2; exit 7", env=env)
    assert (done.returncode, done.stdout, done.stderr) == (7, b"out\n", b"err\n")
    done = step_call("x", "--ask", "--", "cat", env=env, input=b"piped in")
    assert (done.returncode, done.stdout) == (0, b"piped in")
    missing = step_call("x", "--", "no-such-command-here", env=env)
    assert missing.returncode == 127 and missing.stderr.count(b"\n") == 1
    python = subprocess.run(
        ["/usr/bin/python3", "-c", "from sloth_step import step\n"
         "print(step('x', lambda a, b=0: a + b, 2, b=3))\n"
         "step('y', lambda: 1 / 0)\n"],
        capture_output=True, text=True, timeout=60, env=with_step_module(env))
    assert python.stdout == "5\n" and "ZeroDivisionError" in python.stderr
    assert not (tmp_path / "queue.db").exists()


@pytest.mark.parametrize("name", ["", "   ", "x" * 201, "tab\there", "new\nline", "esc\x1b[31m",
                                  "del\x7f", "c1\x85", "sep\u2028", os.fsdecode(b"not\xffutf8")])
def test_a_bad_step_name_is_one_sentence_and_exit_2(tmp_path, name):
    marker = tmp_path / "marker"
    for env in (environment(), environment(SLOTH_RUN_TOKEN="t", SLOTH_LEASE_OWNER="o",
                                           SLOTH_JOB_ID="j", SLOTH_QUEUE=str(tmp_path / "q"))):
        done = step_call(name, "--", "touch", str(marker), env=env)
        assert done.returncode == 2, done
        assert done.stdout == b"" and done.stderr.count(b"\n") == 1, done
        assert done.stderr.startswith(b"sloth-tray: ") and b"Traceback" not in done.stderr
        assert b"name" in done.stderr
        assert not marker.exists()
    assert step_call("good name", "--", "touch", str(marker), env=environment()).returncode == 0
    assert marker.exists()


def test_a_name_that_is_not_utf_8_is_refused_inside_a_job_too(home, tmp_path):
    job_id = add(home, "odd.sh", "#!/bin/bash\n"
                 "sloth-tray step $'odd\\xffname' -- echo ran; echo \"status $?\"\n")
    assert work(home).startswith("ok")
    log = run_log(home, job_id, 1)
    assert "status 2" in log and "ran" not in log and "Traceback" not in log
    assert steps(home, job_id) == []


def test_a_step_name_of_200_characters_is_fine_and_no_command_is_a_usage_error(home):
    job_id = add(home, "long.sh", f"#!/bin/sh\nsloth-tray step {'n' * 200} -- true\n")
    assert work(home).startswith("ok")
    assert [s["name"] for s in steps(home, job_id)] == ["n" * 200]
    for argv in (["s"], ["s", "--"], ["s", "--ask", "--"]):
        done = step_call(*argv, env=environment())
        assert done.returncode == 2 and done.stderr.count(b"\n") == 1, (argv, done)


@pytest.mark.parametrize("argv", [["--", "touch", "touch", "MARKER"],
                                  ["--ask", "--", "touch", "touch", "MARKER"],
                                  ["--", "--", "touch", "MARKER"]])
def test_a_forgotten_name_is_a_usage_error_not_the_commands_first_word(tmp_path, argv):
    """`step -- COMMAND`: the `--` comes before any NAME, so COMMAND's first word is not
    taken for one (it would run the rest, here `touch MARKER`)."""
    marker = tmp_path / "marker"
    argv = [str(marker) if word == "MARKER" else word for word in argv]
    for env in (environment(), environment(SLOTH_RUN_TOKEN="t", SLOTH_LEASE_OWNER="o",
                                           SLOTH_JOB_ID="j", SLOTH_QUEUE=str(tmp_path / "q"))):
        done = step_call(*argv, env=env)
        assert done.returncode == 2, (argv, done)
        assert done.stdout == b"" and done.stderr.count(b"\n") == 1, (argv, done)
        assert done.stderr.startswith(b"sloth-tray: ") and b"NAME" in done.stderr
        assert not marker.exists()
    # A name, then the command: the real form, even when the name looks like a command;
    # a name that starts with a dash comes between two `--`.
    assert step_call("touch", "--", "touch", str(marker), env=environment()).returncode == 0
    assert marker.exists()
    marker.unlink()
    assert step_call("--", "-n", "--", "touch", str(marker), env=environment()).returncode == 0
    assert marker.exists()


def test_a_step_whose_reader_leaves_ends_as_its_command_would_in_sh(home, tmp_path, tag):
    """`step NAME -- yes | head -n 1`: once head has its line, COMMAND meets the broken
    pipe it would meet without the step (SIGPIPE), instead of writing forever into a
    step that keeps reading. The step ends as sh's left side would (141) and is done:
    the script went on with what its reader took, and a later run replays it."""
    effects, flag, said = tmp_path / "effects", tmp_path / "flag", tmp_path / "said"
    job_id = add(home, "first.sh", f"""#!/bin/bash
# sloth: max_attempts=1 timeout=10
sloth-tray step yes -- sh -c 'echo yes >> {effects}; exec yes' | head -n 1 >> {said}
echo "statuses ${{PIPESTATUS[*]}}" >> {said}
n=$(sloth-tray step count -- sh -c 'echo count >> {effects}; exec seq 100000000' | head -n 2)
echo "count $n" >> {said}
test -e {flag} || {{ touch {flag}; exit 1; }}
""", tag=tag)
    try:
        out = subprocess.run([*CLI, "work", "--once", "--home", str(home.root)],
                             capture_output=True, text=True, timeout=8, env=environment(tag),
                             stdin=subprocess.DEVNULL).stdout
    except subprocess.TimeoutExpired:
        pytest.fail("the step kept its lane after its reader had left")
    assert "fail" in out
    assert lines(said) == ["y", "statuses 141 0", "count 1", "2"]
    assert lines(effects) == ["yes", "count"]
    job = show(home, job_id)
    assert (job["state"], job["reason"]) == ("failed", "exit_code")  # its own exit 1
    assert [(s["name"], s["state"]) for s in steps(home, job_id)] == [("yes", "done"),
                                                                      ("count", "done")]
    kept = subprocess.run([*CLI, "show", job_id, "--step", "yes", "--home", str(home.root)],
                          capture_output=True, timeout=60, env=environment()).stdout
    assert kept.startswith(b"y\ny\n") and set(kept.split(b"\n")) == {b"y", b""}
    assert len(kept) < OUTPUT_CAP  # it stopped soon after its reader: not a cap's worth

    sloth(home, "retry", job_id, tag=tag)
    assert work(home, tag).startswith("ok")
    assert lines(effects) == ["yes", "count"]  # replayed, not run again
    again = lines(said)[4:]
    assert again[0] == "y" and again[1].endswith(" 0") and again[2:] == ["count 1", "2"]
    assert "step yes skipped (done " in run_log(home, job_id, 2)

    # By hand, outside a job, COMMAND is exec'd: it is the pipeline's left side itself.
    by_hand = subprocess.run(["bash", "-c", f'"{SLOTH}" step x -- yes | head -n 1; '
                              'echo "${PIPESTATUS[*]}"'], capture_output=True, text=True,
                             timeout=8, env=environment(tag))
    assert by_hand.stdout == "y\n141 0\n" and by_hand.stderr == ""


def test_output_past_the_cap_is_cut_with_a_sentence_and_the_kept_part_replayed(home,
                                                                             tmp_path):
    counts, flag = tmp_path / "counts", tmp_path / "flag"
    job_id = add(home, "big.sh", f"""#!/bin/sh
# sloth: max_attempts=1
sloth-tray step big -- head -c {OUTPUT_CAP + 1000} /dev/zero | wc -c >> {counts}
test -e {flag} || {{ touch {flag}; exit 1; }}
""")
    work(home)
    first = run_log(home, job_id, 1)
    assert "step big wrote 1 MiB; the first 1 MiB was kept" in first
    sloth(home, "retry", job_id)
    assert work(home).startswith("ok")
    # Written whole the first time, then the part kept.
    assert [int(n) for n in lines(counts)] == [OUTPUT_CAP + 1000, OUTPUT_CAP]
    second = run_log(home, job_id, 2)
    assert "step big had written 1 MiB; only the first 1 MiB was kept" in second
    assert "step big skipped (done " in second
    (big,) = steps(home, job_id)
    assert big["output_size"] == OUTPUT_CAP + 1000 and big["state"] == "done"
    shown = subprocess.run([*CLI, "show", job_id, "--step", "big", "--home", str(home.root)],
                           capture_output=True, timeout=60, env=environment())
    assert shown.returncode == 0 and shown.stdout == b"\0" * OUTPUT_CAP
    assert shown.stderr.count(b"\n") == 1 and b"were kept" in shown.stderr


def test_a_skipped_steps_note_is_never_the_error_of_the_job_that_fails_after_it(home,
                                                                                tmp_path):
    job_id = add(home, "quiet.sh", """#!/bin/sh
# sloth: max_attempts=1
sloth-tray step fetch -- echo fetched
sloth-tray step send -- sh -c 'exit 3' || exit 3
""")
    work(home)
    assert show(home, job_id)["last_error"] == "exit status 3: fetched"
    sloth(home, "retry", job_id)
    assert "skipped" not in work(home)
    job = show(home, job_id)
    assert "step fetch skipped (done " in run_log(home, job_id, 2)
    assert (job["state"], job["last_error"]) == ("failed", "exit status 3: fetched")


# -- any Python, any PATH ------------------------------------------------------------------


def test_with_no_path_at_all_a_job_finds_sloth_tray_and_the_systems_programs(home, tmp_path):
    where = tmp_path / "where"
    job_id = add(home, "bare.sh", f"""#!/bin/sh
command -v date > {where}
sloth-tray step when -- date +%Y
""")
    env = environment()
    del env["PATH"]
    done = subprocess.run([*CLI, "work", "--once", "--home", str(home.root)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("ok"), done
    assert Path(lines(where)[0]).name == "date"
    assert states(home, job_id) == [("when", 1, "done", 1)]


@pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK), reason="no /usr/bin/python3")
def test_a_bare_path_daemon_gives_jobs_sloth_tray_and_sloth_step_under_any_python(
        home, tmp_path, pids, tag):
    effects, flag, where = tmp_path / "effects", tmp_path / "flag", tmp_path / "where"
    python_id = add(home, "pay.py", f"""#!/usr/bin/python3
# sloth: max_attempts=1
import os, sys
from sloth_step import step

def pay(amount, currency="EUR"):
    with open({str(effects)!r}, "a") as f:
        f.write("paid\\n")
    return {{"amount": amount, "currency": currency, "key": os.environ["SLOTH_STEP_KEY"]}}

def boom():
    with open({str(effects)!r}, "a") as f:
        f.write("boom\\n")
    raise RuntimeError("no luck")

receipt = step("pay", pay, 12, currency="CHF")
print("receipt", receipt["amount"], receipt["currency"], receipt["key"], flush=True)
try:
    step("odd", set)
except TypeError as exc:
    print("typeerror", '"odd"' in str(exc), flush=True)
try:
    step("boom", boom)
except RuntimeError:
    print("boom raised", flush=True)
print("python", sys.executable, "key" if "SLOTH_STEP_KEY" in os.environ else "no key")
if not os.path.exists({str(flag)!r}):
    open({str(flag)!r}, "w").close()
    sys.exit(1)
""", tag=tag)
    shell_id = add(home, "bare.sh", f"""#!/bin/sh
echo "$PATH" > {where}
command -v sloth-tray >> {where}
sloth-tray step hello -- echo hi
""", tag=tag)
    log = tmp_path / "daemon.log"
    daemon = start_daemon(pids, home, log, env=environment(tag, PATH="/usr/bin:/bin"))
    wait_for(lambda: show(home, shell_id)["state"] == "done"
             and show(home, python_id)["state"] == "failed", what="both jobs to run")
    sloth(home, "retry", python_id, tag=tag)
    wait_for(lambda: show(home, python_id)["state"] == "done", what="the retried job")
    quit_daemon(daemon, log)

    path, command = lines(where)
    assert path == f"/usr/bin:/bin:{Path(SLOTH).parent}"  # appended, never prepended
    assert command == SLOTH
    assert states(home, shell_id) == [("hello", 1, "done", 1)]
    assert run_log(home, shell_id, 1) == "hi\n"

    assert lines(effects) == ["paid", "boom", "boom"]  # pay once, boom each run
    first, second = run_log(home, python_id, 1), run_log(home, python_id, 2)
    receipt = next(line for line in first.splitlines() if line.startswith("receipt"))
    assert receipt.startswith("receipt 12 CHF ") and len(receipt.split()[3]) == 32
    assert receipt in second.splitlines()  # the recorded result, key and all
    assert "sloth-tray: step pay skipped (done " in second
    for log_text in (first, second):
        assert "typeerror True" in log_text and "boom raised" in log_text
        assert "python /usr/bin/python3 no key" in log_text
    assert [(s["name"], s["state"], s["kind"]) for s in steps(home, python_id)] == [
        ("pay", "done", "python"), ("odd", "failed", "python"), ("boom", "failed", "python")]
    recorded = json.loads(sloth(home, "show", python_id, "--step", "pay").stdout)
    assert recorded["amount"] == 12 and recorded["currency"] == "CHF"


PYENV = Path("/root/.pyenv/versions")


def old_python(version: str) -> str:
    """That Python's interpreter, or the test is skipped (most machines have none)."""
    python = PYENV / version / "bin" / "python"
    if not os.access(python, os.X_OK):
        pytest.skip(f"no Python {version} here ({python})")
    return str(python)


@pytest.mark.parametrize("version", ["3.6.15", "3.7.16"])
def test_sloth_step_works_on_the_oldest_pythons_it_names(home, tmp_path, version):
    python = old_python(version)
    effects, flag = tmp_path / "effects", tmp_path / "flag"
    job_id = add(home, "old.py", f"""#!{python}
# sloth: max_attempts=1
import os, sys
from sloth_step import step

def pay(cents):
    with open({str(effects)!r}, "a") as f:
        f.write("paid\\n")
    return {{"cents": cents, "python": sys.version.split()[0]}}

print("receipt", step("pay", pay, 12), flush=True)
if not os.path.exists({str(flag)!r}):
    open({str(flag)!r}, "w").close()
    sys.exit(1)
""")
    assert "fail" in work(home)
    sloth(home, "retry", job_id)
    assert work(home).startswith("ok")  # the retry skips pay
    assert lines(effects) == ["paid"]
    receipt = f"receipt {{'cents': 12, 'python': '{version}'}}"
    assert run_log(home, job_id, 1).splitlines()[0] == receipt
    assert receipt in run_log(home, job_id, 2).splitlines()
    assert "Traceback" not in run_log(home, job_id, 1) + run_log(home, job_id, 2)


def test_a_python_older_than_sloth_steps_floor_fails_the_job_unrunnable_at_once(home):
    python = old_python("2.7.18")
    job_id = add(home, "ancient.py", f"""#!{python}
# sloth: max_attempts=3
from sloth_step import step
step("x", lambda: 1)
""")
    assert "fail" in work(home)
    job = show(home, job_id)
    assert (job["state"], job["reason"], job["attempts"]) == ("failed", "unrunnable", 1)
    assert "\n" not in job["last_error"] and "Python 2.7.18" in job["last_error"]
    assert python in job["last_error"] and "3.6" in job["last_error"]
    log = run_log(home, job_id, 1)
    assert "Traceback" not in log and log.count("\n") == 1, log


def test_a_job_whose_python_is_too_old_for_sloth_step_fails_for_good_on_any_machine(home):
    """This Python, told it is 3.5 before the import: the runner reads the shim's status
    and sentence as a job that can never run. Exit 126 with other words is the job's own."""
    pretend = add(home, "pretend.py", f"""#!{sys.executable}
# sloth: max_attempts=3
import sys
sys.version_info, sys.version = (3, 5, 10, "final", 0), "3.5.10"
from sloth_step import step
""")
    own = add(home, "own126.sh", "#!/bin/sh\n# sloth: max_attempts=3\n"
              "echo 'cannot execute this' >&2\nexit 126\n")
    work(home)
    job = show(home, pretend)
    assert (job["state"], job["reason"], job["attempts"]) == ("failed", "unrunnable", 1)
    assert job["last_error"].startswith("sloth_step needs Python 3.6 or later, and this job "
                                        f"runs Python 3.5.10 ({sys.executable})")
    assert "Traceback" not in run_log(home, pretend, 1)
    job = show(home, own)
    assert (job["state"], job["reason"]) == ("pending", "exit_code")  # tried again later
