#!/usr/bin/env bash
# Smoke test of the Windows installer under Wine + Xvfb, on this Linux machine: builds it
# (build_windows.sh, cached parts reused), then in a scratch Wine prefix:
#   - silent per-user install (setup.exe /S): the files, the Start menu entry, the Apps entry
#   - draftlens-cli --version (names the version, llama_cpp, "torch not installed")
#   - the model-file preflight child on a tiny GGUF through the cross-built llama.cpp, and which
#     ggml-cpu-*.dll variant the dispatcher loaded on this CPU
#   - draftlens-cli run on the tiny GGUF pair (tests/tiny_gguf.py), check-exact on it, and
#     --backend torch, which must fail with the reason and how to get PyTorch
#   - the window's self-test (draftlens.exe --self-test, Qt's windows platform plugin on Wine's
#     X11 driver, Xvfb), exit 0 and a PNG screenshot
#   - nothing written into the install folder or the working folder; the app's files only in
#     its platformdirs folders (%LOCALAPPDATA%\DraftLens)
#   - silent uninstall: the install folder, the Start menu entry and the Apps entry are gone
# Fails loudly (exit 1, "WINDOWS SMOKE TEST FAILED: ...") on the first thing that is wrong.
#
#   bash packaging/windows/smoke_test.sh            build (or reuse the cached parts), then test
#   bash packaging/windows/smoke_test.sh --reuse    test the setup.exe already in packaging/dist
# Environment: SMOKE_KEEP=1 keeps the scratch folder; SMOKE_OUT=DIR where the screenshot goes
# (default packaging/dist/smoke).
#
# Wine 8.0 (Debian 12) lacks two parts of Windows 10+ that the installed app needs, so the test
# prefix (only it) gets them: crealf/cimagf in ucrtbase.dll, which numpy 2 calls when it is
# imported (a copy of Wine's ucrtbase.dll with them filled in: wine_crt_shim.py), and
# icuuc.dll, whose converter functions Qt6Core.dll imports (a stand-in that offers no legacy
# converters: wine_icuuc_stub.c). Nothing of this is in the installer.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/common.sh"
OUT="${SMOKE_OUT:-$DIST/smoke}"
options --reuse=REUSE -- "$@"

fail() { printf '\nWINDOWS SMOKE TEST FAILED: %s\n' "$*" >&2; exit 1; }
die() { fail "$@"; }
step() { printf '\n-- %s\n' "$*"; }
ok() { printf '   ok: %s\n' "$*"; }
started=$SECONDS

SETUP="$DIST/draftlens-$VERSION-windows-x64-setup.exe"
WINE=/usr/lib/wine/wine64
WINESERVER=/usr/lib/wine/wineserver

