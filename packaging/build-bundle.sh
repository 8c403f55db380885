#!/usr/bin/env bash
# Build the one-folder app build/dist/sloth-tray/ with PyInstaller, then smoke-test it.
#
#   bash packaging/build-bundle.sh
#
# Everything happens under build/ (ignored by git): a throwaway venv (build/bundle-venv)
# with the project and PyInstaller, PyInstaller's work files (build/pyinstaller-work) and
# its log (build/pyinstaller.log), and the app (build/dist/sloth-tray, plus
# build/dist/sloth-tray.app on macOS). Exits non-zero if any step or check fails.
#
# Environment (all optional):
#   PYTHON=python3            the Python to build with (3.11 or newer, with venv and a
#                             shared libpython: on Debian/Ubuntu the libpython3.X package)
#   SLOTH_BUNDLE_GTK=auto     Linux: bundle PyGObject, for pystray's GTK/AppIndicator tray
#                             with a real menu. auto: when GObject introspection's and
#                             cairo's development files are there to build it (Debian:
#                             libgirepository1.0-dev libcairo2-dev pkg-config); 1: must;
#                             0: never (on a bare X11 tray with no StatusNotifier host,
#                             the app then runs headless)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PYTHON="${PYTHON:-python3}"
WITH_GTK="${SLOTH_BUNDLE_GTK:-auto}"
BUILD="$ROOT/build"
VENV="$BUILD/bundle-venv"
WORK="$BUILD/pyinstaller-work"
DIST="$BUILD/dist"
APP="$DIST/sloth-tray"
LOG="$BUILD/pyinstaller.log"
SPEC="$ROOT/packaging/pyinstaller/sloth-tray.spec"

step() { printf '\n== %s\n' "$*"; }
die() { printf 'build-bundle: %s\n' "$*" >&2; exit 1; }
SCRATCH=""
on_exit() {
    local rc=$?
    if [ -n "$SCRATCH" ]; then rm -rf "$SCRATCH"; fi
    if [ "$rc" -ne 0 ]; then printf 'build-bundle: FAILED (exit %s)\n' "$rc" >&2; fi
}
trap on_exit EXIT

# -- the Python to build with -----------------------------------------------------------

step "checking $PYTHON"
command -v "$PYTHON" >/dev/null || die "$PYTHON not found: install Python 3.11 or newer (Debian: apt-get install python3 python3-venv)"
"$PYTHON" - <<'EOF' || die "sloth-tray needs Python 3.11 or newer; set PYTHON=/path/to/python3.11+"
import sys
print(sys.version.split()[0], sys.executable)
raise SystemExit(sys.version_info < (3, 11))
EOF
"$PYTHON" -c "import venv, ensurepip" 2>/dev/null \
    || die "$PYTHON cannot make a venv with pip (Debian: apt-get install python3-venv)"

# -- a throwaway venv with the project and PyInstaller ----------------------------------

step "creating $VENV"
rm -rf "$VENV" "${BUILD:?}/lib" "$BUILD/bdist."*  # bdist/lib: setuptools' leftovers from an older tree
mkdir -p "$BUILD"
"$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
[ -x "$PY" ] || PY="$VENV/Scripts/python.exe"  # a venv made by a Windows Python
PIP=("$PY" -m pip --disable-pip-version-check --no-input)

step "installing sloth-tray and PyInstaller"
"${PIP[@]}" install --quiet "$ROOT" "pyinstaller>=6.10,<7"

if [ "$(uname -s)" = Linux ] && [ "$WITH_GTK" != 0 ]; then
    if [ "$WITH_GTK" = 1 ] || { command -v pkg-config >/dev/null \
            && pkg-config --exists gobject-introspection-1.0 cairo; }; then
        step "installing PyGObject (GTK tray with a menu)"
        # PyGObject 3.51 and later need girepository-2.0 (GLib 2.80), newer than Debian 12's.
        if ! "${PIP[@]}" install --quiet "pygobject<3.51"; then
            [ "$WITH_GTK" = 1 ] && die "could not build PyGObject (Debian: apt-get install libgirepository1.0-dev libcairo2-dev pkg-config python3-dev)"
            echo "PyGObject did not build: going on without it (no icon on a bare X11 tray: headless there)"
        fi
    else
        step "no PyGObject: on a bare X11 tray (no StatusNotifier host) the app runs headless"
        echo "(for the GTK tray: apt-get install libgirepository1.0-dev libcairo2-dev pkg-config, then run this again)"
    fi
fi

# PyInstaller embeds the Python shared library. Debian's python3 is linked statically
# and its libpython3.X.so comes in a package of its own, which a fresh system lacks.
if ! "$PY" -c "from PyInstaller.depend.bindepend import get_python_library_path as f; f()" >/dev/null 2>&1; then
    libpkg="$("$PY" -c 'import sys; print("libpython%d.%d" % sys.version_info[:2])')"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        step "installing $libpkg (the Python shared library PyInstaller needs)"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -qq "$libpkg" >/dev/null 2>&1 \
            || { apt-get update -qq && apt-get install -y -qq "$libpkg" >/dev/null; } \
            || die "could not install $libpkg"
    else
        "$PY" -c "from PyInstaller.depend.bindepend import get_python_library_path as f; f()" || true
        die "PyInstaller needs Python's shared library: on Debian/Ubuntu, sudo apt-get install $libpkg"
    fi
