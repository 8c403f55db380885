"""The icon's badges, looked at pixel by pixel: each state alone keeps its one badge
bottom-right; states that hold together each show theirs, in corners of their own."""

from __future__ import annotations

import pytest

from sloth_tray.daemon.snapshot import FailedJob, RunningJob, Snapshot
from sloth_tray.jobs.overdue import OverdueJob
from sloth_tray.tray import presenter
from sloth_tray.tray.icons import BADGE_COLOURS, EVERY_LOOK, Look, render

NOW = 1_000_000.0
SIZES = (16, 22, 32, 64)
SINGLE = (Look.RUNNING, Look.FAILED, Look.PAUSED, Look.OVERDUE, Look.ASKING)

# Quadrants of a 64 px icon, (x0, y0, x1, y1): the primary badge sits bottom-right,
# a second one bottom-left, a third top-right, a fourth top-left.
BOTTOM_RIGHT = (36, 36, 64, 64)
BOTTOM_LEFT = (0, 40, 26, 64)
TOP_RIGHT = (40, 0, 64, 24)
TOP_LEFT = (0, 0, 24, 24)
TOP_CENTRE = (26, 0, 38, 16)  # the fifth, with all five at once


def pixels(look: Look, box: tuple[int, int, int, int], size: int = 64) -> list[tuple]:
    image = render(look, size)
    x0, y0, x1, y1 = box
    return [image.getpixel((x, y)) for y in range(y0, y1) for x in range(x0, x1)]


def close_to(pixel: tuple, colour: tuple, slack: int = 12) -> bool:
    return pixel[3] == 255 and all(abs(a - b) <= slack for a, b in zip(pixel, colour, strict=True))


def has_colour(look: Look, box: tuple[int, int, int, int], colour: tuple) -> bool:
    return sum(close_to(p, colour) for p in pixels(look, box)) >= 20


def test_a_state_alone_changes_only_the_bottom_right_corner():
    for look in SINGLE:
        for box in (BOTTOM_LEFT, TOP_RIGHT, TOP_LEFT):
            assert pixels(look, box) == pixels(Look.IDLE, box), (look, box)
        assert has_colour(look, BOTTOM_RIGHT, BADGE_COLOURS[look]), look


@pytest.mark.parametrize("primary, second", [
    (Look.FAILED, Look.PAUSED), (Look.FAILED, Look.RUNNING), (Look.FAILED, Look.OVERDUE),
    (Look.RUNNING, Look.PAUSED), (Look.OVERDUE, Look.PAUSED), (Look.OVERDUE, Look.RUNNING),
    (Look.ASKING, Look.FAILED), (Look.ASKING, Look.RUNNING),
])
def test_two_states_show_both_badges_in_corners_of_their_own(primary, second):
    both = primary | second
    assert has_colour(both, BOTTOM_RIGHT, BADGE_COLOURS[primary])
    assert not has_colour(both, BOTTOM_RIGHT, BADGE_COLOURS[second])
    assert has_colour(both, BOTTOM_LEFT, BADGE_COLOURS[second])
    assert not has_colour(both, BOTTOM_LEFT, BADGE_COLOURS[primary])
    for box in (TOP_RIGHT, TOP_LEFT):  # the face's eyes stay as they were
        assert pixels(both, box) == pixels(Look.IDLE, box)


def test_every_state_at_once_fills_the_four_corners_in_order():
    every = Look.FAILED | Look.RUNNING | Look.OVERDUE | Look.PAUSED
    assert has_colour(every, BOTTOM_RIGHT, BADGE_COLOURS[Look.FAILED])
    assert has_colour(every, BOTTOM_LEFT, BADGE_COLOURS[Look.OVERDUE])
    assert has_colour(every, TOP_RIGHT, BADGE_COLOURS[Look.RUNNING])
    assert has_colour(every, TOP_LEFT, BADGE_COLOURS[Look.PAUSED])


def test_all_five_at_once_put_the_question_bottom_right_and_the_pause_on_top():
    every = Look.ASKING | Look.FAILED | Look.RUNNING | Look.OVERDUE | Look.PAUSED
    assert has_colour(every, BOTTOM_RIGHT, BADGE_COLOURS[Look.ASKING])
    assert has_colour(every, BOTTOM_LEFT, BADGE_COLOURS[Look.FAILED])
    assert has_colour(every, TOP_RIGHT, BADGE_COLOURS[Look.OVERDUE])
    assert has_colour(every, TOP_LEFT, BADGE_COLOURS[Look.RUNNING])
    assert has_colour(every, TOP_CENTRE, BADGE_COLOURS[Look.PAUSED])


def test_every_combination_is_a_different_picture_in_colour_and_in_shape_alone():
    assert len(EVERY_LOOK) == 32 and len(set(EVERY_LOOK)) == 32
    for size in SIZES:
        pictures = {render(look, size).tobytes() for look in EVERY_LOOK}
        templates = {render(look, size, template=True).tobytes() for look in EVERY_LOOK}
        assert len(pictures) == len(EVERY_LOOK), size
        assert len(templates) == len(EVERY_LOOK), ("shape alone must tell them apart", size)
        assert render(Look.PAUSED | Look.FAILED, size).size == (size, size)


LATE = OverdueJob("backup", NOW - 2 * 86400, "")
BROKEN = FailedJob("f1", "disk_check", "disk full", NOW - 5)
RUN = RunningJob("r1", "tidy", 1, 5, NOW)


@pytest.mark.parametrize("snapshot, look", [
    (Snapshot(), Look.IDLE),
    (Snapshot(paused=True), Look.PAUSED),
    (Snapshot(paused=True, failed_count=1, failed_jobs=(BROKEN,)), Look.FAILED | Look.PAUSED),
    (Snapshot(running=RUN, failed_count=1, failed_jobs=(BROKEN,)), Look.FAILED | Look.RUNNING),
    (Snapshot(overdue=(LATE,), failed_count=1, failed_jobs=(BROKEN,)),
     Look.FAILED | Look.OVERDUE),
    (Snapshot(overdue=(LATE,), running=RUN, paused=True),
     Look.RUNNING | Look.OVERDUE | Look.PAUSED),
    (Snapshot(problem="the queue is locked", paused=True), Look.FAILED | Look.PAUSED),
])
def test_the_look_holds_every_state_that_holds(snapshot, look):
    assert presenter.look(snapshot) == look
