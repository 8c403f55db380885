"""Where everything the app owns lives: one home folder (platformdirs by default)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from sloth_tray.errors import SlothError

APP_NAME = "sloth-tray"
HOME_ENV = "SLOTH_TRAY_HOME"
JOBS_ENV = "SLOTH_TRAY_JOBS"


@dataclass(frozen=True)
class Home:
    """The app's folder: queue.db, spool/, logs/, the doorbell, the lock, and by default jobs/."""

    root: Path
    jobs: Path

    @property
    def db(self) -> Path:
        return self.root / "queue.db"

    @property
    def spool(self) -> Path:
        return self.root / "spool"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def doorbell(self) -> Path:
        """Touched by the CLI after it changes the queue; the daemon watches its folder
        (a folder of its own: the database's writes next to it would wake the watcher)."""
        return self.root / "doorbell" / "ring"

    @property
    def lock(self) -> Path:
        return self.root / "sloth-tray.lock"

    def job_logs(self, job_id: str) -> Path:
        return self.logs / job_id

    def ensure(self) -> Home:
        """Create the folders the app needs, private to the user (0700)."""
        for folder in (self.root, self.spool, self.logs, self.doorbell.parent, self.jobs):
            try:
                folder.mkdir(mode=0o700, parents=folder is not self.root, exist_ok=True)
            except FileExistsError:
                raise SlothError(f"{folder} exists but is not a folder") from None
            except OSError as exc:
                raise SlothError(f"cannot create {folder}: {exc.strerror}") from None
            if not folder.is_dir():
                raise SlothError(f"{folder} exists but is not a folder")
        return self

    def ring_doorbell(self) -> None:
        """Tell a running daemon that the queue changed (it watches this file)."""
        try:
            with open(self.doorbell, "a"):
                pass
            os.utime(self.doorbell)
        except OSError:
            pass  # no daemon can be listening on a home we cannot write


def locate(
    home: str | os.PathLike[str] | None = None,
    jobs: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] = os.environ,
) -> Home:
    """The home from --home, else SLOTH_TRAY_HOME, else the platform's data dir.

    A home named explicitly must have an existing parent folder: a typo should
    not quietly grow a new tree somewhere.
    """
    explicit = home or env.get(HOME_ENV)
    if explicit:
        root = Path(explicit).expanduser().absolute()
        if not root.parent.is_dir():
            raise SlothError(f"no such folder: {root.parent} (the parent of home {root})")
    else:
        root = Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))
        root.parent.mkdir(parents=True, exist_ok=True)
    jobs_dir = jobs or env.get(JOBS_ENV)
    jobs_path = Path(jobs_dir).expanduser().absolute() if jobs_dir else root / "jobs"
    return Home(root=root, jobs=jobs_path)
