"""The command line as pueue and task-spooler users expect it, end to end on real
processes: `add -- COMMAND`, `wait`, `log`, names for ids, typos, what `status` names,
read-only commands that make nothing, and the exit codes of Ctrl-C."""

from __future__ import annotations

import json
import os
import platform
import select
import signal
import subprocess
import sys

import pytest
from helpers.processes import start_daemon, wait_for

from sloth_tray.store.queue import Queue, State

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")


def sloth(home, command: str, *argv: str, cwd=None, check: bool = True,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`sloth-tray COMMAND --home HOME ARGV...` as a shell runs it (--home before the
    rest: after `add --` every word is the command's)."""
    done = subprocess.run([sys.executable, "-m", "sloth_tray", command, "--home",
                           str(home.root), *argv], capture_output=True, text=True,
                          timeout=60, cwd=cwd, env=None if env is None else {**os.environ,
                                                                              **env})
    if check:
        assert done.returncode == 0, done.stderr
    return done


def popen(pids, home, command: str, *argv: str, **kwargs) -> subprocess.Popen:
    return pids.popen([sys.executable, "-m", "sloth_tray", command, "--home", str(home.root),
                       *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                      **kwargs)


def job(home, job_id: str):
    with Queue(home.db) as queue:
        return queue.get(job_id)


def add(home, name: str, text: str, *extra: str) -> str:
    path = home.root.parent / name
    path.write_text(text)
    return sloth(home, "add", str(path), *extra).stdout.strip()


def line_of(proc: subprocess.Popen, timeout: float = 20.0) -> str:
    """The next line `proc` writes to its stdout, waited for at most `timeout` seconds."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"no line from {proc.args} in {timeout}s"
    return proc.stdout.readline()


def gated(tmp_path, name: str, *, before: str = "", after: str = "", code: int = 0) -> str:
    """A job's script that says `before`, waits for the file `go-NAME`, then says
    `after` and exits `code`."""
    return (f"echo {before}\nwhile [ ! -e {tmp_path}/go-{name} ]; do sleep 0.02; done\n"
            f"echo {after}\nexit {code}\n")


# -- add -- COMMAND ----------------------------------------------------------------------


def test_a_command_runs_as_given_where_add_was_called_and_lists_by_its_command_line(
        home, tmp_path, pids):
    here = tmp_path / "project dir"
    here.mkdir()
    out = tmp_path / "out"
    argv = ["sh", "-c", 'pwd > "$1"; for a; do echo "[$a]"; done >> "$1"', "sh", str(out),
            "two words", "it's", "$HOME", "--cwd", "-h", "--", "a\n# sloth: every=1s"]
    job_id = sloth(home, "add", "--", *argv, cwd=here).stdout.strip()
    listed = sloth(home, "list", "--json").stdout
    assert json.loads(listed)[0]["name"].startswith("sh -c 'pwd > \"$1\"")
    assert json.loads(listed)[0]["options"] == {"cwd": str(here)}
    assert "sh -c 'pwd" in sloth(home, "list").stdout
    start_daemon(pids, home)
    wait_for(lambda: job(home, job_id).state == State.DONE, what="the command to run")
    assert out.read_text().splitlines() == [
        str(here), f"[{out}]", "[two words]", "[it's]", "[$HOME]", "[--cwd]", "[-h]", "[--]",
        "[a", "# sloth: every=1s]"]


def test_a_long_command_line_is_cut_for_its_name(home, tmp_path):
    job_id = sloth(home, "add", "--", "echo", "x" * 300, cwd=tmp_path).stdout.strip()
    name = job(home, job_id).name
    assert len(name) == 80 and name.startswith("echo xxx") and name.endswith("…")


def test_cwd_chooses_the_folder_for_a_command_and_for_a_script(home, tmp_path):
    there = tmp_path / "there"
    there.mkdir()
    command = sloth(home, "add", "--cwd", str(there), "--", "sh", "-c", "pwd > where-c",
                    cwd=tmp_path).stdout.strip()
    script = add(home, "where.sh", "pwd > where-s\n", "--cwd", str(there))
    plain = add(home, "plain.sh", "pwd > plain\n")  # a script alone runs in $HOME
    me = tmp_path / "me"
    me.mkdir()
    done = sloth(home, "work", "--once", env={"HOME": str(me)})
    assert done.stdout.count("ok ") == 3, done.stdout
    assert (there / "where-c").read_text().strip() == str(there)
    assert (there / "where-s").read_text().strip() == str(there)
    assert (me / "plain").read_text().strip() == str(me)
    assert {job(home, i).options.get("cwd") for i in (command, script, plain)} == {
        str(there), None}


def test_a_command_whose_folder_is_gone_fails_in_one_sentence_and_retry_keeps_the_folder(
        home, tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    job_id = sloth(home, "add", "--max-attempts", "1", "--", "sh", "-c", "pwd > here",
                   cwd=gone).stdout.strip()
    gone.rmdir()
    sloth(home, "work", "--once")
    failed = job(home, job_id)
    assert (failed.state, failed.reason.value) == ("failed", "could_not_start")
    assert failed.last_error == (f"cannot start the job: its working folder {gone} is gone "
                                 "(it was there when the job was added)")
    gone.mkdir()
    sloth(home, "retry", job_id)
    sloth(home, "work", "--once")
    assert job(home, job_id).state == State.DONE
    assert (gone / "here").read_text().strip() == str(gone)


@pytest.mark.parametrize("argv, said", [
    (["add"], "sloth-tray add: give a script (add PATH) or a command after -- (add -- COMMAND "
              "[ARG...])\n"),
    (["add", "x.sh", "--", "echo"], "sloth-tray add: give a script or a command after --, "
                                    "not both\n"),
    (["add", "--"], "sloth-tray add: give the command after --, as in `sloth-tray add -- make "
                    "test`\n"),
])
def test_add_needs_a_script_or_a_command_in_one_usage_line(home, argv, said):
    done = sloth(home, *argv, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", said)
    with Queue(home.db) as queue:
        assert queue.jobs() == []


def test_a_cwd_that_is_not_a_folder_queues_nothing(home, tmp_path):
    done = sloth(home, "add", "--cwd", str(tmp_path / "nope"), "--", "true", check=False)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"sloth-tray: {tmp_path / 'nope'} is not a folder (--cwd); " \
        "nothing was queued\n"


# -- wait -----------------------------------------------------------------------------------


def blocked_for_good(pid: int) -> bool:
    """Every thread of `pid` sleeps in the kernel with no timeout: a futex wait with no
    time limit, or a poll with none. Such a process costs nothing until woken."""
    calls = {"x86_64": {"futex": 202, "poll": 7, "read": 0},
             "aarch64": {"futex": 98, "ppoll": 73, "read": 63}}.get(platform.machine())
    if calls is None:
        pytest.skip("syscall numbers of this machine are not known here")
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/syscall") as file:
            words = file.read().split()
        if words[0] in ("running", "-1"):
            return False
        number, args = int(words[0]), [int(word, 16) for word in words[1:7]]
        if number == calls["futex"] and args[3] == 0:  # futex(addr, op, val, NULL)
            continue
        if number == calls.get("poll") and args[2] & 0xFFFFFFFF == 0xFFFFFFFF:  # poll(.., -1)
            continue
        if number == calls.get("ppoll") and args[2] == 0:  # ppoll(..., NULL, ...)
            continue
        if number == calls["read"]:  # a blocking read (a pipe)
            continue
        return False
    return True


def switches(pid: int) -> int:
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as file:
            for line in file:
                if "ctxt_switches" in line:
                    total += int(line.split()[1])
    return total


def test_wait_blocks_until_the_jobs_end_costing_nothing_meanwhile_and_exits_0(
        home, tmp_path, pids):
    first = add(home, "first.sh", gated(tmp_path, "first"))
    second = add(home, "second.sh", "echo two\n")
    start_daemon(pids, home)
    wait_for(lambda: "pid" in (job(home, first).child or {}), what="the first job to start")
    waiting = popen(pids, home, "wait", first, "second")  # an id, and a name
    wait_for(lambda: blocked_for_good(waiting.pid), what="wait to block with no timeout")
    before = switches(waiting.pid)
    assert sloth(home, "status").returncode == 0  # a read of the queue wakes nobody
    assert waiting.poll() is None and switches(waiting.pid) == before
    (tmp_path / "go-first").touch()
    assert waiting.wait(timeout=20) == 0, waiting.stderr.read()
    assert waiting.stdout.read().splitlines() == [f"done      first ({first})",
                                                  f"done      second ({second})"]
    assert job(home, second).state == State.DONE


def test_wait_exits_1_and_says_which_failed(home, tmp_path):
    good = add(home, "good.sh", "true\n")
    bad = add(home, "bad.sh", "echo broken >&2; exit 3\n", "--max-attempts", "1")
    gone = add(home, "never.sh", "true\n", "--delay", "1h")
    sloth(home, "cancel", gone)
    sloth(home, "work", "--once")
    done = sloth(home, "wait", good, bad, gone, check=False)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [f"done      good ({good})",
                                        f"failed    bad ({bad}): exit status 3: broken",
                                        f"cancelled never ({gone})"]
    assert done.stderr == (f"sloth-tray: 2 of 3 jobs did not end done: bad ({bad}) failed, "
                           f"never ({gone}) was cancelled\n")


def test_ctrl_c_on_wait_exits_130(home, pids):
    job_id = add(home, "later.sh", "true\n", "--delay", "1h")
    # Started as a terminal's shell starts it, with Ctrl-C's signal at its default: a
    # test run started in the background (`&`) hands its children SIGINT ignored, and
    # Python leaves an ignored SIGINT ignored.
    waiting = pids.popen(["env", "--default-signal=INT", sys.executable, "-m", "sloth_tray",
                          "wait", "--home", str(home.root), job_id], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    # Its watch's thread first: before it, a start-up held up in a read() of a module
    # on a busy machine looks the same as the wait.
    wait_for(lambda: len(os.listdir(f"/proc/{waiting.pid}/task")) > 1
             and blocked_for_good(waiting.pid), what="wait to block")
    waiting.send_signal(signal.SIGINT)
    assert waiting.wait(timeout=10) == 130
    assert "Traceback" not in waiting.stderr.read()


# -- log --------------------------------------------------------------------------------------


def test_the_log_of_a_run_that_printed_nothing_is_empty_and_one_that_never_began_says_why(
        home, tmp_path):
    quiet = add(home, "quiet.sh", "exit 0\n")
    sloth(home, "work", "--once")
    said = sloth(home, "log", quiet, check=False)
    assert (said.returncode, said.stdout, said.stderr) == (0, "", "")
    assert not home.job_logs(quiet).exists()  # printing nothing, it made no file
    (tmp_path / "gone").mkdir()
    nowhere = add(home, "nowhere.sh", "echo never\n", "--cwd", str(tmp_path / "gone"))
    (tmp_path / "gone").rmdir()
    sloth(home, "work", "--once")
    said = sloth(home, "log", nowhere, check=False)
    assert said.returncode == 1 and said.stdout == ""
    assert said.stderr.startswith(f"sloth-tray: run 1 of nowhere ({nowhere}) left no log: "
                                  "cannot start the job: its working folder "), said.stderr


def test_log_prints_the_last_run_or_the_one_asked_for(home, tmp_path):
    count = tmp_path / "count"
    job_id = add(home, "count.sh", f'n=$(( $(cat {count} 2>/dev/null || echo 0) + 1 ))\n'
                                   f'echo $n > {count}\necho "run $n"\necho "err $n" >&2\n')
    none_yet = sloth(home, "log", job_id, check=False)
    assert (none_yet.returncode, none_yet.stdout) == (1, "")
    assert none_yet.stderr.startswith(f"sloth-tray: count ({job_id}) has not run yet")
    sloth(home, "work", "--once")
    sloth(home, "retry", "count")  # a done job runs again, by its name
    sloth(home, "work", "--once")
    assert job(home, job_id).runs == 2
    assert sloth(home, "log", job_id).stdout == "run 2\nerr 2\n"
    assert sloth(home, "log", "count", "--run", "1").stdout == "run 1\nerr 1\n"
    assert sorted(p.name for p in home.job_logs(job_id).iterdir()) == ["1.log", "2.log"]
    assert home.job_logs(job_id).name == f"count-{job_id}"
    beyond = sloth(home, "log", job_id, "--run", "3", check=False)
    assert (beyond.returncode, beyond.stderr) == (
        1, f"sloth-tray: count ({job_id}) has run 2 times: --run takes 1 to 2\n")


@pytest.mark.parametrize("code", [0, 4])
def test_log_follow_streams_a_running_job_until_it_ends(home, tmp_path, pids, code):
    job_id = add(home, "slow.sh", gated(tmp_path, "slow", before="first", after="second",
                                        code=code), "--max-attempts", "1")
    following = popen(pids, home, "log", "slow", "-f")  # before it even started
    start_daemon(pids, home)
    assert line_of(following) == "first\n"  # while the job still runs
    assert following.poll() is None and job(home, job_id).state == State.RUNNING
    (tmp_path / "go-slow").touch()
    assert following.wait(timeout=20) == (0 if code == 0 else 1)
    assert following.stdout.read() == "second\n"


# -- retry, cancel --all-failed, prune ---------------------------------------------------------


def test_cancel_all_failed_then_prune_removes_them(home, tmp_path):
    bad = [add(home, f"bad{i}.sh", "exit 1\n", "--max-attempts", "1") for i in range(2)]
    later = add(home, "later.sh", "true\n", "--delay", "1h")
    sloth(home, "work", "--once")
    done = sloth(home, "cancel", "--all-failed")
    assert sorted(done.stdout.splitlines()) == sorted(f"cancelled bad{i} ({bad[i]})"
                                                      for i in range(2))
    assert sloth(home, "cancel", "--all-failed").stdout == "no failed jobs\n"
    assert sloth(home, "prune", "--older-than", "0").stdout == "removed 2 finished jobs\n"
    listed = json.loads(sloth(home, "list", "--json").stdout)
    assert [job["id"] for job in listed] == [later]
    assert sorted(p.name for p in home.spool.iterdir()) == [later]
    both = sloth(home, "cancel", later, "--all-failed", check=False)
    assert both.returncode == 2 and "one of them" in both.stderr


# -- names and typos ---------------------------------------------------------------------------


def test_a_name_means_its_newest_job_and_a_name_that_starts_an_id_is_refused(home, tmp_path):
    older = add(home, "backup.sh", "true\n", "--delay", "1h")
    newer = add(home, "backup.sh", "true\n", "--delay", "1h")
    assert json.loads(sloth(home, "show", "backup", "--json").stdout)["id"] == newer
    assert sloth(home, "run-now", "backup").stdout == f"due now   backup ({newer})\n"
    assert job(home, older).not_before > job(home, newer).not_before
    prefix = older[:4]
    clash = add(home, "clash.sh", "true\n", "--name", prefix, "--delay", "1h")
    done = sloth(home, "cancel", prefix, check=False)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (f"sloth-tray: '{prefix}' is the name of job {clash} and the start "
                           f"of job {older}'s id: give the whole id of the job you mean\n")
    assert job(home, older).state == job(home, clash).state == State.PENDING
    unknown = sloth(home, "show", "nosuch", check=False)
    assert (unknown.returncode, unknown.stderr) == (
        1, "sloth-tray: no job has the id or name 'nosuch'\n")


@pytest.mark.parametrize("typed, meant", [("stauts", "status"), ("lsit", "list"),
                                          ("wiat", "wait")])
def test_a_mistyped_command_gets_the_one_it_is_nearest(home, typed, meant):
    done = subprocess.run([sys.executable, "-m", "sloth_tray", typed], capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.count("\n") == 1 and f"did you mean {meant}?" in done.stderr


# -- status names the running job and the next -----------------------------------------------


def test_status_names_the_running_job_and_the_next_due(home, tmp_path, pids):
    running = add(home, "busy.sh", gated(tmp_path, "busy"))
    upcoming = add(home, "tidy.sh", "true\n", "--delay", "1h")
    start_daemon(pids, home)
    wait_for(lambda: job(home, running).state == State.RUNNING, what="the job to start")
    status = json.loads(sloth(home, "status", "--json").stdout)
    assert status["running"] == 1 and status["pending"] == 1  # the counts stay
    assert status["running_job"] == {"id": running, "name": "busy",
                                     "since": job(home, running).updated_at}
    assert status["next"] == {"id": upcoming, "name": "tidy",
                              "due": job(home, upcoming).not_before}
    lines = sloth(home, "status").stdout.splitlines()
    assert any(line.startswith("running now") and f"  busy ({running}), started " in line
               for line in lines), lines
    assert any(line.split()[:3] == ["next", "tidy", f"({upcoming}),"] and "due in 1h" in line
               for line in lines), lines
    (tmp_path / "go-busy").touch()


# -- read-only commands make nothing -------------------------------------------------------------


@pytest.mark.parametrize("argv, code", [
    (["status"], 0), (["status", "--json"], 0), (["list"], 0), (["list", "--json"], 0),
    (["paths"], 0), (["paths", "--json"], 0), (["config"], 0), (["config", "--json"], 0),
    (["show", "abc"], 1), (["log", "abc"], 1), (["wait", "abc"], 1)])
@pytest.mark.parametrize("missing", ["home", "jobs folder"])
def test_a_read_only_command_on_a_missing_home_or_jobs_folder_makes_nothing(
        tmp_path, argv, code, missing):
    home, jobs = tmp_path / "home", tmp_path / "jobs"
    if missing == "jobs folder":
        home.mkdir(mode=0o700)
    before = sorted(tmp_path.rglob("*"))
    done = subprocess.run([sys.executable, "-m", "sloth_tray", *argv, "--home", str(home),
                           "--jobs-dir", str(jobs)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == code, done.stderr
    assert done.stderr == f"sloth-tray: there is no queue in {home} yet: no job was ever " \
        "added there\n"
    if argv == ["status", "--json"]:
        assert json.loads(done.stdout)["pending"] == 0
    if argv == ["list", "--json"]:
        assert json.loads(done.stdout) == []
    assert sorted(tmp_path.rglob("*")) == before


def test_the_default_home_is_not_made_by_a_look(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data")}
    done = subprocess.run([sys.executable, "-m", "sloth_tray", "status"], capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 0 and "there is no queue in" in done.stderr
    assert not (tmp_path / "data").exists()


# -- exit codes and config's words ----------------------------------------------------------------


@pytest.mark.parametrize("command", [["work"], ["run", "--headless"]])
def test_ctrl_c_stops_work_and_the_app_cleanly_with_130(home, tmp_path, pids, command):
    job_id = add(home, "long.sh", gated(tmp_path, "long"))
    worker = popen(pids, home, *command)
    wait_for(lambda: "pid" in (job(home, job_id).child or {}), what="the job to start")
    worker.send_signal(signal.SIGINT)
    assert worker.wait(timeout=20) == 130
    released = job(home, job_id)
    assert (released.state, released.attempts) == (State.PENDING, 0)  # the clean stop


def test_config_says_durations_and_sizes_as_they_are_written(home, tmp_path):
    config = tmp_path / "config.toml"
    env = {"SLOTH_TRAY_CONFIG": str(config)}
    shown = json.loads(sloth(home, "config", "--json", env=env).stdout)["settings"]
    assert (shown["lease"]["value"], shown["lease"]["text"]) == (60.0, "60s")
    assert (shown["log_cap"]["value"], shown["log_cap"]["text"]) == (10 * 1024**2, "10MiB")
    assert (shown["timeout"]["value"], shown["timeout"]["text"]) == (None, None)
    config.write_text('lease = "90s"\ntimeout = 1800\nlog_cap = "500KB"\n')
    shown = json.loads(sloth(home, "config", "--json", env=env).stdout)["settings"]
    assert [shown[key]["text"] for key in ("lease", "timeout", "log_cap")] == [
        "90s", "30m", "500KB"]
    assert shown["timeout"]["value"] == 1800.0
    rows = {line.split()[0]: line.split()[1] for line in
            sloth(home, "config", env=env).stdout.splitlines()[3:]}
    assert (rows["lease"], rows["timeout"], rows["log_cap"], rows["notifications"]) == (
        "90s", "30m", "500KB", "true")