fi

# -- PyInstaller ------------------------------------------------------------------------------

step "running PyInstaller (log: ${LOG#"$ROOT"/})"
rm -rf "$APP" "$DIST/sloth-tray.app"
if ! "$PY" -m PyInstaller --noconfirm --clean --distpath "$DIST" --workpath "$WORK" \
        "$SPEC" >"$LOG" 2>&1; then
    tail -n 40 "$LOG" >&2
    die "PyInstaller failed (whole log: $LOG)"
fi
grep -E ' (WARNING|ERROR): ' "$LOG" | grep -v 'Library not found' | sed 's/^[0-9]* //' | sort -u | head -n 20 || true

EXE="$APP/sloth-tray"
[ -x "$EXE" ] || EXE="$APP/sloth-tray.exe"
[ -x "$EXE" ] || die "PyInstaller made no $APP/sloth-tray"

# -- smoke tests: the frozen program alone, from elsewhere, without the venv -------------------

step "smoke-testing $EXE"
SCRATCH="$(mktemp -d)"
HOME_DIR="$SCRATCH/home"
frozen() {
    (cd "$SCRATCH" && env -u PYTHONPATH -u PYTHONHOME -u VIRTUAL_ENV -u SLOTH_TRAY_HOME \
        -u SLOTH_TRAY_JOBS "$EXE" "$@")
}

want_version="$("$PY" -c 'import sloth_tray; print(sloth_tray.__version__)')"
version_out="$(frozen --version)" || die "sloth-tray --version failed"
echo "\$ sloth-tray --version"
echo "$version_out"
[[ "$version_out" == *"$want_version"* ]] || die "--version printed '$version_out', not version $want_version"

status_out="$(frozen status --json --home "$HOME_DIR")" || die "sloth-tray status --json failed"
echo "\$ sloth-tray status --json --home \"\$(mktemp -d)/home\""
echo "$status_out"
"$PYTHON" - "$status_out" <<'EOF' || die "status --json is not all-zero counts"
import json, sys
status = json.loads(sys.argv[1])
# A new home: every count zero (whatever counts there are), and not paused; the other
# keys (the running job, the next one) say there is none.
counts = {"pending", "running", "done", "failed", "cancelled", "due_now"}
numbers = {key: value for key, value in status.items()
           if isinstance(value, int) and not isinstance(value, bool)}
if any(status[key] is not None for key in ("running_job", "next") if key in status):
    raise SystemExit(f"expected no running and no next job, got {status}")
if not counts <= set(numbers) or any(value != 0 for value in numbers.values()) \
        or status.get("paused") is not False:
    raise SystemExit(f"expected every count zero and not paused, got {status}")
EOF

if [ "$EXE" = "$APP/sloth-tray" ]; then  # not on Windows, where .sh jobs do not run
    # One real job through the frozen runner: spool, claim, subprocess, log, complete.
    printf 'echo hello from the bundle\n' >"$SCRATCH/hello.sh"
    frozen add "$SCRATCH/hello.sh" --home "$HOME_DIR" >/dev/null || die "sloth-tray add failed"
    frozen work --once --home "$HOME_DIR" >/dev/null || die "sloth-tray work --once failed"
    done_count="$(frozen status --json --home "$HOME_DIR" \
        | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["done"])')"
    [ "$done_count" = 1 ] || die "a .sh job did not complete in the bundle (done=$done_count)"
    echo "a .sh job ran to done in the bundle"

    # Steps through the frozen app: `sloth-tray step` found on the job's PATH (the bundle's
    # own executable) and `sloth_step` imported by the system's python3; retried, the
    # job skips both.
    cat >"$SCRATCH/steps.sh" <<EOF
#!/bin/sh
set -e
sloth-tray step greet -- sh -c 'echo greeted >>"$SCRATCH/greeted"'
if command -v python3 >/dev/null; then
    python3 -c 'from sloth_step import step; step("count", lambda: open("$SCRATCH/counted", "a").write("1"))'
fi
test -e "$SCRATCH/go"
EOF
    frozen add "$SCRATCH/steps.sh" --max-attempts 1 --home "$HOME_DIR" >/dev/null \
        || die "sloth-tray add failed"
    frozen work --once --home "$HOME_DIR" >/dev/null || true  # fails: no $SCRATCH/go yet
    touch "$SCRATCH/go"
    steps_id="$(frozen list --state failed --json --home "$HOME_DIR" \
        | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)[0]["id"])')" \
        || die "the steps job did not fail as it should have"
    frozen retry "$steps_id" --home "$HOME_DIR" >/dev/null || die "sloth-tray retry failed"
    frozen work --once --home "$HOME_DIR" >/dev/null || die "the retried steps job failed"
    [ "$(wc -l <"$SCRATCH/greeted")" -eq 1 ] || die "a done shell step ran again in the bundle"
    if command -v python3 >/dev/null; then
        [ "$(cat "$SCRATCH/counted")" = 1 ] || die "a done Python step ran again in the bundle"
    fi
    echo "steps ran once each across a retry in the bundle"
fi

step "built $APP ($(du -sh "$APP" | cut -f1))"
if [ -d "$DIST/sloth-tray.app" ]; then echo "and $DIST/sloth-tray.app"; fi
echo "build-bundle: OK in ${SECONDS}s"
