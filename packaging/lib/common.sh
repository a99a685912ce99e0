# shellcheck shell=bash
# What the packaging scripts share. Sourced, never run, by build_linux.sh, smoke_test.sh,
# macos/build_macos.sh, windows/build_windows.sh and windows/check_nsis.sh:
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"        (packaging/*.sh)
#   source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"     (packaging/{macos,windows}/*.sh)
#
# Sourcing it sets `-euo pipefail`, changes to the repository root and sets:
#   ROOT PKG BUILD DIST   the repository, packaging/, packaging/.build (intermediate files),
#                         packaging/dist (outputs)
#   VENV PY               the build venv ($DRAFTLENS_BUILD_VENV, default packaging/.build-venv)
#                         and its python (which may not exist yet: see make_build_venv)
#   PYTHON                the Python that creates the venv ($PYTHON; default python3.11, or
#                         python in Git Bash on Windows)
#   VERSION               __version__ from app/__init__.py (the one place it is written)
#   LLAMA_VERSION         the llama-cpp-python every bundle is built with
#   LLAMA_CPU_DISPATCH    its CMake flags for runtime CPU dispatch (Linux, Windows)
#   SCRIPT                the running script's name, for messages
# and defines say, die, options, begin_build, make_build_venv, install_bundle_requirements,
# install_llama_wheel, refuse_torch, run_pyinstaller, write_tiny_pair, poll_app and
# run_self_test (each described where it is defined). Written for bash 3.2 too (macOS).
# shellcheck disable=SC2034  # the variables above are used by the scripts that source this file
set -euo pipefail

SCRIPT="$(basename "$0")"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT="$PWD"
PKG="$ROOT/packaging"
BUILD="$PKG/.build"
DIST="$PKG/dist"
# The compiled portable llama-cpp-python wheel ($DRAFTLENS_BUNDLE_WHEELS: CI keeps it outside the
# clone, so a new clone does not compile it again)
WHEELS="${DRAFTLENS_BUNDLE_WHEELS:-$BUILD/wheels}"
VENV="${DRAFTLENS_BUILD_VENV:-$PKG/.build-venv}"
case "$(uname -s)" in
  MINGW* | MSYS* | CYGWIN*)  # Git Bash on Windows
    IS_WINDOWS=1
    PYTHON="${PYTHON:-python}"
    PY="$VENV/Scripts/python.exe"
    ;;
  *)
    IS_WINDOWS=0
    PYTHON="${PYTHON:-python3.11}"
    PY="$VENV/bin/python"
    ;;
esac
# shellcheck source=llama.sh
source "$PKG/lib/llama.sh"
# One CPU backend per instruction set level, the best one picked when the app starts (see
# packaging/README.md); GGML_LLAMAFILE off keeps batched and single-token logits identical.
LLAMA_CPU_DISPATCH="-DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_NATIVE=OFF -DGGML_LLAMAFILE=OFF -DLLAVA_BUILD=OFF -DGGML_RPC=ON"

say() { printf '\n== %s\n' "$*"; }
die() { printf '%s: %s\n' "$SCRIPT" "$*" >&2; exit 1; }

