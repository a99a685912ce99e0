# shellcheck shell=bash
# llama.cpp for Windows x64, cross-compiled here with Debian's mingw-w64 (posix threads) from the
# source vendored in the llama-cpp-python sdist the project pins. Sourced by build_windows.sh;
# defines cross_build_llama, which sets LLAMA_DLLS to a folder of DLLs ready for
# llama_cpp/lib: llama.dll, ggml.dll, ggml-base.dll, ggml-rpc.dll, one ggml-cpu-<level>.dll per
# instruction-set level in $WIN_CPU_VARIANTS (ggml loads the best one the CPU supports, as in
# the Linux bundle), and the mingw runtime DLLs they link to.
# shellcheck disable=SC2034  # LLAMA_DLLS is used by the script that sources this file

# The levels built (GGML_CPU_ALL_VARIANTS defines 14, each a full compile of ggml-cpu). A CPU
# runs the best level built that it supports: ivybridge/piledriver CPUs get sandybridge (no
# F16C/FMA code), cannonlake/cascadelake/cooperlake/sapphirerapids get skylakex or icelake
# (without their VBMI/VNNI/BF16/AMX kernels). Not measured how much speed that costs them.
WIN_CPU_VARIANTS="${DRAFTLENS_WIN_CPU_VARIANTS:-x64 sse42 sandybridge haswell alderlake skylakex icelake zen4}"
LLAMA_SDIST_SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
MINGW=x86_64-w64-mingw32
WIN_LLAMA_CMAKE_ARGS="-DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_NATIVE=OFF \
-DGGML_LLAMAFILE=OFF -DGGML_RPC=ON -DGGML_OPENMP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
-DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF \
-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF"

# fetch_llama_sdist: the pinned llama-cpp-python sdist in $WIN_CACHE/sdist (downloaded once,
# sha256 checked every time). Sets LLAMA_SDIST.
fetch_llama_sdist() {
  LLAMA_SDIST="$WIN_CACHE/sdist/llama_cpp_python-$LLAMA_VERSION.tar.gz"
  fetch_pinned_sdist "$LLAMA_SDIST" "llama-cpp-python==$LLAMA_VERSION" "$LLAMA_SDIST_SHA256"
}

