"""Each command imports only what it uses: `sloth-tray status` must answer as fast as
an interpreter that opens SQLite, not pay for the daemon, the tray or the desktop.
How fast it is, is measured by tests/bench/compare.py; here, what it loads."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Never needed to read the queue and print: the daemon and what only it uses.
HEAVY = ("sloth_tray.daemon", "sloth_tray.daemon.app", "sloth_tray.daemon.engine",
         "sloth_tray.daemon.runner", "sloth_tray.daemon.inbox", "sloth_tray.tray",
         "sloth_tray.tray.tray", "sloth_tray.autostart", "sloth_tray.store.spool",
         "sloth_tray.desktop",
         "PIL", "pystray", "watchdog", "asyncio", "dbus_fast", "croniter", "dateutil",
         "subprocess", "logging", "hmac", "ssl", "tomllib", "mcp", "sloth_tray.mcp")


def loaded(*args: str, code: str | None = None) -> set[str]:
    """The modules a fresh interpreter has loaded after running the command."""
    script = code or ("import runpy, sys; sys.argv = ['sloth-tray', *sys.argv[1:]]\n"
                      "try:\n    runpy.run_module('sloth_tray', run_name='__main__')\n"
                      "except SystemExit:\n    pass\n")
    probe = script + "\nimport sys as _s; print(' '.join(sorted(_s.modules)), file=_s.stderr)"
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True,
                          timeout=60)
    return set(done.stderr.strip().splitlines()[-1].split())


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_importing_the_command_line_loads_nothing_of_the_daemon_or_the_tray():
    assert heavy(loaded(code="import sloth_tray.cli")) == []


@pytest.mark.parametrize("command", [["status", "--json"], ["status"], ["list"],
                                     ["list", "--json"], ["paths", "--json"]])
def test_reading_commands_load_nothing_they_do_not_use(tmp_path, command):
    assert heavy(loaded(*command, "--home", str(tmp_path / "home"))) == []


# What `status` does without: the queue's writing code (store/reads.py reads), dataclasses
# and typing (a fifth of its time), and the calendar unless a calendar job waits.
# hashlib loads OpenSSL (5 ms): only a step's key needs it (sloth_step, a job's).
# argparse (and gettext, locale) only for a line that is not plain (cli/glance.py);
# signal's enums and threading for nothing a look does; unicodedata only for a line with
# a control character to show (text.printable).
GLANCE_NEVER = ("sloth_tray.store.queue", "sloth_tray.jobs.header", "dataclasses", "typing",
                "hashlib", "argparse", "gettext", "signal", "threading", "inspect",
                "unicodedata")
CALENDAR = ("sloth_tray.jobs.schedule", "zoneinfo", "croniter")


# A step runs COMMAND (subprocess), passing on the signals that end it (signal, and a
# thread that copies its output).
STEP_RUNS_WITH = {"subprocess", "signal", "threading"}


def test_the_step_command_loads_only_the_command_line_and_sloth_step():
    """`sloth-tray step` runs once per step of every job's shell script: it must not
    pay for the queue's writing code, the daemon or the tray."""
    modules = loaded(code="import sloth_tray.cli.step")
    assert heavy(modules - STEP_RUNS_WITH) == []
    assert "sloth_tray.for_jobs.sloth_step" in modules
    assert sorted(m for m in GLANCE_NEVER if m in modules - STEP_RUNS_WITH) == []


def test_list_show_and_log_read_without_the_queue_or_argparse(tmp_path):
    """`list`, `show` and `log` are looks: the queue's functions on a connection that
    only reads (store/queries.py), not the Queue, its writing code or its dataclasses,
    and `log` without the watch `log -f` needs."""
    from sloth_tray.paths import locate
    from sloth_tray.store.queue import Queue

    home = locate(tmp_path / "home").ensure()
    with Queue(home.db) as queue:
        ran = queue.push("ran")
        queue.claim("test")
        queue.complete(ran, "test", "fine")
        queue.push("waits", options={"require": "ac"})
        queue.set_unmet({"ac"})
    logs = home.job_logs(ran, "ran")
    logs.mkdir(parents=True)
    (logs / "1.log").write_text("output\n")
    for command in (["list"], ["list", "--json"], ["list", "--all-runs", "--state", "done"],
                    ["show", ran], ["show", "ran", "--json"], ["log", ran],
                    ["paths"], ["config"]):
        modules = loaded(*command, "--home", str(home.root))
        assert heavy(modules) == [], command
        assert sorted(m for m in GLANCE_NEVER if m in modules) == [], command
        assert sorted(m for m in CALENDAR if m in modules) == [], command
        if command[0] in ("list", "show", "log"):
            assert "sloth_tray.store.queries" in modules, command
    assert "sloth_tray.jobs.conditions" in loaded("list", "--home", str(home.root))


