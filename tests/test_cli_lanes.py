"""Lanes on the command line, end to end in child processes: each job's lane in `list`
and `show`, `list --lane`, what `status` says of each lane, `pause LANE` and `resume
LANE`, `add --lane`, the lane a retried or hurried job keeps, the bulk forms and
`wait --lane`, and names no lane can have (one sentence, exit 2, nothing done)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sloth_tray.cli import main
from sloth_tray.limits import LIST_LIMIT
from sloth_tray.paths import locate
from sloth_tray.store.lanes import NAME_MAX, problem
from sloth_tray.store.queue import Queue, State
from sloth_tray.text import printable


@pytest.fixture
def home(tmp_path):
    return locate(tmp_path / "home")


def sloth(home, command: str, *argv: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    """`sloth-tray COMMAND --home HOME ARGV...` as a shell runs it (--home first: after
    `add --` every word is the command's), which must exit `code`."""
    done = subprocess.run([sys.executable, "-m", "sloth_tray", command, "--home",
                           str(home.root), *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == code, (done.stdout, done.stderr)
    return done


def add(home, *argv: str) -> str:
    """`add ARGV...`: the new job's id."""
    return sloth(home, "add", *argv).stdout.strip()


def push(home, name: str, lane: str, **options) -> str:
    """A job queued straight into the queue (quicker than `add` where add is not what
    is tried)."""
    with Queue(home.ensure().db) as queue:
        return queue.push(name, lane=lane, **options)


def job(home, job_id: str):
    with Queue(home.db) as queue:
        return queue.get(job_id)


def script(home, name: str = "tidy.sh", text: str = "true\n"):
    path = home.root.parent / name
    path.write_text(text)
    return str(path)


def rung(home) -> bool:
    """Whether the doorbell rang since the last look (and ready for the next)."""
    if not home.doorbell.exists():
        return False
    home.doorbell.unlink()
    return True


def claimed(home, lane: str):
    """The due job of `lane`, leased as the daemon would lease it (owner "me")."""
    with Queue(home.db) as queue:
        found = queue.claim("me", lane=lane)
    assert found is not None and found.lane == lane
    return found


def failed_in(home, lane: str, name: str) -> str:
    """A job of `lane` that failed for good (one attempt, exit status 1)."""
    with Queue(home.ensure().db) as queue:
        job_id = queue.push(name, max_attempts=1, lane=lane)
        assert queue.claim("me", lane=lane).id == job_id
        assert queue.fail(job_id, "me", "exit status 1") == State.FAILED
    return job_id


# -- each job's lane -----------------------------------------------------------------------


def test_every_job_says_its_lane_and_the_list_shows_it_once_there_are_two(home):
    first = add(home, script(home))
    listed = sloth(home, "list").stdout.splitlines()
    assert listed[0].split() == ["ID", "NAME", "STATE", "TRIES", "WHEN", "NOTE"]  # main alone
    fetch = add(home, "--lane", "net", "--", "echo", "fetch")
    assert [(row["id"], row["lane"]) for row in json.loads(sloth(home, "list", "--json").stdout)] \
        == [(fetch, "net"), (first, "main")]
    assert json.loads(sloth(home, "show", fetch, "--json").stdout)["lane"] == "net"
    assert json.loads(sloth(home, "show", first, "--json").stdout)["lane"] == "main"
    header, *rows = sloth(home, "list").stdout.splitlines()
    assert header.split()[:3] == ["ID", "LANE", "NAME"]
    assert [row.split()[1:3] for row in rows] == [["net", "echo"], ["main", "tidy"]]
    assert ["lane", "net"] in [line.split() for line in sloth(home, "show", fetch).stdout
                               .splitlines()]


def test_list_lane_shows_that_lanes_jobs_only_and_an_unknown_lane_is_an_empty_list(home):
    older, newer = (push(home, word, "net") for word in ("a", "b"))
    for n in range(12):  # the newest jobs are the other lane's
        push(home, f"main-{n}", "main")

    def ids(*argv: str) -> list[str]:
        return [row["id"] for row in json.loads(sloth(home, "list", "--json", *argv).stdout)]

    assert ids("--lane", "net") == [newer, older]
    assert ids("--lane", "net", "--limit", "1") == [newer]
    assert ids("--lane", "net", "--limit", str(LIST_LIMIT.high)) == [newer, older]
    assert ids("--lane", "main", "--limit", "0") == ids("--limit", "0")[:12]  # 0: all
    assert ids("--lane", "nowhere") == []
    shown = sloth(home, "list", "--lane", "net", "--limit", "1").stdout.splitlines()
    assert shown[0].split()[:2] == ["ID", "NAME"]  # one lane: no lane column
    assert shown[-1] == "(the newest 1; --limit 0 shows all)" and len(shown) == 3
    assert sloth(home, "list", "--lane", "nowhere").stdout == "no jobs in lane nowhere\n"


# -- status -----------------------------------------------------------------------------------


def test_status_json_counts_each_lane_and_says_which_are_paused(home):
    push(home, "fetch", "net")
    push(home, "again", "net")
    push(home, "tidy", "main")
    failed_in(home, "photos", "resize")
    claimed(home, "net")
    sloth(home, "pause", "photos")
    status = json.loads(sloth(home, "status", "--json").stdout)
    assert (status["pending"], status["running"], status["failed"]) == (2, 1, 1)  # totals kept
    assert list(status["lanes"]) == ["main", "net", "photos"]  # main first, then by name
    zero = dict.fromkeys(["pending", "running", "done", "failed", "cancelled", "due_now"], 0)
    net = status["lanes"].pop("net")
    assert net.pop("due_now") == 1  # its waiting job is due, though behind the running one
    assert net == {"pending": 1, "running": 1, "done": 0, "failed": 0, "cancelled": 0,
                   "paused": False}
    assert status["lanes"] == {"main": zero | {"pending": 1, "due_now": 1, "paused": False},
                               "photos": zero | {"failed": 1, "paused": True}}


def test_status_of_a_home_with_no_queue_has_no_lanes_and_makes_nothing(home):
    status = json.loads(sloth(home, "status", "--json").stdout)
    assert status["lanes"] == {} and status["pending"] == 0
    shown = sloth(home, "status")
    assert "lanes" not in shown.stdout and shown.stderr.startswith("sloth-tray: there is no")
    assert not home.root.exists()


def test_status_says_what_each_lane_is_doing_and_stays_short_with_main_alone(home):
    add(home, script(home))
    short = sloth(home, "status").stdout
    assert "lanes" not in short and ":" not in short.replace("due now", "")
    fetch = push(home, "fetch_mail", "net")
    for word in ("a", "b"):
        push(home, word, "net")
    claimed(home, "net")
    failed_in(home, "photos", "resize")
    sloth(home, "pause", "net")
    lines = sloth(home, "status").stdout.splitlines()
    lanes = lines[lines.index("lanes") + 1:]
    assert lanes[0] == "  main: 1 waiting"
    # Leased as the app would, but no app holds this home: the run was cut short.
    assert lanes[1].startswith("  net: cut short fetch_mail (")
    assert lanes[1].endswith(") · 2 waiting · paused")
    assert lanes[2:] == ["  photos: 1 failed"]
    assert lines[0].split() == ["pending", "3"]  # the totals come first, as before
    assert job(home, fetch).state == State.RUNNING


def test_main_paused_on_its_own_shows_in_status(home):
    add(home, script(home))
    sloth(home, "pause", "main")
    lines = sloth(home, "status").stdout.splitlines()
    assert ["paused", "no"] in [line.split() for line in lines]  # the queue as a whole is not
    assert lines[-2:] == ["lanes", "  main: 1 waiting · paused"]


# -- pause and resume -----------------------------------------------------------------------


def paused(home, *lanes: str) -> list[bool]:
    with Queue(home.db) as queue:
        return [queue.paused(lane) for lane in lanes]


def test_pause_and_resume_one_lane_leave_the_others_running(home):
    push(home, "fetch", "net")
    said = sloth(home, "pause", "net").stdout
    assert said == ("lane net paused: its running job finishes, nothing new starts in it "
                    "until `sloth-tray resume net`\n")
    assert rung(home) and paused(home, "net", "main", None) == [True, False, False]
    assert sloth(home, "pause", "net").stdout.startswith("lane net was paused already")
    assert sloth(home, "run-now", "fetch").stdout.splitlines()[-1] == \
        "lane net is paused: its jobs start after `sloth-tray resume net`"
    said = sloth(home, "resume", "net").stdout
    assert said == "lane net resumed: 1 job due now\n"
    assert rung(home) and paused(home, "net", "main", None) == [False, False, False]
    assert sloth(home, "resume", "net").stdout.startswith("lane net was not paused")


def lanes_known(home) -> list[str]:
    with Queue(home.db) as queue:
        return queue.lanes()


@pytest.mark.parametrize("verb", ["pause", "resume"])
def test_a_lane_no_folder_and_no_job_has_is_refused_with_the_nearest(home, verb):
    push(home, "fetch", "net")
    rung(home)
    done = sloth(home, verb, "nte", code=2)
    assert done.stdout == "" and done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"sloth-tray {verb}: no folder and no job has a lane "
                                  "'nte'; did you mean net?")
    if verb == "pause":  # how to pause a lane before its first job
        assert f"make its folder first (mkdir {home.jobs / 'nte'})" in done.stderr
    assert lanes_known(home) == ["main", "net"] and paused(home, "nte") == [False]
    assert not rung(home)
    far = sloth(home, verb, "photos", code=2).stderr
    assert "did you mean" not in far and "'photos'" in far


def test_a_lane_paused_ahead_of_its_jobs_is_the_folder_made_first(home):
    push(home, "tidy", "main")
    (home.jobs / "later").mkdir(parents=True)
    said = sloth(home, "pause", "later").stdout
    assert said.startswith("lane later paused:")
    fetch = add(home, "--lane", "later", "--", "echo", "fetch")
    with Queue(home.db) as queue:
        assert queue.claim("me", lane="later") is None and queue.get(fetch).lane == "later"


def test_a_lane_only_a_pause_made_is_gone_once_resumed(home):
    """A pause an older version took for a lane nothing has: its resume ends it."""
    push(home, "tidy", "main")
    with Queue(home.db) as queue:
        queue.set_paused(True, "ghost")
    assert lanes_known(home) == ["main", "ghost"]
    assert sloth(home, "resume", "ghost").stdout.startswith("lane ghost resumed")
    assert lanes_known(home) == ["main"]


@pytest.mark.parametrize("verb", ["pause", "resume"])
def test_pause_and_resume_take_the_lane_as_every_command_spells_it(home, verb):
    push(home, "fetch", "net")
    if verb == "resume":
        sloth(home, "pause", "net")
    said = sloth(home, verb, "--lane", "net").stdout
    assert said.startswith(f"lane net {verb}d")
    assert paused(home, "net", "main", None) == [verb == "pause", False, False]
    both = sloth(home, verb, "main", "--lane", "net", code=2).stderr
    assert both.count("\n") == 1 and "not both" in both


def test_pause_everything_then_resume_one_lane_keeps_the_others_paused(home):
    push(home, "fetch", "net")
    push(home, "resize", "photos")
    said = sloth(home, "pause").stdout
    assert said.startswith("paused: no new job starts until `sloth-tray resume`")
    assert paused(home, None, "main", "net", "photos", "made-later") == [True] * 5
    said = sloth(home, "resume", "net").stdout
    assert said == ("lane net resumed: 1 job due now; every other lane stays paused "
                    "(`sloth-tray resume` resumes them all)\n")
    # The whole queue stays paused, net alone resumed: lanes made later stay paused too.
    assert paused(home, "net", "main", "photos", None, "made-later") == [
        False, True, True, True, True]
    status = json.loads(sloth(home, "status", "--json").stdout)
    assert {name: lane["paused"] for name, lane in status["lanes"].items()} == {
        "main": True, "net": False, "photos": True}
    assert sloth(home, "resume").stdout == "resumed: 2 jobs due now\n"
    assert paused(home, None, "main", "net", "photos") == [False] * 4


def test_resume_with_no_lane_resumes_the_lanes_paused_one_by_one(home):
    push(home, "fetch", "net")
    sloth(home, "pause", "net")
    assert sloth(home, "resume").stdout.startswith("resumed every lane: 1 job due now")
    assert paused(home, "net", None) == [False, False]


# -- add --lane -----------------------------------------------------------------------------------


def test_add_puts_a_script_or_a_command_in_the_lane_given_else_main(home):
    rung(home)
    in_net = add(home, script(home), "--lane", "net")
    assert rung(home)
    command = add(home, "--lane", "net", "--", "echo", "--lane", "elsewhere")
    plain = add(home, script(home))
    assert [job(home, i).lane for i in (in_net, command, plain)] == ["net", "net", "main"]
    assert job(home, command).name == "echo --lane elsewhere"  # its words stay its own
    assert not (home.jobs / "net").exists()  # no folder is needed, none is made
    longest = "n" * NAME_MAX
    assert job(home, add(home, "--lane", longest, "--", "true")).lane == longest
    assert job(home, add(home, "--lane", "café", "--", "true")).lane == "café"


def test_add_to_a_paused_queue_or_lane_says_on_stderr_how_it_starts(home):
    """stdout stays the id alone (`id=$(sloth-tray add ...)`); the note is on stderr."""
    quiet = sloth(home, "add", script(home))
    assert quiet.stderr == "" and quiet.stdout == f"{quiet.stdout.strip()}\n"
    (home.jobs / "my photos").mkdir()
    sloth(home, "pause", "my photos")
    held = sloth(home, "add", script(home), "--lane", "my photos")
    assert held.stdout == f"{held.stdout.strip()}\n" and job(home, held.stdout.strip())
    assert held.stderr == ("sloth-tray: lane my photos is paused: the job starts after "
                           "`sloth-tray resume 'my photos'`\n")
    assert sloth(home, "add", script(home)).stderr == ""  # main is not paused
    sloth(home, "pause")
    for lane in ("main", "my photos"):  # one resume lifts both pauses
        said = sloth(home, "add", "--lane", lane, "--", "true")
        assert said.stderr == ("sloth-tray: the queue is paused: the job starts after "
                               "`sloth-tray resume`\n")
    sloth(home, "resume", "main")  # the whole queue paused, main resumed on its own
    assert sloth(home, "add", "--", "true").stderr == ""


BAD_NAMES = [".hidden", "a/b", "", "n" * (NAME_MAX + 1), "bell\x07", "new\nline", "del\x7f",
             "\U0001f600" * NAME_MAX]  # 100 characters, but 400 bytes: no folder's name


def exit_code(capsys, *argv: str) -> tuple[int, str, str]:
    """The command line run in this process (a usage mistake exits through argparse)."""
    try:
        code = main(list(argv))
    except SystemExit as stopped:
        code = stopped.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", [".hidden", "tab\there"])
def test_add_to_a_lane_no_folder_could_be_is_one_sentence_and_queues_nothing(home, name):
    for argv in (["add", script(home), "--lane", name], ["add", "--lane", name, "--", "true"]):
        done = sloth(home, *argv, code=2)
        assert done.stdout == "" and done.stderr.count("\n") == 1
        assert done.stderr.endswith(f"--lane: {printable(problem(name))}\n"), done.stderr
        assert not home.root.exists()  # nothing queued, no home made


@pytest.mark.parametrize("name", BAD_NAMES)
def test_every_command_refuses_a_name_no_lane_can_have_in_one_sentence_with_exit_2(
        home, capsys, name):
    at = ["--home", str(home.root)]
    for argv in (["add", script(home), "--lane", name], ["add", *at, "--lane", name, "--", "true"]):
        code, out, err = exit_code(capsys, *argv, *at)
        assert (code, out, err.count("\n")) == (2, "", 1), err
        assert err.endswith(f": {printable(problem(name))}\n"), err
        assert not home.root.exists()
    failed_in(home, "main", "tidy")
    for argv in (["list", "--lane", name], ["pause", name], ["resume", name],
                 ["retry", "--all-failed", "--lane", name],
                 ["cancel", "--all-failed", "--lane", name], ["wait", "--lane", name]):
        code, out, err = exit_code(capsys, *argv, *at)
        assert (code, out, err.count("\n")) == (2, "", 1), (argv, err)
        assert err.endswith(f": {printable(problem(name))}\n"), (argv, err)
    with Queue(home.db) as queue:
        assert [job.state for job in queue.jobs()] == [State.FAILED]  # nothing retried
        assert queue.lanes() == ["main"] and not queue.paused()


# -- a job keeps its lane --------------------------------------------------------------------------


def test_retry_and_run_now_keep_a_job_in_its_lane(home):
    later = add(home, "--lane", "net", "--delay", "1h", "--", "echo", "later")
    sloth(home, "run-now", later)
    assert (job(home, later).lane, job(home, later).state) == ("net", State.PENDING)
    with Queue(home.db) as queue:
        assert queue.claim("me", lane="net").id == later
        assert queue.complete(later, "me", "ok") == State.DONE
    sloth(home, "retry", later)
    assert (job(home, later).lane, job(home, later).state) == ("net", State.PENDING)
    broken = failed_in(home, "photos", "resize")
    sloth(home, "retry", broken)
    assert (job(home, broken).lane, job(home, broken).state) == ("photos", State.PENDING)


def test_retry_and_cancel_all_failed_of_one_lane_leave_the_other_lanes_failed(home):
    net = [failed_in(home, "net", f"fetch-{n}") for n in range(2)]
    main = failed_in(home, "main", "tidy")
    rung(home)
    assert sloth(home, "retry", "--all-failed", "--lane", "net").stdout.splitlines() == [
        f"retried   fetch-{n} ({net[n]})" for n in (1, 0)]
    assert rung(home)
    assert [job(home, i).state for i in (*net, main)] == [State.PENDING] * 2 + [State.FAILED]
    assert sloth(home, "retry", "--all-failed", "--lane", "net").stdout == \
        "no failed jobs in lane net\n"
    photos = failed_in(home, "photos", "resize")
    assert sloth(home, "cancel", "--all-failed", "--lane", "photos").stdout == \
        f"cancelled resize ({photos})\n"
    assert (job(home, photos).state, job(home, main).state) == (State.CANCELLED, State.FAILED)
    done = sloth(home, "retry", main, "--lane", "main", code=2)
    assert done.stderr.count("\n") == 1 and "--lane goes with --all-failed" in done.stderr


# -- wait --lane -----------------------------------------------------------------------------------


def test_wait_lane_with_nothing_in_the_lane_returns_at_once(home):
    add(home, script(home))  # main's job is not waited for
    assert sloth(home, "wait", "--lane", "net").stdout == "nothing pending or running in lane net\n"
    assert sloth(home, "wait", code=2).stderr == \
        "sloth-tray: give job ids to wait for, or --lane NAME\n"


def finish(home, lane: str, job_id: str, error: str | None = None) -> None:
    """The lane's next job (`job_id`) claimed and ended: done, or failed with `error`."""
    assert claimed(home, lane).id == job_id
    with Queue(home.db) as queue:
        ended = queue.complete(job_id, "me") if error is None else \
            queue.fail(job_id, "me", error)
    assert ended == (State.DONE if error is None else State.FAILED)


def test_wait_lane_waits_for_the_lanes_jobs_and_those_that_join_and_fails_if_one_did(
        home, pids):
    gate = add(home, "--", "echo", "gate")  # in main: waited for by its id
    fetch = add(home, "--lane", "net", "--max-attempts", "1", "--", "echo", "fetch")
    waiting = pids.popen([sys.executable, "-m", "sloth_tray", "wait", "--home", str(home.root),
                          gate, "--lane", "net"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    finish(home, "main", gate)
    # Each look at the jobs begins with the lane's: once gate's end is told, fetch is in.
    assert line_of(waiting) == f"done      echo gate ({gate})\n"
    late = add(home, "--lane", "net", "--", "echo", "late")  # joins while it waits
    finish(home, "net", fetch, "exit status 1")
    assert line_of(waiting) == f"failed    echo fetch ({fetch}): exit status 1\n"
    assert waiting.poll() is None  # late is still to come
    finish(home, "net", late)
    out, err = waiting.communicate(timeout=30)
    assert (waiting.returncode, out) == (1, f"done      echo late ({late})\n")
    assert err == f"sloth-tray: 1 of 3 jobs did not end done: echo fetch ({fetch}) failed\n"


def line_of(proc: subprocess.Popen, timeout: float = 20.0) -> str:
    """The next line `proc` writes to its stdout, waited for at most `timeout` seconds."""
    import select

    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"no line from {proc.args} in {timeout}s"
    return proc.stdout.readline()


def test_a_due_job_held_back_by_its_lanes_running_job_says_which_one(home):
    """Why a job waits: its lane runs one job at a time, and this one is running."""
    running = push(home, "fetch_mail", "net")
    behind = push(home, "tidy", "net")
    elsewhere = push(home, "backup", "main")
    with Queue(home.db) as queue:
        assert queue.claim("app", lane="net").id == running
    listed = {line.split()[0]: line for line in sloth(home, "list").stdout.splitlines()[1:]}
    assert listed[behind[:6]].endswith("after fetch_mail (running in lane net)")
    assert "after" not in listed[elsewhere[:6]] and "after" not in listed[running[:6]]
    shown = sloth(home, "show", behind).stdout
    assert "pending (due now), after fetch_mail (running in lane net)" in shown
