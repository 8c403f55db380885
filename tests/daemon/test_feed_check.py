"""README's feed-check job (Steps that wait), run as written under a real daemon
(`sloth-tray run --headless`), with the app killed -9 between any two of its lines and
started again: fetch, ask "post it?" (with a default and a timeout), sleep, post
(`--ask`).

The user's rules: the feed is fetched once; it is posted at most once without a
person's word (cut during post, the job stops `step_unsure` until one), and exactly
once in all once the job is done. `curl` and `post-feed` are scripts of the test's
own, found first on PATH, that append a line to a file; the sleep is a short one
standing in for `--until`. The script is read from README.md itself.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import sys
import time
from pathlib import Path

import pytest
from helpers.processes import alive, frozen_between_writes, wait_for
from test_steps import environment, lines, quit_daemon, show, sloth, start_daemon
from test_waits import job_processes

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")

# Where the app is killed -9: each point lies between two lines of the script.
# `ask_recorded`: the ask is in the queue, and the app (frozen) never ended the run.
KILL_POINTS = ("after_fetch", "ask_recorded", "while_asking", "after_answer",
               "while_sleeping", "during_post")
SLEEP = 3  # seconds: long enough to be seen asleep and killed, short for the suite
README = Path(__file__).resolve().parents[2] / "README.md"


def readme_example() -> str:
    """The feed-check script as README's Steps that wait shows it."""
    text = README.read_text()
    section = text[text.index("### Steps that wait"):]
    return next(block for block in re.findall(r"```sh\n(.*?\n)```", section, flags=re.S)
                if "Post today's feed?" in block)


def replaced(script: list[str], start: str, new: str) -> None:
    """The one line of `script` beginning `start` (its indent kept) becomes `new`."""
    [at] = [n for n, line in enumerate(script) if line.strip().startswith(start)]
    script[at] = script[at][:len(script[at]) - len(script[at].lstrip())] + new


def feed_check(folder, hold_at: str) -> tuple[str, Path]:
    """README's script as written, its `curl` and `post-feed` local scripts found first
    on PATH (the folder returned), its sleep a short one, and a hold between two lines
    at `hold_at` (a shell loop until the test says go): the app is killed there. A
    hold has no side effect, and is passed at once after the restart."""
    effects, reached, go = folder / "effects", folder / "reached", folder / "go"
    hold = (f'if [ "$1" = {hold_at} ]; then echo "$1" >> {reached}; '
            f"while [ ! -e {go} ]; do sleep 0.05; done; fi")
    bin_ = folder / "bin"
    bin_.mkdir()
    # curl -fsS -o FILE URL: the feed written to FILE
    (bin_ / "curl").write_text(f'#!/bin/sh\necho "fetched $4" >> {effects}\n'
                               "echo '<rss/>' > \"$3\"\n")
    (bin_ / "post-feed").write_text(f'#!/bin/sh\necho "posted $(cat "$1")" >> {effects}\n'
                                    f"set -- during_post\n{hold}\n")
    for tool in bin_.iterdir():
        tool.chmod(0o755)
    script = readme_example().splitlines()
    assert script[:2] == ["#!/bin/sh", "set -e"], script
    replaced(script, "sloth-tray sleep --until", f"sloth-tray sleep {SLEEP}s")
    fetch = next(n for n, line in enumerate(script) if "step fetch" in line)
    script.insert(fetch + 1, "hold after_fetch")
    ask = next(n for n, line in enumerate(script) if "sloth-tray ask" in line)
    script.insert(ask + 1, "    hold after_answer")
    script.insert(2, f"hold() {{ {hold}; }}")
    return "\n".join(script) + "\n", bin_


