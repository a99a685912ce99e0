#!/usr/bin/env bash
# Compiles windows/draftlens.nsi with makensis on Linux against a stand-in payload (a fake
# draftlens.exe and Lib/site-packages/), in seconds, to prove the installer script compiles and
# reads the version from app/__init__.py. The real installer is build_windows.sh's (minutes;
# smoke_test.sh installs and runs it under Wine).
#   bash packaging/windows/check_nsis.sh        (apt-get install nsis, if makensis is missing)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
command -v makensis >/dev/null || { [ "$(id -u)" = 0 ] && apt-get install -y -qq nsis >/dev/null; } \
  || die "makensis missing (apt-get install nsis)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/payload/Lib/site-packages/llama_cpp/lib"
printf 'MZ stand-in for draftlens.exe\n' > "$WORK/payload/draftlens.exe"
head -c 200000 /dev/urandom > "$WORK/payload/Lib/site-packages/llama_cpp/lib/llama.dll"
cat > "$WORK/uninstall.nsh" <<'NSH'
  Delete "$INSTDIR\draftlens.exe"
  Delete "$INSTDIR\Lib\site-packages\llama_cpp\lib\llama.dll"
  RMDir "$INSTDIR\Lib\site-packages\llama_cpp\lib"
  RMDir "$INSTDIR\Lib\site-packages\llama_cpp"
  RMDir "$INSTDIR\Lib\site-packages"
  RMDir "$INSTDIR\Lib"
NSH
ICON_DIR="$BUILD/icons"
if [ ! -f "$ICON_DIR/draftlens.ico" ]; then
  [ -x "$PY" ] || PY="$ROOT/.venv/bin/python"  # the build venv's, else the development one
  "$PY" packaging/make_icons.py "$ICON_DIR" >/dev/null
fi
OUT="$WORK/draftlens-$VERSION-windows-x64-setup.exe"
makensis -V2 -WX -DSOURCE_DIR="$WORK/payload" -DUNINSTALL_LIST="$WORK/uninstall.nsh" -DOUTFILE="$OUT" \
  -DICON="$ICON_DIR/draftlens.ico" \
  packaging/windows/draftlens.nsi
[ -s "$OUT" ] || die "makensis wrote no installer"
[ "$(head -c 2 "$OUT")" = MZ ] || die "the output is not a Windows executable"
echo "check_nsis.sh: ok: $(basename "$OUT") ($(du -h "$OUT" | cut -f1), version $VERSION, stand-in payload)"