def test_version_and_a_step_parse_without_argparse():
    """`--version`, and `sloth-tray step NAME -- COMMAND` (each step of a job's shell
    script: twenty a job are twenty start-ups) read their line without argparse."""
    for command in (["--version"], ["step", "fetch", "--"]):
        modules = loaded(*command) - STEP_RUNS_WITH
        assert sorted(m for m in GLANCE_NEVER if m in modules) == [], command
        assert heavy(modules) == [], command


def test_a_skipped_step_loads_nothing_that_runs_its_command(tmp_path):
    """A shell job's twenty `sloth-tray step NAME -- ...` calls, done in an earlier run:
    each writes its output again and runs nothing, so it loads neither subprocess nor
    argparse: it costs what a glance costs. (signal, and threading for sloth_step's
    lock, a job's own Python steps need too.)"""
    from sloth_tray.for_jobs import sloth_step
    from sloth_tray.store.queue import Queue

    with Queue(tmp_path / "queue.db", lease_seconds=3600) as queue:
        job = queue.push("job")
        queue.claim("first", token="first-run")
        run = sloth_step.Run(str(queue.path), job, "first-run", "first")
        db = sloth_step.connection(run.queue)
        try:
            decision = sloth_step.start(db, run, "fetch", ask=False, kind="shell")
            assert sloth_step.end(db, run, "fetch", decision.occurrence, ok=True, output=b"")
        finally:
            db.close()
        queue.release(job, "first")
        queue.claim("second", token="second-run")
    env = {sloth_step.QUEUE_ENV: str(queue.path), sloth_step.JOB_ENV: job,
           sloth_step.TOKEN_ENV: "second-run", sloth_step.OWNER_ENV: "second"}
    script = ("import os, runpy, sys; sys.argv = ['sloth-tray', *sys.argv[1:]]\n"
              f"os.environ.update({env!r})\n"
              "try:\n    runpy.run_module('sloth_tray', run_name='__main__')\n"
              "except SystemExit as end:\n    assert end.code == 0, end.code\n")
    modules = loaded("step", "fetch", "--", "false", code=script)
    assert "sloth_tray.for_jobs.sloth_step" in modules
    assert sorted(m for m in GLANCE_NEVER + ("subprocess", "selectors", "locale")
                  if m in modules - {"signal", "threading"}) == []
    assert heavy(modules) == []


@pytest.mark.parametrize("waiting, calendar", [(None, False), ({"every": 3600.0}, False),
                                               ({"at": "09:00"}, True)])
def test_status_loads_only_what_a_glance_needs(tmp_path, waiting, calendar):
    from sloth_tray.paths import locate
    from sloth_tray.store.queue import Queue

    home = locate(tmp_path / "home").ensure()
    with Queue(home.db) as queue:
        if waiting is not None:
            queue.push("recurring", options=waiting)
    # The home given after the command, and before it as the usage line shows it
    for line in (["status", "--json", "--home", str(home.root)],
                 ["status", "--home", str(home.root)], ["--home", str(home.root), "status"]):
        modules = loaded(*line)
        assert "sloth_tray.store.reads" in modules
        assert sorted(m for m in GLANCE_NEVER if m in modules) == []
        assert ("sloth_tray.jobs.overdue" in modules) == (waiting is not None)
        assert ("sloth_tray.jobs.schedule" in modules) == calendar
        if not calendar:
            assert sorted(m for m in CALENDAR if m in modules) == []


def test_schedules_reads_the_queue_without_its_writing_code(tmp_path):
    """`schedules` is a look: the queue's writing code and the daemon stay unloaded."""
    from sloth_tray.paths import locate
    from sloth_tray.store.queue import Queue

    home = locate(tmp_path / "home").ensure()
    with Queue(home.db) as queue:
        queue.push("recurring", options={"every": 3600.0})
    for command in (["schedules", "--json"], ["schedules"]):
        modules = loaded(*command, "--home", str(home.root))
        assert "sloth_tray.store.schedules" in modules
        assert heavy(modules) == []
        assert sorted(m for m in GLANCE_NEVER if m in modules) == []
        assert sorted(m for m in CALENDAR if m in modules) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="no display is a Linux notion")
