"""A step's own tries, end to end: `sloth-tray step NAME --retries N --backoff D
--timeout D` and `step(name, fn, retries=, backoff=, timeout=)` in real jobs under a
real runner (`sloth-tray work --once`), with real child processes: a failing step
tried again in place, in the same run; one past its timeout stopped, group and all,
even when it ignores SIGTERM; `show` naming the try.

Side effects are lines appended to files: counting them says how often a try ran.
"""

from __future__ import annotations

import sys
import time

import pytest
from helpers.tagged import tagged
from test_steps import add, lines, run_log, show, sloth, steps, work

from sloth_tray.for_jobs import sloth_step

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")


def test_a_failing_step_is_tried_again_in_place_and_only_the_good_try_is_kept(home,
                                                                             tmp_path, tag):
    effects = tmp_path / "effects"
    job_id = add(home, "flaky.sh", f"""#!/bin/sh
# sloth: max_attempts=1
out=$(sloth-tray step fetch --retries 3 --backoff 0 -- sh -c '
    echo try >> {effects}; n=$(wc -l < {effects}); echo "out $n"; test "$n" -ge 3') || exit 9
echo "got $out"
""", tag=tag)
    assert work(home, tag).startswith("ok")
    job = show(home, job_id)
    assert (job["state"], job["runs"], job["attempts"]) == ("done", 1, 1)
    assert lines(effects) == ["try"] * 3  # three tries, one run
    # The script read only the try that ended well: what is kept and replayed.
    assert job["result"] == "got out 3"
    fetch = steps(home, job_id)[0]
    assert (fetch["state"], fetch["tries"], fetch["exit_code"]) == ("done", 3, 0)
    log = run_log(home, job_id, 1)
    assert 'step "fetch" failed (exit 1) (try 1 of 4); trying again in 0 s' in log
    assert 'step "fetch" failed (exit 1) (try 2 of 4)' in log and "try 3 of 4" not in log
    assert "out 1" in log and "out 2" in log  # a failed try's output: in the log
    assert "  done (try 3)  " in sloth(home, "show", job_id).stdout
    # A later run replays the kept output, the same the first run's script read.
    sloth(home, "retry", job_id)
    assert work(home, tag).startswith("ok")
    assert lines(effects) == ["try"] * 3
    assert show(home, job_id)["result"] == "got out 3"


def test_a_step_out_of_tries_fails_the_job_with_its_last_status(home, tmp_path, tag):
    effects = tmp_path / "effects"
    job_id = add(home, "broken.sh", f"""#!/bin/sh
# sloth: max_attempts=1
sloth-tray step send --retries 1 --backoff 0.2s -- sh -c 'echo try >> {effects}; exit 7'
echo "status $?"
""", tag=tag)
    started = time.monotonic()
    work(home, tag)
    assert time.monotonic() - started >= 0.2  # the backoff was waited
    assert lines(effects) == ["try", "try"]
    assert show(home, job_id)["result"] == "status 7"
    send = steps(home, job_id)[0]
    assert (send["state"], send["tries"], send["exit_code"]) == ("failed", 2, 7)
    assert "trying again in 0.2 s" in run_log(home, job_id, 1)


def test_a_step_past_its_timeout_has_its_group_stopped_even_one_ignoring_sigterm(home,
                                                                               tmp_path,
                                                                               tag):
    effects = tmp_path / "effects"
    # The first try ignores SIGTERM, it and its child (an ignored signal stays ignored
    # across exec): SIGKILL after the grace ends it. The second try is quick.
    job_id = add(home, "slow.sh", f"""#!/bin/sh
# sloth: max_attempts=1
out=$(sloth-tray step slow --timeout 1 --retries 1 --backoff 0 -- sh -c '
    echo try >> {effects}
    if [ "$(wc -l < {effects})" -eq 1 ]; then trap "" TERM; sleep 600 & wait; fi
    echo quick')
echo "got $out status $?"
""", tag=tag)
    started = time.monotonic()
    assert work(home, tag).startswith("ok")
    took = time.monotonic() - started
    assert 1 + sloth_step.GRACE <= took < 1 + sloth_step.GRACE + 15, took
    assert lines(effects) == ["try", "try"]
    assert show(home, job_id)["result"] == "got quick status 0"
    log = run_log(home, job_id, 1)
    assert 'step "slow" ran past its timeout of 1 s: its processes were stopped' in log
    assert 'step "slow" ran past its timeout of 1 s (try 1 of 2)' in log
    assert tagged(tag) == []  # `sleep 600` went with its group


def test_a_step_past_its_timeout_with_no_tries_left_fails_124(home, tmp_path, tag):
    job_id = add(home, "stuck.sh", """#!/bin/sh
# sloth: max_attempts=1
sloth-tray step stuck --timeout 0.5 -- sleep 600
echo "status $?"
""", tag=tag)
    started = time.monotonic()
    work(home, tag)
    assert time.monotonic() - started < sloth_step.GRACE  # it honoured SIGTERM
    assert show(home, job_id)["result"] == f"status {sloth_step.TIMED_OUT}"
    stuck = steps(home, job_id)[0]
    assert (stuck["state"], stuck["exit_code"], stuck["tries"]) == ("failed", 124, None)
    assert tagged(tag) == []


