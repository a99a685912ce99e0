#!/usr/bin/env bash
# Compiles windows/draftlens.nsi with makensis on Linux against a stand-in payload (a fake
# draftlens.exe and _internal/), to prove the installer script compiles and reads the version
# from app/__init__.py. The real installer is built on Windows by build_windows.sh (CI).
#   bash packaging/windows/check_nsis.sh        (apt-get install nsis, if makensis is missing)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$PWD"
command -v makensis >/dev/null || { [ "$(id -u)" = 0 ] && apt-get install -y -qq nsis >/dev/null; } \
  || { echo "check_nsis.sh: makensis missing (apt-get install nsis)" >&2; exit 1; }
VERSION="$(sed -n 's/^__version__ *= *["'\'']\([^"'\'']*\)["'\''].*/\1/p' app/__init__.py)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/payload/_internal/llama_cpp/lib"
printf 'MZ stand-in for draftlens.exe\n' > "$WORK/payload/draftlens.exe"
head -c 200000 /dev/urandom > "$WORK/payload/_internal/llama_cpp/lib/llama.dll"
ICON_DIR="$ROOT/packaging/.build/icons"
if [ ! -f "$ICON_DIR/draftlens.ico" ]; then
  PY="$ROOT/packaging/.build-venv/bin/python"
  [ -x "$PY" ] || PY="$ROOT/.venv/bin/python"
  "$PY" packaging/make_icons.py "$ICON_DIR" >/dev/null
fi
OUT="$WORK/draftlens-$VERSION-windows-x64-setup.exe"
makensis -V2 -WX -DSOURCE_DIR="$WORK/payload" -DOUTFILE="$OUT" -DICON="$ICON_DIR/draftlens.ico" \
  packaging/windows/draftlens.nsi
[ -s "$OUT" ] || { echo "check_nsis.sh: makensis wrote no installer" >&2; exit 1; }
[ "$(head -c 2 "$OUT")" = MZ ] || { echo "check_nsis.sh: the output is not a Windows executable" >&2; exit 1; }
echo "check_nsis.sh: ok: $(basename "$OUT") ($(du -h "$OUT" | cut -f1), version $VERSION, stand-in payload)"
