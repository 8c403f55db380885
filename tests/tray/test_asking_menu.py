"""A job that asks (`sloth-tray ask`) as the tray shows it, without a display: the
`Waiting for you (N)` rows at the top of the menu, the badge that leads, and the
notification with the choices as buttons (announce.Questions)."""

from __future__ import annotations

from dataclasses import replace

from helpers.controls import Recorder as RecordingControls

from sloth_tray.daemon.snapshot import AskingJob, FailedJob, RunningJob, Snapshot
from sloth_tray.tray import presenter
from sloth_tray.tray.announce import Question, Questions, Withdraw
from sloth_tray.tray.dbusmenu import MenuModel
from sloth_tray.tray.icons import Look

NOW = 1_000_000.0
POST = AskingJob("a1", "feed-check", "ask", 1, "Post today's feed?", ("yes", "no"),
                 NOW - 60, default="no", until=NOW + 6 * 3600)
PAY = AskingJob("b2", "summarise", "pay", 1, "Pay for the model call?", ("go", "stop"),
                NOW - 30, by="Claude Desktop")
BROKEN = FailedJob("f1", "disk_check", "disk full", NOW - 5)


def asking(*jobs: AskingJob, count: int | None = None, **more) -> Snapshot:
    return Snapshot(asking=jobs, asking_count=len(jobs) if count is None else count,
                    pending=len(jobs), **more)


def row(items, key):
    return next(item for item in items if item.key == key)


def test_the_questions_come_first_each_with_its_choices_as_items():
    controls = RecordingControls()
    items = presenter.menu(asking(POST, PAY), controls, NOW)
    assert [item.label for item in items[:4]] == [
        "Waiting for you (2)", "feed-check: Post today's feed?",
        "summarise — by Claude Desktop: Pay for the model call?", "-"]
    assert not items[0].enabled
    post, pay = items[1], items[2]
    assert [item.label for item in post.submenu] == [
        "yes", "no", "-", "no is the answer in 6h"]
    assert [item.label for item in pay.submenu] == ["go", "stop"]  # no timeout: no row
    row(post.submenu, "choice:yes").action()
    row(pay.submenu, "choice:stop").action()
    assert controls.calls == [("answer", "a1", "yes", "a1:ask:1"),
                              ("answer", "b2", "stop", "b2:pay:1")]


def test_a_question_with_a_timeout_and_no_default_says_the_job_fails():
    alone = replace(POST, default=None, until=NOW + 90)
    [_, question, _] = presenter.asking_section(asking(alone), RecordingControls(), NOW)
    assert question.submenu[-1].label == "the job fails unanswered in 2 min"


def test_with_no_question_there_is_no_section():
    items = presenter.menu(Snapshot(), RecordingControls(), NOW)
    assert not presenter.asking_section(Snapshot(), RecordingControls(), NOW)
    assert all(not item.key.startswith("ask") for item in items)


def test_questions_past_what_the_snapshot_carries_are_counted():
    section = presenter.asking_section(asking(POST, count=12), RecordingControls(), NOW)
    assert section[0].label == "Waiting for you (12)"
    assert section[2].label == "11 more: sloth-tray list" and not section[2].enabled


def test_a_questions_row_keeps_its_id_while_its_time_moves_and_the_next_question_is_new():
    model = MenuModel()
    model.update(presenter.menu(asking(POST), RecordingControls(), NOW))
    first = ids(model)
    model.update(presenter.menu(asking(POST), RecordingControls(), NOW + 3600))
    assert ids(model)["feed-check: Post today's feed?"] == first["feed-check: Post today's feed?"]
    assert ids(model)["Waiting for you (1)"] == first["Waiting for you (1)"]
    # The same job asks its next question: another row, though its name is the same.
    again = replace(POST, step="ask", occurrence=2, question="Post it now?")
    model.update(presenter.menu(asking(again), RecordingControls(), NOW + 3600))
    assert ids(model)["feed-check: Post it now?"] not in first.values()


def ids(model: MenuModel) -> dict[str, int]:
    return {node.item.label: node_id for node_id, node in model.nodes.items() if node.item}


def test_a_question_leads_the_badge_and_says_so_in_the_title():
    snapshot = asking(POST, failed_count=1, failed_jobs=(BROKEN,),
                      running=RunningJob("r1", "tidy", 1, 5, NOW))
    assert presenter.look(snapshot) == Look.ASKING | Look.FAILED | Look.RUNNING
    assert presenter.state(snapshot) == Look.ASKING
    assert presenter.title(snapshot, NOW) == (
        "sloth: running tidy · 1 waiting · 1 failed · 1 asking you")
    assert presenter.look(Snapshot()) == Look.IDLE


def test_each_question_is_one_notification_with_its_choices_as_buttons():
    questions = Questions()
    [post] = questions.update(asking(POST))  # open at start-up: it waits for the user
    assert isinstance(post, Question) and post.key == "ask:a1:ask:1"
    assert post.body == "feed-check: Post today's feed?"
    assert post.actions == (("choice-0", "yes"), ("choice-1", "no"))
    assert questions.update(asking(POST)) == []  # told once
    [pay] = questions.update(asking(POST, PAY))
    assert pay.key == "ask:b2:pay:1"
    # Answered (anywhere), cancelled or timed out: its notification goes.
    assert questions.update(asking(PAY)) == [Withdraw("ask:a1:ask:1")]
    assert questions.update(Snapshot(problem="the queue is locked")) == []
    assert questions.update(asking()) == [Withdraw("ask:b2:pay:1")]


def test_a_snapshot_carrying_some_of_the_questions_withdraws_none_it_left_out():
    questions = Questions()
    questions.update(asking(POST, PAY))
    assert questions.update(asking(PAY, count=2)) == []


def test_a_button_stands_for_its_choice_whatever_the_choice_says():
    odd = replace(POST, choices=("default", "no_way"))
    [question] = Questions().update(asking(odd))
    assert [question.choice(key) for key, _ in question.actions] == ["default", "no_way"]
    assert question.choice("default") is None and question.choice("choice-7") is None
