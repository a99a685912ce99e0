#!/usr/bin/env bash
# Builds the Linux packages of DraftLens, llama.cpp only (no torch):
#   packaging/dist/draftlens/                                the PyInstaller onedir bundle
#   packaging/dist/draftlens-VERSION-linux-x86_64.tar.gz     portable archive of it
#   packaging/dist/draftlens_VERSION_amd64.deb               /opt/draftlens, /usr/bin/draftlens,
#                                                            desktop entry and icon
#
#   bash packaging/build_linux.sh            build what is missing or out of date
#   bash packaging/build_linux.sh --clean    rebuild the bundle from scratch (keeps the wheel)
#
# Everything is built in its own venv (packaging/.build-venv), never in the dev .venv. llama.cpp
# comes from a llama-cpp-python wheel built here for packaging with runtime CPU dispatch
# (GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS, GGML_NATIVE off): one CPU backend per instruction set
# level, the best one chosen when the app starts, so the bundle runs on x86-64 CPUs without
# AVX-512 as well as on this one. The wheel is cached in packaging/.build/wheels (compiling it
# takes 5-10 minutes on 2 cores). An AppImage is not built: appimagetool and the AppImage
# runtime are on neither PyPI nor Debian (see packaging/README.md).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
LLAMA_CMAKE_ARGS="${DRAFTLENS_LLAMA_CMAKE_ARGS:-$LLAMA_CPU_DISPATCH}"
options --clean=CLEAN -- "$@"

[ "$(uname -s)" = Linux ] || die "this script builds the Linux packages; see packaging/README.md for macOS/Windows"
[ "$(uname -m)" = x86_64 ] || die "only x86_64 is set up (the CPU variants are x86 ones)"
command -v dpkg-deb >/dev/null || die "dpkg-deb is missing (apt-get install dpkg)"
begin_build

# --- 1. build venv -----------------------------------------------------------------------------
make_build_venv
"$PY" -c 'import sysconfig, sys; sys.exit(0 if sysconfig.get_config_var("Py_ENABLE_SHARED") else 1)' \
  || die "$("$PY" -c 'import sys; print(sys.executable)') has no shared libpython; PyInstaller needs one"
install_bundle_requirements

# --- 2. portable llama-cpp-python wheel ----------------------------------------------------------
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
install_llama_wheel
"$PY" - <<'PY' || die "the llama-cpp-python in the build venv is not the portable build"
import pathlib, sys, llama_cpp
lib = pathlib.Path(llama_cpp.__file__).parent / "lib"
variants = sorted(p.name for p in lib.glob("libggml-cpu-*.so"))
print(f"llama-cpp-python {llama_cpp.__version__}: {len(variants)} CPU variants:",
      " ".join(v[len("libggml-cpu-"):-3] for v in variants))
sys.exit(0 if variants else 1)
PY
refuse_torch

# --- 3. the bundle ------------------------------------------------------------------------------
rm -rf "$DIST/draftlens"
if [ "$CLEAN" = 1 ]; then run_pyinstaller --clean; else run_pyinstaller; fi
BUNDLE="$DIST/draftlens"
[ -x "$BUNDLE/draftlens" ] || die "PyInstaller produced no $BUNDLE/draftlens"
# The builder's Python may carry debug symbols (pyenv's libpython: 23 MB, 5 MB stripped). Strip
# only Python's own libraries: PyInstaller's strip option and strip on wheels' patchelf-ed
# libraries (numpy.libs/ ...) break them ("ELF load command address/offset not page-aligned").
if command -v strip >/dev/null; then
  find "$BUNDLE/_internal" -maxdepth 1 -type f -name 'libpython3*.so*' -exec strip --strip-unneeded {} +
  find "$BUNDLE/_internal/python3"* -type f -name '*.so' -exec strip --strip-unneeded {} + 2>/dev/null || true
fi

# Guard the contents: nothing that must stay out, everything that must be in.
bad="$(cd "$BUNDLE" && find . \( -iname '*torch*' -o -iname 'transformers' -o -iname '*WebEngine*' \
        -o -iname '*Qt6Quick*' -o -iname '*Qt6Qml*' -o -iname '*Qt63D*' -o -iname '*Multimedia*' \
        -o -path '*/tests/*' -o -iname '*.gguf' \) | head -n 20)"
[ -z "$bad" ] || die "the bundle holds files it must not: $bad"
# libggml-rpc.so: the RPC backend (--rpc), a plugin ggml_backend_load_all opens like the CPU ones
for need in _internal/llama_cpp/lib/libllama.so _internal/llama_cpp/lib/libggml-rpc.so \
            _internal/assets/draftlens.svg \
            _internal/PySide6/Qt/plugins/platforms/libqxcb.so \
            _internal/PySide6/Qt/plugins/platforms/libqoffscreen.so; do
  [ -e "$BUNDLE/$need" ] || die "the bundle lacks $need"
done
"$BUNDLE/draftlens" --version

# --- 4. tar.gz ------------------------------------------------------------------------------------
ARCH=x86_64
TARBALL="$DIST/draftlens-$VERSION-linux-$ARCH.tar.gz"
say "archive $(basename "$TARBALL")"
STAGE="$BUILD/tar/draftlens-$VERSION"
rm -rf "$BUILD/tar" && mkdir -p "$STAGE"
cp -a "$BUNDLE/." "$STAGE/"
cp "$PKG/linux/draftlens.desktop" "$STAGE/draftlens.desktop"
cat > "$STAGE/README.txt" <<EOF
DraftLens $VERSION for Linux x86-64 (llama.cpp backend; the PyTorch backend is in the pip
install: pip install 'draftlens[torch]').

