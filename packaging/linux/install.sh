#!/usr/bin/env bash
# Put sloth-tray in the desktop's application menu, for the current user only.
#
#   bash packaging/linux/install.sh                 menu entry + icons (sloth-tray must be on PATH)
#   bash packaging/linux/install.sh --bundle DIR    also install a built bundle (DIR is
#                                                   build/dist/sloth-tray) and point the entry at it
#   bash packaging/linux/install.sh --uninstall     remove all of the above
#
# Files go under $XDG_DATA_HOME (default ~/.local/share):
#   applications/sloth-tray.desktop
#   icons/hicolor/<size>x<size>/apps/sloth-tray.png   for 16 22 32 48 64 256
# and, with --bundle, the app under ~/.local/lib/sloth-tray with a link ~/.local/bin/sloth-tray.
# Nothing here touches the app's own data (~/.local/share/sloth-tray).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ASSETS="$(cd "$HERE/../../assets" && pwd)"
SIZES=(16 22 32 48 64 256)

DATA="${XDG_DATA_HOME:-$HOME/.local/share}"
case "$DATA" in /*) ;; *) DATA="$HOME/.local/share" ;; esac  # the spec: relative values are invalid
APPS="$DATA/applications"
ICONS="$DATA/icons/hicolor"
LIB="$HOME/.local/lib/sloth-tray"
BIN="$HOME/.local/bin"

usage() {
    sed -n '2,8s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

refresh_caches() {
    # Optional helpers: menus pick the files up without them, just later.
    if command -v gtk-update-icon-cache >/dev/null && [ -f "$ICONS/index.theme" ]; then
        gtk-update-icon-cache -q -f -t "$ICONS" || true
    fi
    if command -v update-desktop-database >/dev/null; then
        update-desktop-database -q "$APPS" || true
    fi
}

# A path as one argument of a desktop entry's Exec key (quoted when it needs to be).
exec_arg() {
    local path="$1"
    if [[ "$path" =~ ^[A-Za-z0-9_./+-]+$ ]]; then
        printf '%s' "$path"
    else
        path="${path//\\/\\\\\\\\}"
        path="${path//\"/\\\\\"}"
        path="${path//\`/\\\\\`}"
        path="${path//\$/\\\\\$}"
        printf '"%s"' "$path"
    fi
}

uninstall() {
    rm -f "$APPS/sloth-tray.desktop"
    for size in "${SIZES[@]}"; do
        rm -f "$ICONS/${size}x${size}/apps/sloth-tray.png"
    done
    if [ -L "$BIN/sloth-tray" ] && [ "$(readlink "$BIN/sloth-tray")" = "$LIB/sloth-tray" ]; then
        rm -f "$BIN/sloth-tray"
    fi
    rm -rf "$LIB"
    refresh_caches
    echo "removed the sloth-tray menu entry, its icons and any bundle installed by this script"
}

bundle=""
while [ $# -gt 0 ]; do
    case "$1" in
        --bundle) [ $# -ge 2 ] || { echo "install.sh: --bundle needs a folder" >&2; exit 2; }
                  bundle="$2"; shift 2 ;;
        --uninstall) uninstall; exit 0 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "install.sh: unknown argument: $1 (try --help)" >&2; exit 2 ;;
    esac
done

exec_line="sloth-tray"
if [ -n "$bundle" ]; then
    if [ ! -x "$bundle/sloth-tray" ]; then
        echo "install.sh: $bundle/sloth-tray is not there: build it first (bash packaging/build-bundle.sh)" >&2
        exit 1
    fi
    bundle="$(cd "$bundle" && pwd)"
    rm -rf "$LIB.new"
    mkdir -p "$(dirname "$LIB")" "$BIN"
    cp -a "$bundle" "$LIB.new"
    rm -rf "$LIB"
    mv "$LIB.new" "$LIB"
    ln -sfn "$LIB/sloth-tray" "$BIN/sloth-tray"
    exec_line="$(exec_arg "$LIB/sloth-tray")"
    echo "installed the bundle in $LIB (linked from $BIN/sloth-tray)"
fi

for size in "${SIZES[@]}"; do
    install -D -m 0644 "$ASSETS/sloth-idle-$size.png" "$ICONS/${size}x${size}/apps/sloth-tray.png"
done

mkdir -p "$APPS"
tmp="$(mktemp "$APPS/.sloth-tray.desktop.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
while IFS= read -r line || [ -n "$line" ]; do
    if [[ "$line" == Exec=* ]]; then
        line="Exec=$exec_line"
    fi
    printf '%s\n' "$line"
done < "$HERE/sloth-tray.desktop" > "$tmp"
chmod 0644 "$tmp"
mv -f "$tmp" "$APPS/sloth-tray.desktop"
trap - EXIT

refresh_caches

echo "installed $APPS/sloth-tray.desktop and icons under $ICONS"
if [ -z "$bundle" ] && ! command -v sloth-tray >/dev/null; then
    echo "note: sloth-tray is not on PATH, so the menu entry cannot start it yet:" \
         "pip install the project, or run this again with --bundle build/dist/sloth-tray" >&2
fi
