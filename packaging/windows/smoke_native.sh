#!/usr/bin/env bash
# The Windows installer's smoke test on real Windows (Git Bash), for the GitHub workflow's
# windows job: the setup.exe that build_windows.sh made on Linux, installed silently, run, and
# uninstalled. The same checks as smoke_test.sh under Wine, without Wine's stand-ins.
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
VERSION="$(sed -n 's/^__version__ *= *"\([^"]*\)".*/\1/p' app/__init__.py)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/cwd" "$WORK/models" "$ROOT/packaging/dist/smoke"

"$SETUP" /S || fail "the installer exited non-zero"
INST="$(cygpath -u "$LOCALAPPDATA")/Programs/DraftLens"
for f in draftlens.exe draftlens-cli.exe uninstall.exe python313.dll; do
  [ -f "$INST/$f" ] || fail "the install has no $f (in $INST)"
done
[ -f "$(cygpath -u "$APPDATA")/Microsoft/Windows/Start Menu/Programs/DraftLens/DraftLens.lnk" ] \
  || fail "no Start menu entry"
snapshot() { (cd "$INST" && find . -printf '%y %s %T@ %p\n' | LC_ALL=C sort); }
snapshot > "$WORK/before.txt"
ok "installed in $INST"

cd "$WORK/cwd"
line="$("$INST/draftlens-cli.exe" --version | tr -d '\r')" || fail "--version failed"
echo "   $line"
[[ "$line" == "draftlens $VERSION "* && "$line" == *"torch not installed"* ]] || fail "unexpected --version"

T="$(cygpath -w "$WORK/models/t.gguf")" D="$(cygpath -w "$WORK/models/d.gguf")"
PYTHONPATH="$(cygpath -w "$ROOT")" python -c "
import sys
from tests.tiny_gguf import write_tiny_gguf
write_tiny_gguf(sys.argv[1], seed=0); write_tiny_gguf(sys.argv[2], seed=0, noise_from=sys.argv[1])
" "$T" "$D" || fail "could not write the tiny GGUF pair"

"$INST/draftlens-cli.exe" --preflight-child "$T" > "$WORK/pre.out" 2> "$WORK/pre.err" \
  || { cat "$WORK/pre.err" >&2; fail "the preflight child failed"; }
grep -q "stage: done" "$WORK/pre.out" || fail "the preflight child did not reach 'done'"
ok "preflight: $(grep -o 'ggml-cpu-[a-z0-9]*\.dll' "$WORK/pre.err" | tail -n1)"
"$INST/draftlens-cli.exe" run -m "$T" -md "$D" -p "def hello" -n 16 --draft-max 4 > /dev/null 2> "$WORK/run.err" \
  || { tail -n 20 "$WORK/run.err" >&2; fail "draftlens run failed"; }
ok "$(grep -E '^ *generated ' "$WORK/run.err" | tr -s ' ')"

SHOT="$ROOT/packaging/dist/smoke/selftest-windows-native.png"
"$INST/draftlens.exe" --self-test --target "$T" --draft "$D" --screenshot "$(cygpath -w "$SHOT")" \
  --steps 24 --timeout 300 || fail "the self-test exited $?"
[ -s "$SHOT" ] || fail "no screenshot"
ok "self-test exit 0, screenshot $SHOT"

snapshot > "$WORK/after.txt"
diff -u "$WORK/before.txt" "$WORK/after.txt" || fail "the app changed its install folder"
[ -z "$(ls -A "$WORK/cwd")" ] || fail "the app wrote into its working folder"
cd "$ROOT"
"$INST/uninstall.exe" /S || fail "the uninstaller exited non-zero"
for _ in $(seq 60); do [ -e "$INST" ] || break; sleep 1; done  # it runs from a copy in %TEMP%
[ ! -e "$INST" ] || fail "the uninstaller left $INST behind"
echo "WINDOWS SMOKE TEST PASSED (native): $(basename "$SETUP")"
