from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import subprocess
import sys

import pytest
from helpers.queues import queue_file_of_schema

from sloth_tray import __version__
from sloth_tray.cli import main
from sloth_tray.paths import locate
from sloth_tray.store.queue import Queue
from sloth_tray.store.schema import SCHEMA_VERSION


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def sloth(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real entry point, in a child process, as a user's shell would run it."""
    return subprocess.run([sys.executable, "-m", "sloth_tray", *argv], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})})


def test_version_and_module_entry_point():
    done = sloth("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"sloth-tray {__version__}"


def test_status_json_on_a_brand_new_home_is_all_zero_and_makes_nothing(home, tmp_path):
    done = sloth("status", "--json", "--home", str(home))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "pending": 0, "running": 0, "done": 0, "failed": 0, "cancelled": 0, "due_now": 0,
        "paused": False, "overdue": 0, "running_job": None, "next": None, "lanes": {},
        "waiting": {},
        "app_running": False}
    assert done.stderr == f"sloth-tray: there is no queue in {home} yet: no job was ever " \
        "added there\n"
    assert not home.exists()


def test_the_first_add_makes_the_home_private(home, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("echo hi\n")
    done = sloth("add", str(script), "--home", str(home))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE((home / "queue.db").stat().st_mode) == 0o600


def test_home_comes_from_the_environment_too(home):
    done = sloth("paths", "--json", env={"SLOTH_TRAY_HOME": str(home)})
    assert json.loads(done.stdout) == {
        "home": str(home), "db": str(home / "queue.db"), "jobs": str(home / "jobs"),
        "logs": str(home / "logs")}


def test_show_of_an_unknown_id_is_one_line_and_non_zero(home):
    home_db(home)
    done = sloth("show", "nosuchid", "--home", str(home))
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == "sloth-tray: no job has the id or name 'nosuchid'\n"


@pytest.mark.parametrize("content", [b"garbage, not a database\n" * 50, b"\n"])
def test_a_corrupt_database_is_one_line_and_left_untouched(home, content):
    home.mkdir()
    (home / "queue.db").write_bytes(content)
    done = sloth("status", "--home", str(home))
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "damaged or is not a sloth-tray queue" in done.stderr
    assert (home / "queue.db").read_bytes() == content


def other_files(home, case: str) -> None:
    """A queue.db that status must refuse: a newer sloth-tray's, another program's."""
    home.mkdir()
    if case == "a newer sloth-tray's":
        Queue(home / "queue.db").close()
    with contextlib.closing(sqlite3.connect(home / "queue.db", isolation_level=None)) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}" if case == "a newer sloth-tray's"
                    else "CREATE TABLE photos (id INTEGER)")


@pytest.mark.parametrize("case, sentence", [
    ("a newer sloth-tray's", "was written by a newer sloth-tray"),
    ("another program's", "is an SQLite file of something else")])
def test_status_refuses_a_queue_it_cannot_read_in_one_line_and_leaves_it_as_it_was(
        home, case, sentence):
    other_files(home, case)
    before = (home / "queue.db").read_bytes()
    done = sloth("status", "--json", "--home", str(home))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and sentence in done.stderr, done.stderr
    assert (home / "queue.db").read_bytes() == before


