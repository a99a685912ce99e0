#!/usr/bin/env bash
# Builds the DraftLens bundle and its NSIS installer on Windows x64, from the same
# packaging/draftlens.spec as Linux and macOS, then smoke-tests the installer: silent install
# into a scratch folder, --version, the GUI self-test on a tiny GGUF pair, the screenshot,
# nothing written into the install folder, silent uninstall.
#
#   bash packaging/windows/build_windows.sh            (Git Bash; MSVC and NSIS installed)
#   bash packaging/windows/build_windows.sh --no-test
#
# llama.cpp is built with runtime CPU dispatch (one ggml-cpu-*.dll per instruction set level),
# like the Linux bundle. Not run by the developers (no Windows here): CI runs it
# (.github/workflows/package.yml).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
LLAMA_CMAKE_ARGS="${DRAFTLENS_LLAMA_CMAKE_ARGS:-$LLAMA_CPU_DISPATCH}"
options --no-test=NO_TEST -- "$@"
begin_build

make_build_venv
install_bundle_requirements
install_llama_wheel
refuse_torch

"$PY" "$PKG/make_icons.py" "$BUILD/icons"
rm -rf "$DIST/draftlens"
DRAFTLENS_ICON_DIR="$BUILD/icons" run_pyinstaller
[ -f "$DIST/draftlens/draftlens.exe" ] || die "PyInstaller made no draftlens.exe"

MAKENSIS="$(command -v makensis || true)"
[ -n "$MAKENSIS" ] || MAKENSIS="/c/Program Files (x86)/NSIS/makensis.exe"
[ -x "$MAKENSIS" ] || die "makensis not found (choco install nsis)"
SETUP="$DIST/draftlens-$VERSION-windows-x64-setup.exe"
"$MAKENSIS" -V2 -DICON="$(cygpath -w "$BUILD/icons/draftlens.ico")" \
  -DOUTFILE="$(cygpath -w "$SETUP")" "$(cygpath -w "$PKG/windows/draftlens.nsi")"
echo "bundle $(du -sh "$DIST/draftlens" | cut -f1), installer $(du -h "$SETUP" | cut -f1)"
if [ "$NO_TEST" = 1 ]; then exit 0; fi

# --- smoke test ----------------------------------------------------------------------------------
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
INST="$WORK/DraftLens"
# NSIS: /D= must be the last argument and unquoted.
"$SETUP" /S /D="$(cygpath -w "$INST")"
[ -f "$INST/draftlens.exe" ] || die "the silent install put no draftlens.exe in $INST"
snapshot() { (cd "$INST" && find . -printf '%y %s %T@ %p\n' | LC_ALL=C sort); }
snapshot | grep -v ' ./uninstall.exe$' > "$WORK/before.txt"
mkdir -p "$WORK/home" "$WORK/models" "$WORK/cwd"
write_tiny_pair "$(cygpath -w "$WORK/models/t.gguf")" "$(cygpath -w "$WORK/models/d.gguf")"
cd "$WORK/cwd"
# platformdirs on Windows: %LOCALAPPDATA% / %APPDATA%; point them at the scratch home.
export LOCALAPPDATA="$(cygpath -w "$WORK/home/Local")" APPDATA="$(cygpath -w "$WORK/home/Roaming")"
unset DRAFTLENS_HOME || true
SHOT="$DIST/smoke/selftest-windows.png"
mkdir -p "$(dirname "$SHOT")"
run_self_test "$WORK/selftest" "$SHOT" "$INST/draftlens.exe" --self-test \
  --target "$(cygpath -w "$WORK/models/t.gguf")" --draft "$(cygpath -w "$WORK/models/d.gguf")" \
  --screenshot "$(cygpath -w "$SHOT")" --steps 16
snapshot | grep -v ' ./uninstall.exe$' > "$WORK/after.txt"
diff -u "$WORK/before.txt" "$WORK/after.txt" || die "the app wrote into its install folder"
[ -z "$(ls -A "$WORK/cwd")" ] || die "the app wrote into its working folder"
find "$WORK/home" -type f
"$INST/uninstall.exe" /S _?="$(cygpath -w "$INST")"
[ ! -e "$INST/draftlens.exe" ] || die "the uninstaller left draftlens.exe behind"
echo "SMOKE TEST PASSED (Windows): $(basename "$SETUP")"
