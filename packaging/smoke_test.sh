#!/usr/bin/env bash
# Smoke test of the Linux packages: builds them (packaging/build_linux.sh, incremental), installs
# the .deb into a scratch root (dpkg -x), and runs the PACKAGED binary:
#   - --version (names the version and "torch not installed"), the tar.gz's binary too
#   - the model-file preflight child on a tiny GGUF (load, tokenize, one decode), printing which
#     llama.cpp CPU variant the dispatcher picked on this CPU
#   - `draftlens run` headless on a tiny GGUF pair, and `--backend torch`, which must fail with
#     the reason and how to get the PyTorch backend
#   - cold start under Xvfb: seconds from launch to the main window being visible (xdotool)
#   - the GUI self-test under Xvfb (--self-test: opens the window, loads the tiny pair, runs
#     speculative steps, writes a screenshot, exits 0); the PNG must exist
#   - nothing written into the install tree (or the working folder): settings, caches and
#     traces must land in the platformdirs folders under $HOME
#   - with qemu-x86_64 installed (apt-get install qemu-user): the preflight on emulated CPUs
#     without AVX-512 (Haswell: AVX2), without AVX2 (Sandy Bridge) and without AVX (Nehalem),
#     proving the portable build picks the matching llama.cpp CPU variant and decodes
# Fails loudly (exit 1, "SMOKE TEST FAILED: ...") on the first thing that is wrong.
#
#   bash packaging/smoke_test.sh                 build (or update), then test
#   bash packaging/smoke_test.sh --reuse         test the packages already in packaging/dist
#   bash packaging/smoke_test.sh --real-install  also `apt-get install` the .deb on this machine,
#                                                run `draftlens --version` from PATH, remove it
#   bash packaging/smoke_test.sh --no-qemu       skip the emulated-CPU checks
# Environment: SMOKE_KEEP=1 keeps the scratch folder; SMOKE_OUT=DIR where the screenshot goes
# (default packaging/dist/smoke).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
OUT="${SMOKE_OUT:-$DIST/smoke}"
options --reuse=REUSE --real-install=REAL --no-qemu=NO_QEMU -- "$@"

fail() { printf '\nSMOKE TEST FAILED: %s\n' "$*" >&2; exit 1; }
die() { fail "$@"; }  # what packaging/lib/common.sh's functions call
step() { printf '\n-- %s\n' "$*"; }
ok() { printf '   ok: %s\n' "$*"; }

DEB="$DIST/draftlens_${VERSION}_amd64.deb"
TARBALL="$DIST/draftlens-$VERSION-linux-x86_64.tar.gz"

