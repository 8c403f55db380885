"""The icon: a sloth's face, with a badge per state whose SHAPE says the state.

macOS draws menu-bar icons as one-colour templates, so colour alone cannot
carry the meaning: idle has no badge, running a ring with a notch (a spinner),
failed a triangle with a bar (a warning), paused two bars, overdue a clock face
(a recurring job has not succeeded for too long), asking a question mark (a job
waits for the user's answer). One icon for every lane: states
that hold together each show their badge, the first in BADGE_ORDER (the state that
most needs the user) bottom-right, as it would alone, the others smaller, in the
corners where the face has least to lose. Each size is drawn four times larger and
scaled down, which keeps 16 px as crisp as 64 px.
"""

from __future__ import annotations

from enum import Flag
from functools import lru_cache, reduce
from itertools import combinations

from PIL import Image, ImageChops, ImageDraw

SUPERSAMPLE = 4
FUR = (120, 92, 64, 255)
MASK = (232, 214, 186, 255)
PATCH = (62, 44, 30, 255)
EYE = (250, 250, 250, 255)


class Look(Flag):
    """The states the icon shows, combined with `|` (Look.PAUSED | Look.FAILED);
    IDLE is none of them."""

    IDLE = 0
    RUNNING = 1
    FAILED = 2
    PAUSED = 4
    OVERDUE = 8
    ASKING = 16


# Which badge takes the bottom-right corner when several show, whichever lanes they
# hold in: the state that most needs the user first. A question holds its job until
# the user answers (and its timeout may answer for them); failed needs the user now;
# overdue needs a look soon; running says what the machine is busy with; a pause is
# the user's own doing.
BADGE_ORDER = (Look.ASKING, Look.FAILED, Look.OVERDUE, Look.RUNNING, Look.PAUSED)
# Every look there is, IDLE first: what a cache of drawn icons holds at most.
EVERY_LOOK = tuple(reduce(lambda a, b: a | b, badges, Look.IDLE)
                   for n in range(len(BADGE_ORDER) + 1)
                   for badges in combinations(BADGE_ORDER, n))


def leading(look: Look) -> Look:
    """The one state of `look` that most needs the user (its badge bottom-right), or IDLE."""
    return next((state for state in BADGE_ORDER if state in look), Look.IDLE)


BADGE_COLOURS = {
    Look.RUNNING: (40, 120, 220, 255),
    Look.FAILED: (214, 48, 49, 255),
    Look.PAUSED: (120, 120, 120, 255),
    Look.OVERDUE: (232, 150, 20, 255),  # amber: late, not broken
    Look.ASKING: (128, 64, 200, 255),  # violet: a word wanted, nothing broken
}


# Where the badges go, on the 64-unit grid: (left, top, scale of a 30-unit badge).
# The first is where a state alone puts its badge; the second and third keep the
# eyes clear; the fifth, all five at once, is the smallest, on top of the head.
CORNERS = ((34, 34, 1.0), (0, 38, 26 / 30), (38, 0, 26 / 30), (0, 0, 26 / 30),
           (22, 0, 20 / 30))


