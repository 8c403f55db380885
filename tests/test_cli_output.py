"""What the command line prints: one line for a bad argument, nothing when its reader
goes away, and never a raw control character from a job's name, result or output."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys

import pytest

from sloth_tray.cli import main
from sloth_tray.daemon.app import log, setup_logging
from sloth_tray.paths import locate
from sloth_tray.store.queue import Queue
from sloth_tray.text import printable

CONTROLS = ["\x1b", "\x07", "\x9b", "\x7f", "\u202e", "\u2066", "\r", "\x00", "\u2028"]


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def sloth(*argv: str, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sloth_tray", *argv], capture_output=True,
                          text=True, timeout=60, **kwargs)


def no_jobs(home) -> bool:
    if not (home / "queue.db").exists():
        return True
    with Queue(home / "queue.db") as queue:
        return queue.jobs() == []


# -- a bad number on the command line -------------------------------------------------


@pytest.mark.parametrize("argv, flag, accepted", [
    (["add", "JOB", "--max-attempts", "0"], "--max-attempts", "between 1 and 1000"),
    (["add", "JOB", "--max-attempts", "18446744073709551616"], "--max-attempts",
     "between 1 and 1000"),
    (["add", "JOB", "--max-attempts", "３"], "--max-attempts", "between 1 and 1000"),
    (["add", "JOB", "--delay", "99999999999999999999d"], "--delay", "between 0s and 3650d"),
    (["add", "JOB", "--delay", "9" * 400], "--delay", "between 0s and 3650d"),
    (["list", "--limit", "-1"], "--limit", "between 0 and 1000000"),
    (["list", "--limit", "9" * 5000], "--limit", "between 0 and 1000000"),
    (["prune", "--older-than", "99999d"], "--older-than", "between 0s and 3650d"),
    (["prune", "--older-than", "-1d"], "--older-than", "between 0s and 3650d"),
    (["add", "JOB", "--delay", "-90s"], "--delay", "between 0s and 3650d"),
    (["add", "JOB", "--delay", "-1.5h"], "--delay", "between 0s and 3650d"),
    (["run", "--headless", "--lease", "0"], "--lease", "between 1s and 1d"),
    (["work", "--once", "--lease", "0.001"], "--lease", "between 1s and 1d"),
])
def test_a_number_out_of_range_on_the_command_line_is_one_line_and_nothing_happens(
        tmp_path, home, capsys, argv, flag, accepted):
    script = tmp_path / "job.sh"
    script.write_text("echo hi\n")
    argv = [str(script) if arg == "JOB" else arg for arg in argv]
    code, out, err = run(capsys, *argv, "--home", str(home))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert err.startswith(f"sloth-tray {argv[0]}: argument {flag}: ") and accepted in err
    assert no_jobs(home)


@pytest.mark.parametrize("argv", [["prune", "--older-than=--"], ["list", "--limit=--"],
                                  ["add", "JOB", "--delay=--"]])
def test_a_double_dash_as_a_number_is_one_line_not_an_empty_list(tmp_path, home, capsys, argv):
    argv = [str(tmp_path) if arg == "JOB" else arg for arg in argv]
    code, out, err = run(capsys, *argv, "--home", str(home))
    assert (code, out) == (2, "")
    assert err == f"sloth-tray {argv[0]}: argument {argv[-1][:-3]}: expected one value\n"


def test_run_with_a_zero_lease_is_one_line_from_the_real_entry_point(home):
    done = sloth("run", "--headless", "--lease", "0", "--home", str(home))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr == ("sloth-tray run: argument --lease: '0' is not a duration between "
                           "1s and 1d: use a number of seconds, or a number followed by s, m, "
                           "h or d (90, 90s, 10m, 2h, 1d)\n")


def test_a_header_too_big_for_the_database_is_refused_by_add_and_nothing_is_queued(
        tmp_path, home, capsys):
    script = tmp_path / "many.sh"
    script.write_text("# sloth: max_attempts=99999999999999999999\necho hi\n")
    code, out, err = run(capsys, "add", str(script), "--home", str(home))
    assert code == 1 and out == ""
    assert err == ("sloth-tray: many.sh, line 1: bad value '99999999999999999999' for "
                   "max_attempts: use a whole number between 1 and 1000; nothing was queued\n")
    assert no_jobs(home)


# -- a reader that goes away ---------------------------------------------------------


def test_list_json_into_head_exits_quietly(home):
    locate(home).ensure()
    with Queue(home / "queue.db") as queue:
        for number in range(200):
            queue.push(f"job{number}-" + "x" * 5000)  # ~1 MB of JSON: far past a pipe's buffer
    proc = subprocess.Popen([sys.executable, "-m", "sloth_tray", "list", "--json", "--limit",
                             "0", "--home", str(home)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"[\n"
        proc.stdout.close()  # like `| head -1`
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert err == ""
    assert code == 128 + signal.SIGPIPE  # as a Unix tool stopped by SIGPIPE says


# -- control characters never reach the terminal ----------------------------------------


def test_display_escapes_every_control_and_bidi_character_and_nothing_else():
    plain = "plain — ünïcödé 漢字 🙂 C:\\path"
    assert printable(plain) == plain
    assert printable("a\nb\tc\rd") == "a\\nb\\tc\\rd"
    assert printable("\x1b]0;title\x07\x1b[2J") == "\\x1b]0;title\\x07\\x1b[2J"
    assert printable("\x00\x7f\x85\x9b") == "\\x00\\x7f\\x85\\x9b"
    assert printable("\u202egnp.exe \u2066x\u2069 \u200f") == \
        "\\u202egnp.exe \\u2066x\\u2069 \\u200f"
    assert printable("line\u2028sep\udcff") == "line\\u2028sep\\udcff"
    for char in CONTROLS:
        assert char not in printable(f"a{char}b")


EVIL_NAME = "evil\nabcdef123456  forged  done  1/5  now\x1b]0;owned\x07"
EVIL_RESULT = "\x1b[2Jall clear\u202etxt.exe"


def seed_evil(home) -> str:
    locate(home).ensure()
    with Queue(home / "queue.db") as queue:
        job_id = queue.push(EVIL_NAME)
        queue.claim("me")
        queue.complete(job_id, "me", EVIL_RESULT)
        queue.push("failing\u202e", max_attempts=1)
        queue.claim("me")
        other = queue.jobs()[0].id
        queue.fail(other, "me", "boom\x1b[31m red\x9b")
    return job_id


def assert_clean(text: str) -> None:
    for char in CONTROLS:
        assert char not in text, (char, text)


def test_list_escapes_names_and_notes_and_cannot_be_forged(home, capsys):
    seed_evil(home)
    code, out, _ = run(capsys, "list", "--home", str(home))
    assert code == 0
    assert_clean(out)
    assert len(out.splitlines()) == 3  # the header and two jobs: no forged row
    assert "evil\\nabcdef123456" in out and "\\x1b]0;owned\\x07" in out
    assert "\\x1b[2Jall clear\\u202etxt.exe" in out and "boom\\x1b[31m red\\x9b" in out


def test_show_escapes_every_field_and_the_history(home, capsys):
    job_id = seed_evil(home)
    code, out, _ = run(capsys, "show", job_id, "--home", str(home))
    assert code == 0
    assert_clean(out)
    assert "evil\\nabcdef123456" in out and "\\x1b[2Jall clear\\u202etxt.exe" in out


def test_json_stays_exact(home, capsys):
    job_id = seed_evil(home)
    code, out, _ = run(capsys, "show", job_id, "--json", "--home", str(home))
    shown = json.loads(out)
    assert shown["name"] == EVIL_NAME and shown["result"] == EVIL_RESULT


def test_paths_config_and_error_lines_escape_what_the_user_gave(tmp_path, capsys, monkeypatch):
    odd = tmp_path / "odd\x1b[2J\nhome"
    code, out, _ = run(capsys, "paths", "--home", str(odd))
    assert code == 0 and len(out.splitlines()) == 4
    assert_clean(out)
    monkeypatch.setenv("SLOTH_TRAY_JOBS", str(tmp_path / "jobs\u202e"))
    code, out, _ = run(capsys, "config", "--home", str(tmp_path / "home"))
    assert code == 0 and "jobs\\u202e" in out
    assert_clean(out)
    code, _, err = run(capsys, "add", str(tmp_path / "no\x1b[2Jsuch"), "--home",
                       str(tmp_path / "home"))
    assert code == 1 and err.count("\n") == 1 and "no\\x1b[2Jsuch" in err
    assert_clean(err)


# -- the app's log on a full disk -------------------------------------------------------


@pytest.fixture
def app_log(monkeypatch):
    """setup_logging's handlers, removed again afterwards, and the switches of logging
    it turns off for the whole process, back as they were."""
    import logging

    for switch in ("_srcfile", "logThreads", "logProcesses", "logMultiprocessing"):
        monkeypatch.setattr(logging, switch, getattr(logging, switch))
    before = list(log.handlers)
    yield log
    for handler in log.handlers[len(before):]:
        log.removeHandler(handler)
        handler.close()


def test_a_log_that_cannot_be_written_is_said_once_not_a_traceback_per_line(
        tmp_path, capsys, app_log):
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    home = locate(tmp_path / "home").ensure()
    (home.logs / "sloth-tray.log").symlink_to("/dev/full")  # every write: ENOSPC
    setup_logging(home, to_stderr=False)
    for number in range(50):
        app_log.info("line %d", number)
    err = capsys.readouterr().err
    assert "Logging error" not in err and "Traceback" not in err
    assert err.count("\n") == 1, err
    assert err.startswith(f"sloth-tray: cannot write the log {home.logs / 'sloth-tray.log'}: ")
    assert "No space left on device" in err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mount")
def test_a_full_log_disk_is_said_once_and_again_only_after_it_worked(tmp_path, capsys, app_log):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    home = locate(tmp_path / "home").ensure()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs",
                              str(home.logs)], capture_output=True, text=True, timeout=30)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    filler = home.logs / "filler"
    try:
        setup_logging(home, to_stderr=False)
        app_log.info("first line")
        fill(filler)
        for number in range(100):
            app_log.info("line %d %s", number, "x" * 200)
        first = capsys.readouterr().err
        assert first.count("\n") == 1 and "No space left on device" in first
        assert "Logging error" not in first
        filler.unlink()
        app_log.info("room again")
        assert capsys.readouterr().err == ""
        assert "room again" in (home.logs / "sloth-tray.log").read_text()
        fill(filler)
        for number in range(100):
            app_log.info("full again %d %s", number, "x" * 200)
        second = capsys.readouterr().err
        assert second.count("\n") == 1 and "No space left on device" in second
    finally:
        for handler in app_log.handlers:
            if isinstance(handler, logging.FileHandler):
                with contextlib.suppress(OSError):
                    handler.close()  # before the unmount: it holds the log open
        if subprocess.run(["umount", str(home.logs)], capture_output=True, timeout=30).returncode:
            subprocess.run(["umount", "-l", str(home.logs)], capture_output=True, timeout=30)


def fill(path) -> None:
    """Write until the file system says it is full."""
    with open(path, "ab", buffering=0) as file:
        try:
            while True:
                file.write(b"\0" * 4096)
        except OSError:
            pass



def test_a_home_with_undecodable_bytes_prints_in_a_strict_utf8_terminal(tmp_path):
    odd = os.fsencode(tmp_path) + b"/odd\xff"
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict"}
    done = subprocess.run([sys.executable, "-m", "sloth_tray", "paths", "--json", "--home", odd],
                          capture_output=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["home"] == os.fsdecode(odd)
    done = subprocess.run([sys.executable, "-m", "sloth_tray", "paths", "--home", odd],
                          capture_output=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert b"odd\\udcff" in done.stdout


def test_the_app_log_rotates_at_its_size_and_keeps_its_backups(tmp_path, app_log, monkeypatch):
    from sloth_tray.daemon import app

    monkeypatch.setattr(app, "APP_LOG_BYTES", 1000)
    home = locate(tmp_path / "home").ensure()
    setup_logging(home, to_stderr=False)
    for number in range(200):
        app_log.info("line %03d %s", number, "x" * 40)
    for handler in app_log.handlers:
        handler.flush()
    files = sorted(p.name for p in home.logs.iterdir())
    assert files == ["sloth-tray.log", "sloth-tray.log.1", "sloth-tray.log.2",
                     "sloth-tray.log.3"]
    assert all((home.logs / name).stat().st_size <= 1000 for name in files)
    newest = (home.logs / "sloth-tray.log").read_text().splitlines()
    assert newest[-1].endswith(f"line 199 {'x' * 40}")
    # Nothing lost between the files that are kept: each ends where the next begins.
    kept = [line.split()[4] for name in reversed(files)
            for line in (home.logs / name).read_text().splitlines()]
    assert kept == [f"{n:03d}" for n in range(int(kept[0]), 200)]


# -- a job's steps, as `show` prints them -------------------------------------------------

STEP_NAME = "pay\u202etxt.exe"  # a name may hold a bidi control: shown escaped, kept exact


def seed_steps(home) -> str:
    """A done job whose run recorded two steps: one done (binary output), one failed."""
    import sqlite3

    from sloth_tray.for_jobs import sloth_step

    locate(home).ensure()
    with Queue(home / "queue.db") as queue:
        job_id = queue.push("stepped", max_attempts=1)
        queue.claim("me")
        assert queue.started(job_id, "me", {"token": "tok"})
        run = sloth_step.Run(str(home / "queue.db"), job_id, "tok", "me")
        db = sqlite3.connect(home / "queue.db", isolation_level=None)
        try:
            for name, ok, output in ((STEP_NAME, True, b"r\x00\n\x1b[2J"), ("send", False, b"")):
                began = sloth_step.begin(db, run, name, ask=False, kind="shell", now=100.0)
                assert sloth_step.finish(db, run, name, began.occurrence, ok=ok,
                                         exit_code=0 if ok else 4, output=output,
                                         output_size=len(output), now=101.0)
        finally:
            db.close()
        queue.complete(job_id, "me", "ok")
    return job_id


def test_show_lists_steps_escaped_and_json_stays_exact(home, capsys):
    job_id = seed_steps(home)
    code, out, _ = run(capsys, "show", job_id, "--home", str(home))
    assert code == 0
    assert_clean(out)
    rows = out.split("\nsteps\n")[1].splitlines()
    assert len(rows) == 2 and "pay\\u202etxt.exe" in rows[0] and "done" in rows[0]
    assert "failed (exit 4)" in rows[1] and "run 1" in rows[1]
    code, out, _ = run(capsys, "show", job_id, "--json", "--home", str(home))
    steps = json.loads(out)["steps"]
    assert [(s["name"], s["occurrence"], s["state"], s["run"], s["exit_code"],
             s["started_at"], s["ended_at"]) for s in steps] == [
        (STEP_NAME, 1, "done", 1, 0, 100.0, 101.0), ("send", 1, "failed", 1, 4, 100.0, 101.0)]


def test_show_step_prints_its_output_exactly_as_kept(home, capsysbinary):
    job_id = seed_steps(home)
    assert main(["show", job_id, "--step", STEP_NAME, "--home", str(home)]) == 0
    assert capsysbinary.readouterr().out == b"r\x00\n\x1b[2J"  # bytes for a pipe, as kept
    assert main(["show", job_id, "--step", "send", "--home", str(home)]) == 1
    out, err = capsysbinary.readouterr()
    assert out == b"" and err == b'sloth-tray: step "send" is failed: only a done step\'s ' \
        b"output is kept\n"


@pytest.mark.parametrize("argv, fine", [
    (["retry", "ID", "--from", "a", "--fresh"], ["retry", "ID", "--from", "a"]),
    (["retry", "ID", "--fresh", "--step-done", "a"], ["retry", "ID", "--step-done", "a"]),
    (["show", "ID", "--step", "a", "--occurrence", "0"], ["show", "ID", "--step", "a",
                                                          "--occurrence", "1"]),
    (["show", "ID", "--occurrence", "2"], ["show", "ID", "--step", "a", "--occurrence", "2"]),
])
def test_step_options_that_cannot_go_together_are_one_line(home, capsys, argv, fine):
    code, out, err = run(capsys, *argv, "--home", str(home))
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("sloth-tray")
    assert no_jobs(home)
    code, out, err = run(capsys, *fine, "--home", str(home))  # each alone is understood
    said = f"there is no queue in {home} yet: no job was ever added there" \
        if fine[0] == "show" else "no job has the id or name 'ID'"  # show reads; retry makes
    assert (code, out, err) == (1, "", f"sloth-tray: {said}\n")
