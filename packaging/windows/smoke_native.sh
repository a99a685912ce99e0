#!/usr/bin/env bash
# The Windows installer's smoke test on real Windows (Git Bash), for the GitHub workflow's
# windows job: the setup.exe that build_windows.sh made on Linux, installed silently, run, and
# uninstalled, with the checks of smoke_test.sh under Wine, natively:
#   - silent per-user install (setup.exe /S): the files, the Start menu entry, the Apps entry
#     (HKCU ...\Uninstall\DraftLens, DisplayVersion = this version), no torch or transformers
#   - draftlens-cli --version (names the version, llama_cpp $LLAMA_VERSION, "torch not installed")
#   - the model-file preflight child on a tiny GGUF through the cross-built llama.cpp, and which
#     ggml-cpu-*.dll variant the dispatcher loaded on this CPU
#   - draftlens-cli run on the tiny GGUF pair (tests/tiny_gguf.py), check-exact on it (the
#     exact-kernels suite in its child process), and --backend torch, which must fail (exit 1)
#     with the reason and how to get PyTorch
#   - the window's self-test (draftlens.exe --self-test), exit 0 and a PNG screenshot
#   - nothing written into the install folder or the working folder; the app's files in its
#     platformdirs folder (%LOCALAPPDATA%\DraftLens), and no file or folder named for DraftLens
#     made anywhere else in %LOCALAPPDATA% or %APPDATA%. (Under Wine the whole profile is
#     compared before and after; a Windows runner's profile changes for other reasons too.)
#   - silent uninstall: the install folder, the Start menu entry and the Apps entry are gone
# Not the Wine test's stand-ins (ucrtbase.dll, icuuc.dll): real Windows has what they stand for.
# NOT RUN YET: the development machines have no Windows and cannot reach GitHub's runners;
# expect to fix details on its first run.
#
#   bash packaging/windows/smoke_native.sh SETUP.exe
# Needs a Python with gguf and numpy on PATH (python) to write the tiny GGUF pair.
set -euo pipefail
SETUP="$(cygpath -u "$1")"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT="$PWD"
fail() { printf '\nWINDOWS SMOKE TEST FAILED: %s\n' "$*" >&2; exit 1; }
ok() { printf '   ok: %s\n' "$*"; }
step() { printf '\n-- %s\n' "$*"; }
# Windows programs given /S, /v, /f: Git Bash must not turn them into paths
win() { MSYS2_ARG_CONV_EXCL='*' "$@"; }
VERSION="$(sed -n 's/^__version__ *= *"\([^"]*\)".*/\1/p' app/__init__.py)"
LLAMA_VERSION="$(sed -n 's/^LLAMA_VERSION="\([^"]*\)".*/\1/p' packaging/lib/llama.sh)"
[ -n "$VERSION" ] && [ -n "$LLAMA_VERSION" ] || fail "cannot read the versions from app/__init__.py and packaging/lib/llama.sh"
UNINST_KEY='HKCU\Software\Microsoft\Windows\CurrentVersion\Uninstall\DraftLens'
LOCAL="$(cygpath -u "$LOCALAPPDATA")"
ROAMING="$(cygpath -u "$APPDATA")"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/cwd" "$WORK/models" "$ROOT/packaging/dist/smoke"
# what is named for DraftLens in the profile's app-data folders, outside its own folders
strays() {
  find "$LOCAL" "$ROAMING" -iname '*draftlens*' \
    -not -path "$LOCAL/DraftLens" -not -path "$LOCAL/DraftLens/*" \
    -not -path "$ROAMING/DraftLens" -not -path "$ROAMING/DraftLens/*" \
    -not -path "$LOCAL/Programs/DraftLens" -not -path "$LOCAL/Programs/DraftLens/*" \
    -not -path "$ROAMING/Microsoft/Windows/Start Menu/Programs/DraftLens*" \
    -not -path "$LOCAL/Temp/*" 2> /dev/null | LC_ALL=C sort || true
}
ours() { find "$LOCAL/DraftLens" -type f 2> /dev/null | LC_ALL=C sort || true; }
strays > "$WORK/strays-before.txt"
ours > "$WORK/ours-before.txt"

# --- install -------------------------------------------------------------------------------------
step "silent install: $(basename "$SETUP") /S"
win "$SETUP" /S || fail "the installer exited non-zero"
INST="$LOCAL/Programs/DraftLens"
for f in draftlens.exe draftlens-cli.exe uninstall.exe python313.dll python313._pth \
         Lib/site-packages/llama_cpp/lib/llama.dll Lib/site-packages/ui/launcher.py; do
  [ -f "$INST/$f" ] || fail "the install has no $f (in $INST)"
done
VARIANTS="$(find "$INST/Lib/site-packages/llama_cpp/lib" -maxdepth 1 -name 'ggml-cpu-*.dll' | sed 's/.*ggml-cpu-//; s/\.dll$//' | LC_ALL=C sort | tr '\n' ' ')"
[ -n "$VARIANTS" ] || fail "no ggml-cpu-*.dll CPU variants installed"
LNK="$ROAMING/Microsoft/Windows/Start Menu/Programs/DraftLens/DraftLens.lnk"
[ -f "$LNK" ] || fail "no Start menu entry ($LNK)"
win reg query "$UNINST_KEY" /v DisplayVersion > "$WORK/reg.txt" 2>&1 \
  || { cat "$WORK/reg.txt" >&2; fail "no Apps (Uninstall) entry in HKCU"; }
tr -d '\r' < "$WORK/reg.txt" | grep -Eq "DisplayVersion +REG_SZ +$VERSION\$" \
  || { cat "$WORK/reg.txt" >&2; fail "the Apps entry does not name version $VERSION"; }
[ -z "$(find "$INST/Lib/site-packages" -maxdepth 1 \( -iname '*torch*' -o -iname 'transformers*' \) -print -quit)" ] \
  || fail "torch or transformers in the install"
snapshot() { (cd "$INST" && find . -printf '%y %s %T@ %p\n' | LC_ALL=C sort); }
snapshot > "$WORK/before.txt"
ok "installed in $INST; Start menu entry; Apps entry $VERSION; CPU variants: $VARIANTS"

cd "$WORK/cwd"
CLI="$INST/draftlens-cli.exe"

# --- command line -------------------------------------------------------------------------------
step "draftlens-cli --version"
line="$("$CLI" --version | tr -d '\r')" || fail "--version failed"
echo "   $line"
[[ "$line" == "draftlens $VERSION "* ]] || fail "--version does not start with 'draftlens $VERSION'"
[[ "$line" == *"torch not installed"* ]] || fail "--version should say torch is not installed"
[[ "$line" == *"llama_cpp $LLAMA_VERSION"* ]] || fail "--version names no llama_cpp $LLAMA_VERSION"

step "tiny GGUF pair (tests/tiny_gguf.py)"
T="$(cygpath -w "$WORK/models/t.gguf")" D="$(cygpath -w "$WORK/models/d.gguf")"
PYTHONPATH="$(cygpath -w "$ROOT")" python -c "
import sys
from tests.tiny_gguf import write_tiny_gguf
write_tiny_gguf(sys.argv[1], seed=0); write_tiny_gguf(sys.argv[2], seed=0, noise_from=sys.argv[1])
" "$T" "$D" || fail "could not write the tiny GGUF pair"

step "preflight child (load, tokenize, one decode through the cross-built llama.cpp)"
"$CLI" --preflight-child "$T" > "$WORK/pre.out" 2> "$WORK/pre.err" \
  || { cat "$WORK/pre.err" >&2; fail "the preflight child failed"; }
grep -q "stage: done" "$WORK/pre.out" || { cat "$WORK/pre.out" "$WORK/pre.err" >&2; fail "the preflight child did not reach 'done'"; }
VARIANT="$(tr -d '\r' < "$WORK/pre.err" | grep -o 'loaded CPU backend from .*ggml-cpu-[a-z0-9]*\.dll' | sed 's/.*ggml-cpu-//; s/\.dll$//' | tail -n1)"
[ -n "$VARIANT" ] || { cat "$WORK/pre.err" >&2; fail "cannot tell which ggml-cpu-*.dll was loaded"; }
ok "decoded with the '$VARIANT' CPU variant (ggml-cpu-$VARIANT.dll)"

step "draftlens-cli run (headless, llama.cpp, tiny pair)"
"$CLI" run -m "$T" -md "$D" -p "def hello" -n 16 --draft-max 4 > /dev/null 2> "$WORK/run.err" \
  || { tail -n 20 "$WORK/run.err" >&2; fail "draftlens run failed"; }
RUN_LINE="$(tr -d '\r' < "$WORK/run.err" | grep -E '^ *generated ' | tail -n1 | tr -s ' ' | sed 's/^ //')"
[ -n "$RUN_LINE" ] || { cat "$WORK/run.err" >&2; fail "draftlens run printed no 'generated' line"; }
ok "$RUN_LINE"

step "draftlens-cli check-exact (the exact-kernels suite in a child process)"
"$CLI" check-exact -m "$T" -md "$D" --samples 60 -n 12 --json > "$WORK/check.out" 2> "$WORK/check.err" \
  || { tail -n 20 "$WORK/check.err" >&2; cat "$WORK/check.out" >&2; fail "check-exact failed"; }
grep -q '"exact_kernels_identical": true' "$WORK/check.out" \
  || { cat "$WORK/check.out" >&2; fail "check-exact did not run the exact-kernels suite"; }
ok "$(grep -o '"verdict": "[^"]*"' "$WORK/check.out" | cut -c1-160)"

step "draftlens-cli run --backend torch (must explain that PyTorch is not in this build)"
rc=0
"$CLI" run --backend torch -m "$T" -md "$D" -p "def" -n 4 > /dev/null 2> "$WORK/torch.err" || rc=$?
[ "$rc" = 1 ] || { cat "$WORK/torch.err" >&2; fail "--backend torch exited $rc, expected 1"; }
if ! grep -q "PyTorch backend not installed" "$WORK/torch.err" || ! grep -q "draftlens\[torch\]" "$WORK/torch.err"; then
  cat "$WORK/torch.err" >&2; fail "--backend torch did not give the reason and the way to get it"
fi
ok "$(tr -d '\r' < "$WORK/torch.err" | grep -m1 '^error:')"

# --- the window ---------------------------------------------------------------------------------
step "the window's self-test (draftlens.exe --self-test)"
SHOT="$ROOT/packaging/dist/smoke/selftest-windows-native.png"
rm -f "$SHOT"
rc=0
"$INST/draftlens.exe" --self-test --target "$T" --draft "$D" --screenshot "$(cygpath -w "$SHOT")" \
  --steps 24 --timeout 300 || rc=$?
[ "$rc" = 0 ] || fail "the self-test exited $rc"
[ -s "$SHOT" ] || fail "no screenshot at $SHOT"
[ "$(head -c 8 "$SHOT" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$SHOT is not a PNG"
ok "self-test exit 0, screenshot $SHOT"

# --- what the app wrote -------------------------------------------------------------------------
step "the install folder is unchanged; files went to the platformdirs folder"
snapshot > "$WORK/after.txt"
diff -u "$WORK/before.txt" "$WORK/after.txt" || fail "the app changed its install folder"
[ -z "$(ls -A "$WORK/cwd")" ] || fail "the app wrote into its working folder: $(ls -A "$WORK/cwd")"
ours > "$WORK/ours-after.txt"
WRITTEN="$(comm -13 "$WORK/ours-before.txt" "$WORK/ours-after.txt")"
[ -n "$WRITTEN" ] || fail "expected the app's files in %LOCALAPPDATA%\\DraftLens (platformdirs)"
strays > "$WORK/strays-after.txt"
STRAY="$(comm -13 "$WORK/strays-before.txt" "$WORK/strays-after.txt")"
[ -z "$STRAY" ] || fail "files named for DraftLens outside its platformdirs folders: $STRAY"
ok "install folder identical before/after; $(echo "$WRITTEN" | wc -l) new files under %LOCALAPPDATA%\\DraftLens, none named for it elsewhere"

# --- uninstall ----------------------------------------------------------------------------------
step "silent uninstall: uninstall.exe /S"
cd "$ROOT"
win "$INST/uninstall.exe" /S || fail "the uninstaller exited non-zero"
for _ in $(seq 60); do [ -e "$INST" ] || break; sleep 1; done  # it runs from a copy in %TEMP%
[ ! -e "$INST" ] || fail "the uninstaller left $INST behind"
[ ! -e "$(dirname "$LNK")" ] || fail "the uninstaller left the Start menu entry"
if win reg query "$UNINST_KEY" > /dev/null 2>&1; then
  fail "the uninstaller left the Apps entry ($UNINST_KEY)"
fi
ok "install folder, Start menu entry and Apps entry removed"
echo "WINDOWS SMOKE TEST PASSED (native): draftlens $VERSION, $(basename "$SETUP"); CPU variant here: $VARIANT"