# --- tools ------------------------------------------------------------------------------------
need_apt=()
command -v xvfb-run >/dev/null || need_apt+=(xvfb)
command -v xdotool >/dev/null || need_apt+=(xdotool)
command -v bc >/dev/null || need_apt+=(bc)
if [ ${#need_apt[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || fail "missing ${need_apt[*]}: apt-get install -y ${need_apt[*]}"
  apt-get install -y -qq "${need_apt[@]}" >/dev/null || fail "apt-get install ${need_apt[*]} failed"
fi

# --- build --------------------------------------------------------------------------------------
if [ "$REUSE" = 1 ] && [ -f "$DEB" ] && [ -f "$TARBALL" ]; then
  step "reusing $(basename "$DEB") and $(basename "$TARBALL")"
else
  step "building (packaging/build_linux.sh)"
  bash "$PKG/build_linux.sh" || fail "build_linux.sh failed"
fi
[ -f "$DEB" ] || fail "no $DEB"
[ -f "$TARBALL" ] || fail "no $TARBALL"
[ -x "$PY" ] || fail "no build venv python at $PY (run packaging/build_linux.sh)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/draftlens-smoke.XXXXXX")"
APP_PID=""
cleanup() {
  if [ -n "$APP_PID" ] && kill -0 "$APP_PID" 2>/dev/null; then kill "$APP_PID" 2>/dev/null || true; fi
  if [ "${SMOKE_KEEP:-0}" = 1 ]; then echo "scratch folder kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
mkdir -p "$OUT" "$WORK/home" "$WORK/cwd" "$WORK/models"

# --- install the .deb into a scratch root -----------------------------------------------------------
step "dpkg -x $(basename "$DEB") into a scratch root"
SROOT="$WORK/root"
dpkg -x "$DEB" "$SROOT" || fail "dpkg -x failed"
echo "   Depends: $(dpkg-deb -f "$DEB" Depends)"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  # what apt would install with the package: the bundle is run from the scratch root below
  DEPS="$(dpkg-deb -f "$DEB" Depends | tr ',' '\n' | sed 's/([^)]*)//; s/|.*//; s/ //g' | grep -v '^$')"
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $DEPS > "$WORK/deps.log" 2>&1 \
    || { tail "$WORK/deps.log" >&2; fail "apt-get install of the .deb's Depends failed"; }
fi
APP="$SROOT/opt/draftlens/draftlens"
[ -x "$APP" ] || fail "the .deb has no executable /opt/draftlens/draftlens"
[ -x "$SROOT/usr/bin/draftlens" ] || fail "the .deb has no /usr/bin/draftlens"
grep -q '^exec /opt/draftlens/draftlens "\$@"' "$SROOT/usr/bin/draftlens" \
  || fail "/usr/bin/draftlens does not start /opt/draftlens/draftlens"
DESKTOP="$SROOT/usr/share/applications/draftlens.desktop"
[ -f "$DESKTOP" ] || fail "the .deb has no desktop entry"
if command -v desktop-file-validate >/dev/null; then
  desktop-file-validate "$DESKTOP" || fail "the desktop entry does not validate"
fi
ICON="$(sed -n 's/^Icon=//p' "$DESKTOP")"
[ -f "$SROOT/usr/share/icons/hicolor/scalable/apps/$ICON.svg" ] \
  && [ -f "$SROOT/usr/share/icons/hicolor/256x256/apps/$ICON.png" ] \
  || fail "the icon named in the desktop entry ($ICON) is not installed"
[ -z "$(find "$SROOT" -iname '*torch*' -print -quit)" ] || fail "torch files in the package"
ok "/opt/draftlens ($(du -sh "$SROOT/opt/draftlens" | cut -f1)), /usr/bin/draftlens, desktop entry, icon $ICON"

snapshot() { (cd "$SROOT" && find . -printf '%y %m %s %T@ %p\n' | LC_ALL=C sort); }
snapshot > "$WORK/tree-before.txt"

# The packaged app gets a fresh HOME: platformdirs puts settings/data/cache under it.
export HOME="$WORK/home"
unset XDG_CONFIG_HOME XDG_DATA_HOME XDG_CACHE_HOME XDG_STATE_HOME DRAFTLENS_HOME PYTHONPATH PYTHONHOME || true
export QT_QPA_PLATFORM=xcb
cd "$WORK/cwd"

# --- command line -------------------------------------------------------------------------------------
step "draftlens --version"
VERSION_LINE="$("$APP" --version)" || fail "--version exited non-zero"
echo "   $VERSION_LINE"
[[ "$VERSION_LINE" == "draftlens $VERSION "* ]] || fail "--version does not start with 'draftlens $VERSION'"
[[ "$VERSION_LINE" == *"torch not installed"* ]] || fail "--version should say torch is not installed"
[[ "$VERSION_LINE" == *"llama_cpp 0."* ]] || fail "--version names no llama_cpp version"

step "tiny GGUF pair (tests/tiny_gguf.py)"
TARGET="$WORK/models/tiny-target.gguf"
DRAFT="$WORK/models/tiny-draft.gguf"
HOME="$WORK/builder-home" write_tiny_pair "$TARGET" "$DRAFT" || fail "could not write the tiny GGUF pair"
ok "$(du -h "$TARGET" | cut -f1) target, $(du -h "$DRAFT" | cut -f1) draft"

step "preflight child in the packaged binary (load, tokenize, one decode)"
if ! "$APP" --preflight-child "$TARGET" > "$WORK/preflight.out" 2> "$WORK/preflight.err"; then
  tail -n 20 "$WORK/preflight.err" >&2
  fail "the packaged preflight child failed (exit $?)"
fi
grep -q "stage: done" "$WORK/preflight.out" || fail "the preflight child did not reach 'done'"
VARIANT="$(grep -o 'loaded CPU backend from [^ ]*' "$WORK/preflight.err" | sed 's/.*libggml-cpu-//; s/\.so$//' | tail -n1)"
[ -n "$VARIANT" ] || fail "cannot tell which llama.cpp CPU variant was loaded"
ok "decoded on this CPU with the '$VARIANT' CPU variant"

step "draftlens run (headless, llama.cpp, tiny pair)"
"$APP" run -m "$TARGET" -md "$DRAFT" -p "def hello" -n 16 --draft-max 4 \
  > "$WORK/run.out" 2> "$WORK/run.err" || { tail -n 20 "$WORK/run.err" >&2; fail "draftlens run failed"; }
ok "$(grep -E '^ *generated ' "$WORK/run.err" | tail -n1 | tr -s ' ' | sed 's/^ //')"

step "draftlens check-exact (both kernel modes: the exact one in a child of the packaged binary)"
"$APP" check-exact -m "$TARGET" -md "$DRAFT" --samples 60 -n 12 --json \
  > "$WORK/exact.out" 2> "$WORK/exact.err" || { tail -n 20 "$WORK/exact.err" >&2; cat "$WORK/exact.out" >&2; fail "check-exact failed"; }
grep -q '"exact_kernels_identical": true' "$WORK/exact.out" \
  || { cat "$WORK/exact.out" >&2; fail "check-exact did not run the exact-kernels suite"; }
ok "$(grep -o '"verdict": "[^"]*"' "$WORK/exact.out" | cut -c1-160)"

step "draftlens run --backend torch (must explain that PyTorch is not in this build)"
set +e
"$APP" run --backend torch -m "$TARGET" -md "$DRAFT" -p "def" -n 4 > /dev/null 2> "$WORK/torch.err"
rc=$?
set -e
[ "$rc" = 1 ] || { cat "$WORK/torch.err" >&2; fail "--backend torch exited $rc, expected 1"; }
grep -q "PyTorch backend not installed" "$WORK/torch.err" && grep -q "draftlens\[torch\]" "$WORK/torch.err" \
  || { cat "$WORK/torch.err" >&2; fail "--backend torch did not give the reason and the way to get it"; }
ok "$(grep -m1 '^error:' "$WORK/torch.err")"

# --- the window ----------------------------------------------------------------------------------------
XVFB=(xvfb-run -a -s "-screen 0 1400x900x24")

step "cold start under Xvfb: launch to the main window visible"
{
  echo '#!/usr/bin/env bash'
  declare -f poll_app  # packaging/lib/common.sh's wait loop, for the shell inside xvfb-run
  cat <<'SH'
# $1 app, $2 scratch: prints seconds from launch until a visible window named DraftLens exists
# (polled every 50 ms with xdotool, at most 90 s), then closes the app it started.
set -u
now() { date +%s.%N; }
window_shown() { wid="$(xdotool search --onlyvisible --name '^DraftLens' 2>/dev/null | head -n1)"; [ -n "$wid" ]; }
t0=$(now)
"$1" > "$2/coldstart-app.log" 2>&1 &
pid=$!
wid=""
rc=0
poll_app "$pid" 90 window_shown || rc=$?
t1=$(now)
[ "$rc" = 1 ] && { echo "the app exited"; exit 1; }
[ "$rc" = 124 ] && { echo "no window"; kill "$pid"; exit 1; }
printf '%.2f %s\n' "$(echo "$t1 - $t0" | bc)" "$(xdotool getwindowname "$wid" | tr ' ' '_')"
kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
exit 0
SH
} > "$WORK/coldstart.sh"
COLD=()
for attempt in 1 2 3; do
  r="$("${XVFB[@]}" bash "$WORK/coldstart.sh" "$APP" "$WORK")" \
    || { echo "$r" >&2; cat "$WORK/coldstart-app.log" >&2; fail "no DraftLens window within 90 s"; }
  COLD+=("${r%% *}")
  TITLE="${r#* }"
done
ok "window '${TITLE//_/ }' visible after ${COLD[0]} s (first launch after install), then ${COLD[1]} s, ${COLD[2]} s"

step "GUI self-test under Xvfb (--self-test, tiny pair, screenshot)"
SHOT="$OUT/selftest.png"
t0=$(date +%s.%N)
run_self_test "$WORK/selftest" "$SHOT" "${XVFB[@]}" "$APP" --self-test \
  --target "$TARGET" --draft "$DRAFT" --screenshot "$SHOT" --steps 24 --timeout 300
t1=$(date +%s.%N)
ok "exit 0 in $(python3 -c "print(f'{$t1 - $t0:.1f}')") s; screenshot $SHOT ($(du -h "$SHOT" | cut -f1))"

# --- nothing written into the install folder ------------------------------------------------------------
step "the install tree is unchanged; files went to the platformdirs folders"
check_install_folder_unchanged "$WORK"
WRITTEN="$(cd "$HOME" && find . -type f | sort)"
echo "$WRITTEN" | sed 's/^/   $HOME\//; s/\/\.\//\//'
echo "$WRITTEN" | grep -q '^\./\.cache/DraftLens/preflight\.json$' \
  || fail "expected the preflight cache in ~/.cache/DraftLens (platformdirs)"
BAD="$(echo "$WRITTEN" | grep -v -E '^\./\.(cache|config|local/share|local/state)/DraftLens/' || true)"
[ -z "$BAD" ] || fail "files outside the DraftLens platformdirs folders: $BAD"
ok "install tree identical before/after; $(echo "$WRITTEN" | wc -l) files, all under ~/.cache|.config|.local/share/DraftLens"

# --- the tar.gz -----------------------------------------------------------------------------------------
step "the portable archive"
mkdir -p "$WORK/tar"
tar -C "$WORK/tar" -xzf "$TARBALL"
TAR_APP="$WORK/tar/draftlens-$VERSION/draftlens"
[ -x "$TAR_APP" ] || fail "the tar.gz has no draftlens-$VERSION/draftlens"
"$TAR_APP" --version > /dev/null || fail "the tar.gz's draftlens --version failed"
"$TAR_APP" --preflight-child "$TARGET" > /dev/null 2>&1 || fail "the tar.gz's preflight failed"
ok "draftlens-$VERSION/draftlens runs (--version, preflight)"

# --- portable CPU build: emulated CPUs without AVX-512 / AVX2 / AVX ---------------------------------
# qemu-x86_64 (user mode) runs the packaged binary on an emulated CPU, whose CPUID the llama.cpp
# dispatcher reads. PyInstaller's bootloader re-executes itself once (to set LD_LIBRARY_PATH),
# which would leave the emulator: pre-set what that re-exec sets, so it runs in place.
# Nehalem: numpy's OpenBLAS picks an AVX kernel from QEMU's CPUID and dies with SIGILL before
# llama.cpp is reached, so OpenBLAS is told the core type (llama.cpp is what is tested here).
if [ "$NO_QEMU" = 0 ] && command -v qemu-x86_64 >/dev/null; then
  PYI_ENV=(_PYI_ARCHIVE_FILE="$APP" _PYI_PARENT_PROCESS_LEVEL=-1 _PYI_LINUX_PROCESS_NAME=draftlens
           LD_LIBRARY_PATH="$(dirname "$APP")/_internal")
  for spec in "Haswell-v4:haswell:" "SandyBridge-v2:sandybridge:" "Nehalem-v2:sse42:OPENBLAS_CORETYPE=Nehalem"; do
    IFS=: read -r cpu want extra <<< "$spec"
    step "preflight under qemu-x86_64 -cpu $cpu (${extra:-no extra settings})"
    if ! env ${extra:+"$extra"} "${PYI_ENV[@]}" timeout 900 qemu-x86_64 -cpu "$cpu" "$APP" \
        --preflight-child "$TARGET" > "$WORK/qemu.out" 2> "$WORK/qemu.err"; then
      grep -v "TCG doesn't support" "$WORK/qemu.err" | tail -n 15 >&2
      fail "the packaged llama.cpp failed on an emulated $cpu CPU"
    fi
    grep -q "stage: done" "$WORK/qemu.out" || fail "no 'stage: done' on $cpu"
    v="$(grep -o 'loaded CPU backend from [^ ]*' "$WORK/qemu.err" | sed 's/.*libggml-cpu-//; s/\.so$//' | tail -n1)"
    [ "$v" = "$want" ] || fail "emulated $cpu: expected the '$want' variant, got '$v'"
    ok "emulated $cpu: decoded with the '$v' variant"
  done
elif [ "$NO_QEMU" = 0 ]; then
  step "emulated-CPU checks skipped: qemu-x86_64 not installed (apt-get install qemu-user)"
fi

# --- optional: a real install -----------------------------------------------------------------------------
if [ "$REAL" = 1 ]; then
  step "apt-get install the .deb on this machine"
  [ "$(id -u)" = 0 ] || fail "--real-install needs root"
  apt-get install -y -qq "$DEB" > "$WORK/apt.log" 2>&1 || { tail "$WORK/apt.log" >&2; fail "apt-get install failed"; }
  command -v draftlens >/dev/null || fail "draftlens is not on PATH after installing"
  draftlens --version || fail "the installed draftlens --version failed"
  run_self_test "$WORK/selftest-installed" "" "${XVFB[@]}" draftlens --self-test \
    --target "$TARGET" --draft "$DRAFT" --steps 8 --timeout 300
  apt-get remove -y -qq draftlens > /dev/null || fail "apt-get remove draftlens failed"
  [ ! -e /opt/draftlens ] || fail "/opt/draftlens is left behind after removal"
  ok "installed, ran from PATH, removed cleanly"
fi

printf '\nSMOKE TEST PASSED: draftlens %s; .deb %s, tar.gz %s, bundle %s; window in %s s (first launch), %s / %s s (next); CPU variant here: %s\n' \
  "$VERSION" "$(du -h "$DEB" | cut -f1)" "$(du -h "$TARBALL" | cut -f1)" \
  "$(du -sh "$SROOT/opt/draftlens" | cut -f1)" "${COLD[0]}" "${COLD[1]}" "${COLD[2]}" "$VARIANT"