def test_status_brings_a_queue_of_an_older_schema_up_to_date_and_counts_its_jobs(home):
    home.mkdir(mode=0o700)
    queue_file_of_schema(home / "queue.db", 2,
                         rows=(("0123456789ab", "old", "pending", 0, None, "{}"),))
    done = sloth("status", "--json", "--home", str(home))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "pending": 1, "running": 0, "done": 0, "failed": 0, "cancelled": 0, "due_now": 1,
        "paused": False, "overdue": 0, "running_job": None,
        "next": {"id": "0123456789ab", "name": "old", "due": 0},
        "lanes": {"main": {"pending": 1, "running": 0, "done": 0, "failed": 0, "cancelled": 0,
                           "due_now": 1, "paused": False}}, "waiting": {},
        "app_running": False}
    with sqlite3.connect(home / "queue.db") as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_status_answers_at_once_while_the_daemon_holds_the_write_lock(home, capsys):
    """A glance never waits for a writer: it reads the last commit (WAL)."""
    with Queue(home_db(home)) as q:
        q.push("committed")
    writer = sqlite3.connect(home / "queue.db", isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("UPDATE jobs SET state = 'done'")  # not committed: status must not see it
        code, out, err = run(capsys, "status", "--json", "--home", str(home))
        assert code == 0, err
        assert json.loads(out)["pending"] == 1 and json.loads(out)["done"] == 0
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def home_db(home):
    locate(home).ensure()
    return home / "queue.db"


@pytest.mark.parametrize("command", ["paths", "status", "list"])
def test_a_home_that_is_a_file_is_refused_by_every_command(tmp_path, command):
    a_file = tmp_path / "passwd"
    a_file.write_text("root:x:0:0\n")
    done = sloth(command, "--home", str(a_file))
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"sloth-tray: the home folder {a_file} is not a folder\n"
    assert a_file.read_text() == "root:x:0:0\n"


def test_a_home_whose_parent_is_missing_is_refused(tmp_path):
    done = sloth("status", "--home", str(tmp_path / "no" / "such"))
    assert done.returncode == 1
    assert done.stderr.startswith("sloth-tray: no such folder:")
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("argv, option, what", [
    (["status", "--home", ""], "--home", "a folder"),
    (["--home=", "list"], "--home", "a folder"),
    (["status", "--json", "--jobs-dir", ""], "--jobs-dir", "a folder"),
    (["add", "--config", "", "--", "true"], "--config", "a file"),
])
def test_an_option_given_an_empty_name_is_refused_not_taken_as_left_out(
        argv, option, what, tmp_path):
    """`--home "$SLOTH_HOME"` with the variable unset must not quietly use (and write
    into) the default home."""
    done = sloth(*argv, env={"XDG_DATA_HOME": str(tmp_path / "data")})
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (f"sloth-tray: {option} was given an empty name: give it "
                           f"{what}, or leave it out\n")
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("command, said", [
    ("log", "sloth-tray log: the following arguments are required: ID"),
    ("show", "sloth-tray show: the following arguments are required: ID"),
    ("cancel", "sloth-tray: unrecognized arguments: -rf"),
])
def test_a_job_named_with_a_leading_dash_is_shown_how_to_name_it(command, said, tmp_path):
    """The app takes `-rf.sh` as a drop (job `-rf`); `sloth-tray log -rf` reads it as
    options, and said only that ID is missing."""
    done = sloth(command, "-rf", "--home", str(tmp_path / "home"))
    assert (done.returncode, done.stdout) == (2, "")
    how = f"sloth-tray {command}" if command != "cancel" else "sloth-tray COMMAND"
    assert done.stderr == (f"{said}; a job whose name starts with a dash goes after --, as "
                           f"in `{how} -- -rf`\n")
    after = sloth(command, "--home", str(tmp_path / "home"), "--", "-rf")
    assert after.returncode == 1, after.stderr  # after --, a job's name: none has it here


@pytest.mark.parametrize("argv", [
    ["status", "--json", "extra"], ["cancel", "--all-failed", "extra"],
    ["log", f"--home={os.devnull}x"], ["list", "--state", "failed", "extra"],
])
def test_a_mistake_with_no_name_starting_with_a_dash_gets_no_such_hint(argv):
    done = sloth(*argv)
    assert done.returncode == 2 and "starts with a dash" not in done.stderr, done.stderr


def seed(home) -> dict[str, str]:
    locate(home).ensure()
    with Queue(home / "queue.db") as q:
        ids = {"ok": q.push("tidy_downloads"), "bad": q.push("disk_check", max_attempts=1),
               "later": q.push("later", delay=300)}
        q.claim("me")
        q.complete(ids["ok"], "me", "tidy: moved 4 files")
        q.claim("me")
        q.fail(ids["bad"], "me", "disk check: 82% full")
    return ids


def test_list_is_newest_first_in_aligned_columns(home, capsys):
    ids = seed(home)
    code, out, _ = run(capsys, "list", "--home", str(home))
    lines = out.splitlines()
    assert code == 0
    assert lines[0].split() == ["ID", "NAME", "STATE", "TRIES", "WHEN", "NOTE"]
    assert [line.split()[1] for line in lines[1:]] == ["later", "disk_check", "tidy_downloads"]
    assert lines[1].index("pending") == lines[0].index("STATE")
    assert "due in 4m" in lines[1] or "due in 5m" in lines[1]
    assert "disk check: 82% full" in lines[2]
    assert lines[2].split()[0] == ids["bad"][: len(lines[2].split()[0])]


def test_list_json_filters_by_state(home, capsys):
    ids = seed(home)
    code, out, _ = run(capsys, "list", "--state", "failed", "--json", "--home", str(home))
    jobs = json.loads(out)
    assert [job["id"] for job in jobs] == [ids["bad"]]
    assert jobs[0]["state"] == "failed" and jobs[0]["last_error"] == "disk check: 82% full"


def test_show_json_has_the_fields_history_and_logs(home, capsys):
    ids = seed(home)
    code, out, _ = run(capsys, "show", ids["ok"][:8], "--json", "--home", str(home))
    shown = json.loads(out)
    assert shown["id"] == ids["ok"] and shown["result"] == "tidy: moved 4 files"
    assert [event["kind"] for event in shown["history"]] == ["pushed", "claimed", "completed"]
    assert shown["logs"] == str(home / "logs" / f"tidy_downloads-{ids['ok']}")


def test_show_says_the_options_as_a_header_would_and_the_series_clock_as_a_time(home, capsys):
    from sloth_tray.timefmt import clock_time

    locate(home).ensure()
    with Queue(home / "queue.db") as q:
        job_id = q.push("hourly", options={"every": 3600.0, "timeout": 90.0, "grace": 600.0,
                                           "require": "ac", "max_attempts": 3})
        scheduled = q.get(job_id).options["scheduled"]
    code, out, _ = run(capsys, "show", job_id, "--home", str(home))
    (options,) = [line for line in out.splitlines() if line.startswith("options")]
    assert options.split(None, 1)[1] == (
        f"every=1h grace=10m max_attempts=3 require=ac scheduled={clock_time(scheduled)} "
        "timeout=90s")
    (logs,) = [line for line in out.splitlines() if line.startswith("logs")]
    assert logs.endswith("(none yet)")  # it never ran


def test_retry_all_failed_then_cancel_and_the_doorbell_rings(home, capsys):
    ids = seed(home)
    code, out, _ = run(capsys, "retry", "--all-failed", "--home", str(home))
    assert code == 0 and out.startswith("retried   disk_check")
    assert (home / "doorbell" / "ring").exists()
    code, out, err = run(capsys, "cancel", ids["bad"], ids["ok"], "--home", str(home))
    assert code == 1  # the done job cannot be cancelled
    assert out.startswith("cancelled disk_check")
    assert err == f"sloth-tray: tidy_downloads ({ids['ok']}) is done; nothing to cancel\n"


def test_retry_needs_ids_or_all_failed(home, capsys):
    code, _, err = run(capsys, "retry", "--home", str(home))
    assert code == 2 and "give job ids to retry, or --all-failed" in err  # as a usage error


def test_prune_parses_ages(home, capsys):
    seed(home)
    code, out, _ = run(capsys, "prune", "--older-than", "0s", "--home", str(home))
    assert (code, out) == (0, "removed 1 finished job\n")
    with pytest.raises(SystemExit):
        main(["prune", "--older-than", "soon", "--home", str(home)])
    assert "'soon' is not a duration" in capsys.readouterr().err


def test_autostart_round_trips_for_real_under_a_temporary_home(tmp_path):
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / ".config")}
    entry = tmp_path / ".config" / "autostart" / "sloth-tray.desktop"
    enabled = json.loads(sloth("autostart", "enable", "--json", env=env).stdout)
    assert enabled["enabled"] and enabled["where"] == str(entry)
    assert "X-Sloth-Tray=1" in entry.read_text()
    assert json.loads(sloth("autostart", "--json", env=env).stdout)["enabled"]
    assert not json.loads(sloth("autostart", "disable", "--json", env=env).stdout)["enabled"]
    assert not entry.exists()


