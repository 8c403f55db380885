"""Whose files these are: refuse a home someone else could write to (like sshd's StrictModes).

The queue in home says what runs as the user, so whoever can write into home can
make the user run anything. Home and each thing the app keeps in it must be the
user's own, writable by nobody else, and never a symbolic link that sends the app
somewhere else. A mode that lets others write is refused, never changed: someone
may have written already, and only the user can judge what.

The parents of home are not checked: a shared parent such as /tmp (sticky) is fine
once home itself is private, as nobody else can then reach inside.

A folder on a read-only file system is said as such, not as a mode to fix.
"""

import os
import stat

from sloth_tray.errors import SlothError

TYPE_CHECKING = False  # as the standard library does: typing itself is not imported
if TYPE_CHECKING:
    Place = str | os.PathLike[str]  # a Path, or text (a look imports no pathlib: paths.py)

# Owners and modes mean this on POSIX; Windows guards a user's folders with ACLs.
POSIX = os.name == "posix"
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
REFUSED = "sloth-tray will not use it"
NOT_FOLLOWED = "sloth-tray will not follow it"


class UnsafePath(SlothError):
    """A file or folder of the app's that someone else owns or could write, or a link."""


def user_name(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def group_name(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def users_own_group(gid: int) -> bool:
    """A group of the user's alone: their primary group, named after them, no other member.
    Where every user has one (Debian, Fedora, ...) the umask is 002 and new folders come out
    group-writable; Debian's sshd accepts such a group too."""
    import grp
    import pwd

    try:
        user, group = pwd.getpwuid(os.geteuid()), grp.getgrgid(gid)
    except KeyError:
        return False
    return (gid == user.pw_gid and group.gr_name == user.pw_name
            and set(group.gr_mem) <= {user.pw_name})


def problem(info: os.stat_result) -> str | None:
    """What makes a file or folder with this stat unsafe to use ("is owned by ..."), or None."""
    if not POSIX:
        return None
    if info.st_uid != os.geteuid():
        return f"is owned by user {user_name(info.st_uid)}, not you"
    mode = stat.S_IMODE(info.st_mode)
    if mode & stat.S_IWOTH:
        return f"is writable by others (mode {mode:04o})"
    if mode & stat.S_IWGRP and not users_own_group(info.st_gid):
        return f"is writable by its group {group_name(info.st_gid)} (mode {mode:04o})"
    return None


def check_opened(path: "Place", info: os.stat_result) -> None:
    """Refuse a file already opened (its fstat), when someone else owns it or could write it."""
    why = problem(info)
    if why:
        raise UnsafePath(f"{path} {why}; {REFUSED}")


def read_only(path: "Place") -> bool:
    """Whether `path` is on a file system mounted read-only (False where that cannot be
    told: no statvfs on Windows, or nothing there)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (AttributeError, OSError):
        return False


def refuse_if_read_only(path: "Place", what: str) -> None:
    """For a folder about to be written in: a read-only file system, said as such."""
    if read_only(path):
        raise SlothError(f"{what} {path} is on a read-only file system; sloth-tray can only "
                         "read it there (status, list, show, log)")


def link_target(path: "Place") -> str:
    """Where the link at `path` points, for a sentence; "somewhere else" if unreadable."""
    try:
        return os.readlink(path)
    except OSError:
        return "somewhere else"


def _link_refusal(path: "Place") -> UnsafePath:
    return UnsafePath(f"{path} is a symbolic link (to {link_target(path)}); {NOT_FOLLOWED}")


def refuse_if_link(path: "Place") -> None:
    """For an open(O_NOFOLLOW) that failed: say so in one sentence if a link was the cause."""
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise _link_refusal(path)
    except OSError:
        pass


def own_entry(path: "Place", *, folder: bool) -> bool:
    """Refuse `path` (never following a link) unless it is the user's own, writable by nobody
    else, and of the right kind. False when it does not exist."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise UnsafePath(f"cannot look at {path}: {exc.strerror}") from None
    if stat.S_ISLNK(info.st_mode):
        raise _link_refusal(path)
    if folder and not stat.S_ISDIR(info.st_mode):
        raise UnsafePath(f"{path} exists but is not a folder")
    if not folder and not stat.S_ISREG(info.st_mode):
        raise UnsafePath(f"{path} is not a regular file; {REFUSED}")
    check_opened(path, info)
    return True


def own_folder(path: "Place") -> None:
    """The user's own folder at `path`: made private (0700) when missing, else checked."""
    if own_entry(path, folder=True):
        return
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass  # made meanwhile: checked below like any other
    except OSError as exc:
        raise SlothError(f"cannot create {path}: {exc.strerror}") from None
    own_entry(path, folder=True)


def home_folder(path: "Place") -> None:
    """Home itself may be the user's own link to the user's own folder (home on another
    disk, say), but a link someone else made, or one to someone else's folder, is refused."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        own_folder(path)
        return
    except OSError as exc:
        raise UnsafePath(f"cannot look at {path}: {exc.strerror}") from None
    if not stat.S_ISLNK(info.st_mode):
        own_folder(path)
        return
    if POSIX and info.st_uid != os.geteuid():
        raise UnsafePath(f"{path} is a symbolic link owned by user {user_name(info.st_uid)}, "
                         f"not you; {NOT_FOLLOWED}")
    target = os.path.realpath(path)
    try:
        target_info = os.stat(target)
    except OSError:
        raise SlothError(f"{path} is a symbolic link to {target}, which does not exist") from None
    if not stat.S_ISDIR(target_info.st_mode):
        raise UnsafePath(f"{path} exists but is not a folder")
    why = problem(target_info)
    if why:
        raise UnsafePath(f"{path} leads to {target}, which {why}; {REFUSED}")


def jobs_folder(path: "Place") -> None:
    """The watched folder: made when missing; it must be the user's, and the user must be
    able to list it and move drops out of it. (A link to it is fine: only files dropped
    in it are read, each one checked when it is taken.)"""
    try:
        os.makedirs(path, 0o700, exist_ok=True)
    except FileExistsError:
        raise SlothError(f"the jobs folder {path} exists but is not a folder") from None
    except OSError as exc:
        raise SlothError(f"cannot create the jobs folder {path}: {exc.strerror}") from None
    try:
        info = os.stat(path)
    except OSError as exc:
        raise SlothError(f"cannot look at the jobs folder {path}: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise SlothError(f"the jobs folder {path} exists but is not a folder")
    if not POSIX:
        return
    if info.st_uid != os.geteuid():
        raise UnsafePath(f"the jobs folder {path} is owned by user {user_name(info.st_uid)}, "
                         "not you; sloth-tray will not take jobs from it")
    refuse_if_read_only(path, "the jobs folder")
    mode = stat.S_IMODE(info.st_mode)
    # The owner's bits as well as access(): root may read any folder, but a folder its
    # owner shut (chmod 000) was shut on purpose or by mistake; either way, say so.
    if mode & stat.S_IRWXU != stat.S_IRWXU or not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        raise UnsafePath(f"the jobs folder {path} cannot be read and written by you "
                         f"(mode {mode:04o}); sloth-tray must list it and move each drop "
                         "out of it")