@pytest.mark.parametrize("kill_at", KILL_POINTS)
def test_the_feed_check_example_survives_a_kill_9_of_the_app_between_any_two_lines(
        home, tmp_path, pids, tag, kill_at):  # noqa: F811 - tag: the fixture
    effects, reached, go = tmp_path / "effects", tmp_path / "reached", tmp_path / "go"
    script = home.root.parent / "feed-check.sh"
    text, tools = feed_check(tmp_path, "after_fetch" if kill_at == "ask_recorded" else kill_at)
    script.write_text(text)
    job_id = sloth(home, "add", str(script), tag=tag).stdout.strip()
    # The job's $HOME (where the feed goes) is the test's, its curl and post-feed ours.
    env = environment(tag, HOME=str(tmp_path), PATH=f"{tools}{os.pathsep}{os.environ['PATH']}")
    logs = iter(tmp_path / f"daemon{n}.log" for n in (1, 2))
    log = next(logs)
    daemon = start_daemon(pids, home, log, env=env)

    def job() -> dict:
        return show(home, job_id)

    def waiting(kind: str) -> dict | None:
        """The job, once it waits (`answer` or `time`) with its run ended and no process."""
        now = job()
        waits = now["state"] == "pending" and (now["waiting_for"] or {}).get("kind") == kind
        return now if waits and not job_processes(job_id) else None

    def ask_step() -> str | None:
        with sqlite3.connect(home.db) as db:
            found = db.execute("SELECT state FROM steps WHERE job = ? AND kind = 'ask'",
                               (job_id,)).fetchone()
        return found and found[0]

    def held_at(point: str) -> None:
        wait_for(lambda: point in lines(reached), timeout=20, what=f"the job at {point}")

    def kill_here(point: str) -> None:
        """kill -9 of the app at `point`, and a new start; the job's processes left
        behind are the new start's to end (it does, before it runs anything)."""
        nonlocal daemon, log
        if point != kill_at:
            return
        daemon.send_signal(signal.SIGKILL)
        daemon.wait(timeout=10)
        left = job_processes(job_id)
        log = next(logs)
        daemon = start_daemon(pids, home, log, env=env)
        assert not any(alive(pid) for pid in left), "the restart ends the cut run"
        go.touch()  # later holds pass: the rest of the script runs as written

    try:
        if kill_at == "after_fetch":
            held_at("after_fetch")
            kill_here("after_fetch")
        if kill_at == "ask_recorded":
            held_at("after_fetch")
            frozen_between_writes(daemon, home.db)  # the app cannot end the run that asks
            go.touch()
            wait_for(lambda: ask_step() == "waiting", timeout=20, what="the ask recorded")
            assert job()["state"] == "running"
            kill_here("ask_recorded")
        asking = wait_for(lambda: waiting("answer"), timeout=20, what="the job to ask")
        assert asking["waiting_for"]["default"] == "no"
        # A run cut before its wait was recorded counts as an attempt; a wait never does,
        # even one the app was killed before it ended the run (taken back as the wait).
        assert asking["attempts"] == (1 if kill_at == "after_fetch" else 0), asking["history"]
        assert asking["waiting_for"]["until"] > time.time() + 5 * 3600  # the 6h timeout
        kill_here("while_asking")
        sloth(home, "answer", job_id, "yes")
        if kill_at == "after_answer":
            held_at("after_answer")
            kill_here("after_answer")
        asleep = wait_for(lambda: waiting("time"), timeout=20, what="the job to sleep")
        until = asleep["waiting_for"]["until"]
        kill_here("while_sleeping")
        if kill_at == "during_post":
            held_at("during_post")
            kill_here("during_post")
            # Cut short in an asking step: stopped, posted once, until a person's word.
            stopped = wait_for(lambda: (lambda now: now["state"] == "failed" and now)(job()),
                               timeout=20, what="the job to stop unsure")
            assert stopped["reason"] == "step_unsure", stopped["last_error"]
            assert f"sloth-tray retry {job_id} --step-done post" in stopped["last_error"]
            assert lines(effects).count("posted <rss/>") == 1
            sloth(home, "retry", job_id, "--step-done", "post")  # it was posted
        wait_for(lambda: job()["state"] == "done", timeout=20, what="the job to end")
        assert time.time() >= until  # the sleep never ended early, killed or not
    finally:
        go.touch()
        quit_daemon(daemon, log)

    # fetched once, posted once
    assert lines(effects) == ["fetched https://example.org/feed.xml", "posted <rss/>"]
    done = job()
    steps = {(s["name"], s["state"]) for s in done["steps"]}
    assert steps == {("fetch", "done"), ("ask: Post today's feed?", "done"),
                     ("sleep", "done"), ("post", "done")}
    answered = next(s for s in done["steps"] if s["kind"] == "ask")
    assert answered["answer"] == "yes"
    kinds = [event["kind"] for event in done["history"]]
    assert kinds.count("waiting") >= 2 and kinds.count("answered") == 1, kinds
    assert kinds.count("failed") == (1 if kill_at == "during_post" else 0), kinds
