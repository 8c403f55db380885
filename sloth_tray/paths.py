"""Where everything the app owns lives: one home folder (platformdirs by default).

A job's logs are in a folder named by the job, then its id (logs/<name>-<id>/<run>.log;
a folder an older version named logs/<id> is kept). A command that only reads makes
nothing (`Home.readable`).

A look (`status`, `list`, ...) gets its home as text (`locate(..., text=True)`): pathlib
brings urllib.parse and ipaddress with it, about 3 ms, a third of what a glance costs
on top of a bare interpreter (`python -X importtime`). So this module, and every one a
look goes through, works on paths with os.path, whatever type they are given in.
"""

import os
import sys
from collections.abc import Mapping

from sloth_tray import safety
from sloth_tray.errors import SlothError

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    Place = str | os.PathLike[str]  # a Path, or text

APP_NAME = "sloth-tray"
HOME_ENV = "SLOTH_TRAY_HOME"
JOBS_ENV = "SLOTH_TRAY_JOBS"
DB_NAME = "queue.db"
DB_SIDES = ("-wal", "-shm", "-journal")
NUL_IN_PATH = "holds a NUL character, which no file name can hold"


def joined(base: "Place", *names: str) -> "Place":
    """`base / name / ...` in base's own type: text stays text (a look imports no
    pathlib), a Path stays a Path."""
    place = os.path.join(base, *names)
    return place if isinstance(base, str) else type(base)(place)


class Home:
    """The app's folder (`root`): queue.db, spool/, logs/, the doorbell, the lock, and
    by default the watched `jobs` folder. Each place is of the type `root` is: a Path,
    or text for a look (`locate(..., text=True)`).

    A plain class, neither a dataclass nor a named tuple: every command builds one, and
    importing dataclasses cost `sloth-tray status` a fifth of its time, the named tuple's
    class, compiled at import, half a percent."""

    __slots__ = ("root", "jobs")

    def __init__(self, root: "Place", jobs: "Place") -> None:
        self.root, self.jobs = root, jobs

    def __repr__(self) -> str:
        return f"Home(root={self.root!r}, jobs={self.jobs!r})"

    @property
    def db(self) -> "Place":
        return joined(self.root, DB_NAME)

    @property
    def spool(self) -> "Place":
        return joined(self.root, "spool")

    @property
    def logs(self) -> "Place":
        return joined(self.root, "logs")

    @property
    def doorbell(self) -> "Place":
        """Touched by the CLI after it changes the queue; the daemon watches its folder
        (a folder of its own: the database's writes next to it would wake the watcher)."""
        return joined(self.root, "doorbell", "ring")

    @property
    def lock(self) -> "Place":
        return joined(self.root, "sloth-tray.lock")

    def lane_folder(self, lane: str) -> "Place":
        """Where drops go to `lane`: the jobs folder itself for main, else the folder of
        that name in it (store/lanes.py)."""
        return self.jobs if lane == "main" else joined(self.jobs, lane)

    def job_logs(self, job_id: str, name: str | None = None) -> "Place":
        """The folder of a job's run logs, named so a person finds it: `backup-<id>`.
        With `name`, where its runs write (made when the first one starts); without,
        the one it has (found by its id), else where one would be. A folder from an
        older version, named by the id alone, is kept and used."""
        old = joined(self.logs, job_id)
        if name is None and not os.path.exists(old):
            found = self.log_folders(job_id)
            return found.get(job_id, old)
        return old if os.path.exists(old) else joined(self.logs,
                                                      log_folder_name(job_id, name or ""))

    def log_folders(self, *job_ids: str) -> "dict[str, Place]":
        """{id: its log folder} for the jobs asked about that have one, in one look at
        the logs folder however many are asked about (none asked: all of them)."""
        wanted = set(job_ids)
        found: dict[str, Place] = {}
        try:
            entries = os.scandir(self.logs)
        except OSError:
            return found
        with entries:
            for entry in entries:
                job_id = entry.name[-12:]
                if (entry.name == job_id or entry.name[-13:-12] == "-") and \
                        (not wanted or job_id in wanted) and entry.is_dir(follow_symlinks=False):
                    found[job_id] = joined(self.logs, entry.name)
        return found

    @property
    def own_folders(self) -> "tuple[Place, ...]":
        """The folders the app keeps in home: the spool, the logs, the doorbell's."""
        return (self.spool, self.logs, joined(self.root, "doorbell"))

    @property
    def own_files(self) -> "tuple[Place, ...]":
        """The files the app keeps in home (the database's are SQLite's, beside it)."""
        return (self.db, *(joined(self.root, DB_NAME + side) for side in DB_SIDES),
                self.lock, self.doorbell)

    def ensure(self) -> "Home":
        """Create the folders the app needs, private to the user (0700), and refuse a home
        someone else owns or could write to, before anything is written in it (safety.py).
        Every start and every command that writes to the queue passes here."""
        parent = os.path.dirname(self.root)
        if not os.path.isdir(parent):  # the platform's data folder, on a first start
            os.makedirs(parent, exist_ok=True)
        safety.refuse_if_read_only(self.root if os.path.isdir(self.root) else self.root.parent,
                                   "the home folder")
        safety.home_folder(self.root)
        for folder in self.own_folders:
            safety.own_folder(folder)
        for file in self.own_files:
            safety.own_entry(file, folder=False)
        safety.jobs_folder(self.jobs)
        return self

    def vet(self) -> "Home":
        """The checks of ensure() on what is there, making nothing: for a command that
        only reads (a home that does not exist passes: there is nothing to read)."""
        if not os.path.lexists(self.root):
            return self
        safety.home_folder(self.root)  # there already: checked, not made
        for folder in self.own_folders:
            safety.own_entry(folder, folder=True)
        for file in self.own_files:
            safety.own_entry(file, folder=False)
        if os.path.isdir(self.jobs) and not safety.read_only(self.jobs):
            safety.jobs_folder(self.jobs)  # (read-only: nothing is taken from it anyway)
        return self

    def readable(self) -> bool:
        """For a command that only reads (`status`, `list`, `show`, `log`, `wait`): whether
        there is a queue to read, the home vetted. Where the home and the jobs folder
        both are, a missing queue file is made, as every command always did; where
        either is missing, or home is on a read-only file system, nothing at all is
        made (False when there is no queue)."""
        if os.path.isdir(self.root) and os.path.isdir(self.jobs) \
                and not safety.read_only(self.root) and not safety.read_only(self.jobs):
            self.ensure()
            return True
        self.vet()
        return os.path.exists(self.db)

    @property
    def no_queue(self) -> str:
        """The sentence for a home with no queue in it (yet)."""
        return f"there is no queue in {self.root} yet: no job was ever added there"

    def ring_doorbell(self) -> None:
        """Tell a running daemon that the queue changed (it watches this file)."""
        from sloth_tray.for_jobs.sloth_step import ring  # the one touch, as jobs ring it

        ring(self.doorbell)


