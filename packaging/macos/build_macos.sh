#!/usr/bin/env bash
# Builds DraftLens.app and a .dmg on macOS (Apple Silicon), from the same packaging/draftlens.spec
# as Linux and Windows, with llama.cpp on Metal. Then smoke-tests the .dmg like the Linux one:
# mounts it, copies the .app out, runs --version and the GUI self-test on a tiny GGUF pair,
# checks the screenshot and that nothing was written inside the .app.
#
#   bash packaging/macos/build_macos.sh            build + smoke test
#   bash packaging/macos/build_macos.sh --no-test  build only
#
# Not run by the developers (no Mac here): CI runs it (.github/workflows/package.yml).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
LLAMA_CMAKE_ARGS="${DRAFTLENS_LLAMA_CMAKE_ARGS:--DGGML_METAL=ON -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF}"
options --no-test=NO_TEST -- "$@"

[ "$(uname -s)" = Darwin ] || die "run this on macOS"
ARCH="$(uname -m)"
begin_build

make_build_venv
install_bundle_requirements
# Metal: one backend built in, no CPU variants to move, so a plain source install.
if ! "$PY" -c "import llama_cpp" 2>/dev/null; then
  say "compiling llama-cpp-python $LLAMA_VERSION with CMAKE_ARGS=\"$LLAMA_CMAKE_ARGS\""
  CMAKE_ARGS="$LLAMA_CMAKE_ARGS" "$PY" -m pip install --no-cache-dir --no-deps \
    "llama-cpp-python==$LLAMA_VERSION"
fi
refuse_torch

"$PY" "$PKG/make_icons.py" "$BUILD/icons"
rm -rf "$DIST/DraftLens.app" "$DIST/draftlens"
DRAFTLENS_ICON_DIR="$BUILD/icons" run_pyinstaller
APP="$DIST/DraftLens.app"
[ -x "$APP/Contents/MacOS/draftlens" ] || die "PyInstaller made no $APP"
# PyInstaller signs ad hoc; re-sign the whole bundle so Gatekeeper's checks on Apple Silicon
# accept it (a Developer ID signature and notarization need the project's Apple account).
codesign --force --deep --sign - "$APP"

DMG="$DIST/DraftLens-$VERSION-macos-$ARCH.dmg"
STAGE="$BUILD/dmg"
rm -rf "$STAGE" "$DMG" && mkdir -p "$STAGE"
cp -R "$APP" "$STAGE/"
ln -s /Applications "$STAGE/Applications"
hdiutil create -volname "DraftLens $VERSION" -srcfolder "$STAGE" -ov -format UDZO "$DMG"
echo "bundle $(du -sh "$APP" | cut -f1), dmg $(du -h "$DMG" | cut -f1)"
if [ "$NO_TEST" = 1 ]; then exit 0; fi

# --- smoke test ------------------------------------------------------------------------------
WORK="$(mktemp -d)"
MNT="$WORK/mnt"
cleanup() { hdiutil detach "$MNT" -quiet 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
hdiutil attach "$DMG" -nobrowse -readonly -mountpoint "$MNT" -quiet
cp -R "$MNT/DraftLens.app" "$WORK/DraftLens.app"
hdiutil detach "$MNT" -quiet
BIN="$WORK/DraftLens.app/Contents/MacOS/draftlens"
snapshot() { (cd "$WORK/DraftLens.app" && find . -exec stat -f '%HT %Lp %z %m %N' {} + | LC_ALL=C sort); }
snapshot > "$WORK/before.txt"
mkdir -p "$WORK/home" "$WORK/models" "$WORK/cwd"
write_tiny_pair "$WORK/models/t.gguf" "$WORK/models/d.gguf"
cd "$WORK/cwd"
export HOME="$WORK/home"
unset DRAFTLENS_HOME || true
"$BIN" --version | tee "$WORK/version.txt"
grep -q "draftlens $VERSION" "$WORK/version.txt" || die "--version does not name $VERSION"
"$BIN" --preflight-child "$WORK/models/t.gguf" > /dev/null 2> "$WORK/preflight.err" \
  || { tail -n 20 "$WORK/preflight.err"; die "the preflight child failed"; }
SHOT="$DIST/smoke/selftest-macos.png"
run_self_test "$WORK/selftest" "$SHOT" env QT_QPA_PLATFORM="${SMOKE_QPA:-offscreen}" "$BIN" \
  --self-test --target "$WORK/models/t.gguf" --draft "$WORK/models/d.gguf" --screenshot "$SHOT" \
  --steps 16
snapshot > "$WORK/after.txt"
diff -u "$WORK/before.txt" "$WORK/after.txt" || die "the app wrote inside DraftLens.app"
[ -z "$(ls -A "$WORK/cwd")" ] || die "the app wrote into its working folder"
find "$HOME" -type f | sed "s|$HOME|~|"
echo "SMOKE TEST PASSED (macOS): $(basename "$DMG")"
