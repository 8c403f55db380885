"""The spool: the app's own copy of each job's script, in spool/<job-id>/<name>.

A queued job must not change under the daemon when the user edits or deletes
the original, so every script is first moved (from the jobs folder) or copied
(by `sloth-tray add`) into its spool folder, and only then pushed. Once the
push has committed, a marker in the folder says so (`.queued`: a second name of
the script, or an empty file). Start-up reconciles
what a crash interrupted, by these rules:

- a folder with a job: the job's (its marker is restored if a crash lost it);
- a folder with no job and no marker: a drop that was never pushed: push it;
- a folder with no job but a marker: the queue held that job once and no
  longer does (pruned, or the database was replaced): it is never pushed
  again; it is set aside in recovered/, unless a later run of a recurring
  job still uses it.

So the file is never lost, never becomes two jobs, and a finished job never
comes back.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from sloth_tray.errors import SlothError
from sloth_tray.fileid import FileId, same_entry
from sloth_tray.jobs.header import (
    ADDED_OPTIONS,
    HEAD_BYTES,
    BadJobFile,
    empty_sentence,
    job_name,
    open_file,
    parse_options,
    read_head,
)
from sloth_tray.paths import Home
from sloth_tray.store import lanes
from sloth_tray.store.queue import VALID_ID, Queue, new_job_id
from sloth_tray.store.reasons import Reason, in_retry_all
from sloth_tray.store.rows import DROPPED, SHELL
from sloth_tray.store.states import State

log = logging.getLogger("sloth_tray")

PARTIAL = ".partial"  # a copy still being written into the spool
QUEUED = ".queued"  # in spool/<id>/: the push of <id> has committed
LANE = ".lane"  # in spool/<id>/ of a drop into a lane folder: the lane's name
STAGING = ".add-"  # spool/.add-<id>/: `sloth-tray add`'s copy, before its push commits
STALE_STAGING = 600.0  # seconds after which a staging folder is a crashed add's
POSIX = os.name == "posix"


def safe_name(name: str) -> str:
    """A file name SQLite and every tool can hold: undecodable bytes become U+FFFD."""
    return os.fsencode(name).decode("utf-8", "replace")


def refusal(info: os.stat_result, folder: Path | None = None) -> str | None:
    """Why a dropped file must never run, or None. `folder` is the jobs folder it
    was dropped into, when known."""
    if stat.S_ISLNK(info.st_mode):
        return "refused: it is a symbolic link; drop the script itself"
    if not stat.S_ISREG(info.st_mode):
        return "refused: it is not a regular file"
    if POSIX and info.st_uid != os.getuid():
        return "refused: not owned by you"
    if POSIX and folder is not None and \
            os.stat(folder).st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "refused: the jobs folder is writable by other users"
    return None


# -- placing a file in the spool ---------------------------------------------------------


class Replaced(OSError):
    """The entry at a drop's path is no longer the one that was looked at: another
    was renamed over it meanwhile. Nothing was placed; look at it again."""

    def __init__(self, path: Path) -> None:
        super().__init__(errno.EAGAIN, "it was replaced while being taken", str(path))


def place(home: Home, source: Path, job_id: str, *, move: bool,
          seen: os.stat_result | None = None, lane: str = lanes.MAIN) -> Path:
    """Move or copy `source` to spool/<job_id>/<name>; returns the new path.

    A move is a hard link into the spool, then an unlink of the original, not a
    rename: inotify reports a rename out of a watched folder as a lone "moved
    from", which watchdog holds back half a second waiting for its pair, and
    every later drop would wait behind it. A crash between the link and the
    unlink leaves twins, which reconcile() resolves.

    `seen` is the stat the caller judged the drop by: what is placed is that very
    file (kind and inode), or Replaced is raised and nothing is placed.

    A drop into a lane folder leaves its lane's name beside it (LANE) before the
    script arrives: a crash before the push still knows where it was dropped.
    """
    folder = home.spool / job_id
    folder.mkdir(mode=0o700, parents=True)
    try:
        if lane != lanes.MAIN:
            fd = os.open(folder / LANE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with open(fd, "w", encoding="utf-8") as told:
                told.write(lane)
        return _place_in(folder, source, move=move, seen=seen)
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _place_in(folder: Path, source: Path, *, move: bool,
              seen: os.stat_result | None = None) -> Path:
    target = folder / safe_name(source.name)
    # A move takes the dropped entry itself, even a link; a copy (`add PATH`)
    # takes what PATH names, as cp does.
    info = seen if seen is not None else os.lstat(source) if move else os.stat(source)
    if move and info.st_nlink == 1:
        try:
            os.link(source, target, follow_symlinks=False)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.ENOTSUP):
                raise
        else:
            placed = os.lstat(target)
            if not same_entry(placed, info):  # not what was looked at: a link, say
                raise Replaced(source)
            if placed.st_nlink == 2:  # nobody linked it elsewhere meanwhile
                os.unlink(source)
                return target
            os.unlink(target)
    # Another file system, a copy was asked for, or the file has other names
    # (a hard link to a file elsewhere): the spool gets a copy of its own, so a
    # queued job is frozen as it was when dropped.
    if stat.S_ISREG(info.st_mode):
        partial = target.with_name(target.name + PARTIAL)
        _copy(source, partial, info, follow=not move)
        os.replace(partial, target)
    else:
        _stand_in(source, target, info)
    if move:
        os.unlink(source)
    return target


def _copy(source: Path, partial: Path, info: os.stat_result, *, follow: bool) -> None:
    """Copy the very file `info` describes: opened once (a link is not followed
    unless asked) and checked by its inode, so that a file renamed over it since
    is never what gets copied."""
    try:
        original = open_file(source, follow=follow)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:  # a link now, where a file was seen
            raise Replaced(source) from None
        raise
    with original:
        opened = os.fstat(original.fileno())
        if not same_entry(opened, info):
            raise Replaced(source)
        with open(partial, "wb") as copy:
            shutil.copyfileobj(original, copy)
    os.chmod(partial, stat.S_IMODE(opened.st_mode))


def _stand_in(source: Path, target: Path, info: os.stat_result) -> None:
    """A non-regular drop (a link, a FIFO, ...) that cannot be linked across file
    systems: what stands for it in the spool is of the same kind, so it is
    refused for what it is, and its target is never read."""
    if stat.S_ISLNK(info.st_mode):
        os.symlink(os.readlink(source), target)
    else:
        os.mkfifo(target, 0o600)


def unplace(target: Path, source: Path) -> None:
    """Undo place() for a move: the file goes back where it was dropped."""
    try:
        os.link(target, source, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.ENOTSUP):
            raise
        # The jobs folder is on another file system: copy back under a name the
        # inbox ignores, then rename, so it never sees half a file.
        partial = source.with_name(f".{source.name}{PARTIAL}")
        info = os.lstat(target)
        if stat.S_ISREG(info.st_mode):
            shutil.copyfile(target, partial, follow_symlinks=False)
            shutil.copymode(target, partial, follow_symlinks=False)
        else:
            _stand_in(target, partial, info)
        os.replace(partial, source)
    shutil.rmtree(target.parent)


def _mark_queued(folder: Path, script: Path | None = None) -> None:
    """The marker: a second name of the folder's script where it can be one, else an
    empty file. A name costs the file system no new file: on some, making a file is
    the dearest step of a drop (0.8 ms of kernel time each on the ext4 of a virtual
    machine, where a link takes 0.02 ms). Only the marker's name is ever looked at."""
    marker = folder / QUEUED
    try:
        # A regular file only: a refused drop's link or FIFO is never given a twin.
        if script is not None and stat.S_ISREG(os.lstat(script).st_mode):
            os.link(script, marker, follow_symlinks=False)
            return
    except FileExistsError:
        return  # marked already
    except OSError:
        pass  # no hard links here (or no more for this file): an empty file then
    try:
        # An empty file made, or found made: one call (Path.touch sets its times first).
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError as exc:  # the job is queued all the same; reconcile marks it later
        log.warning("could not mark %s as queued: %s", folder, exc.strerror)