def test_a_python_step_is_tried_again_and_timed_out_in_place(home, tmp_path, tag):
    effects = tmp_path / "effects"
    job_id = add(home, "tries.py", f"""#!{sys.executable}
# sloth: max_attempts=1
import time
from sloth_step import step, StepTimedOut

def flaky():
    with open({str(effects)!r}, "a") as f:
        f.write("flaky\\n")
    if len(open({str(effects)!r}).read().split()) < 2:
        raise ConnectionError("no network")
    return "fetched"

print(step("fetch", flaky, retries=2, backoff=0))
try:
    step("hang", time.sleep, 600, timeout=0.3, retries=1, backoff=0)
except StepTimedOut as exc:
    print("gave up:", exc)
""", tag=tag)
    assert work(home, tag).startswith("ok")
    job = show(home, job_id)
    assert job["state"] == "done" and lines(effects) == ["flaky", "flaky"]
    assert job["result"] == 'gave up: step "hang" ran past its timeout of 0.3 s'
    log = run_log(home, job_id, 1)
    assert log.splitlines()[0] == ('sloth-tray: step "fetch" raised ConnectionError: no '
                                   "network (try 1 of 3); trying again in 0 s")
    assert "fetched" in log and 'step "hang" ran past its timeout of 0.3 s (try 1 of 2)' in log
    fetch, hang = steps(home, job_id)
    assert (fetch["state"], fetch["tries"]) == ("done", 2)
    assert (hang["state"], hang["tries"]) == ("failed", 2)


@pytest.mark.parametrize("how, words", [
    ({"retries": -1}, "bad value -1 for retries"),
    ({"retries": 101}, "bad value 101 for retries"),
    ({"backoff": 86401}, "bad value 86401 for backoff"),
    ({"timeout": 0}, "bad value 0 for timeout"),
    ({"timeout": float("nan")}, "bad value nan for timeout"),
])
def test_a_python_steps_bad_tries_are_one_sentence(how, words):
    with pytest.raises(ValueError, match=words):
        sloth_step.step("x", lambda: 1, **how)


def test_the_backoff_doubles_from_a_second_up_to_its_cap():
    assert [sloth_step.backoff_delay(n, 60) for n in range(1, 9)] == [
        1, 2, 4, 8, 16, 32, 60, 60]
    assert sloth_step.backoff_delay(1000, 5.5) == 5.5 and sloth_step.backoff_delay(3, 0) == 0


def test_show_says_what_a_sleep_and_an_ask_wait_for_and_which_try_a_step_is_on(home,
                                                                              tmp_path,
                                                                              tag):
    effects = tmp_path / "effects"
    job_id = add(home, "feed.sh", f"""#!/bin/sh
sloth-tray step fetch --retries 1 --backoff 0 -- sh -c '
    echo try >> {effects}; test "$(wc -l < {effects})" -ge 2'
sloth-tray ask "Post it?" --name post --timeout 1d --default no
sloth-tray sleep 2h
""", tag=tag)

    def rows() -> dict[str, list[str]]:
        text = sloth(home, "show", job_id).stdout
        table = text.split("\nsteps\n", 1)[1].splitlines()
        return {row.split()[0]: [cell.strip() for cell in row.strip().split("  ")
                                 if cell.strip()] for row in table}

    work(home, tag)
    fetch, post = rows()["fetch"], rows()["post"]
    assert fetch[1] == "done (try 2)" and fetch[-1] == "0 bytes"
    assert post[1].startswith('asks "Post it?" (yes/no, until ') and post[-1] == "-"
    assert post[-2].endswith(" so far")
    sloth(home, "answer", job_id, "yes")
    assert rows()["post"][1] == "answered yes (runs again now)"
    work(home, tag)
    post, sleep = rows()["post"], rows()["sleep"]
    assert post[1] == "done (answered yes)" and post[-1] == "-"
    assert sleep[1].startswith("sleeping until ") and sleep[-2] in ("2h to go", "1h to go")
    assert sleep[-1] == "-"


def test_a_try_from_a_run_that_is_over_is_refused_and_changes_nothing(home):
    from sloth_tray.store.queue import Queue

    with Queue(home.db) as queue:
        job_id = queue.push("flaky")
        queue.claim("me", token="t1")
        run = sloth_step.Run(str(home.db), job_id, "t1", "me")
        db = sloth_step.connection(str(home.db))
        decision = sloth_step.start(db, run, "fetch", ask=False, kind="shell")
        assert sloth_step.next_try(db, run, "fetch", decision.occurrence, 2)
        stranger = sloth_step.Run(str(home.db), job_id, "t2", "me")
        assert not sloth_step.next_try(db, stranger, "fetch", decision.occurrence, 3)
        queue.release(job_id, "me")  # the run is over: its step was cut short
        assert not sloth_step.next_try(db, run, "fetch", decision.occurrence, 3)
        (step,) = queue.steps(job_id)
        assert (step["state"], step["tries"]) == ("cut", 2)
