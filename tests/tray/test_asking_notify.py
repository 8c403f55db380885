"""A job's question answered from its notification: a real daemon and tray, its
Notifier on a private D-Bus with a fake notification server, a button clicked there."""

from __future__ import annotations

import shutil
import sys

import pytest
from helpers.processes import wait_for

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("dbus-daemon") is None,
    reason="needs Linux and dbus-daemon")

from test_notification_flood import app, drop, notice_id  # noqa: E402,F401

from sloth_tray.store.queue import Queue, State  # noqa: E402

ASKS = """#!/bin/sh
echo drafted >> "{effects}"
if [ "$(sloth-tray ask "{question}" --choices yes,no)" = yes ]; then
    echo sent >> "{effects}"
fi
"""


def questions(server) -> list[dict]:
    return [sent for sent in server.sent if sent["summary"] == "sloth-tray: a job asks you"]


def job_named(home, name: str):
    queue = Queue(home.db)
    try:
        return next(job for job in queue.jobs() if job.name == name)
    finally:
        queue.close()


def test_two_questions_each_a_notification_answered_by_a_button_or_withdrawn(
        desktop, app, tmp_path):  # noqa: F811
    server = desktop.notifications(["actions", "body"])
    effects = tmp_path / "effects"
    drop(app.home, "mail.sh", ASKS.format(effects=effects, question="Send it to Bob?"))
    drop(app.home, "post.sh", ASKS.format(effects=effects, question="Post it?"))
    wait_for(lambda: len(questions(server)) == 2, timeout=30, what="both questions")
    by_body = {sent["body"]: sent for sent in questions(server)}
    mail = by_body["mail: Send it to Bob?"]
    assert mail["actions"] == ["choice-0", "yes", "choice-1", "no"]
    assert app.tray._snapshot.asking_count == 2
    # The button answers it: the job runs on at once with the choice, and its
    # notification goes; the other question is left alone.
    desktop.call(server.ActionInvoked, notice_id(server, mail), "choice-0")
    wait_for(lambda: job_named(app.home, "mail").state == State.DONE, timeout=30,
             what="the answered job to run on")
    wait_for(lambda: notice_id(server, mail) in server.closed, what="its notification to go")
    assert job_named(app.home, "post").state == State.PENDING
    # A click read off an older question of the job answers nothing (the menu's and
    # the buttons' actions run in order on one thread: the cancel comes after it).
    post_id = job_named(app.home, "post").id
    app.tray.answer(post_id, "yes", f"{post_id}:an-older-question:1")
    # Cancelled while it asks: its notification goes too.
    app.tray.cancel(post_id)
    post = by_body["post: Post it?"]
    wait_for(lambda: notice_id(server, post) in server.closed, what="the other to go")
    queue = Queue(app.home.db)
    try:
        kinds = [event.kind for event in queue.history(post_id)]
    finally:
        queue.close()
    assert "answered" not in kinds and kinds[-1] == "cancelled", kinds
    assert effects.read_text().splitlines() == ["drafted", "drafted", "drafted", "sent"]
