"""The icon: a sloth's face, with a badge whose SHAPE says the state.

macOS draws menu-bar icons as one-colour templates, so colour alone cannot
carry the meaning: idle has no badge, running a ring with a notch (a spinner),
failed a triangle with a bar (a warning), paused two bars, overdue a clock face
(a recurring job has not succeeded for too long). Each size is drawn
four times larger and scaled down, which keeps 16 px as crisp as 64 px.
"""

from __future__ import annotations

from enum import StrEnum
from functools import lru_cache

from PIL import Image, ImageChops, ImageDraw

SUPERSAMPLE = 4
FUR = (120, 92, 64, 255)
MASK = (232, 214, 186, 255)
PATCH = (62, 44, 30, 255)
EYE = (250, 250, 250, 255)


class Look(StrEnum):
    IDLE = "idle"
    RUNNING = "running"
    FAILED = "failed"
    PAUSED = "paused"
    OVERDUE = "overdue"


BADGE_COLOURS = {
    Look.RUNNING: (40, 120, 220, 255),
    Look.FAILED: (214, 48, 49, 255),
    Look.PAUSED: (120, 120, 120, 255),
    Look.OVERDUE: (232, 150, 20, 255),  # amber: late, not broken
}


@lru_cache(maxsize=32)
def render(look: Look, size: int = 64, *, template: bool = False) -> Image.Image:
    """The icon for `look` at `size` px (RGBA). `template`: black on clear, for macOS."""
    big = size * SUPERSAMPLE
    image = Image.new("RGBA", (big, big), (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    _face(draw, big)
    if look != Look.IDLE:
        _badge(draw, big, look)
    image = image.resize((size, size), Image.LANCZOS)
    return _as_template(image) if template else image


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


def _badge(draw: ImageDraw.ImageDraw, s: int, look: Look) -> None:
    """Bottom-right, over the face, with a clear rim so it reads at 16 px."""
    u = s / 64
    colour = BADGE_COLOURS[look]
    box = (34 * u, 34 * u, 64 * u, 64 * u)
    rim = (box[0] - 3 * u, box[1] - 3 * u, box[2], box[3])
    if look == Look.FAILED:
        _triangle(draw, rim, (0, 0, 0, 0))
        _triangle(draw, box, colour)
        draw.rectangle((47.5 * u, 44 * u, 50.5 * u, 55 * u), fill=EYE)
        draw.rectangle((47.5 * u, 57 * u, 50.5 * u, 60 * u), fill=EYE)
        return
    draw.ellipse(rim, fill=(0, 0, 0, 0))
    draw.ellipse(box, fill=colour)
    if look == Look.PAUSED:
        draw.rectangle((42 * u, 41 * u, 46.5 * u, 57 * u), fill=EYE)
        draw.rectangle((51.5 * u, 41 * u, 56 * u, 57 * u), fill=EYE)
    elif look == Look.OVERDUE:  # a clock: a white face, hands at ten past twelve
        draw.ellipse((38 * u, 38 * u, 60 * u, 60 * u), fill=EYE)
        hand = int(3 * u)
        draw.line((49 * u, 49 * u, 49 * u, 41 * u), fill=colour, width=hand)
        draw.line((49 * u, 49 * u, 55 * u, 52 * u), fill=colour, width=hand)
    else:  # running: a ring with a gap and an arrow head, a spinner
        width = int(4 * u)
        draw.arc((40 * u, 40 * u, 58 * u, 58 * u), 40, 320, fill=EYE, width=width)
        draw.polygon([(54 * u, 36 * u), (62 * u, 46 * u), (50 * u, 47 * u)], fill=EYE)


def _triangle(draw: ImageDraw.ImageDraw, box: tuple[float, ...], fill) -> None:
    x0, y0, x1, y1 = box
    draw.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=fill)
