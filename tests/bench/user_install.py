"""sloth-tray installed as a person installs it, so that its commands are timed as a
person types them: a wheel of this tree built by pip, installed by pip into a new venv
(`python -m venv`, with the pip and setuptools a venv comes with), run through the
`sloth-tray` console script pip writes.

Not the checkout's editable install (`pip install -e`, as the test command makes): its
finder is run by site at every start of that venv's interpreter, and imports pathlib,
urllib.parse and ipaddress, so the bare interpreter a command is held against pays for
what the command would have imported. Both then look faster than either is.

The dependencies are the running environment's, named by a path line in a .pth file
(a path line runs no code): nothing is downloaded, and no .pth of that environment's
runs in the new one.

    python tests/bench/user_install.py DIR    # installs into DIR; prints the JSON of it
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[2]
WHAT_A_WHEEL_HOLDS = ("pyproject.toml", "README.md", "sloth_tray")
TIMEOUT = 300  # seconds for each step; a new venv with its pip takes a few


class Installed(NamedTuple):
    python: str  # the new venv's interpreter
    script: str  # its `sloth-tray` console script


class InstallFailed(RuntimeError):
    """The install could not be made; its one sentence says why."""


def install(where: Path) -> Installed:
    """sloth-tray from this tree installed into a new venv under `where` (made)."""
    where.mkdir(parents=True, exist_ok=True)
    tree, wheels, venv = where / "tree", where / "wheels", where / "venv"
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir()
    # A copy: the build's own folders (build/, *.egg-info) stay out of the checkout.
    for name in WHAT_A_WHEEL_HOLDS:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, tree / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, tree / name)
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index",
          "--no-build-isolation", "--wheel-dir", str(wheels), str(tree)],
         "building the wheel (the bench extra brings the setuptools it needs: "
         "sh tests/bench/setup.sh)")
    wheel = next(wheels.glob("sloth_tray-*.whl"), None)
    if wheel is None:
        raise InstallFailed(f"pip built no sloth_tray wheel in {wheels}")
    shutil.rmtree(venv, ignore_errors=True)
    _run([sys.executable, "-m", "venv", str(venv)], "making the venv")
    python = str(venv / "bin" / "python")
    _run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
         "installing the wheel")
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path("
                              "'purelib'))"], capture_output=True, text=True, check=True,
                             timeout=TIMEOUT).stdout.strip()
    ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (Path(purelib) / "sloth-bench-dependencies.pth").write_text(
        "".join(f"{folder}\n" for folder in sorted(ours)))
    script = venv / "bin" / "sloth-tray"
    if not script.is_file():
        raise InstallFailed(f"pip wrote no console script at {script}")
    return Installed(python, str(script))


def _run(command: list[str], doing: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise InstallFailed(f"{doing} failed (exit {done.returncode}): "
                            f"{said[-1] if said else 'nothing said'}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/bench/user_install.py DIR")
    try:
        print(json.dumps(install(Path(sys.argv[1]))._asdict()))
    except InstallFailed as exc:
        sys.exit(f"user_install: {exc}")
