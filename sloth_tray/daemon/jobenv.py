"""A run's environment: the app's own (cleaned by procs.job_environment), what names the
run (its job, token, lease owner, queue file), and the app's tools at the very end of
PATH and PYTHONPATH, so that `sloth-tray step` and `from sloth_step import step` work in
every job, even one started at login with a bare PATH, under any Python 3.

Appended, never prepended: a job's own programs and modules always win.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path

from sloth_tray.daemon import procs
from sloth_tray.for_jobs import step_env
from sloth_tray.paths import Home

COMMAND = "sloth-tray.exe" if os.name == "nt" else "sloth-tray"


def for_run(base: Mapping[str, str], *, job_id: str, name: str, attempt: int, home: Home,
            db: Path, owner: str, token: str) -> dict[str, str]:
    env = app_environment(base) | {
        "SLOTH_JOB_ID": job_id, "SLOTH_JOB_NAME": name, "SLOTH_ATTEMPT": str(attempt),
        "SLOTH_HOME": str(home.root), procs.RUN_TOKEN_ENV: token,
        step_env.OWNER_ENV: owner, step_env.QUEUE_ENV: str(Path(db).absolute()),
        step_env.DOORBELL_ENV: str(Path(home.doorbell).absolute()),
    }
    env.pop(step_env.KEY_ENV, None)  # a step's key is its own, never the app's
    command_folder = own_command_folder()
    if command_folder:
        env["PATH"] = appended(env.get("PATH"), command_folder)
    env["PYTHONPATH"] = appended(env.get("PYTHONPATH"), step_module_folder())
    return env


# The app's environment as every job starts from it, kept with what it was made from:
# os.environ decodes each name and value anew on every look, which made building it a
# seventh of a lane worker's time in a burst of trivial jobs. One tuple, replaced
# whole: lanes read it at once.
_made: tuple[object, dict, dict[str, str]] | None = None


def app_environment(base: Mapping[str, str]) -> dict[str, str]:
    """procs.job_environment(with_search_path(base)), a copy of its own: made again
    only when `base` changed (os.environ's own encoded names and values, compared
    whole; any other mapping is made every time)."""
    global _made
    raw = getattr(base, "_data", None)
    if not isinstance(raw, dict):
        return procs.job_environment(with_search_path(base))
    made = _made
    if made is None or made[0] is not base or made[1] != raw:
        made = _made = (base, dict(raw), procs.job_environment(with_search_path(base)))
    return dict(made[2])


# What a shell searches when PATH is not set (dash's and systemd's default; launchd's
# holds the same folders).
DEFAULT_PATH = os.pathsep.join(("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin",
                                "/sbin", "/bin")) if os.name == "posix" else os.defpath


def with_search_path(environ: Mapping[str, str]) -> Mapping[str, str]:
    """The app's environment as its jobs start from it: an app started with no PATH at all
    (`env -i`, a bare service manager) hands them the PATH their shell would have
    searched, since one holding only the app's folder would hide every other program."""
    if "PATH" in environ:
        return environ
    return {**environ, "PATH": DEFAULT_PATH}


def appended(value: str | None, folder: str) -> str:
    """`folder` at the end of a search path, once."""
    parts = [part for part in (value or "").split(os.pathsep) if part]
    if folder in parts:
        return os.pathsep.join(parts)
    return os.pathsep.join([*parts, folder])


@cache
def step_module_folder() -> str:
    """The folder holding the job's sloth_step.py and nothing else, which checks the
    job's Python and runs the app's sloth_step (in a bundle: their copies there).
    Resolved once: a module's place does not move while it is loaded."""
    return str(Path(step_env.__file__).resolve().parent / "pythonpath")


# Lanes start their first runs at once, and sysconfig fills its variables on first use
# without a lock: a second thread would read them half made (KeyError 'userbase').
_LOOKING_UP = threading.Lock()


def own_command_folder() -> str | None:
    """The folder of the `sloth-tray` that runs this very app: the bundle's executable,
    the script pip made for this interpreter (its environment's, or the user's), or
    the one this process was started as. None when there is none (run from a source
    tree): then a job finds `sloth-tray` only on its own PATH. Looked up once."""
    with _LOOKING_UP:
        return _own_command_folder()


@cache
def _own_command_folder() -> str | None:
    if getattr(sys, "frozen", False):
        return str(Path(sys.executable).resolve().parent)
    for place in _command_places():
        if place and (Path(place) / COMMAND).is_file():
            return str(Path(place).absolute())
    return None


def _command_places() -> Iterator[str | Path | None]:
    """Where pip puts `sloth-tray`, most likely first, each looked up only if the one
    before has none: the app started as that command, at login, and from a virtual
    environment need no sysconfig, whose tables hold 0.4 MiB for as long as the app
    runs. A virtual environment's scripts are in its own bin (Scripts) folder."""
    started_as = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    yield started_as.parent if started_as and started_as.name == COMMAND else None
    if sys.prefix != sys.base_prefix:
        yield Path(sys.prefix) / ("Scripts" if os.name == "nt" else "bin")
    import sysconfig

    yield sysconfig.get_path("scripts")
    yield sysconfig.get_path("scripts", f"{os.name}_user")
    yield Path(sys.executable).parent
