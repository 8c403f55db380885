"""The spool: the app's own copy of each job's script, in spool/<job-id>/<name>.

A queued job must not change under the daemon when the user edits or deletes
the original, so every script is first moved (from the jobs folder) or copied
(by `sloth-tray add`) into its spool folder, and only then pushed. A crash in
between leaves a spool entry without a job, which start-up reconciles: the
file is never lost, and never becomes two jobs.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
from pathlib import Path

from sloth_tray.errors import SlothError, UnknownJob
from sloth_tray.jobfile import BadJobFile, job_name, parse_options, read_head
from sloth_tray.paths import Home
from sloth_tray.queue import VALID_ID, Queue, State, new_job_id

log = logging.getLogger("sloth_tray")

PARTIAL = ".partial"  # a copy still being written into the spool


def safe_name(name: str) -> str:
    """A file name SQLite and every tool can hold: undecodable bytes become U+FFFD."""
    return os.fsencode(name).decode("utf-8", "replace")


def place(home: Home, source: Path, job_id: str, *, move: bool) -> Path:
    """Move or copy `source` to spool/<job_id>/<name>; returns the new path.

    A move is a hard link into the spool, then an unlink of the original, not a
    rename: inotify reports a rename out of a watched folder as a lone "moved
    from", which watchdog holds back half a second waiting for its pair, and
    every later drop would wait behind it. A crash between the link and the
    unlink leaves twins, which reconcile() resolves.
    """
    folder = home.spool / job_id
    folder.mkdir(mode=0o700, parents=True)
    target = folder / safe_name(source.name)
    try:
        if move:
            try:
                os.link(source, target, follow_symlinks=False)
                os.unlink(source)
                return target
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EPERM, errno.ENOTSUP) \
                        or not source.is_file() or source.is_symlink():
                    raise  # only a regular file may be copied: never a link's target
        # Another file system (or a copy was asked for): copy under a temporary
        # name, then rename, so the spool never holds half a script.
        partial = target.with_name(target.name + PARTIAL)
        shutil.copyfile(source, partial)
        shutil.copymode(source, partial)
        os.replace(partial, target)
        if move:
            os.unlink(source)
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return target


def unplace(target: Path, source: Path) -> None:
    """Undo place() for a move: the file goes back where it was dropped."""
    os.link(target, source, follow_symlinks=False)
    shutil.rmtree(target.parent)


def push(queue: Queue, script: Path, job_id: str, *, name: str | None = None,
         delay: float = 0.0, max_attempts: int | None = None,
         refused: str | None = None) -> str:
    """Queue a script already in the spool, with the options of its header.

    A bad header or a refusal makes a job born failed with that sentence: the
    user sees why in the failed list, and nothing runs.
    """
    options: dict = {}
    error = refused
    if error is None and script.is_file() and not script.is_symlink():
        try:
            options = parse_options(read_head(script), script.name)
        except BadJobFile as exc:
            error = str(exc)
    return queue.push(name or job_name(script), script=str(script), job_id=job_id,
                      delay=delay or options.get("delay", 0.0),
                      max_attempts=max_attempts or options.get("max_attempts"),
                      options=options, error=error)


def add(home: Home, source: Path, *, name: str | None = None, delay: float = 0.0,
        max_attempts: int | None = None) -> str:
    """`sloth-tray add`: copy `source` into the spool and queue it; returns the job id.

    Here a bad header is the caller's mistake, said at once: nothing is queued.
    """
    if not source.is_file():
        raise SlothError(f"{source} is not a file")
    try:
        parse_options(read_head(source), source.name)
    except BadJobFile as exc:
        raise SlothError(f"{exc}; nothing was queued") from None
    job_id = new_job_id()
    try:
        target = place(home, source, job_id, move=False)
    except OSError as exc:
        raise SlothError(f"cannot copy {source} into the spool: {exc.strerror}") from None
    try:
        with Queue(home.db) as queue:
            return push(queue, target, job_id, name=name, delay=delay,
                        max_attempts=max_attempts)
    except SlothError:
        shutil.rmtree(target.parent, ignore_errors=True)  # told "failed": it must stay so
        raise


def reconcile(home: Home, queue: Queue) -> None:
    """Start-up: finish what a crash interrupted.

    A spool folder whose job was never pushed is pushed now; an empty one (the
    crash came before the move) or a half copy is removed; a pending job whose
    script has vanished fails with a sentence saying so.
    """
    for folder in sorted(home.spool.iterdir()):
        if not folder.is_dir() or not VALID_ID.fullmatch(folder.name):
            continue
        for partial in folder.glob(f"*{PARTIAL}"):
            partial.unlink()
        try:
            queue.get(folder.name)
            continue
        except UnknownJob:
            pass
        scripts = sorted(folder.iterdir())
        if not scripts:
            folder.rmdir()
            continue
        _finish_move(home, scripts[0])
        log.info("queueing %s: it reached the spool but was not queued before a stop",
                 scripts[0].name)
        push(queue, scripts[0], folder.name)
    for job in queue.jobs(State.PENDING):
        if job.script and not os.path.lexists(job.script):
            queue.refuse(job.id, f"its script is gone from the spool ({job.script}); "
                                 "drop it into the jobs folder again")


def _finish_move(home: Home, spooled: Path) -> None:
    """A crash between the spool's copy and the unlink of the original leaves the
    original in the jobs folder: remove it, or it would become a second job."""
    twin = home.jobs / spooled.name
    try:
        here, there = os.lstat(spooled), os.lstat(twin)
    except FileNotFoundError:
        return
    same_file = (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)
    if same_file or (stat.S_ISREG(there.st_mode) and _same_bytes(spooled, twin)):
        twin.unlink()


def _same_bytes(a: Path, b: Path) -> bool:
    try:
        return a.read_bytes() == b.read_bytes()
    except OSError:
        return False
