#!/usr/bin/env bash
# Builds llama.cpp's own programs from the llama.cpp source vendored in the llama-cpp-python
# release DraftLens uses, with the same CMake flags as setup.sh, so DraftLens can be compared
# with (and talk to) the very same llama.cpp:
#   bash packaging/build_llama_tools.sh [TARGET...]
# TARGETs default to llama-bench, llama-speculative-simple and rpc-server (llama.cpp's CMake
# target ggml-rpc-server, installed under the name its docs and --rpc users know). The programs
# land in packaging/.build/llama-tools/bin (or $DRAFTLENS_LLAMA_TOOLS/bin); a target already
# built with the same flags is not rebuilt. Needs cmake and a C++ compiler.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/llama.sh
source packaging/lib/llama.sh

TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(llama-bench llama-speculative-simple rpc-server)
TOOLS="${DRAFTLENS_LLAMA_TOOLS:-packaging/.build/llama-tools}"
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
ARGS="$(llama_cmake_args)"
for tool in cmake c++; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "build_llama_tools.sh: '$tool' not found — install cmake and a C++ compiler" \
         "(Debian/Ubuntu: apt-get install cmake g++)" >&2; exit 1; }
done

SRC="$TOOLS/llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp"
if [ ! -f "$SRC/CMakeLists.txt" ]; then
  mkdir -p "$TOOLS"
  "$PY" -m pip download --quiet --no-deps --no-binary :all: \
    "llama-cpp-python==$LLAMA_VERSION" -d "$TOOLS"
  tar xzf "$TOOLS/llama_cpp_python-$LLAMA_VERSION.tar.gz" -C "$TOOLS"
fi

STAMP="$TOOLS/build/.cmake-args"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$ARGS" ]; then
  rm -rf "$TOOLS/build"
  # shellcheck disable=SC2086  # ARGS is a list of flags
  cmake -S "$SRC" -B "$TOOLS/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF $ARGS >/dev/null
  echo "$ARGS" > "$STAMP"
fi
cmake_target() { if [ "$1" = rpc-server ]; then echo ggml-rpc-server; else echo "$1"; fi; }
CMAKE_TARGETS=()
for target in "${TARGETS[@]}"; do CMAKE_TARGETS+=("$(cmake_target "$target")"); done
echo "Building ${TARGETS[*]} with $ARGS (minutes on first build)"
cmake --build "$TOOLS/build" --config Release -j "$(nproc 2>/dev/null || echo 2)" \
  --target "${CMAKE_TARGETS[@]}" >/dev/null
mkdir -p "$TOOLS/bin"
for target in "${TARGETS[@]}"; do
  cp "$TOOLS/build/bin/$(cmake_target "$target")" "$TOOLS/bin/$target"
done
echo "llama.cpp programs in $TOOLS/bin: ${TARGETS[*]}"