def _scripts(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name not in (QUEUED, LANE))


def _lane_of(folder: Path) -> str:
    """The lane a drop placed in `folder` was dropped into (main, unless it says)."""
    try:
        lane = (folder / LANE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return lanes.MAIN
    return lanes.MAIN if lanes.problem(lane) else lane


# -- queueing -------------------------------------------------------------------------------


def push(queue: Queue, script: Path, job_id: str, *, name: str | None = None,
         delay: float | None = None, max_attempts: int | None = None,
         refused: str | None = None, final: Path | None = None,
         cwd: str | None = None, lane: str = lanes.MAIN, key: str | None = None,
         source: str = DROPPED) -> str:
    """Queue a script already in the spool, with the options of its header.

    A bad header or a refusal makes a job born failed with that sentence: the
    user sees why in the failed list, and nothing runs. `final` is where the
    script will live, when it is still being staged elsewhere (`add`); `cwd` the
    folder it runs in (`add`'s; else the home folder); `lane` the lane it runs in;
    `key` and `source` as Queue.push takes them (a key some job has: that job's id).
    """
    read = _read(script, job_id, refused=refused, name=name, delay=delay,
                 max_attempts=max_attempts, final=final, cwd=cwd, lane=lane, key=key,
                 source=source)
    pushed = queue.push(**read.row)
    _pushed(read, pushed)
    return pushed


class Drop(NamedTuple):
    """A drop placed in the spool (spool/<job_id>/<name>), to push: why it is refused,
    if it is, and its lane."""
    script: Path
    job_id: str
    refused: str | None
    lane: str


def push_drops(queue: Queue, drops: Sequence[Drop],
               then: Callable[[], object] | None = None) -> list[str | Exception]:
    """Push drops placed in the spool in one commit: one fsync for them all, each its
    own job, as push() makes it. For each drop, in order: its job id, or what stopped
    its push alone (its savepoint undone, the others' kept). `then` is called inside
    that commit once the drops are pushed (the engine claims them there), so what it
    writes is undone with them if the commit fails.

    Each marker is made once the commit that holds its job is done, as push() makes
    it, so a crash at any moment leaves each folder as reconcile() expects: before the
    commit, no job and no marker (pushed at the next start); after it, a job, its
    marker made there if lost. A failed commit (SlothError) raises: none was queued."""
    reads = [_read(drop.script, drop.job_id, refused=drop.refused, lane=drop.lane)
             for drop in drops]  # the headers read before the write lock is taken
    outcomes: list[str | Exception] = []
    with queue.batch():
        for read in reads:
            try:
                with queue.savepoint():
                    outcomes.append(queue.push(**read.row))
            except Exception as exc:  # this drop's alone: the batch goes on
                if not queue.still_in_transaction():
                    raise  # undone whole: none of them is queued
                outcomes.append(exc)
        if then is not None:
            then()
    for read, outcome in zip(reads, outcomes, strict=True):
        if isinstance(outcome, str):
            _pushed(read, outcome)
    return outcomes


class _Read(NamedTuple):
    """A script's push, read and decided before it is made: Queue.push's arguments."""
    script: Path
    row: dict[str, Any]


def _read(script: Path, job_id: str, *, refused: str | None, name: str | None = None,
          delay: float | None = None, max_attempts: int | None = None,
          final: Path | None = None, cwd: str | None = None, lane: str = lanes.MAIN,
          key: str | None = None, source: str = DROPPED) -> _Read:
    options: dict = {}
    error, reason = refused, Reason.REFUSED
    if error is None and script.is_file() and not script.is_symlink():
        try:
            head = read_head(script)
            options = parse_options(head, script.name)
        except BadJobFile as exc:
            error, reason = str(exc), Reason.BAD_HEADER
        else:
            error = empty_sentence(script.name, head)
            reason = Reason.UNRUNNABLE
    if cwd is not None:
        options["cwd"] = cwd
    return _Read(script, dict(
        name=name or job_name(script), script=str(final or script), job_id=job_id,
        delay=delay if delay is not None else options.get("delay", 0.0),
        max_attempts=max_attempts if max_attempts is not None else options.get("max_attempts"),
        options=options, error=error, reason=reason, lane=lane, key=key, source=source))


def _pushed(read: _Read, pushed: str) -> None:
    """After the commit that queued `read`'s job: its marker, and a failure said."""
    row = read.row
    if pushed != row["job_id"]:  # the key's job, already queued: this copy is not a job
        return
    _mark_queued(read.script.parent, read.script)
    if row["error"] is not None and row["reason"] is not Reason.REFUSED:
        # a refusal is said by the caller
        log.warning("failed %s (%s): %s", row["name"], pushed, row["error"])


class AlreadyAdded(str):
    """What add() and add_command() return for a key some job has already: that job's
    id (whatever its state). Nothing was added."""


def add(home: Home, source: Path, *, name: str | None = None, delay: float | None = None,
        max_attempts: int | None = None, cwd: str | None = None,
        lane: str = lanes.MAIN, key: str | None = None, by: str = SHELL) -> str:
    """`sloth-tray add`: copy `source` into the spool and queue it; returns the job id.
    `cwd`: the folder it runs in (checked by working_folder; default: the home folder);
    `key`: the job that has it already is the one (AlreadyAdded); `by`: its source.

    Here a bad header is the caller's mistake, said at once: nothing is queued.
    The copy waits in a staging folder that start-up never queues, and moves
    into place only once the push has committed: an add that fails, or is
    interrupted (Ctrl-C, kill), leaves nothing that a later start would run.
    """
    if not source.is_file():
        raise SlothError(f"{source} is not a file")
    try:
        head = read_head(source)
        parse_options(head, source.name)
    except BadJobFile as exc:
        raise SlothError(f"{exc}; nothing was queued") from None
    if empty_sentence(source.name, head):
        raise SlothError(f"{source.name} is empty: there is nothing to run; nothing was "
                         "queued")
    return _staged(home, lambda staging: _place_in(staging, source, move=False),
                   f"cannot copy {source} into the spool", name=name, delay=delay,
                   max_attempts=max_attempts, cwd=cwd, lane=lane, key=key, source=by)


COMMAND_FILE = "command.sh"  # the script `add -- COMMAND` writes into the spool
NAME_CHARACTERS = 80  # of a command line, as the name of its job


def command_script(argv: list[str], header: str = "") -> bytes:
    """The script that runs `argv` as given, whatever its words hold: each one quoted
    for sh, and the script become the command (exec), so its exit status, its signals
    and its output are the command's own. The `sloth:` line is the header (`header`'s
    options, else empty): a word of the command that holds "# sloth:" on a line of its
    own is only a word."""
    from shlex import join

    options = f" {header}" if header else ""
    return (f"#!/bin/sh\n# sloth:{options}\nexec {join(argv)}\n").encode(
        "utf-8", "surrogateescape")  # words from a command line that were not UTF-8


def command_name(argv: list[str]) -> str:
    """The job's name: the command line, as a shell would take it, cut to a length."""
    from shlex import join

    line = join(argv)
    return line if len(line) <= NAME_CHARACTERS else line[:NAME_CHARACTERS - 1] + "…"


def add_command(home: Home, argv: list[str], *, cwd: str, name: str | None = None,
                delay: float | None = None, max_attempts: int | None = None,
                lane: str = lanes.MAIN, key: str | None = None, by: str = SHELL) -> str:
    """`sloth-tray add -- COMMAND [ARG...]`: a script that runs the command, written into
    the spool and queued as add() queues a copy; it runs in `cwd`. Its job id."""
    if not argv:
        raise SlothError("no command to queue: give it after --, as in "
                         "`sloth-tray add -- make test`")
    return add_text(home, command_script(argv), COMMAND_FILE, cwd=cwd,
                    name=name or command_name(argv), delay=delay,
                    max_attempts=max_attempts, lane=lane, key=key, by=by)


def add_text(home: Home, text: bytes, file_name: str, *, cwd: str | None,
             name: str | None = None, **options: Any) -> str:
    """A script given as its text (`add -- COMMAND`'s, an agent's), written into the
    spool as `file_name` and queued as add() queues a copy: its job id. A bad header is
    the caller's mistake, said at once: nothing is queued."""
    try:
        head = text[:HEAD_BYTES]
        parse_options(head, file_name)
    except BadJobFile as exc:
        raise SlothError(f"{exc}; nothing was queued") from None
    if empty_sentence(file_name, head):
        raise SlothError(f"{file_name} is empty: there is nothing to run; nothing was "
                         "queued")

    def write(staging: Path) -> Path:
        script = staging / file_name
        fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
        with open(fd, "wb") as file:
            file.write(text)
        return script

    by = options.pop("by", SHELL)
    return _staged(home, write, "cannot write the script into the spool", name=name,
                   cwd=cwd, source=by, **options)


def working_folder(given: str | None, *, default_here: bool) -> str | None:
    """The folder a job is to run in, as `add` is told it (--cwd, or where `add` runs
    with `default_here`): absolute, and a folder you can enter now (SlothError
    otherwise). None: none given, and not here."""
    if given is None and not default_here:
        return None
    if given is None:
        try:
            folder = os.getcwd()
        except OSError:
            raise SlothError("the current folder is gone; give the folder to run in with "
                             "--cwd DIR") from None
    else:
        folder = os.path.abspath(os.path.expanduser(given))
    if not os.path.isdir(folder):
        raise SlothError(f"{folder} is not a folder (--cwd); nothing was queued")
    if not os.access(folder, os.X_OK):
        raise SlothError(f"{folder} cannot be entered by you (--cwd); nothing was queued")
    return folder


def _staged(home: Home, make: Any, cannot: str, **push_options: Any) -> str:
    """The copy `make(staging)` places in a staging folder, queued, then moved into
    place: the job's id. Nothing is left behind when the push fails."""
    job_id = new_job_id()
    staging = home.spool / f"{STAGING}{job_id}"
    final = home.spool / job_id
    try:
        staging.mkdir(mode=0o700)
        copy = make(staging)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise SlothError(f"{cannot}: {exc.strerror}") from None
    try:
        with Queue(home.db) as queue:
            pushed = push(queue, copy, job_id, final=final / copy.name, **push_options)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # told "failed": it must stay so
        raise
    if pushed != job_id:  # the key's job: this copy was never queued
        shutil.rmtree(staging, ignore_errors=True)
        return AlreadyAdded(pushed)
    try:
        os.rename(staging, final)
    except OSError as exc:  # queued all the same: start-up finishes the move
        log.warning("could not move %s into place yet: %s", staging, exc.strerror)
    return job_id


def retry(queue: Queue, job_id: str, **steps: Any) -> bool:
    """Put a done, failed or cancelled job back in line, due now, with fresh attempts;
    `steps` says what to do with its recorded steps (Queue.retry: step_done,
    forget_from, fresh).

    The script's header is read again, so a fixed header counts and a bad one
    fails again with its sentence (BadJobFile). A refused job raises Refused.
    False when the job is in no state to retry.
    """
    job = queue.get(job_id)
    options, max_attempts = None, None
    script = Path(job.script) if job.script else None
    if job.reason != Reason.REFUSED and job.state in (State.DONE, State.FAILED, State.CANCELLED) \
            and script is not None and script.is_file() and not script.is_symlink():
        try:
            options = parse_options(read_head(script), script.name)
        except BadJobFile as exc:
            queue.refuse(job.id, str(exc), Reason.BAD_HEADER)
            raise BadJobFile(f"{job.name} ({job.id}) still cannot run: {exc}") from None
        max_attempts = options.get("max_attempts")
        # What `add` gave the job, no header says: kept (the folder it runs in).
        options.update({key: job.options[key] for key in ADDED_OPTIONS if key in job.options})
    return queue.retry(job.id, options=options, max_attempts=max_attempts, **steps)


def retry_all_failed(queue: Queue, lane: str | None = None) -> tuple[int, int]:
    """Retry every failed job a Retry all retries (reasons.in_retry_all; `lane`: of that
    lane only): (how many retried, how many refused were skipped). A job whose header
    is still bad stays failed, and so does one cut short in a step that asks
    (step_unsure): only its own retry answers it."""
    retried = refused = 0
    for job in queue.jobs(State.FAILED, lane=lane):
        if not in_retry_all(job.reason):
            refused += job.reason == Reason.REFUSED
            continue
        try:
            retried += retry(queue, job.id)
        except SlothError as exc:
            log.warning("%s", exc)
    return retried, refused


def prune(home: Home, queue: Queue, before: float) -> int:
    """Delete done and cancelled jobs older than `before`, then their logs and
    spool folders. Rows go first: a job retried meanwhile is not pruned and
    keeps its files, and a crash halfway leaves only folders that reconcile
    sets aside (their marker says the queue once held them)."""
    # Marked first: a crash between a push and its marker leaves a folder that
    # only start-up would mark, and a prune cut short before then must not leave
    # it looking like a drop that never reached the queue.
    for script in queue.prunable_scripts(before):
        folder = Path(script).parent
        if _in_spool(home, folder) and folder.is_dir():
            _mark_queued(folder)
    pruned = queue.prune(before)
    logs = home.log_folders(*(job_id for job_id, _ in pruned)) if pruned else {}
    for folder in logs.values():
        shutil.rmtree(folder, ignore_errors=True)
    folders = sorted({str(Path(script).parent) for _, script in pruned
                      if script and _in_spool(home, Path(script).parent)})
    in_use = queue.folders_in_use(folders, str(home.spool))
    for folder in folders:
        if folder not in in_use:
            shutil.rmtree(folder, ignore_errors=True)
    return len(pruned)


def _in_spool(home: Home, folder: Path) -> bool:
    return folder.parent == home.spool and bool(VALID_ID.fullmatch(folder.name))


# -- start-up ------------------------------------------------------------------------------


def reconcile(home: Home, queue: Queue, *, clock=time.time) -> None:
    """Start-up, under the instance lock: finish what a crash interrupted."""
    once_held = []
    for folder in sorted(home.spool.iterdir()):
        if folder.name.startswith(STAGING) and folder.is_dir():
            _finish_add(home, queue, folder, clock())
            continue
        if not folder.is_dir() or not VALID_ID.fullmatch(folder.name):
            continue
        for partial in folder.glob(f"*{PARTIAL}"):
            partial.unlink()
        if queue.exists(folder.name):
            if not os.path.lexists(folder / QUEUED):
                scripts = _scripts(folder)
                _mark_queued(folder, scripts[0] if scripts else None)
            continue
        scripts = _scripts(folder)
        if not scripts:
            shutil.rmtree(folder)
        elif os.path.lexists(folder / QUEUED):
            once_held.append(str(folder))
        else:
            lane = _lane_of(folder)
            _finish_move(home, scripts[0], lane)
            log.info("queueing %s: it reached the spool but was not queued before a stop",
                     scripts[0].name)
            push(queue, scripts[0], folder.name, refused=refusal(os.lstat(scripts[0])),
                 lane=lane)
    _set_aside(home, queue, once_held)
    for job in queue.jobs(State.PENDING):
        if job.script and not os.path.lexists(job.script):
            queue.refuse(job.id, f"its script is gone from the spool ({job.script}); "
                                 "drop it into the jobs folder again")


def _finish_add(home: Home, queue: Queue, staging: Path, now: float) -> None:
    """An add whose push committed but whose copy was not moved into place yet
    is finished; a stale one that never committed is removed."""
    job_id = staging.name.removeprefix(STAGING)
    if VALID_ID.fullmatch(job_id) and queue.exists(job_id):
        if not (home.spool / job_id).exists():
            os.rename(staging, home.spool / job_id)
    elif now - staging.stat().st_mtime > STALE_STAGING:  # else: an add still at work
        shutil.rmtree(staging, ignore_errors=True)


def _set_aside(home: Home, queue: Queue, folders: list[str]) -> None:
    """Folders of jobs the queue no longer holds: kept out of the way in
    recovered/, never queued again; a recurring job's shared folder stays."""
    in_use = queue.folders_in_use(folders, str(home.spool))
    moved = 0
    for folder in folders:
        if folder in in_use:
            continue
        recovered = home.root / "recovered"
        recovered.mkdir(mode=0o700, exist_ok=True)
        os.replace(folder, recovered / Path(folder).name)
        moved += 1
    if moved:
        log.info("set aside %d spool folder(s) of jobs this queue no longer holds in %s; "
                 "none of them was run", moved, home.root / "recovered")


def _finish_move(home: Home, spooled: Path, lane: str) -> None:
    """A crash between the spool's copy and the unlink of the original leaves the
    original in the folder it was dropped into (the jobs folder, or its lane's): remove
    it, or it would become a second job."""
    twin = home.lane_folder(lane) / spooled.name
    try:
        here, there = os.lstat(spooled), os.lstat(twin)
    except FileNotFoundError:
        return
    same_file = FileId.of(here) == FileId.of(there)
    if same_file or (stat.S_ISREG(there.st_mode) and _same_bytes(spooled, twin)):
        twin.unlink()


def _same_bytes(a: Path, b: Path) -> bool:
    try:
        return a.read_bytes() == b.read_bytes()
    except OSError:
        return False