def test_the_app_with_no_display_runs_headless_without_loading_the_tray(tmp_path, pids):
    """`sloth-tray` on a server: one line, then the daemon, with neither Pillow nor
    pystray in memory (what `run --headless` holds, not 6 MB more)."""
    from helpers.processes import mapped, wait_for

    home = tmp_path / "home"
    app = pids.popen([sys.executable, "-m", "sloth_tray", "run", "--home", str(home)],
                     env=headless_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    app_log = home / "logs" / "sloth-tray.log"
    wait_for(lambda: app_log.exists() and "running headless" in app_log.read_text(),
             what="the app to say it runs headless")
    assert not mapped(app.pid, "_imaging") and not mapped(app.pid, "pystray")


def test_the_app_as_login_starts_it_reads_its_line_without_argparse(tmp_path, pids):
    """Login starts the app as `sloth-tray --home DIR` (autostart/command.py), and it
    runs for days: argparse and gettext would stay in its memory all along.
    Told by the interpreter's own list of imports (-X importtime), once the app holds
    its home's lock: its command line was read long before."""
    from helpers.processes import wait_for

    from sloth_tray import instance
    from sloth_tray.paths import locate

    home = locate(tmp_path / "home")
    imports = tmp_path / "imports.txt"
    with imports.open("w") as said:
        app = pids.popen([sys.executable, "-X", "importtime", "-m", "sloth_tray",
                          "--home", str(home.root), "--jobs-dir", str(tmp_path / "jobs"),
                          "--config", str(tmp_path / "none.toml")],
                         env=headless_env(), stdout=subprocess.DEVNULL, stderr=said)
        wait_for(lambda: instance.pid_in(home.lock) == app.pid, what="the app to hold its home")
    imported = {line.rsplit("|", 1)[-1].strip() for line in imports.read_text().splitlines()
                if line.startswith("import time:")}
    assert "sloth_tray.daemon.app" in imported  # the list is the app's
    assert sorted({"argparse", "gettext"} & imported) == []


def headless_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}


def test_the_tray_and_the_daemon_never_import_the_mcp_sdk():
    """The MCP SDK is `sloth-tray mcp`'s alone (an extra, and a second of imports): the
    app that runs the jobs, its tray and its daemon load none of it."""
    modules = loaded(code="import sloth_tray.daemon.app, sloth_tray.tray.tray, "
                          "sloth_tray.daemon.engine, sloth_tray.cli.entry")
    assert sorted(m for m in modules if m.split(".")[0] in ("mcp", "mcp_types")
                  or m.startswith("sloth_tray.mcp")) == []


def test_the_queue_scripts_import_is_the_apps_own():
    """`from sloth_tray.queue import Queue` is the name promised to scripts outside the
    app: the same class, with the same way in, wherever the app keeps it."""
    import inspect

    from sloth_tray import queue as public
    from sloth_tray.store import queue as store
    from sloth_tray.store import reasons, states

    assert public.Queue is store.Queue and public.Job is store.Job
    assert public.State is states.State and public.Reason is reasons.Reason
    assert str(inspect.signature(public.Queue)) == str(inspect.signature(store.Queue))
    assert "path" in inspect.signature(public.Queue).parameters


def test_the_queue_runs_none_of_what_a_job_runs():
    """A job's side of steps (for_jobs/sloth_step.py) is a job's to run: the queue's side
    is store/steps.py, and neither the queue nor `status` loads the job's."""
    assert "sloth_tray.store.steps" in loaded(code="import sloth_tray.store.queue")
    for code in ("import sloth_tray.store.queue", "import sloth_tray.store.reads"):
        assert sorted(m for m in loaded(code=code) if m.startswith("sloth_tray.for_jobs")) == []


def test_the_app_holds_only_the_words_it_shares_with_a_job():
    """The app hands every run its environment's names and reads back its last words
    (for_jobs/step_env.py), but never runs a step: the job's library (sloth_step and
    its parts, a third of a megabyte) stays out of the memory of an app that runs for
    days."""
    modules = loaded(code="import sloth_tray.cli.daemons, sloth_tray.daemon.app, "
                          "sloth_tray.daemon.engine, sloth_tray.daemon.runner")
    assert sorted(m for m in modules if m.startswith("sloth_tray.for_jobs.")) == [
        "sloth_tray.for_jobs.step_env"]


