"""Home and the jobs folder are the user's own: nobody else can plant a job or a file there.

Most cases need root (to hand files to the user `nobody`); they say so when skipped.
Each refusal is checked with the real command, and the files it refused are checked
to be exactly as they were: a mode that lets others write is refused, never changed.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from functools import cache
from pathlib import Path

import pytest

from sloth_tray.cli import main
from sloth_tray.daemon.lock import InstanceLock
from sloth_tray.errors import SlothError
from sloth_tray.paths import locate
from sloth_tray.store.queue import Queue

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX owners and modes")

REPO = Path(__file__).resolve().parent.parent
ROOT = os.name == "posix" and os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="only root can give files to another user")
OTHER = "nobody"


def other_ids() -> tuple[int, int]:
    user = pwd.getpwnam(OTHER)
    return user.pw_uid, user.pw_gid


def sloth(*argv: str, env: dict[str, str] | None = None,
          timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The real entry point, in a child process, as a user's shell would run it."""
    return subprocess.run([sys.executable, "-m", "sloth_tray", *argv], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


@cache
def python_for_other() -> str | None:
    """An interpreter of this Python version that the other user may run (this one may sit
    in a folder only its owner can enter), with this project and its libraries importable."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (sys.executable, f"/usr/bin/{version}", shutil.which(version) or ""):
        if candidate and subprocess.run(
                ["setpriv", f"--reuid={OTHER}", f"--regid={other_ids()[1]}", "--clear-groups",
                 candidate, "-c", "import sloth_tray.cli"], cwd="/", capture_output=True,
                env=other_env(Path("/nonexistent"))).returncode == 0:
            return candidate
    return None


def other_env(place: Path) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(place),
            "SLOTH_TRAY_CONFIG": str(place / "no-config.toml"),
            "PYTHONPATH": os.pathsep.join([str(REPO), sysconfig.get_paths()["purelib"]])}


def sloth_as_other(place: Path, *argv: str, umask: int = 0o022,
                   timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The real command, run by the other user."""
    python = python_for_other()
    if python is None:
        pytest.skip(f"no Python {sys.version_info[:2]} that the user {OTHER} may run")
    return subprocess.run(
        ["setpriv", f"--reuid={OTHER}", f"--regid={other_ids()[1]}", "--clear-groups",
         python, "-m", "sloth_tray", *argv], capture_output=True, text=True, timeout=timeout,
        cwd="/", env=other_env(place), preexec_fn=lambda: os.umask(umask))


@pytest.fixture
def shared():
    """A folder like /tmp: everyone may create in it, only owners may remove (sticky)."""
    if not ROOT:
        pytest.skip("only root can give files to another user")
    place = Path(tempfile.mkdtemp(prefix="sloth-shared-", dir="/tmp"))
    os.chmod(place, 0o1777)
    try:
        yield place
    finally:
        shutil.rmtree(place)


def snapshot(*roots: Path) -> dict[str, tuple]:
    """Every path under roots, not following links: owner, mode, and content or target."""
    seen: dict[str, tuple] = {}

    def note(path: str) -> None:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            body: object = os.readlink(path)
        elif stat.S_ISREG(info.st_mode):
            body = Path(path).read_bytes()
        else:
            body = None
        seen[path] = (info.st_uid, info.st_gid, info.st_mode, body)

    for root in roots:
        note(str(root))
        if os.path.isdir(root) and not os.path.islink(root):
            for folder, dirs, files in os.walk(root):
                for name in dirs + files:
                    note(os.path.join(folder, name))
    return seen


def chown_tree(root: Path) -> None:
    uid, gid = other_ids()
    os.lchown(root, uid, gid)
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            os.lchown(os.path.join(folder, name), uid, gid)


def real_home(path: Path):
    """A home as sloth-tray makes it, with one job in its queue."""
    home = locate(path).ensure()
    with Queue(home.db) as queue:
        queue.push("hello", script=None)
    return home


def one_sentence(done: subprocess.CompletedProcess[str], sentence: str) -> None:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr == f"sloth-tray: {sentence}\n"


# -- a home someone else could write to is refused -----------------------------------------


def home_of_another_user(shared: Path):
    home = real_home(shared / "home")
    os.chmod(home.root, 0o777)
    os.chmod(home.db, 0o666)
    chown_tree(home.root)
    return home.root, f"{home.root} is owned by user {OTHER}, not you; sloth-tray will not use it"


def home_open_to_all(shared: Path):
    home = real_home(shared / "home")
    os.chmod(home.root, 0o777)
    return home.root, f"{home.root} is writable by others (mode 0777); sloth-tray will not use it"


def home_open_to_a_shared_group(shared: Path):
    home = real_home(shared / "home")
    os.chown(home.root, -1, other_ids()[1])
    os.chmod(home.root, 0o770)
    return home.root, (f"{home.root} is writable by its group {grp.getgrgid(other_ids()[1])[0]} "
                       "(mode 0770); sloth-tray will not use it")


def database_open_to_all(shared: Path):
    home = real_home(shared / "home")
    os.chmod(home.db, 0o666)
    return home.root, f"{home.db} is writable by others (mode 0666); sloth-tray will not use it"


def database_of_another_user(shared: Path):
    home = real_home(shared / "home")
    os.chown(home.db, *other_ids())
    return home.root, f"{home.db} is owned by user {OTHER}, not you; sloth-tray will not use it"


def wal_open_to_all(shared: Path):
    home = real_home(shared / "home")
    wal = home.root / "queue.db-wal"
    os.close(os.open(wal, os.O_CREAT | os.O_WRONLY, 0o600))
    os.chmod(wal, 0o666)
    return home.root, f"{wal} is writable by others (mode 0666); sloth-tray will not use it"


def shm_of_another_user(shared: Path):
    home = real_home(shared / "home")
    shm = home.root / "queue.db-shm"
    os.close(os.open(shm, os.O_CREAT | os.O_WRONLY, 0o600))
    os.chown(shm, *other_ids())
    return home.root, f"{shm} is owned by user {OTHER}, not you; sloth-tray will not use it"


def database_a_link_to_another_file(shared: Path):
    home = real_home(shared / "home")
    elsewhere = shared / "elsewhere.db"
    os.rename(home.db, elsewhere)
    os.symlink(elsewhere, home.db)
    return home.root, (f"{home.db} is a symbolic link (to {elsewhere}); "
                       "sloth-tray will not follow it")


def logs_a_link_to_another_folder(shared: Path):
    home = real_home(shared / "home")
    elsewhere = shared / "etc"
    elsewhere.mkdir()
    (elsewhere / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    shutil.rmtree(home.logs)
    os.symlink(elsewhere, home.logs)
    return home.root, (f"{home.logs} is a symbolic link (to {elsewhere}); "
                       "sloth-tray will not follow it")


def spool_of_another_user(shared: Path):
    home = real_home(shared / "home")
    os.chown(home.spool, *other_ids())
    return home.root, f"{home.spool} is owned by user {OTHER}, not you; sloth-tray will not use it"


def doorbell_open_to_all(shared: Path):
    home = real_home(shared / "home")
    os.chmod(home.doorbell.parent, 0o777)
    return home.root, (f"{home.doorbell.parent} is writable by others (mode 0777); "
                       "sloth-tray will not use it")


def doorbell_ring_a_link(shared: Path):
    home = real_home(shared / "home")
    elsewhere = shared / "precious"
    elsewhere.write_text("keep me\n")
    os.symlink(elsewhere, home.doorbell)
    return home.root, (f"{home.doorbell} is a symbolic link (to {elsewhere}); "
                       "sloth-tray will not follow it")


def lock_of_another_user(shared: Path):
    home = real_home(shared / "home")
    home.lock.write_text("")
    os.chown(home.lock, *other_ids())
    return home.root, f"{home.lock} is owned by user {OTHER}, not you; sloth-tray will not use it"


def home_a_link_to_another_users_folder(shared: Path):
    theirs = real_home(shared / "theirs").root
    chown_tree(theirs)
    os.chmod(theirs, 0o755)
    link = shared / "home"
    os.symlink(theirs, link)
    return link, (f"{link} leads to {theirs}, which is owned by user {OTHER}, not you; "
                  "sloth-tray will not use it")


def home_a_link_another_user_planted(shared: Path):
    mine = real_home(shared / "mine").root
    link = shared / "home"
    os.symlink(mine, link)
    os.lchown(link, *other_ids())
    return link, (f"{link} is a symbolic link owned by user {OTHER}, not you; "
                  "sloth-tray will not follow it")


UNSAFE_HOMES = [home_of_another_user, home_open_to_all, home_open_to_a_shared_group,
                database_open_to_all, database_of_another_user, wal_open_to_all,
                shm_of_another_user, database_a_link_to_another_file,
                logs_a_link_to_another_folder, spool_of_another_user, doorbell_open_to_all,
                doorbell_ring_a_link, lock_of_another_user, home_a_link_to_another_users_folder,
                home_a_link_another_user_planted]


@pytest.mark.parametrize("unsafe", UNSAFE_HOMES, ids=lambda f: f.__name__)
def test_a_home_others_could_write_to_is_one_sentence_and_left_exactly_as_it_was(
        shared, unsafe):
    home, sentence = unsafe(shared)
    before = snapshot(shared)
    one_sentence(sloth("status", "--home", str(home)), sentence)
    assert snapshot(shared) == before


@pytest.mark.parametrize("unsafe", [home_of_another_user, database_open_to_all,
                                    logs_a_link_to_another_folder], ids=lambda f: f.__name__)
def test_the_daemon_does_not_start_on_a_home_others_could_write_to(shared, unsafe):
    home, sentence = unsafe(shared)
    before = snapshot(shared)
    one_sentence(sloth("run", "--headless", "--home", str(home), timeout=30), sentence)
    assert snapshot(shared) == before


def test_a_home_another_user_prepared_in_a_shared_folder_is_refused(shared):
    """The other user runs sloth-tray first, with a umask that opens everything."""
    home = shared / "sloth"
    made = sloth_as_other(shared, "pause", "--home", str(home), umask=0)  # makes the queue
    assert made.returncode == 0, made.stderr
    os.chmod(home / "queue.db", 0o666)  # and opens the queue to everyone
    before = snapshot(shared)
    one_sentence(sloth("status", "--home", str(home)),
                 f"{home} is owned by user {OTHER}, not you; sloth-tray will not use it")
    one_sentence(sloth("add", str(REPO / "README.md"), "--home", str(home)),
                 f"{home} is owned by user {OTHER}, not you; sloth-tray will not use it")
    assert snapshot(shared) == before


# -- the user's own homes keep working ------------------------------------------------------


def test_a_fresh_home_under_an_open_umask_comes_out_private(tmp_path):
    home = locate(tmp_path / "home")
    old = os.umask(0)
    try:
        home.ensure()
        with Queue(home.db) as queue, InstanceLock(home.lock):
            queue.push("hello")
            home.ring_doorbell()
            made = [home.root, home.spool, home.logs, home.doorbell.parent, home.jobs,
                    home.db, home.root / "queue.db-wal", home.root / "queue.db-shm",
                    home.lock, home.doorbell]
            modes = {str(path): oct(stat.S_IMODE(path.stat().st_mode)) for path in made}
    finally:
        os.umask(old)
    assert all(mode in ("0o700", "0o600") for mode in modes.values()), modes
    assert sloth("status", "--home", str(home.root)).returncode == 0


def test_a_home_made_by_an_older_version_is_accepted(tmp_path):
    root = tmp_path / "home"
    for folder in (root, root / "spool", root / "logs", root / "doorbell", root / "jobs"):
        folder.mkdir(mode=0o700)
    with Queue(root / "queue.db") as queue:
        queue.push("old")
    os.chmod(root / "queue.db", 0o600)
    (root / "sloth-tray.lock").write_text("")
    os.chmod(root / "sloth-tray.lock", 0o600)
    (root / "doorbell" / "ring").write_text("")
    os.chmod(root / "doorbell" / "ring", 0o644)  # an older version touched it with the umask
    done = sloth("status", "--json", "--home", str(root))
    assert done.returncode == 0, done.stderr
    assert '"pending": 1' in done.stdout


def test_a_home_writable_only_by_the_users_own_private_group_is_accepted(tmp_path):
    user = pwd.getpwuid(os.geteuid())
    group = grp.getgrgid(user.pw_gid)
    if group.gr_name != user.pw_name or set(group.gr_mem) - {user.pw_name}:
        pytest.skip("this user's primary group is not a group of its own")
    home = real_home(tmp_path / "home")
    os.chmod(home.root, 0o770)  # what a umask of 002 makes, on systems with user groups
    os.chmod(home.db, 0o660)
    done = sloth("status", "--home", str(home.root))
    assert done.returncode == 0, done.stderr


def test_a_home_reached_through_the_users_own_link_is_accepted(tmp_path):
    home = real_home(tmp_path / "real")
    link = tmp_path / "home"
    os.symlink(home.root, link)
    done = sloth("status", "--json", "--home", str(link))
    assert done.returncode == 0, done.stderr


def test_the_instance_lock_never_follows_a_link(tmp_path):
    precious = tmp_path / "precious"
    precious.write_text("keep me\n")
    lock = tmp_path / "sloth-tray.lock"
    os.symlink(precious, lock)
    with pytest.raises(SlothError, match="is a symbolic link"):
        InstanceLock(lock).acquire()
    assert precious.read_text() == "keep me\n"


def test_the_queue_never_opens_a_database_through_a_link(tmp_path):
    real = tmp_path / "real.db"
    with Queue(real) as queue:
        queue.push("theirs")
    before = real.read_bytes()
    os.symlink(real, tmp_path / "queue.db")
    with pytest.raises(SlothError, match="is a symbolic link"):
        Queue(tmp_path / "queue.db")
    assert real.read_bytes() == before


def test_the_queue_refuses_a_database_others_can_write_even_without_a_home(tmp_path):
    path = tmp_path / "queue.db"
    with Queue(path) as queue:
        queue.push("hello")
    os.chmod(path, 0o666)
    before = path.read_bytes()
    with pytest.raises(SlothError, match=r"is writable by others \(mode 0666\)"):
        Queue(path)
    assert path.read_bytes() == before and stat.S_IMODE(path.stat().st_mode) == 0o666


# -- the jobs folder is a folder of its own -------------------------------------------------


@pytest.fixture
def places(tmp_path, monkeypatch):
    me = tmp_path / "me"
    me.mkdir()
    monkeypatch.setenv("HOME", str(me))
    home = real_home(tmp_path / "app")
    return tmp_path, home


def jobs_choices(tmp_path: Path, home) -> dict[str, tuple[str, str]]:
    """The jobs folder given -> the reason it is refused."""
    root = home.root
    link = tmp_path / "spool-link"
    if not link.exists():
        os.symlink(home.spool, link)
    why_own = "which sloth-tray keeps for itself; use a folder of its own, such as {}/jobs"
    return {
        "home itself": (str(root), "is the home folder itself: sloth-tray would take its own "
                        f"files as jobs; use a folder of its own, such as {root}/jobs"),
        "home spelled another way": (f"{root}/spool/..", "is the home folder itself"),
        "the spool": (f"{root}/spool", f"lies inside {root}/spool, " + why_own.format(root)),
        "inside the logs": (f"{root}/logs/x", f"lies inside {root}/logs, "
                            + why_own.format(root)),
        "the doorbell": (f"{root}/doorbell", f"lies inside {root}/doorbell"),
        "a link into the spool": (str(link), f"lies inside {root}/spool"),
        "a folder holding home": (str(tmp_path), f"holds the home folder {root}, where "
                                  "sloth-tray keeps its own files"),
        "the user's home folder": ("~", "is your home folder: every file in it would be "
                                   "taken and run as a job"),
        "the root of the file system": ("/", "is the root of the file system"),
    }


JOBS_CASES = ["home itself", "home spelled another way", "the spool", "inside the logs",
              "the doorbell", "a link into the spool", "a folder holding home",
              "the user's home folder", "the root of the file system"]


@pytest.mark.parametrize("case", JOBS_CASES)
@pytest.mark.parametrize("command", ["status", "paths"])
def test_a_jobs_folder_that_would_swallow_the_apps_or_the_users_files_is_refused(
        places, capsys, case, command):
    tmp_path, home = places
    given, reason = jobs_choices(tmp_path, home)[case]
    before = snapshot(tmp_path)
    code = main([command, "--home", str(home.root), "--jobs-dir", given])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.startswith("sloth-tray: the jobs folder ") and err.count("\n") == 1
    assert "(from --jobs-dir)" in err and reason in err, err
    assert snapshot(tmp_path) == before


def test_the_refused_jobs_folder_names_where_it_was_set(places, capsys, tmp_path):
    _, home = places
    config = tmp_path / "config.toml"
    config.write_text(f'jobs_dir = "{home.root}"\n')
    assert main(["status", "--home", str(home.root), "--config", str(config)]) == 1
    assert f"(from jobs_dir in {config})" in capsys.readouterr().err
    with pytest.raises(SlothError, match=r"\(from SLOTH_TRAY_JOBS\) is the home folder itself"):
        locate(home.root, env={"SLOTH_TRAY_JOBS": str(home.root)})


def test_the_daemon_never_takes_its_own_files_as_jobs(tmp_path):
    home = real_home(tmp_path / "home")
    before = snapshot(home.root)
    done = sloth("run", "--headless", "--home", str(home.root), "--jobs-dir", str(home.root),
                 timeout=30)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "is the home folder itself" in done.stderr
    assert snapshot(home.root) == before


@pytest.mark.parametrize("given", ["jobs", "my jobs", "../elsewhere"])
def test_a_jobs_folder_of_its_own_is_fine(places, capsys, given):
    _, home = places
    jobs = (home.root / given).resolve()
    assert main(["pause", "--home", str(home.root), "--jobs-dir", str(jobs)]) == 0
    assert jobs.is_dir()  # made by a command that writes (one that only reads makes nothing)


# -- one sentence, not a traceback -----------------------------------------------------------


def test_a_nul_in_the_jobs_folder_is_one_sentence_from_every_source(places, capsys, tmp_path):
    _, home = places
    assert main(["status", "--home", str(home.root), "--jobs-dir", "/tmp/a\0b"]) == 1
    err = capsys.readouterr().err
    assert err == ("sloth-tray: the jobs folder '/tmp/a\\x00b' (from --jobs-dir) holds a NUL "
                   "character, which no file name can hold\n")
    with pytest.raises(SlothError, match=r"\(from SLOTH_TRAY_JOBS\) holds a NUL character"):
        locate(home.root, env={"SLOTH_TRAY_JOBS": "/tmp/a\0b"})
    config = tmp_path / "config.toml"
    config.write_text('jobs_dir = "/tmp/a\\u0000b"\n')
    done = sloth("status", "--home", str(home.root), "--config", str(config))
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert f"(from jobs_dir in {config}) holds a NUL character" in done.stderr


def test_a_nul_in_the_home_folder_is_one_sentence(capsys):
    assert main(["status", "--home", "/tmp/a\0b"]) == 1
    assert capsys.readouterr().err == ("sloth-tray: the home folder '/tmp/a\\x00b' holds a NUL "
                                       "character, which no file name can hold\n")


@needs_root
def test_a_jobs_folder_of_another_user_stops_the_start_with_one_sentence(tmp_path):
    home = real_home(tmp_path / "home")
    jobs = tmp_path / "jobs"
    jobs.mkdir(mode=0o700)
    os.chown(jobs, *other_ids())
    done = sloth("run", "--headless", "--home", str(home.root), "--jobs-dir", str(jobs),
                 timeout=30)
    one_sentence(done, f"the jobs folder {jobs} is owned by user {OTHER}, not you; "
                       "sloth-tray will not take jobs from it")


def test_a_jobs_folder_its_owner_cannot_read_stops_the_start_with_one_sentence(tmp_path):
    home = real_home(tmp_path / "home")
    jobs = tmp_path / "jobs"
    jobs.mkdir(mode=0o700)
    jobs.chmod(0)
    try:
        done = sloth("run", "--headless", "--home", str(home.root), "--jobs-dir", str(jobs),
                     timeout=30)
    finally:
        jobs.chmod(0o700)
    one_sentence(done, f"the jobs folder {jobs} cannot be read and written by you "
                       "(mode 0000); sloth-tray must list it and move each drop out of it")


def test_an_unreadable_jobs_folder_is_one_sentence_for_an_ordinary_user(shared):
    place = shared / "mine"
    place.mkdir(mode=0o755)
    os.chown(place, *other_ids())
    assert sloth_as_other(shared, "status", "--home", str(place / "home")).returncode == 0
    jobs = place / "jobs"
    jobs.mkdir(mode=0)
    os.chown(jobs, *other_ids())
    done = sloth_as_other(shared, "run", "--headless", "--home", str(place / "home"),
                          "--jobs-dir", str(jobs), timeout=30)
    one_sentence(done, f"the jobs folder {jobs} cannot be read and written by you "
                       "(mode 0000); sloth-tray must list it and move each drop out of it")


def test_a_jobs_folder_another_user_makes_again_after_its_removal_never_runs_their_file(
        shared, tmp_path, pids):
    """The jobs folder sits in a folder everyone may write to (like /tmp). It is
    removed while the app runs, and another user makes it again and drops a script in:
    the app watches it again, takes the drop, and refuses it; it never runs."""
    from helpers.processes import start_daemon, wait_for

    home = real_home(tmp_path / "home")
    jobs = shared / "jobs"
    jobs.mkdir(mode=0o700)
    daemon = start_daemon(pids, home, "--jobs-dir", str(jobs))
    shutil.rmtree(jobs)
    ran = shared / "ran"
    planted = subprocess.run(
        ["setpriv", f"--reuid={OTHER}", f"--regid={other_ids()[1]}", "--clear-groups",
         "sh", "-c", f"mkdir -m 755 {jobs} && printf 'touch {ran}\\n' > {jobs}/evil.sh"],
        capture_output=True, text=True, timeout=30, cwd="/")
    assert planted.returncode == 0, planted.stderr

    def planted_job():
        with Queue(home.db) as queue:
            return next((job for job in queue.jobs() if job.name == "evil"), None)

    job = wait_for(planted_job, what="the planted drop to be taken")
    with Queue(home.db) as queue:
        wait_for(lambda: queue.get(job.id).state == "failed", what="the drop to be refused")
        assert queue.get(job.id).last_error == "refused: not owned by you"
        assert "claimed" not in [e.kind for e in queue.history(job.id)]  # never run
    assert not ran.exists() and daemon.poll() is None


def bad_homes(base: Path) -> dict[str, list[str]]:
    """Homes and jobs folders every command refuses, each as the options that name it."""
    good = base / "good"
    good.mkdir()
    writable = base / "writable"
    writable.mkdir()
    writable.chmod(0o777)
    a_file = base / "a-file"
    a_file.write_text("")
    places = {"home writable by others": ["--home", str(writable)],
              "home a file": ["--home", str(a_file)],
              "home under a missing folder": ["--home", str(base / "missing" / "home")],
              "jobs the root": ["--home", str(good), "--jobs-dir", "/"],
              "jobs the home": ["--home", str(good), "--jobs-dir", str(good)],
              "jobs in the spool": ["--home", str(good), "--jobs-dir", str(good / "spool" / "x")],
              "jobs holding the home": ["--home", str(good), "--jobs-dir", str(base)]}
    if ROOT:
        others = base / "others"
        others.mkdir()
        os.chown(others, *other_ids())
        places["home another user's"] = ["--home", str(others)]
    return places


def test_a_look_refuses_a_bad_home_in_the_words_a_change_does(tmp_path):
    """A look gets its home as text and every other command as Paths (paths.py): both
    refuse the same homes with the same sentence, exit 1, and make nothing."""
    for why, where in bad_homes(tmp_path).items():
        before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
        looked, changed = sloth(*where, "status"), sloth(*where, "add", "--", "true")
        assert looked.returncode == changed.returncode == 1, (why, looked, changed)
        assert looked.stderr == changed.stderr, why
        assert looked.stderr.startswith("sloth-tray: ") and looked.stderr.count("\n") == 1, why
        assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before, why
