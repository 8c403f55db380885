"""Render the app's icons into assets/ (the app draws the same pictures at run time).

    python assets/render_icons.py
"""

from __future__ import annotations

from pathlib import Path

from sloth_tray.icons import Look, render

HERE = Path(__file__).resolve().parent
SIZES = (16, 22, 32, 48, 64, 256)


def main() -> None:
    for look in Look:
        for size in SIZES:
            render(look, size).save(HERE / f"sloth-{look.value}-{size}.png")
        render(look, 64, template=True).save(HERE / f"sloth-{look.value}-template.png")
    render(Look.IDLE, 256).save(HERE / "sloth-tray.png")  # the app's icon for menus


if __name__ == "__main__":
    main()
