"""The desktop tests' eyes: an X display of the test's own, and its pixels."""

from __future__ import annotations

import os
import subprocess


def start_xvfb(pids, size: str) -> str:
    """An Xvfb on a display it picks itself (-displayfd): a lock or socket left in
    /tmp by a server killed earlier never makes it fail. Returns ":N". Stopped at
    teardown with SIGTERM first, so that it removes its lock and socket."""
    read_end, write_end = os.pipe()
    told = os.fdopen(read_end)  # closes read_end, once
    try:
        try:
            server = pids.popen(["Xvfb", "-displayfd", str(write_end), "-screen", "0", size,
                                 "-nolisten", "tcp"], pass_fds=(write_end,),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            pids.gentle.append(server)
        finally:
            os.close(write_end)  # ours, once: the server holds its own copy
        number = told.readline().strip()
    finally:
        told.close()
    assert number.isdigit(), "Xvfb did not say which display it took"
    return f":{number}"


def grab(env, box=None):
    """The screen of env["DISPLAY"] (or the `box` of it) as a Pillow image."""
    from PIL import ImageGrab

    image = ImageGrab.grab(xdisplay=env["DISPLAY"])
    return image.crop(box) if box else image


def red_pixels(image) -> int:
    """How many pixels are the red of the failure badge."""
    rgb = image.convert("RGB")
    pixels = rgb.load()
    return sum(1 for x in range(rgb.width) for y in range(rgb.height)
               if (lambda r, g, b: r > 180 and g < 90 and b < 90)(*pixels[x, y]))
