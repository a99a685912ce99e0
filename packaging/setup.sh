#!/usr/bin/env bash
# Installs DraftLens into ./.venv: torch for this machine's hardware, llama-cpp-python built
# with CPU flags that are safe on this processor, then the app itself.
#   bash packaging/setup.sh            install (and fetch the demo pair)
#   bash packaging/setup.sh --dev      also the test tools; skip the demo pair
set -euo pipefail
cd "$(dirname "$0")/.."

DEV=0
for arg in "$@"; do
  case "$arg" in
    --dev) DEV=1 ;;
    *) echo "setup.sh: unknown option '$arg' (use --dev)" >&2; exit 2 ;;
  esac
done

PYTHON="${PYTHON:-python3}"
VENV="${DRAFTLENS_VENV:-.venv}"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install --quiet --upgrade pip wheel setuptools

# --- torch: CUDA build where an NVIDIA GPU is present, otherwise the CPU build -------------
if ! $VENV/bin/python -c "import torch" 2>/dev/null; then
  TORCH_SPEC="${DRAFTLENS_TORCH:-torch==2.13.0}"
  if command -v nvidia-smi >/dev/null 2>&1 || [ "$(uname)" = "Darwin" ]; then
    $PIP install "$TORCH_SPEC"
  elif $VENV/bin/python - <<'PY' 2>/dev/null
import urllib.request
urllib.request.urlopen("https://download.pytorch.org/whl/cpu/", timeout=4)
PY
  then
    $PIP install "$TORCH_SPEC" --index-url https://download.pytorch.org/whl/cpu \
      --extra-index-url https://pypi.org/simple
  else
    # No route to the PyTorch index: take the pinned version from the configured indexes.
    $PIP install "$TORCH_SPEC"
  fi
fi

# --- llama-cpp-python: compiled from source with explicit, portable CPU flags ----------------
# (packaging/lib/llama.sh says which and why). The flags used are recorded next to the venv;
# different flags mean a rebuild.
# shellcheck source=lib/llama.sh
source packaging/lib/llama.sh
CMAKE_ARGS="$(llama_cmake_args)"
LLAMA_STAMP="$VENV/.llama-cpp-cmake-args"
if ! $VENV/bin/python -c "import llama_cpp" 2>/dev/null \
   || [ "$(cat "$LLAMA_STAMP" 2>/dev/null)" != "$CMAKE_ARGS" ]; then
  echo "Building llama-cpp-python with CMAKE_ARGS=\"$CMAKE_ARGS\" (a few minutes on first install)"
  # --no-cache-dir: a wheel cached from a build with other flags must not be reused
  $PIP install --quiet numpy typing-extensions diskcache jinja2
  CMAKE_ARGS="$CMAKE_ARGS" $PIP install --no-cache-dir --force-reinstall --no-deps \
    "llama-cpp-python==$LLAMA_VERSION"
  echo "$CMAKE_ARGS" > "$LLAMA_STAMP"
fi

if [ "$DEV" = 1 ]; then
  $PIP install --quiet -e ".[torch,dev]"
else
  $PIP install --quiet -e ".[torch]"
  HF_HUB_OFFLINE=1 "$VENV/bin/draftlens" models fetch-demo
fi
echo "DraftLens is installed in $VENV. Start it with: $VENV/bin/draftlens"