VERSION="$(sed -n 's/^__version__ *= *["'\'']\([^"'\'']*\)["'\''].*/\1/p' app/__init__.py)"
[ -n "$VERSION" ] || die "cannot read __version__ from app/__init__.py"

# options FLAG=VAR ... -- ARG...: every VAR starts at 0 and is set to 1 when its FLAG is among
# the ARGs; anything else stops the script (exit 2) with the flags it knows.
#   options --clean=CLEAN -- "$@"
# fetch_pinned_sdist FILE REQUIREMENT SHA256: the sdist of REQUIREMENT (NAME==VERSION) as FILE,
# downloaded into FILE's folder once, its sha256 checked every time.
fetch_pinned_sdist() {
  local file="$1" requirement="$2" sha256="$3"
  if [ ! -f "$file" ]; then
    mkdir -p "$(dirname "$file")"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
      -d "$(dirname "$file")" "$requirement" || die "pip download of the $requirement sdist failed"
  fi
  echo "$sha256  $file" | sha256sum -c --quiet - \
    || die "$file does not have the pinned sha256 (delete it to download again)"
}

options() {
  local -a specs
  local spec arg known usage=""
  specs=()
  while [ "$1" != -- ]; do specs+=("$1"); usage="${usage:+$usage, }${1%%=*}"; shift; done
  shift
  for spec in "${specs[@]}"; do printf -v "${spec#*=}" 0; done
  for arg in "$@"; do
    known=0
    for spec in "${specs[@]}"; do
      if [ "$arg" = "${spec%%=*}" ]; then printf -v "${spec#*=}" 1; known=1; fi
    done
    if [ "$known" = 0 ]; then
      printf "%s: unknown option '%s' (use %s)\n" "$SCRIPT" "$arg" "$usage" >&2
      exit 2
    fi
  done
}

# begin_build: names the version being built and makes the build and output folders.
begin_build() {
  say "DraftLens $VERSION"
  mkdir -p "$BUILD" "$WHEELS" "$DIST"
}

# make_build_venv: creates the build venv ($VENV, with $PYTHON) if it does not exist yet, with
# an up-to-date pip and wheel. Never the development .venv.
make_build_venv() {
  if [ ! -x "$PY" ]; then
    say "creating the build venv $VENV"
    "$PYTHON" -m venv "$VENV"
    "$PY" -m pip install --quiet --disable-pip-version-check --upgrade pip wheel
  fi
}

# install_bundle_requirements: the pinned packages of packaging/requirements-bundle.txt.
install_bundle_requirements() {
  say "bundle requirements"
  "$PY" -m pip install --quiet --disable-pip-version-check -r "$PKG/requirements-bundle.txt"
}

# install_llama_wheel: installs into the build venv a llama-cpp-python $LLAMA_VERSION wheel built
# with CMAKE_ARGS="$LLAMA_CMAKE_ARGS" (set by the script), compiling it into $WHEELS unless
# a wheel is already there (delete it to rebuild; CMAKE_BUILD_PARALLEL_LEVEL is honoured), with
# its CPU variants moved into llama_cpp/lib (fix_llama_wheel.py). Sets WHEEL. Reinstalls only
# when the wheel differs from the one installed last.
install_llama_wheel() {
  # shellcheck disable=SC2012  # a glob on a fixed name pattern; ls sorts and head picks one
  WHEEL="$(ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
  if [ -z "$WHEEL" ]; then
    say "compiling llama-cpp-python $LLAMA_VERSION with CMAKE_ARGS=\"$LLAMA_CMAKE_ARGS\" (5-10 min)"
    # --no-cache-dir: never reuse a wheel from pip's cache (the dev venv's is built for this CPU)
    CMAKE_ARGS="$LLAMA_CMAKE_ARGS" \
      "$PY" -m pip wheel --no-cache-dir --no-deps --disable-pip-version-check \
        -w "$WHEELS" "llama-cpp-python==$LLAMA_VERSION"
    # shellcheck disable=SC2012
    WHEEL="$(ls "$WHEELS"/llama_cpp_python-"$LLAMA_VERSION"-*.whl | head -n1)"
  fi
  # The CPU variants land in the wheel's top-level bin/: move them into llama_cpp/lib, where the
  # runtime hook loads them from (idempotent).
  "$PY" "$PKG/fix_llama_wheel.py" "$WHEEL"
  if ! cmp -s "$WHEEL" "$BUILD/installed-llama-wheel" 2>/dev/null \
     || ! "$PY" -c "import llama_cpp" 2>/dev/null; then
    say "installing $(basename "$WHEEL") into the build venv"
    "$PY" -m pip install --quiet --no-deps --force-reinstall --disable-pip-version-check "$WHEEL"
    cp "$WHEEL" "$BUILD/installed-llama-wheel"
  fi
}

# refuse_torch: stops the build if torch is in the build venv (the default bundle is llama.cpp
# only; see the spec's excludes).
refuse_torch() {
  if "$PY" -c "import torch" 2>/dev/null; then
    die "torch is installed in $VENV; the default bundle must be built without it"
  fi
}

# run_pyinstaller [OPTION...]: PyInstaller on packaging/draftlens.spec, output in $DIST, work
# files in $BUILD/pyinstaller; OPTIONs (e.g. --clean) go to PyInstaller.
# shellcheck disable=SC2119,SC2120  # the OPTIONs are optional
run_pyinstaller() {
  say "PyInstaller (packaging/draftlens.spec)"
  "$PY" -m PyInstaller --noconfirm --log-level WARN --distpath "$DIST" \
    --workpath "$BUILD/pyinstaller" "$@" "$PKG/draftlens.spec"
}

# write_tiny_pair TARGET DRAFT: a tiny GGUF target and a draft close to it (tests/tiny_gguf.py),
# written with the build venv's python. Paths as that python takes them (cygpath -w on Windows).
write_tiny_pair() {
  PYTHONPATH="$ROOT" "$PY" - "$1" "$2" <<'PY'
import sys
from tests.tiny_gguf import write_tiny_gguf
target, draft = sys.argv[1], sys.argv[2]
write_tiny_gguf(target, seed=0)
write_tiny_gguf(draft, seed=0, noise_from=target)
PY
}

# poll_app PID SECONDS [CHECK...]: the one wait loop for a started app. Polls every 50 ms until
# CHECK (a command, its output discarded) succeeds, or, without a CHECK, until the process PID
# has ended: 0. Returns 1 when PID ended before CHECK succeeded, 124 when SECONDS passed first
# (PID is left running; the caller stops it). Collect PID's exit status with `wait PID`.
# smoke_test.sh copies it into the shell it runs under xvfb-run (declare -f poll_app).
poll_app() {
  local pid="$1" end=$((SECONDS + $2))
  shift 2
  while :; do
    if [ $# -gt 0 ] && "$@" > /dev/null 2>&1; then return 0; fi
    if ! kill -0 "$pid" 2> /dev/null; then
      if [ $# -gt 0 ]; then return 1; fi
      return 0
    fi
    if [ "$SECONDS" -ge "$end" ]; then return 124; fi
    sleep 0.05
  done
}

# run_self_test LOG SHOT COMMAND...: the app's GUI self-test. COMMAND is the app with
# `--self-test` and its options, behind whatever gives it a display (`xvfb-run ...`,
# `env QT_QPA_PLATFORM=offscreen`). Starts it in its own process group with stdout and stderr in
# LOG.out and LOG.err, waits for it (poll_app, at most $SELF_TEST_LIMIT s, default 600; then
# the whole group is stopped), prints its output, and dies unless it exited 0, printed
# "self-test ok" and, when SHOT is not empty, wrote a PNG at SHOT.
run_self_test() {
  local log="$1" shot="$2" limit="${SELF_TEST_LIMIT:-600}" pid rc=0
  shift 2
  if [ -n "$shot" ]; then rm -f "$shot"; fi
  set -m  # its own process group: at the deadline, xvfb-run, the X server and the app all stop
  "$@" > "$log.out" 2> "$log.err" < /dev/null &
  pid=$!
  set +m
  poll_app "$pid" "$limit" || rc=$?
  if [ "$rc" != 0 ]; then
    kill -TERM -- "-$pid" 2> /dev/null || kill -TERM "$pid" 2> /dev/null || true
    wait "$pid" 2> /dev/null || true
    tail -n 30 "$log.err" >&2
    die "the self-test did not finish within $limit s"
  fi
  wait "$pid" || rc=$?
  cat "$log.out"
  if [ "$rc" != 0 ]; then
    tail -n 30 "$log.err" >&2
    die "the self-test exited $rc"
  fi
  # The Windows .exe is windowed: it may have no stdout to print the line on.
  if [ "$IS_WINDOWS" = 0 ] && ! grep -q "self-test ok" "$log.out"; then
    die "the self-test printed no 'self-test ok'"
  fi
  if [ -n "$shot" ]; then
    [ -s "$shot" ] || die "the self-test wrote no screenshot at $shot"
    [ "$(head -c 8 "$shot" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] \
      || die "$shot is not a PNG"
  fi
}

# After the app ran: the install folder lists as `snapshot` (the caller's) listed it into
# WORK/tree-before.txt, and the folder the app ran in (WORK/cwd) is empty. A packaged app
# writes only to its platformdirs folders.
check_install_folder_unchanged() {  # WORK
  local work="$1"
  snapshot > "$work/tree-after.txt"
  if ! diff -u "$work/tree-before.txt" "$work/tree-after.txt" > "$work/tree.diff"; then
    head -n 40 "$work/tree.diff" >&2
    die "the app changed its install folder"
  fi
  [ -z "$(ls -A "$work/cwd")" ] || die "the app wrote into its working folder: $(ls -A "$work/cwd")"
}