# What a job's name may not bring into a folder name: separators, and what Windows forbids.
_NOT_IN_FOLDER_NAMES = set('/\\:*?"<>|')
LOG_NAME_CHARACTERS = 60  # of the job's name in its log folder's name


def log_folder_name(job_id: str, name: str) -> str:
    """`<name>-<id>`: the name made safe for a folder (no separators, no control
    characters, no leading dot, at most LOG_NAME_CHARACTERS), the id for uniqueness."""
    safe = "".join("_" if char in _NOT_IN_FOLDER_NAMES or ord(char) < 32 or ord(char) == 127
                   else char for char in name)
    safe = safe.strip().lstrip(".")[:LOG_NAME_CHARACTERS].strip() or "job"
    return f"{safe}-{job_id}"


# Linux's user folders, as the XDG base directory rules (and platformdirs) say them:
# an absolute $XDG_..._HOME, else the default under ~.
XDG_USER_DIRS = {"data": ("XDG_DATA_HOME", "~/.local/share"),
                 "config": ("XDG_CONFIG_HOME", "~/.config")}


def user_dir(kind: str, env: Mapping[str, str] = os.environ) -> str:
    """platformdirs' user_data_dir or user_config_dir ("data", "config") of the app.
    On Linux worked out here, the same folder without importing platformdirs, which
    brings tempfile, shutil and the compression modules into every command that reads."""
    if sys.platform.startswith("linux") and "ANDROID_DATA" not in env:
        variable, default = XDG_USER_DIRS[kind]
        base = env.get(variable, "")
        return absolute(os.path.join(base if os.path.isabs(base)
                                     else os.path.expanduser(default), APP_NAME))
    import platformdirs  # elsewhere: its rules, not copied here

    if kind == "data":
        return platformdirs.user_data_dir(APP_NAME, appauthor=False)
    return platformdirs.user_config_dir(APP_NAME, appauthor=False)


