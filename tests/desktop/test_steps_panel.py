"""Steps in a real StatusNotifier host (xfce4-panel, as xfce_host.py runs it): the
running job's row names its step; an app killed -9 in a step that asks leaves a job
that, at the next start, fails for a person's word, says so in a notification, and
is answered by clicking `Mark "send" done` in the panel's menu. Every process started
here is killed by pid at the end.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess

import pytest
from helpers.processes import wait_for
from test_sni_panel import (
    add,
    app_layout,
    choose,
    missing,
    start_app,
)
from xfce_host import registered_items

from sloth_tray.paths import locate
from sloth_tray.store.queue import Queue, Reason, State

pytestmark = pytest.mark.skipif(missing() is not None, reason=missing() or "")


def item_name(env) -> str:
    """The bus name of the one item registered with the panel."""
    [name] = re.findall(r"(:[0-9.]+)/StatusNotifierItem", registered_items(env))
    return name


def every_label(env, bus_name: str) -> list[str]:
    """Every row's label, submenus too (nine levels: more than the menu has)."""
    out = subprocess.run(["gdbus", "call", "--session", "--dest", bus_name, "--object-path",
                          "/MenuBar", "--method", "com.canonical.dbusmenu.GetLayout", "0", "9",
                          "['label']"], env=env, capture_output=True, text=True).stdout
    return re.findall(r"'label': <'([^']*)'>", out)


def test_a_step_cut_short_by_a_killed_app_is_answered_in_the_panels_menu(
        panel, pids, tmp_path):
    from fake_desktop import Desktop

    home = locate(tmp_path / "home").ensure()
    started, after, sent = tmp_path / "started", tmp_path / "after", tmp_path / "sent"
    app = start_app(home, panel, pids)
    job = add(home, panel, "invoice",
              "sloth-tray step prepare -- echo prepared\n"
              f"sloth-tray step send --ask -- sh -c 'touch {sent}; echo $$ > {started}; "
              "exec sleep 300'\n"
              f"echo after > {after}\n")
    pids.add(int(wait_for(lambda: started.exists() and started.read_text().strip(),
                          what='step "send" to start')))
    bus_name = item_name(panel)
    wait_for(lambda: any(label.startswith("Running invoice — step 2 send (attempt 1, ")
                         for _, label in app_layout(panel, bus_name)),
             what="the running row to name its step")

    os.kill(app.pid, signal.SIGKILL)  # mid-step: did "send" happen? Nobody knows
    app.wait(timeout=10)
    wait_for(lambda: "StatusNotifierItem" not in registered_items(panel),
             what="the killed app's item to leave the panel")
    sent.unlink()

    services = Desktop(panel["DBUS_SESSION_BUS_ADDRESS"])
    try:
        notifications = services.notifications(["actions", "body"])
        start_app(home, panel, pids)  # takes the lease back: the job fails, asking
        with Queue(home.db) as queue:
            wait_for(lambda: queue.get(job).state == State.FAILED, what="the job to fail")
            assert queue.get(job).reason == Reason.STEP_UNSURE
        wait_for(lambda: any("cut short" in note["summary"] for note in notifications.sent),
                 what="the notification that asks")
        [note] = [note for note in notifications.sent if "cut short" in note["summary"]]
        assert note["actions"][:4] == ["mark-done", 'Mark "send" done',
                                       "run-again", 'Run "send" again']

        labels = wait_for(lambda: every_label(panel, item_name(panel)), what="the menu")
        assert 'Got through 1 step; stopped in "send" (cut short)' in labels
        assert 'Mark "send" done' in labels and 'Run "send" again' in labels
        # Nothing runs: Failed jobs is the first enabled row; in the job's submenu the
        # error and how far it got are greyed out, so Right lands on Mark "send" done.
        choose(panel, "Down", "Right", "Right")

        with Queue(home.db) as queue:
            wait_for(lambda: queue.get(job).state == State.DONE,
                     what="the job to run again and end")
            steps = {step["name"]: step for step in queue.steps(job)}
            assert [(name, step["state"]) for name, step in steps.items()] == [
                ("prepare", "done"), ("send", "done")]
            assert steps["send"]["marked_at"] is not None
            assert steps["prepare"]["run"] == 1, "a step done never runs again"
        assert after.read_text() == "after\n"
        assert not sent.exists(), 'step "send" ran again'
    finally:
        services.close()