def test_pause_and_resume_are_kept_in_the_queue_and_ring_the_doorbell(home, capsys):
    ids = seed(home)
    with Queue(home / "queue.db") as q:
        q.retry(ids["bad"])  # due now
    code, out, _ = run(capsys, "pause", "--home", str(home))
    assert code == 0 and out.startswith("paused: no new job starts until `sloth-tray resume`")
    assert (home / "doorbell" / "ring").exists()
    with Queue(home / "queue.db") as q:
        assert q.paused()
    code, out, _ = run(capsys, "status", "--json", "--home", str(home))
    status = json.loads(out)
    assert (status["paused"], status["due_now"], status["pending"]) == (True, 0, 2)
    code, out, _ = run(capsys, "status", "--home", str(home))
    assert ["paused", "yes"] in [line.split() for line in out.splitlines()]
    assert out.splitlines()[-1].endswith("due now (paused)")  # the next job, held back
    (home / "doorbell" / "ring").unlink()
    code, out, _ = run(capsys, "resume", "--home", str(home))
    assert code == 0 and out.startswith("resumed")
    assert (home / "doorbell" / "ring").exists()
    status = json.loads(run(capsys, "status", "--json", "--home", str(home))[1])
    assert (status["paused"], status["due_now"]) == (False, 1)


