"""A run's environment: what names the run, and the app's own `sloth-tray` and
`sloth_step` at the very end of PATH and PYTHONPATH, whatever PATH the app was given."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sloth_tray.daemon import jobenv
from sloth_tray.for_jobs import sloth_step
from sloth_tray.paths import Home


def environment(base: dict[str, str], tmp_path: Path) -> dict[str, str]:
    home = Home(tmp_path / "home", tmp_path / "home" / "jobs")
    return jobenv.for_run(base, job_id="0123456789ab", name="backup", attempt=2, home=home,
                          db=home.db, owner="me:1", token="feedface")


def test_the_run_is_named_for_its_steps(tmp_path):
    env = environment({"PATH": "/usr/bin:/bin"}, tmp_path)
    run = sloth_step.Run.from_environment(env)
    assert (run.job, run.token, run.owner) == ("0123456789ab", "feedface", "me:1")
    assert run.queue == str(tmp_path / "home" / "queue.db")
    assert run.doorbell == str(tmp_path / "home" / "doorbell" / "ring")


def test_the_apps_tools_come_last_so_the_jobs_own_win(tmp_path):
    env = environment({"PATH": "/opt/mine/bin:/usr/bin", "PYTHONPATH": "/opt/mine/lib"},
                      tmp_path)
    path, python_path = env["PATH"].split(os.pathsep), env["PYTHONPATH"].split(os.pathsep)
    assert path[:2] == ["/opt/mine/bin", "/usr/bin"]
    assert path[-1] == jobenv.own_command_folder()
    assert python_path == ["/opt/mine/lib", jobenv.step_module_folder()]


def test_a_bare_environment_still_finds_the_command_the_systems_programs_and_the_module(
        tmp_path):
    """An app started with no PATH at all: its jobs search what a shell would, then the
    app's own folder."""
    env = environment({}, tmp_path)
    path = env["PATH"].split(os.pathsep)
    assert path == [*jobenv.DEFAULT_PATH.split(os.pathsep), jobenv.own_command_folder()]
    assert Path(path[-1], jobenv.COMMAND).is_file()
    assert env["PYTHONPATH"] == jobenv.step_module_folder()


def test_a_folder_already_there_is_not_added_twice(tmp_path):
    folder = jobenv.step_module_folder()
    env = environment({"PYTHONPATH": f"{folder}{os.pathsep}/x"}, tmp_path)
    assert env["PYTHONPATH"].split(os.pathsep) == [folder, "/x"]
    assert jobenv.appended("", "/a") == "/a"
    assert jobenv.appended(f"/a{os.pathsep}{os.pathsep}/b", "/c") == os.pathsep.join(
        ["/a", "/b", "/c"])


def test_the_module_folder_holds_only_sloth_step(tmp_path):
    """A job's Python gets this folder: nothing else in it may shadow a job's module.
    Its bytecode is sloth_step still: a Python 3 keeps it in __pycache__, and a Python 2
    job (told in one sentence that it is too old) writes sloth_step.pyc beside it."""
    modules = {entry.name for entry in Path(jobenv.step_module_folder()).iterdir()
               if entry.name not in ("__pycache__", "sloth_step.pyc")}
    assert modules == {"sloth_step.py"}


def test_each_run_starts_from_the_apps_environment_as_it_is_then(tmp_path, monkeypatch):
    monkeypatch.setenv("GREETING", "hello")
    first = environment(os.environ, tmp_path)
    first["LEFT_BY_A_RUN"] = "1"  # one run's environment is its own
    monkeypatch.setenv("GREETING", "good night")
    second = environment(os.environ, tmp_path)
    monkeypatch.delenv("GREETING")
    third = environment(os.environ, tmp_path)
    assert (first["GREETING"], second["GREETING"]) == ("hello", "good night")
    assert "GREETING" not in third
    assert "LEFT_BY_A_RUN" not in second and "LEFT_BY_A_RUN" not in third


def test_a_step_key_from_the_apps_own_environment_is_not_passed_on(tmp_path):
    env = environment({"SLOTH_STEP_KEY": "stale"}, tmp_path)
    assert "SLOTH_STEP_KEY" not in env


def test_the_system_python_imports_sloth_step_with_nothing_installed(tmp_path):
    """The module is the standard library's only: any Python 3 a script names loads it."""
    python = "/usr/bin/python3"
    env = environment({"PATH": "/usr/bin:/bin"}, tmp_path)
    found = subprocess.run(
        [python, "-c",
         "import sloth_step, sys; print(sloth_step.__file__)"],
        env={"PATH": env["PATH"], "PYTHONPATH": env["PYTHONPATH"]},
        capture_output=True, text=True, timeout=30)
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()).parent == Path(jobenv.step_module_folder())


# Lanes start their first runs at once: each thread builds its run's environment, in an
# app that has not yet looked up where its command lives.
FIRST_RUNS_AT_ONCE = """
import threading
from sloth_tray.daemon import jobenv
from pathlib import Path
from sloth_tray.paths import Home
home = Home(Path("/nonexistent/home"), Path("/nonexistent/home/jobs"))
start, failures = threading.Barrier(8), []
def first_run():
    start.wait()
    try:
        jobenv.for_run({"PATH": "/usr/bin"}, job_id="0123456789ab", name="backup", attempt=1,
                       home=home, db=home.db, owner="me:1", token="feedface")
    except Exception as exc:
        failures.append(repr(exc))
threads = [threading.Thread(target=first_run) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(failures)
"""


def test_runs_starting_at_once_in_a_fresh_app_each_get_their_environment():
    # sysconfig fills its variables lazily and not thread-safely: two first lookups at
    # once saw them half made ('userbase'), and that lane's run failed as an internal
    # error. A fresh interpreter each time, since only the first lookup can race.
    for _ in range(3):
        said = subprocess.run([sys.executable, "-c", FIRST_RUNS_AT_ONCE], capture_output=True,
                              text=True, timeout=60, check=True).stdout
        assert said.strip() == "[]", said
