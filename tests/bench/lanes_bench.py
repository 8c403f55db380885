"""Lanes, measured on real daemons (compare.py's "lanes" section):

- drop -> start in a second lane while the first lane runs a long job, against
  drop -> start into an idle one-lane app (goal: at most 1.5 x);
- wake-ups a minute of an idle app with three lanes, each of which ran a job and has
  one due in an hour (goal: 0);
- RSS of that idle app against the same app with one lane (goal: at most 1 MiB more).

Drops are renamed in, as the README says to drop a file; each start is the job's own
clock (`date +%s%N` as its first line), so the figure is what a user waits.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from statistics import median
from typing import Any

import drop_latency

from sloth_tray.store.queue import Queue

GOAL_SECOND_LANE = 1.5  # x the one-lane drop -> start
GOAL_RSS_MIB = 1.0  # MiB a 3-lane app may use above a 1-lane one
LANES = ("main", "net", "mail")


def drop(places: drop_latency.Places, lane: str, name: str, text: str) -> int:
    """A script renamed into `lane`'s folder; the moment it was in place (ns)."""
    folder = places.jobs if lane == "main" else places.jobs / lane
    staging = places.results / f"{name}.sh"
    staging.write_text(text, encoding="utf-8")
    os.rename(staging, folder / f"{name}.sh")
    return time.time_ns()


def drop_to_start_ms(places, daemon, lane: str, name: str) -> float:
    result = places.results / f"{name}.ns"
    dropped = drop(places, lane, name, drop_latency.script_text(result))
    started = drop_latency.wait_for(lambda: drop_latency.read_timestamp(result),
                                    drop_latency.DROP_TIMEOUT, f"{name} to start", daemon)
    return (started - dropped) / 1e6


def holding_job(places, hold: Path, started: Path) -> str:
    """A long job: it says it started, then runs until `hold` exists."""
    return (f"#!/bin/sh\ntouch {started}\n"
            f"while [ ! -e {hold} ]; do sleep 0.05; done\n")


def start(base: Path, lanes: tuple[str, ...], reaper) -> tuple[Any, Any]:
    places = drop_latency.Places(home=base / "home", results=base / "results")
    places.results.mkdir(parents=True)
    places.jobs.mkdir(parents=True)
    for lane in lanes:
        if lane != "main":
            (places.jobs / lane).mkdir()
    daemon = drop_latency.start_daemon(places)
    reaper.add(daemon.pid, daemon)
    drop_latency.wait_until_ready(daemon, places)
    return places, daemon


def latencies(trials: int, root: Path, reaper, log) -> dict[str, Any]:
    """Interleaved: a drop into an idle one-lane app, then one into lane net of a
    two-lane app while its main lane runs a long job."""
    one, one_daemon = start(root / "one-lane", ("main",), reaper)
    two, two_daemon = start(root / "two-lanes", ("main", "net"), reaper)
    alone, beside = [], []
    try:
        for trial in range(trials):
            time.sleep(1.0)  # the point of the bench: each drop meets a daemon at rest
            alone.append(drop_to_start_ms(one, one_daemon, "main", f"alone-{trial}"))
            hold, started = two.results / f"hold-{trial}", two.results / f"long-{trial}"
            drop(two, "main", f"long-{trial}", holding_job(two, hold, started))
            drop_latency.wait_for(started.exists, drop_latency.DROP_TIMEOUT,
                                  "the long job to start", two_daemon)
            time.sleep(1.0)  # as above: the second lane's drop meets the app at rest
            beside.append(drop_to_start_ms(two, two_daemon, "net", f"beside-{trial}"))
            hold.touch()
            log(f"  lanes trial {trial + 1}: one lane {alone[-1]:7.1f} ms, second lane "
                f"{beside[-1]:7.1f} ms")
    finally:
        reaper.stop(one_daemon.pid)
        reaper.stop(two_daemon.pid)
    ratio = median(beside) / median(alone)
    return {"one_lane_ms": median(alone), "second_lane_ms": median(beside),
            "ratio": ratio, "goal": GOAL_SECOND_LANE, "met": ratio <= GOAL_SECOND_LANE,
            "trials": {"one_lane_ms": alone, "second_lane_ms": beside}}


def idle_apps(root: Path, reaper) -> dict[str, tuple[Any, Any]]:
    """A one-lane and a three-lane app, each lane having run a job and holding one due
    in an hour: idle as a user's app is between jobs."""
    apps = {}
    for label, lanes in (("1 lane", ("main",)), ("3 lanes", LANES)):
        places, daemon = start(root / f"idle-{label.replace(' ', '-')}", lanes, reaper)
        ran = [places.results / f"ran-{lane}" for lane in lanes]
        for lane, marker in zip(lanes, ran, strict=True):
            drop(places, lane, f"once-{lane}", f"#!/bin/sh\ntouch {marker}\n")
        drop_latency.wait_for(lambda ran=ran: all(m.exists() for m in ran),
                              drop_latency.DROP_TIMEOUT, "a job in each lane", daemon)
        with Queue(places.db) as queue:
            for lane in lanes:
                queue.push(f"later-{lane}", script="/bin/true", delay=3600, lane=lane)
        apps[label] = (places, daemon)
    return apps


def idle_rows_data(summaries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    one, three = summaries["1 lane"], summaries["3 lanes"]
    more = three["rss_mib"] - one["rss_mib"]
    return {"wakeups_per_min": three["wakeups_per_min"], "rss_3_mib": three["rss_mib"],
            "rss_1_mib": one["rss_mib"], "rss_more_mib": more,
            "met": {"wakeups": three["wakeups_per_min"] == 0, "rss": more <= GOAL_RSS_MIB},
            "goal_rss_mib": GOAL_RSS_MIB, "summaries": summaries}