Run ./draftlens (the window) or ./draftlens --help (the command line). Settings, downloaded
models and traces go to ~/.config/DraftLens, ~/.local/share/DraftLens and ~/.cache/DraftLens
(or everything under \$DRAFTLENS_HOME); nothing is written into this folder.
EOF
tar -C "$BUILD/tar" --owner=0 --group=0 -czf "$TARBALL" "draftlens-$VERSION"

# --- 5. .deb --------------------------------------------------------------------------------------
DEB="$DIST/draftlens_${VERSION}_amd64.deb"
say "Debian package $(basename "$DEB")"
DROOT="$BUILD/deb/root"
rm -rf "$BUILD/deb" && mkdir -p "$DROOT/DEBIAN" "$DROOT/opt" "$DROOT/usr/bin" \
  "$DROOT/usr/share/applications" "$DROOT/usr/share/icons/hicolor/scalable/apps" \
  "$DROOT/usr/share/icons/hicolor/256x256/apps" "$DROOT/usr/share/doc/draftlens"
cp -a "$BUNDLE" "$DROOT/opt/draftlens"
install -m 0755 "$PKG/linux/draftlens-launcher.sh" "$DROOT/usr/bin/draftlens"
install -m 0644 "$PKG/linux/draftlens.desktop" "$DROOT/usr/share/applications/draftlens.desktop"
install -m 0644 assets/draftlens.svg "$DROOT/usr/share/icons/hicolor/scalable/apps/draftlens.svg"
install -m 0644 assets/draftlens.png "$DROOT/usr/share/icons/hicolor/256x256/apps/draftlens.png"
printf 'DraftLens %s, packaged from the project repository.\nLicense: MIT.\n' "$VERSION" \
  > "$DROOT/usr/share/doc/draftlens/copyright"

# Depends: the system libraries the bundle links to but does not carry (X11/xcb, GL, fontconfig,
# ...), found with ldd and mapped to their Debian packages with dpkg -S.
DEPENDS="$(
  cd "$DROOT/opt/draftlens"
  find . -type f \( -name '*.so*' -o -name draftlens \) -print0 \
    | LD_LIBRARY_PATH="$PWD/_internal:$PWD/_internal/PySide6/Qt/lib" xargs -0 ldd 2>/dev/null \
    | awk '/=> \// {print $3}' | grep -v "^$PWD/" | sort -u \
    | while read -r lib; do dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "$lib" 2>/dev/null; done \
    | cut -d: -f1 | sort -u | grep -v -E '^(libc6|libgcc-s1|libstdc\+\+6)$' | paste -sd, | sed 's/,/, /g'
)"
# The bundle needs a glibc at least as new as the one it was built against.
GLIBC="$(getconf GNU_LIBC_VERSION | awk '{print $2}')"
DEPENDS="libc6 (>= $GLIBC), libgcc-s1, libstdc++6${DEPENDS:+, $DEPENDS}"
# Qt's xcb platform plugin needs these (Qt's list for X11). ldd finds only the ones this build
# machine happens to have, and Qt 6.5+ dlopens libxcb-cursor0, so they are named here: a bundle
# built on a machine without them must still install them where it is installed.
for pkg in libxcb-cursor0 libxcb-icccm4 libxcb-image0 libxcb-keysyms1 libxcb-randr0 \
           libxcb-render-util0 libxcb-shape0 libxcb-xfixes0 libxcb-xkb1 libxkbcommon0 \
           libxkbcommon-x11-0 libx11-xcb1 libfontconfig1 libdbus-1-3; do
  case ", $DEPENDS," in *", $pkg,"*) ;; *) DEPENDS="$DEPENDS, $pkg";; esac
done
SIZE_KB="$(du -sk --exclude=DEBIAN "$DROOT" | cut -f1)"
cat > "$DROOT/DEBIAN/control" <<EOF
Package: draftlens
Version: $VERSION
Section: science
Priority: optional
Architecture: amd64
Maintainer: DraftLens developers <draftlens@users.noreply.github.com>
Installed-Size: $SIZE_KB
Depends: $DEPENDS
Homepage: https://github.com/draftlens/draftlens
Description: see speculative decoding, token by token
 DraftLens runs a target and a draft language model (GGUF files, through
 llama.cpp) and shows every draft token's p, q, acceptance and replacement
 live, with throughput and acceptance charts. This package carries the
 llama.cpp backend only; the PyTorch backend comes with the pip install.
EOF
# The bundle is self-contained: no maintainer scripts. dpkg's triggers refresh the desktop and
# icon caches when desktop-file-utils / the icon theme tools are installed.
find "$DROOT" -type d -exec chmod 0755 {} +
dpkg-deb --root-owner-group -Zxz --build "$DROOT" "$DEB" >/dev/null
dpkg-deb --info "$DEB" | sed -n '/Package:/,/Description:/p'

# --- 6. sizes ---------------------------------------------------------------------------------------
say "sizes"
printf '%-48s %8s\n' "bundle folder (packaging/dist/draftlens)" "$(du -sh "$BUNDLE" | cut -f1)"
printf '%-48s %8s\n' "$(basename "$TARBALL")" "$(du -h "$TARBALL" | cut -f1)"
printf '%-48s %8s\n' "$(basename "$DEB")" "$(du -h "$DEB" | cut -f1)"
echo "AppImage: not built (appimagetool / the AppImage runtime are on neither PyPI nor Debian)"