# cross_build_llama: builds (or reuses from $WIN_CACHE/llama-dlls/KEY, KEY naming the version,
# the flags, the variants and the compiler) the DLLs. Sets LLAMA_DLLS.
cross_build_llama() {
  command -v "$MINGW-g++-posix" > /dev/null \
    || die "$MINGW-g++-posix missing (apt-get install g++-mingw-w64-x86-64-posix)"
  local key gcc_version src build variant targets=(llama ggml-rpc) compat=""
  gcc_version="$("$MINGW-g++-posix" -dumpversion)"
  # Debian 12's mingw-w64 headers lack THREAD_POWER_THROTTLING_STATE, which ggml-cpu.c uses
  if ! grep -qs THREAD_POWER_THROTTLING_STATE "/usr/$MINGW/include/processthreadsapi.h"; then
    compat="-include $PKG/windows/mingw_compat.h"
  fi
  key="$(printf '%s|%s|%s|%s|%s|%s' "$LLAMA_VERSION" "$LLAMA_SDIST_SHA256" "$WIN_LLAMA_CMAKE_ARGS" \
    "$WIN_CPU_VARIANTS" "$gcc_version" "${compat:+$(sha256sum < "$PKG/windows/mingw_compat.h")}" \
    | sha256sum | cut -c1-16)"
  LLAMA_DLLS="$WIN_CACHE/llama-dlls/$LLAMA_VERSION-$key"
  if [ -f "$LLAMA_DLLS/llama.dll" ]; then
    echo "reusing the cross-built llama.cpp in $LLAMA_DLLS"
    return
  fi
  fetch_llama_sdist
  src="$WIN_CACHE/src/llama_cpp_python-$LLAMA_VERSION"
  if [ ! -f "$src/vendor/llama.cpp/CMakeLists.txt" ]; then
    mkdir -p "$WIN_CACHE/src"
    tar -C "$WIN_CACHE/src" -xzf "$LLAMA_SDIST"
  fi
  # GGML_CPU_ALL_VARIANTS builds 14 levels (its libggml depends on all of them): keep the lines
  # of the ones in $WIN_CPU_VARIANTS only, in a fresh copy of ggml's CMakeLists.txt
  local cmakelists="llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp/ggml/src/CMakeLists.txt"
  tar -C "$WIN_CACHE/src" -xzf "$LLAMA_SDIST" "$cmakelists"
  python3 - "$WIN_CACHE/src/$cmakelists" $WIN_CPU_VARIANTS <<'PY'
import re, sys
path, keep = sys.argv[1], set(sys.argv[2:])
x86 = {"x64", "sse42", "sandybridge", "ivybridge", "piledriver", "haswell", "skylakex", "cannonlake",
       "cascadelake", "icelake", "cooperlake", "zen4", "alderlake", "sapphirerapids"}
if keep - x86:
    sys.exit(f"unknown CPU variants: {sorted(keep - x86)} (known: {sorted(x86)})")
lines = open(path).read().splitlines(keepends=True)
variant = re.compile(r"^\s*ggml_add_cpu_backend_variant\((\w+)")
out = [ln for ln in lines if not ((m := variant.match(ln)) and m.group(1) in x86 - keep)]
open(path, "w").write("".join(out))
PY
  build="$WIN_CACHE/cmake-build/$LLAMA_VERSION-$key"
  for variant in $WIN_CPU_VARIANTS; do targets+=("ggml-cpu-$variant"); done
  say "cross-compiling llama.cpp $LLAMA_VERSION for Windows x64 (mingw-w64 $gcc_version; CPU variants: $WIN_CPU_VARIANTS)"
  local launcher=()
  if command -v ccache > /dev/null; then launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
  # shellcheck disable=SC2086  # the flags are words
  cmake -S "$src/vendor/llama.cpp" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_SYSTEM_NAME=Windows -DCMAKE_SYSTEM_PROCESSOR=x86_64 \
    -DCMAKE_C_COMPILER="$MINGW-gcc-posix" -DCMAKE_CXX_COMPILER="$MINGW-g++-posix" \
    -DCMAKE_RC_COMPILER="$MINGW-windres" -DCMAKE_FIND_ROOT_PATH="/usr/$MINGW" \
    -DCMAKE_FIND_ROOT_PATH_MODE_PROGRAM=NEVER -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY \
    -DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY -DBUILD_SHARED_LIBS=ON "${launcher[@]}" \
    -DCMAKE_C_FLAGS="$compat" -DCMAKE_CXX_FLAGS="$compat" \
    $WIN_LLAMA_CMAKE_ARGS > "$WIN_CACHE/cmake-configure.log" 2>&1 \
    || { tail -n 30 "$WIN_CACHE/cmake-configure.log" >&2; die "cmake configure for Windows failed"; }
  cmake --build "$build" --parallel "${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" --target "${targets[@]}" \
    || die "the llama.cpp cross-compile failed"
  local out="$LLAMA_DLLS.partial" dll
  rm -rf "$out" && mkdir -p "$out"
  # mingw names the library libllama.dll; llama.dll as in MSVC builds (no DLL imports it)
  cp "$build/bin/libllama.dll" "$out/llama.dll" || die "the cross-compile made no libllama.dll"
  for dll in ggml.dll ggml-base.dll ggml-rpc.dll $(printf 'ggml-cpu-%s.dll ' $WIN_CPU_VARIANTS); do
    cp "$build/bin/$dll" "$out/" || die "the cross-compile made no $dll"
  done
  # The mingw runtime the DLLs import (libstdc++, libgcc's SEH unwinder, winpthreads).
  cp "$("$MINGW-g++-posix" -print-file-name=libstdc++-6.dll)" \
     "$("$MINGW-g++-posix" -print-file-name=libgcc_s_seh-1.dll)" \
     "/usr/$MINGW/lib/libwinpthread-1.dll" "$out/"
  "$MINGW-strip" --strip-unneeded "$out"/*.dll
  mv "$out" "$LLAMA_DLLS"
  rm -rf "$build"  # the objects are in ccache; the cmake tree is 100s of MB
}