@lru_cache(maxsize=128)
def render(look: Look, size: int = 64, *, template: bool = False) -> Image.Image:
    """The icon for `look` at `size` px (RGBA). `template`: black on clear, for macOS."""
    big = size * SUPERSAMPLE
    image = Image.new("RGBA", (big, big), (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    _face(draw, big)
    badges = [state for state in BADGE_ORDER if state in look]
    for state, corner in zip(badges, CORNERS, strict=False):
        _badge(draw, big, state, corner)
    image = image.resize((size, size), Image.LANCZOS)
    return _as_template(image) if template else image


@lru_cache(maxsize=16)
def badge(state: Look, size: int = 16) -> Image.Image:
    """One state's badge alone, filling `size` px: what a menu row carries beside its
    label (an overdue series' row, the amber clock)."""
    big = size * SUPERSAMPLE
    image = Image.new("RGBA", (big, big), (0, 0, 0, 0))
    _badge(ImageDraw.Draw(image), big, state, (0, 0, 64 / 30))
    return image.resize((size, size), Image.LANCZOS)


def _as_template(image: Image.Image) -> Image.Image:
    """Black, with the light parts (mask, eyes, glyphs) cut out: the dark parts
    carry the shape, as a template image must."""
    darkness = image.convert("L").point(lambda v: min(255, (255 - v) * 255 // 150))
    black = Image.new("RGBA", image.size, (0, 0, 0, 255))
    black.putalpha(ImageChops.multiply(darkness, image.getchannel("A")))
    return black


def _face(draw: ImageDraw.ImageDraw, s: int) -> None:
    """A round furry head, a pale mask, two drooping eye patches, a nose."""
    u = s / 64  # drawn on a 64-unit grid
    draw.ellipse((2 * u, 4 * u, 58 * u, 60 * u), fill=FUR)
    draw.ellipse((8 * u, 14 * u, 52 * u, 54 * u), fill=MASK)
    for x0, x1 in ((11, 27), (33, 49)):  # the patches slope down and out: a sleepy look
        draw.ellipse((x0 * u, 24 * u, x1 * u, 38 * u), fill=PATCH)
    draw.ellipse((17 * u, 28 * u, 22 * u, 33 * u), fill=EYE)
    draw.ellipse((38 * u, 28 * u, 43 * u, 33 * u), fill=EYE)
    draw.ellipse((26 * u, 38 * u, 34 * u, 44 * u), fill=PATCH)
    draw.arc((23 * u, 40 * u, 37 * u, 50 * u), 20, 160, fill=PATCH, width=max(1, int(2 * u)))


def _badge(draw: ImageDraw.ImageDraw, s: int, state: Look,
           corner: tuple[float, float, float]) -> None:
    """One state's badge in `corner`, over the face, with a clear rim on the face's
    side so it reads at 16 px. Drawn in the badge's own 30 units, from (0, 0)."""
    left, top, scale = corner
    u = s / 64

    def at(*xy: float) -> tuple[float, ...]:  # badge units -> pixels, x and y in turn
        return tuple((origin + v * scale) * u
                     for origin, v in zip((left, top) * (len(xy) // 2), xy, strict=True))

    colour = BADGE_COLOURS[state]
    box = at(0, 0, 30, 30)
    rim_x, rim_y = (-3, 0) if left > 32 else (0, 3), (-3, 0) if top > 32 else (0, 3)
    rim = at(rim_x[0], rim_y[0], 30 + rim_x[1], 30 + rim_y[1])
    if state == Look.FAILED:
        _triangle(draw, rim, (0, 0, 0, 0))
        _triangle(draw, box, colour)
        draw.rectangle(at(13.5, 10, 16.5, 21), fill=EYE)
        draw.rectangle(at(13.5, 23, 16.5, 26), fill=EYE)
        return
    draw.ellipse(rim, fill=(0, 0, 0, 0))
    draw.ellipse(box, fill=colour)
    if state == Look.PAUSED:
        draw.rectangle(at(8, 7, 12.5, 23), fill=EYE)
        draw.rectangle(at(17.5, 7, 22, 23), fill=EYE)
    elif state == Look.ASKING:  # a question mark: a hook, its stem, its dot
        width = int(4 * scale * u)
        draw.arc(at(9, 5, 21, 16), 180, 90, fill=EYE, width=width)
        draw.rectangle(at(13, 15, 17, 20), fill=EYE)
        draw.rectangle(at(13, 22.5, 17, 26), fill=EYE)
    elif state == Look.OVERDUE:  # a clock: a white face, hands at ten past twelve
        draw.ellipse(at(4, 4, 26, 26), fill=EYE)
        hand = int(3 * scale * u)
        draw.line(at(15, 15, 15, 7), fill=colour, width=hand)
        draw.line(at(15, 15, 21, 18), fill=colour, width=hand)
    else:  # running: a ring with a gap and an arrow head, a spinner
        width = int(4 * scale * u)
        draw.arc(at(6, 6, 24, 24), 40, 320, fill=EYE, width=width)
        draw.polygon([at(20, 2), at(28, 12), at(16, 13)], fill=EYE)


def _triangle(draw: ImageDraw.ImageDraw, box: tuple[float, ...], fill) -> None:
    x0, y0, x1, y1 = box
    draw.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=fill)
