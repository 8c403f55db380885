#!/bin/sh
# Install what tests/bench/compare.py needs, on a Debian or Ubuntu machine:
#   - task-spooler (`tsp`), from the distribution, when run as root where apt-get exists;
#   - the `bench` extra (huey, persist-queue, litequeue) into a venv, made if missing.
#
#   sh tests/bench/setup.sh [VENV]      # VENV defaults to .venv in the repository root
#
# Running it again changes nothing that is already in place.
set -eu

repo=$(cd "$(dirname "$0")/../.." && pwd)
venv=${1:-"$repo/.venv"}

# -- task-spooler ----------------------------------------------------------------------
if command -v tsp >/dev/null 2>&1; then
    echo "task-spooler: already installed ($(command -v tsp))"
elif ! command -v apt-get >/dev/null 2>&1; then
    echo "task-spooler: apt-get not found; install task-spooler by hand" \
         "(compare.py leaves tsp out without it)"
elif [ "$(id -u)" -ne 0 ]; then
    echo "task-spooler: not root; run 'sudo apt-get install -y task-spooler'" \
         "(compare.py leaves tsp out without it)"
else
    # A fresh machine may have no package lists yet: read them, then install.
    if ! apt-get install -y task-spooler; then
        apt-get update
        apt-get install -y task-spooler
    fi
    echo "task-spooler: installed ($(command -v tsp))"
fi

# -- the bench extra -------------------------------------------------------------------
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
py="$venv/bin/python"
# -I: the current folder is not on the path, so only an installed sloth_tray counts.
if "$py" -I -c 'import sys, sloth_tray; sys.exit(not sloth_tray.__file__.startswith(sys.argv[1]))' \
        "$repo/" >/dev/null 2>&1; then
    # sloth-tray is installed from this tree already: add the extra's packages alone
    # (pip leaves those already satisfied as they are), so the installed project is not
    # taken out and put back under whoever is using it meanwhile.
    requirements=$(mktemp)
    trap 'rm -f "$requirements"' EXIT
    "$py" -I -c '
import sys, tomllib
with open(sys.argv[1], "rb") as file:
    print("\n".join(tomllib.load(file)["project"]["optional-dependencies"]["bench"]))
' "$repo/pyproject.toml" >"$requirements"
    "$py" -m pip install --quiet -r "$requirements"
    echo "bench extra: in $venv"
else
    (cd "$repo" && "$py" -m pip install --quiet -e '.[bench]')
    echo "sloth-tray and its bench extra: installed into $venv"
fi
"$py" -m pip freeze 2>/dev/null | grep -iE '^(huey|persist-queue|litequeue)==' || true
