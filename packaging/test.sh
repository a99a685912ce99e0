#!/usr/bin/env bash
# Installs DraftLens with its test tools into ./.venv (if needed) and runs the test suite.
# Tests build their own tiny models and never touch a model hub.
set -euo pipefail
cd "$(dirname "$0")/.."
bash packaging/setup.sh --dev
# Qt needs a few system libraries even offscreen (EGL/GL, fontconfig, xkbcommon); on a bare
# Debian/Ubuntu machine install them when they are missing and we are allowed to.
if ! .venv/bin/python -c "import PySide6.QtGui" 2>/dev/null; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      libegl1 libgl1 libfontconfig1 libxkbcommon0 libdbus-1-3 libglib2.0-0 >/dev/null
  else
    echo "test.sh: PySide6 cannot load its system libraries (libEGL, libGL, fontconfig," \
         "xkbcommon); install them with your package manager" >&2
  fi
fi
# tests/test_rpc.py runs the target over a real llama.cpp rpc-server built from the same
# llama.cpp (skipped work when already built); with it set, a build without RPC fails the tests.
TOOLS="${DRAFTLENS_LLAMA_TOOLS:-packaging/.build/llama-tools}"
mkdir -p "$TOOLS"
printf 'rpc-server for tests/test_rpc.py ... '
if bash packaging/build_llama_tools.sh rpc-server > "$TOOLS/build.log" 2>&1; then
  echo "ok ($TOOLS/bin/rpc-server)"
else
  echo "FAILED"; tail -n 25 "$TOOLS/build.log" >&2
  echo "test.sh: building rpc-server failed; the whole output is in $TOOLS/build.log" >&2
  exit 1
fi
DRAFTLENS_RPC_SERVER="$(cd "$TOOLS/bin" && pwd)/rpc-server"
export DRAFTLENS_RPC_SERVER
export HF_HUB_OFFLINE=1 QT_QPA_PLATFORM=offscreen
echo "ruff, mypy, pytest:"
.venv/bin/ruff check .
.venv/bin/mypy  # files and strictness: [tool.mypy] in pyproject.toml
.venv/bin/python -m pytest -q "$@"