def test_run_now_hurries_a_waiting_job_and_points_a_failed_one_to_retry(home, capsys):
    ids = seed(home)
    code, out, err = run(capsys, "run-now", ids["later"][:8], "--home", str(home))
    assert (code, err) == (0, "")
    assert out == f"due now   later ({ids['later']})\n"
    assert (home / "doorbell" / "ring").exists()
    with Queue(home / "queue.db") as q:
        assert q.get(ids["later"]).not_before <= q.clock()
        assert q.status()["due_now"] == 1
    code, out, err = run(capsys, "run-now", ids["bad"], "--home", str(home))
    assert code == 1 and out == ""
    assert err == (f"sloth-tray: disk_check ({ids['bad']}) is failed; "
                   f"`sloth-tray retry {ids['bad']}` puts it back in line\n")


def test_run_now_while_paused_says_it_waits_for_resume(home, capsys):
    ids = seed(home)
    run(capsys, "pause", "--home", str(home))
    code, out, _ = run(capsys, "run-now", ids["later"], "--home", str(home))
    assert code == 0
    assert out.splitlines()[-1] == ("the queue is paused: it starts after "
                                    "`sloth-tray resume`")


def test_retry_of_a_waiting_job_says_how_to_start_it_now(home, capsys):
    ids = seed(home)
    code, out, err = run(capsys, "retry", ids["later"], "--home", str(home))
    assert code == 1 and out == ""
    assert err == (f"sloth-tray: later ({ids['later']}) is waiting; "
                   f"`sloth-tray run-now {ids['later']}` starts it now\n")


def test_autostart_records_the_home_and_jobs_folder_it_was_enabled_for(tmp_path, monkeypatch):
    from helpers.desktopfile import read_exec

    from sloth_tray.autostart import parse_desktop_entry

    monkeypatch.delenv("SLOTH_TRAY_CONFIG")  # the default config file, found again at login
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / ".config")}
    app_home = tmp_path / "my sloth $HOME"
    jobs = tmp_path / "jobs 100% \\ \"odd\""
    jobs.mkdir()
    done = sloth("autostart", "enable", "--json", "--home", str(app_home),
                 "--jobs-dir", str(jobs), env=env)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["enabled"] and shown["detail"] == "starts at login"
    assert (shown["home"], shown["jobs_dir"]) == (str(app_home), str(jobs))
    entry = tmp_path / ".config" / "autostart" / "sloth-tray.desktop"
    argv = read_exec(parse_desktop_entry(entry.read_text("utf-8"))["Exec"])
    assert argv[argv.index("--home") + 1] == str(app_home)
    assert argv[argv.index("--jobs-dir") + 1] == str(jobs)
    assert "--config" not in argv  # none was given: the default is found at login

    status = sloth("autostart", "status", "--home", str(app_home), "--jobs-dir", str(jobs),
                   env=env)
    assert status.returncode == 0, status.stderr
    assert f"home:        {app_home}" in status.stdout
    assert f"jobs folder: {jobs}" in status.stdout
    assert "start at login: on — starts at login" in status.stdout
    elsewhere = sloth("autostart", "status", "--home", str(tmp_path / "other"), env=env)
    assert "with another command" in elsewhere.stdout
    assert f"home:        {app_home}" in elsewhere.stdout  # what login would start


