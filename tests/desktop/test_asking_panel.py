"""A job's question in a real StatusNotifier host (xfce4-panel, as xfce_host.py
runs it): `Waiting for you (1)` heads the menu, and clicking a choice in the panel's
menu answers the job, which runs on with it. Every process started here is killed by
pid at the end.
"""

from __future__ import annotations

import pytest
from helpers.processes import wait_for
from test_sni_panel import add, choose, missing, start_app
from test_steps_panel import every_label, item_name

from sloth_tray.paths import locate
from sloth_tray.store.queue import Queue, State

pytestmark = pytest.mark.skipif(missing() is not None, reason=missing() or "")


def test_a_choice_clicked_in_the_panels_menu_answers_the_job(panel, pids, tmp_path):
    home = locate(tmp_path / "home").ensure()
    said = tmp_path / "said"
    start_app(home, panel, pids)
    # (no apostrophe in the question: gdbus would quote its label otherwise)
    job = add(home, panel, "feed-check",
              f"sloth-tray ask 'Post the feed today?' --choices yes,no > {said}\n")
    with Queue(home.db) as queue:
        wait_for(lambda: queue.waiting_for([job]), what="the job to ask")
    labels = wait_for(lambda: (lambda found: "Waiting for you (1)" in found and found)(
        every_label(panel, item_name(panel))), what="the question in the menu")
    assert labels[:2] == ["Waiting for you (1)", "feed-check: Post the feed today?"]
    assert labels[2:4] == ["yes", "no"]
    # The header is greyed out: Down lands on the question, Right opens it on "yes",
    # Down moves to "no".
    choose(panel, "Down", "Right", "Down")
    with Queue(home.db) as queue:
        wait_for(lambda: queue.get(job).state == State.DONE, what="the job to run on")
        assert [event.kind for event in queue.history(job)].count("answered") == 1
    assert said.read_text() == "no\n"
    wait_for(lambda: "Waiting for you (1)" not in every_label(panel, item_name(panel)),
             what="the question to leave the menu")
