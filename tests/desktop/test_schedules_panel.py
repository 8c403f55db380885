"""The Schedules submenu in a real StatusNotifier host (xfce4-panel, as xfce_host.py
runs it): a series' row, and each item of its submenu clicked in the panel's menu by
keyboard (Run now, Pause this schedule, Resume, Show last log, Cancel schedule), each
one's effect checked in the queue, and Show last log's in what the desktop's opener
was asked to open. Every process started here is killed by pid at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers.opener import recording_opener
from helpers.processes import wait_for
from test_sni_panel import (
    add,
    choose,
    history,
    missing,
    start_app,
    state,
)
from test_steps_panel import every_label, item_name

from sloth_tray.paths import locate
from sloth_tray.store.queue import Queue, State

pytestmark = pytest.mark.skipif(missing() is not None, reason=missing() or "")

# Nothing runs and nothing failed: Schedules is the menu's first enabled row, its first
# row the series, whose submenu's rows are, in order:
SERIES = ("Down", "Right", "Right")  # ... > check_inbox > Run now
RUN_NOW, PAUSE, SHOW_LAST_LOG, CANCEL = (SERIES + ("Down",) * n for n in range(4))


# The row's label as dbusmenu carries it: an underscore doubled (one alone would mark
# the row's access key).
ROW = "check__inbox — every 1h · "


def runs(home, *states: str) -> list:
    with Queue(home.db) as queue:
        return queue.jobs_named("check_inbox", list(states))


def test_each_item_of_a_schedules_row_works_in_a_real_panel(panel, pids, tmp_path):
    bin_dir, opened = recording_opener(tmp_path)  # the desktop's opener
    env = {**panel, "PATH": f"{bin_dir}:{panel['PATH']}"}
    home = locate(tmp_path / "home").ensure()
    start_app(home, env, pids)
    bus_name = item_name(panel)
    add(home, panel, "check_inbox", "# sloth: every=1h\necho inbox\n")

    def idle_row(*words: str) -> None:
        """Wait until the series' row shows its next run (none runs: Run now is
        enabled, the rows are where SERIES counts them) and says `words`."""
        wait_for(lambda: any(label.startswith(ROW)
                             and all(word in label for word in words)
                             for label in every_label(panel, bus_name))
                 and not runs(home, "running"), what=f"the series' row to say {words}")

    wait_for(lambda: runs(home, "done") and runs(home, "pending"), what="the first run")
    idle_row("· next ", "· last ok ")
    [waiting] = runs(home, "pending")
    key = waiting.script  # the series' key: its runs share the spooled script

    choose(panel, *RUN_NOW)
    wait_for(lambda: state(home, waiting.id) == State.DONE, what="Run now to run the run")
    assert "hurried" in history(home, waiting.id)
    wait_for(lambda: runs(home, "pending"), what="the series' next run")
    [following] = runs(home, "pending")
    assert following.not_before > waiting.updated_at + 3000  # its schedule goes on: 1h

    idle_row("· next ")
    choose(panel, *SHOW_LAST_LOG)  # the last run is the one Run now ran, not the first
    wait_for(lambda: opened.exists()
             and f"{home.job_logs(waiting.id)}/1.log" in opened.read_text().splitlines(),
             what="Show last log to open the last run's log")

    choose(panel, *PAUSE)
    with Queue(home.db) as queue:
        wait_for(lambda: queue.series_paused(key), what="Pause this schedule")
    idle_row("· paused")
    done = subprocess.run([sys.executable, "-m", "sloth_tray", "status", "--json", "--home",
                           str(home.root)], capture_output=True, text=True)
    assert json.loads(done.stdout)["next"] is None, done.stdout  # held: nothing is next
    choose(panel, *PAUSE)  # now Resume, in the same place
    with Queue(home.db) as queue:
        wait_for(lambda: not queue.series_paused(key), what="Resume")
    idle_row("· next ")

    choose(panel, *CANCEL)
    wait_for(lambda: state(home, following.id) == State.CANCELLED, what="Cancel schedule")
    assert runs(home, "pending", "running") == []  # the series ended
    wait_for(lambda: not any(label.startswith("Schedules")
                             for label in every_label(panel, bus_name)),
             what="the Schedules section to go with the last series")