def test_autostart_records_a_config_file_given_by_the_environment(tmp_path):
    """A jobs folder the config file names is not copied into the entry: at login
    the file is read again, so an edit of it still counts."""
    config = tmp_path / "conf" / "sloth.toml"
    config.parent.mkdir()
    config.write_text(f'jobs_dir = "{tmp_path / "from-file"}"\n')
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / ".config"),
           "SLOTH_TRAY_CONFIG": str(config), "SLOTH_TRAY_HOME": str(tmp_path / "h")}
    shown = json.loads(sloth("autostart", "enable", "--json", env=env).stdout)
    assert (shown["home"], shown["config"], shown["jobs_dir"]) == (
        str(tmp_path / "h"), str(config), None)


def test_a_command_run_off_the_main_thread_keeps_its_own_errors_plain():
    """Off the main thread SIGINT cannot be touched; an error of the command must not
    read as a failure of that ("During handling of ... signal only works in main
    thread")."""
    import threading

    from sloth_tray.cli import interrupted_at_once

    caught: list[BaseException] = []

    def command() -> None:
        try:
            with interrupted_at_once(True):
                raise RuntimeError("the command's own")
        except RuntimeError as exc:
            caught.append(exc)

    thread = threading.Thread(target=command)
    thread.start()
    thread.join()
    assert len(caught) == 1 and caught[0].__context__ is None


def damaged_queue(home) -> tuple[bytes, str]:
    """A real queue whose page of old finished jobs is garbage, closed cleanly: the
    header and the schema read fine. (Its bytes, and a waiting job's id.)"""
    import random

    home_db(home)
    with Queue(home / "queue.db") as queue:
        for i in range(300):
            queue.push(f"finished-{i:03}")
            job = queue.claim("fixture")
            queue.complete(job.id, "fixture", f"result of finished-{i:03}")
        waiting = queue.push("waiting", delay=3600)
    data = (home / "queue.db").read_bytes()
    page = int.from_bytes(data[16:18], "big")
    at = data.index(b"result of finished-050") // page * page
    damaged = data[:at] + random.Random(7).randbytes(page) + data[at + page:]
    (home / "queue.db").write_bytes(damaged)
    return damaged, waiting


@pytest.mark.parametrize("command", [["list"], ["show", "ID"], ["pause"], ["resume"],
                                     ["cancel", "ID"], ["retry", "ID"], ["run-now", "ID"],
                                     ["prune", "--older-than", "0"], ["add", "SCRIPT"],
                                     ["retry", "--all-failed"]])
def test_no_command_writes_to_a_damaged_queue_and_each_says_so_once(home, tmp_path, command):
    damaged, waiting = damaged_queue(home)
    script = tmp_path / "new.sh"
    script.write_text("echo new\n")
    argv = [{"ID": waiting, "SCRIPT": str(script)}.get(arg, arg) for arg in command]
    done = sloth(*argv, "--home", str(home))
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and "damaged" in done.stderr, done.stderr
    assert "it was left as it is" in done.stderr and "Traceback" not in done.stderr
    assert (home / "queue.db").read_bytes() == damaged
    assert sorted(p.name for p in home.iterdir() if p.name.startswith("queue.db")) == [
        "queue.db"]