# --- tools --------------------------------------------------------------------------------------
need_apt=()
[ -x "$WINE" ] || need_apt+=(wine64)
command -v Xvfb > /dev/null || need_apt+=(xvfb)
if [ ${#need_apt[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || fail "missing ${need_apt[*]}: apt-get install -y --no-install-recommends ${need_apt[*]}"
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" > /dev/null \
    || fail "apt-get install ${need_apt[*]} failed"
fi
WINE_VERSION="$("$WINE" --version)"

# --- build ----------------------------------------------------------------------------------------
if [ "$REUSE" = 1 ] && [ -f "$SETUP" ]; then
  step "reusing $(basename "$SETUP")"
else
  step "building (packaging/windows/build_windows.sh)"
  bash "$PKG/windows/build_windows.sh" || fail "build_windows.sh failed"
fi
[ -f "$SETUP" ] || fail "no $SETUP"
HOST_PY=""
for candidate in "$PY" "$ROOT/.venv/bin/python"; do
  if [ -x "$candidate" ] && "$candidate" -c 'import gguf, numpy' 2> /dev/null; then HOST_PY="$candidate"; break; fi
done
[ -n "$HOST_PY" ] || fail "no Linux Python with gguf and numpy to write the tiny GGUF pair (run packaging/build_linux.sh or packaging/setup.sh)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/draftlens-winsmoke.XXXXXX")"
XVFB_PID=""
cleanup() {
  "$WINESERVER" -k 2> /dev/null || true
  if [ -n "$XVFB_PID" ]; then kill "$XVFB_PID" 2> /dev/null || true; fi
  if [ "${SMOKE_KEEP:-0}" = 1 ]; then echo "scratch folder kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
mkdir -p "$OUT" "$WORK/home" "$WORK/cwd" "$WORK/models"

# A scratch Wine prefix and HOME (Wine links the profile folders to HOME's), a display of its own,
# no crash debugger (a crash must end the program with an error, not wait in winedbg).
export HOME="$WORK/home" WINEPREFIX="$WORK/prefix" WINEDEBUG=-all WINEARCH=win64
export WINEDLLOVERRIDES="winedbg.exe=d"
unset PYTHONPATH PYTHONHOME DRAFTLENS_HOME QT_QPA_PLATFORM || true
for n in $(seq 90 130); do [ -e "/tmp/.X11-unix/X$n" ] || [ -e "/tmp/.X$n-lock" ] || break; done
Xvfb ":$n" -screen 0 1400x900x24 -nolisten tcp > "$WORK/xvfb.log" 2>&1 &
XVFB_PID=$!
export DISPLAY=":$n"
winpath() { printf 'Z:%s' "${1//\//\\}"; }
# wine PROGRAM ARG...: runs it with stdout and stderr through pipes (the embeddable Python cannot
# start with a plain file as its standard output under Wine 8), into $WORK/LAST.out / .err.
wine() {
  rm -f "$WORK/LAST.rc"
  { rc=0; "$WINE" "$@" 2> >(cat > "$WORK/LAST.err") || rc=$?; echo "$rc" > "$WORK/LAST.rc"; } \
    | cat > "$WORK/LAST.out"
  sleep 0.2  # the stderr reader finishes
  return "$(cat "$WORK/LAST.rc")"
}

step "Wine prefix ($WINE_VERSION)"
"$WINE" wineboot -i > "$WORK/wineboot.log" 2>&1 || { tail "$WORK/wineboot.log" >&2; fail "wineboot failed"; }
"$WINESERVER" -w
UCRT="$WINEPREFIX/drive_c/windows/system32/ucrtbase.dll"
python3 "$PKG/windows/wine_crt_shim.py" "$UCRT" "$WORK/shim" > /dev/null || fail "wine_crt_shim.py failed"
cp "$WORK/shim/ucrtbase.dll" "$UCRT"
export WINEDLLOVERRIDES="winedbg.exe=d;ucrtbase=n"  # load that copy, not Wine's own
x86_64-w64-mingw32-gcc-posix -O2 -Wall -Wextra -Werror -shared -static \
  -o "$WINEPREFIX/drive_c/windows/system32/icuuc.dll" "$PKG/windows/wine_icuuc_stub.c" \
  || fail "could not build the icuuc.dll stand-in (wine_icuuc_stub.c)"
USERDIR="$WINEPREFIX/drive_c/users/$(id -un)"
[ -d "$USERDIR" ] || fail "no Wine profile folder $USERDIR"
ok "prefix $WINEPREFIX; ucrtbase.dll with crealf/cimagf and an icuuc.dll (Wine 8 lacks them; Windows 10+ has them)"

# --- install ---------------------------------------------------------------------------------------
step "silent install: $(basename "$SETUP") /S ($(du -h "$SETUP" | cut -f1))"
t0=$SECONDS
wine "$SETUP" /S || { cat "$WORK/LAST.err" >&2; fail "the installer exited non-zero"; }
"$WINESERVER" -w
INST="$USERDIR/AppData/Local/Programs/DraftLens"
for f in draftlens.exe draftlens-cli.exe uninstall.exe python313.dll python313._pth \
         Lib/site-packages/llama_cpp/lib/llama.dll Lib/site-packages/ui/launcher.py; do
  [ -f "$INST/$f" ] || fail "the install has no $f (in $INST)"
done
VARIANTS="$(cd "$INST/Lib/site-packages/llama_cpp/lib" && ls ggml-cpu-*.dll | sed 's/ggml-cpu-//; s/\.dll//' | tr '\n' ' ')"
[ -n "$VARIANTS" ] || fail "no ggml-cpu-*.dll CPU variants installed"
LNK="$USERDIR/AppData/Roaming/Microsoft/Windows/Start Menu/Programs/DraftLens/DraftLens.lnk"
[ -f "$LNK" ] || fail "no Start menu entry ($LNK)"
grep -q 'CurrentVersion\\\\Uninstall\\\\DraftLens\]' "$WINEPREFIX/user.reg" || fail "no Apps (Uninstall) entry in HKCU"
grep -A12 'CurrentVersion\\\\Uninstall\\\\DraftLens\]' "$WINEPREFIX/user.reg" | grep -q "\"DisplayVersion\"=\"$VERSION\"" \
  || fail "the Apps entry does not name version $VERSION"
# (backends/torch_hf.py is DraftLens's own: it reports the PyTorch backend as not installed)
[ -z "$(find "$INST/Lib/site-packages" -maxdepth 1 \( -iname '*torch*' -o -iname 'transformers*' \) -print -quit)" ] \
  || fail "torch or transformers in the install"
ok "per-user install in %LOCALAPPDATA%\\Programs\\DraftLens ($(du -sh "$INST" | cut -f1), $(find "$INST" -type f | wc -l) files) in $((SECONDS - t0)) s; Start menu entry; Apps entry $VERSION; CPU variants: $VARIANTS"

snapshot() { (cd "$INST" && find . -printf '%y %m %s %T@ %p\n' | LC_ALL=C sort); }
profile() { (cd "$USERDIR" && find . -type f | LC_ALL=C sort); }
snapshot > "$WORK/tree-before.txt"
profile > "$WORK/profile-before.txt"
CLI="$INST/draftlens-cli.exe"
cd "$WORK/cwd"

# --- command line -------------------------------------------------------------------------------------
step "draftlens-cli --version"
wine "$CLI" --version || { cat "$WORK/LAST.err" >&2; fail "--version exited non-zero"; }
VERSION_LINE="$(tr -d '\r' < "$WORK/LAST.out")"
echo "   $VERSION_LINE"
[[ "$VERSION_LINE" == "draftlens $VERSION "* ]] || fail "--version does not start with 'draftlens $VERSION'"
[[ "$VERSION_LINE" == *"torch not installed"* ]] || fail "--version should say torch is not installed"
[[ "$VERSION_LINE" == *"llama_cpp $LLAMA_VERSION"* ]] || fail "--version names no llama_cpp $LLAMA_VERSION"

step "tiny GGUF pair (tests/tiny_gguf.py)"
TARGET="$WORK/models/tiny-target.gguf"
DRAFT="$WORK/models/tiny-draft.gguf"
PY="$HOST_PY" HOME="$WORK/builder-home" write_tiny_pair "$TARGET" "$DRAFT" || fail "could not write the tiny GGUF pair"
ok "$(du -h "$TARGET" | cut -f1) target, $(du -h "$DRAFT" | cut -f1) draft"
WT="$(winpath "$TARGET")"
WD="$(winpath "$DRAFT")"

step "preflight child (load, tokenize, one decode through the cross-built llama.cpp)"
wine "$CLI" --preflight-child "$WT" || { tail -n 20 "$WORK/LAST.err" >&2; fail "the preflight child failed"; }
grep -q "stage: done" "$WORK/LAST.out" || { cat "$WORK/LAST.out" "$WORK/LAST.err" >&2; fail "the preflight child did not reach 'done'"; }
VARIANT="$(tr -d '\r' < "$WORK/LAST.err" | grep -o 'loaded CPU backend from .*ggml-cpu-[a-z0-9]*\.dll' | sed 's/.*ggml-cpu-//; s/\.dll$//' | tail -n1)"
[ -n "$VARIANT" ] || { cat "$WORK/LAST.err" >&2; fail "cannot tell which ggml-cpu-*.dll was loaded"; }
ok "decoded with the '$VARIANT' CPU variant (ggml-cpu-$VARIANT.dll)"

step "draftlens-cli run (headless, llama.cpp, tiny pair)"
wine "$CLI" run -m "$WT" -md "$WD" -p "def hello" -n 16 --draft-max 4 \
  || { tail -n 20 "$WORK/LAST.err" >&2; fail "draftlens run failed"; }
RUN_LINE="$(tr -d '\r' < "$WORK/LAST.err" | grep -E '^ *generated ' | tail -n1 | tr -s ' ' | sed 's/^ //')"
[ -n "$RUN_LINE" ] || { cat "$WORK/LAST.err" >&2; fail "draftlens run printed no 'generated' line"; }
ok "$RUN_LINE"

step "draftlens-cli check-exact (the exact-kernels suite in a child process)"
wine "$CLI" check-exact -m "$WT" -md "$WD" --samples 60 -n 12 --json \
  || { tail -n 20 "$WORK/LAST.err" >&2; cat "$WORK/LAST.out" >&2; fail "check-exact failed"; }
grep -q '"exact_kernels_identical": true' "$WORK/LAST.out" \
  || { cat "$WORK/LAST.out" >&2; fail "check-exact did not run the exact-kernels suite"; }
ok "$(grep -o '"verdict": "[^"]*"' "$WORK/LAST.out" | cut -c1-160)"

step "draftlens-cli run --backend torch (must explain that PyTorch is not in this build)"
rc=0
wine "$CLI" run --backend torch -m "$WT" -md "$WD" -p "def" -n 4 || rc=$?
[ "$rc" = 1 ] || { cat "$WORK/LAST.err" >&2; fail "--backend torch exited $rc, expected 1"; }
grep -q "PyTorch backend not installed" "$WORK/LAST.err" && grep -q "draftlens\[torch\]" "$WORK/LAST.err" \
  || { cat "$WORK/LAST.err" >&2; fail "--backend torch did not give the reason and the way to get it"; }
ok "$(tr -d '\r' < "$WORK/LAST.err" | grep -m1 '^error:')"

# --- the window --------------------------------------------------------------------------------------------
step "the window's self-test (draftlens.exe --self-test, Qt's windows plugin on Wine + Xvfb)"
SHOT="$OUT/selftest-windows.png"
rm -f "$SHOT"
t0=$(date +%s.%N)
{ rc=0; timeout 600 "$WINE" "$INST/draftlens.exe" --self-test --target "$WT" --draft "$WD" \
    --screenshot "$(winpath "$SHOT")" --steps 24 --timeout 300 2> >(cat > "$WORK/selftest.err") || rc=$?
  echo "$rc" > "$WORK/selftest.rc"; } | cat > "$WORK/selftest.out"
rc="$(cat "$WORK/selftest.rc")"
sleep 0.2
t1=$(date +%s.%N)
tr -d '\r' < "$WORK/selftest.out"
[ "$rc" = 0 ] || { tail -n 30 "$WORK/selftest.err" >&2; fail "the self-test exited $rc"; }
[ -s "$SHOT" ] || { tail -n 30 "$WORK/selftest.err" >&2; fail "the self-test wrote no screenshot at $SHOT"; }
[ "$(head -c 8 "$SHOT" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$SHOT is not a PNG"
SELFTEST_LINE="$(tr -d '\r' < "$WORK/selftest.out" | grep -m1 'self-test ok' || true)"
ok "exit 0 in $(python3 -c "print(f'{$t1 - $t0:.1f}')") s; screenshot $SHOT ($(du -h "$SHOT" | cut -f1))${SELFTEST_LINE:+; $SELFTEST_LINE}"

# --- nothing written into the install folder ----------------------------------------------------------------
step "the install folder is unchanged; files went to the platformdirs folders"
"$WINESERVER" -w
check_install_folder_unchanged "$WORK"
profile > "$WORK/profile-after.txt"
WRITTEN="$(comm -13 "$WORK/profile-before.txt" "$WORK/profile-after.txt")"
echo "$WRITTEN" | sed 's/^\./   %USERPROFILE%/'
echo "$WRITTEN" | grep -q '^\./AppData/Local/DraftLens/' \
  || fail "expected the app's files in %LOCALAPPDATA%\\DraftLens (platformdirs)"
BAD="$(echo "$WRITTEN" | grep -v -E '^\./AppData/(Local|Roaming)/DraftLens/' || true)"
[ -z "$BAD" ] || fail "files outside the DraftLens platformdirs folders: $BAD"
ok "install folder identical before/after; $(echo "$WRITTEN" | wc -l) new files, all under %LOCALAPPDATA%|%APPDATA%\\DraftLens"

# --- uninstall -----------------------------------------------------------------------------------------------
step "silent uninstall: uninstall.exe /S"
wine "$INST/uninstall.exe" /S || { cat "$WORK/LAST.err" >&2; fail "the uninstaller exited non-zero"; }
"$WINESERVER" -w  # the uninstaller runs from a copy in %TEMP%; wait for it
[ ! -e "$INST" ] || fail "the uninstaller left $INST behind: $(cd "$INST" && find . | head -n 20)"
[ ! -e "$(dirname "$LNK")" ] || fail "the uninstaller left the Start menu entry"
if grep -q 'Uninstall\\\\DraftLens\]\|^\[Software\\\\DraftLens\]' "$WINEPREFIX/user.reg"; then
  fail "the uninstaller left the registry entries"
fi
ok "install folder, Start menu entry and Apps entry removed (the user's settings and caches in %LOCALAPPDATA%\\DraftLens stay, by design)"

printf '\nWINDOWS SMOKE TEST PASSED: draftlens %s, %s %s, under %s + Xvfb; CPU variant here: %s; %d s\n' \
  "$VERSION" "$(basename "$SETUP")" "$(du -h "$SETUP" | cut -f1)" "$WINE_VERSION" "$VARIANT" "$((SECONDS - started))"
