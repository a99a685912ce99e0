# shellcheck shell=bash
# The llama.cpp build settings setup.sh, the bundle scripts and build_llama_tools.sh share.
# Sourced, never run; it only defines LLAMA_VERSION and llama_cmake_args.
# shellcheck disable=SC2034  # LLAMA_VERSION is used by the scripts that source this file

LLAMA_VERSION="0.3.36"

# CMake flags for this machine: CUDA where an NVIDIA GPU is present, Metal on macOS, else the
# CPU's instruction sets named one by one. The default native build (GGML_NATIVE) crashed in
# the first decode on CPUs that advertise AMX; GGML_LLAMAFILE=OFF keeps batched and
# single-token logits bit-identical. GGML_RPC=ON builds the RPC backend (--rpc).
llama_cmake_args() {
  if [ -n "${CMAKE_ARGS:-}" ]; then
    printf '%s\n' "$CMAKE_ARGS"
    return
  fi
  local args
  if command -v nvidia-smi >/dev/null 2>&1; then
    args="-DGGML_CUDA=ON -DGGML_NATIVE=OFF"
  elif [ "$(uname)" = "Darwin" ]; then
    args="-DGGML_METAL=ON"
  else
    args="-DGGML_NATIVE=OFF -DGGML_LLAMAFILE=OFF"
    local flag
    for flag in avx2 fma f16c; do
      if grep -qw "$flag" /proc/cpuinfo 2>/dev/null; then
        args="$args -DGGML_$(printf '%s' "$flag" | tr '[:lower:]' '[:upper:]')=ON"
      fi
    done
    if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then args="$args -DGGML_AVX512=ON"; fi
  fi
  printf '%s -DGGML_RPC=ON\n' "$args"
}