@pytest.mark.parametrize("argv, expected", [
    (["step", "n", "--", "cmd", "a"], ("n", ["cmd", "a"], False)),
    (["step", "n", "--ask", "--", "cmd"], ("n", ["cmd"], True)),
    (["step", "--ask", "n", "--", "cmd"], ("n", ["cmd"], True)),
    (["step", "n", "cmd", "-h", "--version"], ("n", ["cmd", "-h", "--version"], False)),
    (["step", "n", "--", "git", "checkout", "--", "f"], ("n", ["git", "checkout", "--", "f"],
                                                         False)),
    (["step", "n", "--", "cmd", "--ask"], ("n", ["cmd", "--ask"], False)),
    (["step", "--", "-n", "--", "cmd"], ("-n", ["cmd"], False)),
    (["step", "--", "-n", "--ask", "--", "cmd"], ("-n", ["cmd"], True)),
    (["--home", "step", "step", "n", "--", "cmd"], ("n", ["cmd"], False)),
    (["step", "n", "--retries", "3", "--ask", "--timeout=2m", "--", "cmd", "--retries", "1"],
     ("n", ["cmd", "--retries", "1"], True, {"retries": 3, "timeout": 120.0})),
    (["step", "--backoff", "10s", "n", "--retries", "0", "--", "cmd"],
     ("n", ["cmd"], False, {"retries": 0, "backoff": 10.0})),
    (["step", "--", "-n", "--retries=2", "--", "cmd"], ("-n", ["cmd"], False, {"retries": 2})),
])
def test_step_takes_its_name_ask_and_the_whole_command_after_the_double_dash(
        monkeypatch, argv, expected):
    from sloth_tray.cli import step

    seen = []
    monkeypatch.setattr(step, "main", lambda name, command, *, ask, **how: seen.append(
        (name, command, ask, *([{k: v for k, v in how.items() if v is not None}] if any(
            v is not None for v in how.values()) else []))) or 0)
    monkeypatch.delenv("SLOTH_TRAY_CONFIG")  # no settings are read: the run names its queue
    assert main(argv) == 0
    assert seen == [expected]


@pytest.mark.parametrize("argv, words", [
    (["step", "n", "--retries", "101", "--", "cmd"], "--retries: '101' is not a whole number"),
    (["step", "n", "--backoff", "2d", "--", "cmd"], "--backoff: '2d' is not a duration"),
    (["step", "n", "--timeout", "0", "--", "cmd"], "--timeout: '0' is not a duration"),
    (["step", "--retries", "-1", "n", "--", "cmd"], "--retries"),
    (["step", "--retries", "3", "--", "cmd"], "a step's NAME goes before `--`"),
])
def test_a_steps_bad_tries_are_one_sentence_and_exit_2(monkeypatch, capsys, argv, words):
    monkeypatch.delenv("SLOTH_TRAY_CONFIG")
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own exit, for an option before NAME
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err, err


def unsure_job(home) -> str:
    """A job whose run was cut short in a step that asks (a quit): failed step_unsure."""
    from sloth_tray.for_jobs import sloth_step

    locate(home).ensure()
    with Queue(home / "queue.db") as q:
        job_id = q.push("invoice")
        q.claim("me", token="t1")
        run = sloth_step.Run(str(home / "queue.db"), job_id, "t1", "me")
        sloth_step.begin(q._db, run, "send", ask=True, kind="shell", now=q.clock())
        q.release(job_id, "me")
        assert q.get(job_id).reason == "step_unsure"
    return job_id


def test_retry_all_failed_leaves_a_step_that_asks_to_its_own_retry(home, capsys):
    """Retry all never answers a step's question for the user: the step may have
    happened, and only a retry of that job (or --step-done) says what to do."""
    job_id = unsure_job(home)
    code, out, _ = run(capsys, "retry", "--all-failed", "--home", str(home))
    assert code == 0
    assert out.splitlines() == [
        f"skipped 1 job that asks about a step cut short: `sloth-tray retry {job_id}` runs "
        f"the step again, `sloth-tray retry {job_id} --step-done NAME` says it happened",
        "nothing else to retry"]
    with Queue(home / "queue.db") as q:
        assert q.get(job_id).state == "failed"
