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
cd "$(dirname "$0")/../.."
ROOT="$PWD"
PKG="$ROOT/packaging"
BUILD="$PKG/.build"
DIST="$PKG/dist"
VENV="${DRAFTLENS_BUILD_VENV:-$PKG/.build-venv}"
PYTHON="${PYTHON:-python}"
LLAMA_VERSION="0.3.36"
LLAMA_CMAKE_ARGS="${DRAFTLENS_LLAMA_CMAKE_ARGS:--DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_NATIVE=OFF -DGGML_LLAMAFILE=OFF -DLLAVA_BUILD=OFF}"
TEST=1
[ "${1:-}" = "--no-test" ] && TEST=0

die() { printf 'build_windows.sh: %s\n' "$*" >&2; exit 1; }
VERSION="$(sed -n 's/^__version__ *= *["'\'']\([^"'\'']*\)["'\''].*/\1/p' app/__init__.py)"
mkdir -p "$BUILD" "$DIST"

[ -x "$VENV/Scripts/python.exe" ] || "$PYTHON" -m venv "$VENV"
PY="$VENV/Scripts/python.exe"
"$PY" -m pip install --quiet --upgrade pip wheel
"$PY" -m pip install --quiet -r "$PKG/requirements-bundle.txt"
WHEEL="$(ls "$BUILD"/wheels/llama_cpp_python-"$LLAMA_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
if [ -z "$WHEEL" ]; then
  echo "compiling llama-cpp-python $LLAMA_VERSION with CMAKE_ARGS=\"$LLAMA_CMAKE_ARGS\""
  CMAKE_ARGS="$LLAMA_CMAKE_ARGS" "$PY" -m pip wheel --no-cache-dir --no-deps \
    -w "$BUILD/wheels" "llama-cpp-python==$LLAMA_VERSION"
  WHEEL="$(ls "$BUILD"/wheels/llama_cpp_python-"$LLAMA_VERSION"-*.whl | head -n1)"
fi
# The CPU variants (ggml-cpu-*.dll) land in the wheel's top-level bin/: move them into
# llama_cpp/lib, where the runtime hook loads them from.
"$PY" "$PKG/fix_llama_wheel.py" "$WHEEL"
"$PY" -m pip install --quiet --no-deps --force-reinstall "$WHEEL"
"$PY" -c "import torch" 2>/dev/null && die "torch is installed in $VENV; the default bundle is built without it"

"$PY" "$PKG/make_icons.py" "$BUILD/icons"
rm -rf "$DIST/draftlens"
DRAFTLENS_ICON_DIR="$BUILD/icons" "$PY" -m PyInstaller --noconfirm --log-level WARN \
  --distpath "$DIST" --workpath "$BUILD/pyinstaller" "$PKG/draftlens.spec"
[ -f "$DIST/draftlens/draftlens.exe" ] || die "PyInstaller made no draftlens.exe"

MAKENSIS="$(command -v makensis || true)"
[ -n "$MAKENSIS" ] || MAKENSIS="/c/Program Files (x86)/NSIS/makensis.exe"
[ -x "$MAKENSIS" ] || die "makensis not found (choco install nsis)"
SETUP="$DIST/draftlens-$VERSION-windows-x64-setup.exe"
"$MAKENSIS" -V2 -DICON="$(cygpath -w "$BUILD/icons/draftlens.ico")" \
  -DOUTFILE="$(cygpath -w "$SETUP")" "$(cygpath -w "$PKG/windows/draftlens.nsi")"
echo "bundle $(du -sh "$DIST/draftlens" | cut -f1), installer $(du -h "$SETUP" | cut -f1)"
[ "$TEST" = 1 ] || exit 0

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
PYTHONPATH="$ROOT" "$PY" -c "
import sys; from tests.tiny_gguf import write_tiny_gguf
write_tiny_gguf(sys.argv[1], seed=0); write_tiny_gguf(sys.argv[2], seed=0, noise_from=sys.argv[1])
" "$(cygpath -w "$WORK/models/t.gguf")" "$(cygpath -w "$WORK/models/d.gguf")"
cd "$WORK/cwd"
# platformdirs on Windows: %LOCALAPPDATA% / %APPDATA%; point them at the scratch home.
export LOCALAPPDATA="$(cygpath -w "$WORK/home/Local")" APPDATA="$(cygpath -w "$WORK/home/Roaming")"
unset DRAFTLENS_HOME || true
SHOT="$DIST/smoke/selftest-windows.png"
mkdir -p "$(dirname "$SHOT")"
"$INST/draftlens.exe" --self-test --target "$(cygpath -w "$WORK/models/t.gguf")" \
  --draft "$(cygpath -w "$WORK/models/d.gguf")" --screenshot "$(cygpath -w "$SHOT")" --steps 16 \
  || die "the self-test failed (exit $?)"
[ -s "$SHOT" ] || die "no screenshot"
snapshot | grep -v ' ./uninstall.exe$' > "$WORK/after.txt"
diff -u "$WORK/before.txt" "$WORK/after.txt" || die "the app wrote into its install folder"
[ -z "$(ls -A "$WORK/cwd")" ] || die "the app wrote into its working folder"
find "$WORK/home" -type f
"$INST/uninstall.exe" /S _?="$(cygpath -w "$INST")"
[ ! -e "$INST/draftlens.exe" ] || die "the uninstaller left draftlens.exe behind"
echo "SMOKE TEST PASSED (Windows): $(basename "$SETUP")"