def absolute(place: "Place") -> str:
    """`str(Path(place).expanduser().absolute())`, worked out without pathlib on POSIX:
    `~` expanded, the current folder put before a relative path, and written as a Path
    writes it (no empty or `.` parts, no slash at the end; `..` kept, as a link may
    stand before it)."""
    if os.name != "posix":
        from pathlib import Path  # elsewhere: its rules (drives, UNC), not copied here

        return str(Path(place).expanduser().absolute())
    text = os.path.expanduser(os.fspath(place))
    if not text.startswith("/"):
        text = os.path.join(os.getcwd(), text)
    # POSIX keeps exactly two slashes at the start as they are; pathlib does too.
    lead = "//" if text.startswith("//") and not text.startswith("///") else "/"
    return lead + "/".join(part for part in text.split("/") if part not in ("", "."))


def locate(
    home: str | os.PathLike[str] | None = None,
    jobs: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] = os.environ,
    *,
    jobs_source: str | None = None,
    text: bool = False,
) -> Home:
    """The home from --home, else SLOTH_TRAY_HOME, else the platform's data dir; its
    places are Paths, or text with `text` (for a look, which imports no pathlib).

    A home named explicitly must have an existing parent folder: a typo should
    not quietly grow a new tree somewhere. `jobs_source` says where `jobs` was set
    (as config.Settings.sources does), for the sentence that refuses it.
    """
    explicit = home or env.get(HOME_ENV)
    if explicit:
        if "\0" in os.fspath(explicit):
            raise SlothError(f"the home folder {os.fspath(explicit)!r} {NUL_IN_PATH}")
        root = absolute(explicit)
        parent = os.path.dirname(root)
        if not os.path.isdir(parent):
            raise SlothError(f"no such folder: {parent} (the parent of home {root})")
    else:
        # Its parent is made by Home.ensure, when something is to be written: a
        # command that only reads makes nothing.
        root = user_dir("data", env)
    if os.path.exists(root) and not os.path.isdir(root):
        raise SlothError(f"the home folder {root} is not a folder")
    jobs_dir = jobs or env.get(JOBS_ENV)
    if not jobs:
        jobs_source = f"env {JOBS_ENV}" if jobs_dir else None
    if jobs_dir and "\0" in os.fspath(jobs_dir):
        raise SlothError(f"the jobs folder {os.fspath(jobs_dir)!r}{_from(jobs_source)} "
                         f"{NUL_IN_PATH}")
    jobs_path = absolute(jobs_dir) if jobs_dir else os.path.join(root, "jobs")
    located = Home(root=root, jobs=jobs_path)
    why = _swallows(located)
    if why:
        raise SlothError(f"the jobs folder {jobs_path}{_from(jobs_source)} {why}; use a folder "
                         f"of its own, such as {os.path.join(root, 'jobs')}")
    if text:
        return located
    from pathlib import Path

    return Home(root=Path(root), jobs=Path(jobs_path))


def _from(source: str | None) -> str:
    """' (from --jobs-dir)' for a source as config.Settings.sources names it."""
    if not source or source == "default":
        return ""
    kind, _, where = source.partition(" ")
    return {"flag": " (from --jobs-dir)", "env": f" (from {where})",
            "file": f" (from jobs_dir in {where})"}.get(kind, f" (from {source})")


def _swallows(home: Home) -> str | None:
    """Why the jobs folder would take files that are not drops, or None. Everything in the
    jobs folder is taken and run: the app's own files, or a whole home folder, must never
    be in it. (Compared as real paths: `..` and links must not get around it.)"""
    jobs = os.path.realpath(home.jobs)
    root = os.path.realpath(home.root)
    user_home = os.path.expanduser("~")  # left as it is where it cannot be told
    if os.path.dirname(jobs) == jobs:
        return "is the root of the file system: every file in it would be taken as a job"
    if user_home != "~" and jobs == os.path.realpath(user_home):
        return "is your home folder: every file in it would be taken and run as a job"
    if jobs == root:
        return "is the home folder itself: sloth-tray would take its own files as jobs"
    if _within(root, jobs):
        return f"holds the home folder {home.root}, where sloth-tray keeps its own files"
    if not _within(jobs, root):
        return None  # outside home: none of the app's own places can hold it
    real = Home(root, jobs)  # the same places under the real root
    for own, real_own in zip((*home.own_folders, *home.own_files),
                             (*real.own_folders, *real.own_files), strict=True):
        if _within(jobs, real_own):
            return f"lies inside {own}, which sloth-tray keeps for itself"
    return None


def _within(place: str, folder: str) -> bool:
    """Whether `place` is `folder` or inside it (both real paths, as realpath writes them)."""
    return place == folder or place.startswith(folder.rstrip(os.sep) + os.sep)