def test_a_glance_without_a_home_named_loads_no_platformdirs(tmp_path, monkeypatch):
    """The default home and config.toml are found as platformdirs finds them, without it
    (and the tempfile, shutil and compression modules it brings) on Linux."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the XDG folders are worked out here on Linux only")
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("SLOTH_TRAY_HOME", "SLOTH_TRAY_CONFIG", "XDG_DATA_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    for command in (["status", "--json"], ["status"], ["schedules"]):
        modules = loaded(*command)
        assert sorted(m for m in ("platformdirs", "tempfile", "shutil", "bz2", "lzma")
                      if m in modules) == [], command


def test_in_a_virtual_environment_the_app_finds_its_command_without_sysconfig():
    """Started as `python -m sloth_tray` from a virtual environment (the tests run in
    one), the app finds the folder of its `sloth-tray` command, for its jobs' PATH,
    where sysconfig would (the environment's own scripts), without loading sysconfig:
    its tables held 0.4 MiB for as long as the app ran."""
    import sysconfig

    if sys.prefix == sys.base_prefix:
        pytest.skip("not run from a virtual environment")
    done = subprocess.run([sys.executable, "-c", (
        "import sys; from sloth_tray.daemon import jobenv; print(jobenv.own_command_folder()); "
        "print('sysconfig' in sys.modules)")], capture_output=True, text=True, timeout=60,
        check=True)
    folder, loaded_sysconfig = done.stdout.split()
    assert folder == str(Path(sysconfig.get_path("scripts")).absolute())
    assert loaded_sysconfig == "False"


# pathlib brings urllib.parse and ipaddress (about 3 ms), contextlib half a millisecond:
# a third of what a look costs on top of a bare interpreter. A look's home is text. And
# no module a look passes through says `from __future__ import annotations`, which
# loads a module of its own.
LOOK_NEVER = ("pathlib", "urllib", "urllib.parse", "ipaddress", "fnmatch", "contextlib",
              "__future__")
CHECKOUT = str(Path(__file__).resolve().parent.parent)


def loaded_alone(*args: str) -> set[str]:
    """The modules the command loads itself: run without site (-S), as the checkout's
    package, since an editable install's finder, which site runs at every start of its
    interpreter, imports pathlib before any command does."""
    script = ("import sys; sys.path.insert(0, sys.argv.pop(1))\n"
              "sys.argv = ['sloth-tray', *sys.argv[1:]]\n"
              "from sloth_tray.cli import main\n"
              "try:\n    code = main()\nexcept SystemExit as end:\n    code = end.code\n"
              "print(code, ' '.join(sorted(sys.modules)), file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-S", "-c", script, CHECKOUT, *args],
                          capture_output=True, text=True, timeout=60)
    code, _, modules = done.stderr.strip().splitlines()[-1].partition(" ")
    assert code == "0", (args, done.stderr)
    return set(modules.split())


def test_every_look_reads_its_home_as_text_without_pathlib(tmp_path):
    """The looks a person types (compare.py times each against a bare interpreter) work
    on their home's paths as text: none loads pathlib, the URL modules it brings, or
    contextlib, on a home whose app ran a job that left a log and a schedule."""
    from sloth_tray.paths import locate
    from sloth_tray.store.queue import Queue

    home = locate(tmp_path / "home").ensure()
    with Queue(home.db) as queue:
        ran = queue.push("ran")
        queue.claim("test")
        queue.complete(ran, "test", "fine")
        queue.push("hourly", options={"every": 3600.0})
        queue.push("waits", options={"require": "ac"})
        queue.set_unmet({"ac"})
    logs = home.job_logs(ran, "ran")
    logs.mkdir(parents=True)
    (logs / "1.log").write_text("output\n")
    at = ["--home", str(home.root)]
    for line in (["status", "--json"], ["status"], ["list"], ["list", "--json"],
                 ["list", "--state", "done"], ["show", ran], ["show", "ran", "--json"],
                 ["log", ran], ["schedules"], ["schedules", "--json"], ["paths"],
                 ["paths", "--json"], ["config"], ["config", "--json"]):
        for words in ([*line, *at], [*at, *line]):
            modules = loaded_alone(*words)
            assert "sloth_tray.paths" in modules, words
            assert sorted(m for m in LOOK_NEVER if m in modules) == [], words


def test_a_look_on_a_home_never_made_loads_no_pathlib_either(tmp_path):
    """No home yet: `status` says so, and still reads its (absent) home as text."""
    modules = loaded_alone("status", "--json", "--home", str(tmp_path / "none"))
    assert sorted(m for m in LOOK_NEVER if m in modules) == []



def test_status_loads_no_other_looks_code_and_no_limits(tmp_path):
    """`status` is the look typed most (and a shell job's steps pay its start): it loads
    its own module, not the other looks' (cli/reading.py), and reads no number against
    a limit, so limits.py stays unloaded too, on a home whose app ran a job."""
    from sloth_tray.paths import locate
    from sloth_tray.store.queue import Queue

    home = locate(tmp_path / "home").ensure()
    with Queue(home.db) as queue:
        queue.push("waits")
    for line in (["status", "--json"], ["status"], ["--home", str(home.root), "status"]):
        modules = loaded_alone(*line, *([] if line[0] == "--home" else
                                        ["--home", str(home.root)]))
        assert "sloth_tray.cli.status" in modules, line
        assert sorted(m for m in ("sloth_tray.cli.reading", "sloth_tray.limits",
                                  "sloth_tray.store.access") if m in modules) == [], line


# What a glance never says, and so never loads: the steps' model and the schema's
# migrations (store/steps.py), why a job failed (store/reasons.py). Each module costs a
# start its finding and its first run, an enum's members and a named tuple's class the
# most: together they were a fortieth of status's time.
# And `from __future__ import annotations` loads a module of its own, a fiftieth of a
# glance: the modules a glance passes through quote what only type checkers import.
GLANCE_NEVER_SAYS = ("sloth_tray.store.steps", "sloth_tray.store.reasons", "__future__")
# What only a person's table needs: `status --json`, which scripts run, loads none.
TABLE_ONLY = ("sloth_tray.text", "sloth_tray.timefmt", "sloth_tray.store.states")


def test_status_loads_neither_the_steps_model_nor_the_reasons(tmp_path):
    """On a queue with a job asleep in a step, a failed job and a schedule, `status`
    says each (the sleeper's wait too) without the modules that write or judge them."""
    from sloth_tray.for_jobs import sloth_step
    from sloth_tray.paths import locate
    from sloth_tray.store.queue import Queue

    home = locate(tmp_path / "home").ensure()
    with Queue(home.db) as queue:
        failed = queue.push("fails", max_attempts=1)
        sleeper = queue.push("sleeper")
        queue.push("hourly", options={"every": 3600.0}, delay=60.0)
        assert queue.claim("test").id == failed
        assert queue.fail(failed, "test", "it broke")
        assert queue.claim("test", token="run-1").id == sleeper
        with contextlib.closing(sqlite3.connect(home.db, isolation_level=None)) as db:
            sloth_step.begin_wait(db, sloth_step.Run(str(home.db), sleeper, "run-1", "test"),
                                  "nap", kind="sleep", wake_at=time.time() + 3600,
                                  now=time.time())
        assert queue.wait(sleeper, "test", "run-1") == "pending"
    for line in (["status", "--json"], ["status"]):
        modules = loaded_alone(*line, "--home", str(home.root))
        assert "sloth_tray.store.reads" in modules, line
        assert sorted(m for m in GLANCE_NEVER_SAYS if m in modules) == [], line
        if "--json" in line:
            assert sorted(m for m in TABLE_ONLY if m in modules) == [], line
    shown = subprocess.run([sys.executable, "-m", "sloth_tray", "status", "--json", "--home",
                            str(home.root)], capture_output=True, text=True, timeout=60)
    said = json.loads(shown.stdout)
    assert said["failed"] == 1 and said["waiting"][sleeper]["kind"] == "time"


def test_list_and_log_read_no_number_against_a_limit(tmp_path):
    """`list` and `log` show no option's number (`show` does, as a header says it), so
    they leave limits.py unloaded."""
    from sloth_tray.paths import locate
    from sloth_tray.store.queue import Queue

    home = locate(tmp_path / "home").ensure()
    with Queue(home.db) as queue:
        ran = queue.push("ran", options={"timeout": 90.0})
        queue.claim("test")
        queue.complete(ran, "test", "fine")
    logs = home.job_logs(ran, "ran")
    logs.mkdir(parents=True)
    (logs / "1.log").write_text("output\n")
    for line in (["list"], ["list", "--json"], ["log", ran]):
        modules = loaded_alone(*line, "--home", str(home.root))
        assert "sloth_tray.limits" not in modules, line
    shown = subprocess.run([sys.executable, "-m", "sloth_tray", "show", ran, "--home",
                            str(home.root)], capture_output=True, text=True, timeout=60)
    assert "timeout=90s" in shown.stdout, shown.stdout  # as a header says it
