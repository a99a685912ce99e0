"""The native Windows smoke test (packaging/windows/smoke_native.sh) cannot run here (no
Windows): this reads it, and checks that it makes each check packaging/README.md says it
makes, with the command that makes it. It has never run: that is said there too."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NATIVE = (ROOT / "packaging" / "windows" / "smoke_native.sh").read_text(encoding="utf-8")
README = " ".join((ROOT / "packaging" / "README.md").read_text(encoding="utf-8").split())

# each check the README names, and what in the script makes it
CHECKS = {
    "the files": 'for f in draftlens.exe draftlens-cli.exe uninstall.exe',
    "Start menu entry": '[ -f "$LNK" ] || fail "no Start menu entry',
    "Apps entry with its version": 'reg query "$UNINST_KEY" /v DisplayVersion',
    "`--version` naming llama_cpp": '"llama_cpp $LLAMA_VERSION"',
    "the preflight child and its CPU variant": "loaded CPU backend from",
    "`run`": '"$CLI" run -m "$T" -md "$D"',
    "`check-exact`": '"exact_kernels_identical": true',
    "the `--backend torch` refusal": '"PyTorch backend not installed"',
    "the self-test's exit 0 and PNG": "89504e470d0a1a0a",
    "the install folder unchanged": 'diff -u "$WORK/before.txt" "$WORK/after.txt"',
    "the working folder empty": '[ -z "$(ls -A "$WORK/cwd")" ]',
    "`%LOCALAPPDATA%\\DraftLens`": 'ours > "$WORK/ours-after.txt"',
    "nothing else named for DraftLens": "files named for DraftLens outside",
    "a silent uninstall that removes the folder, the Start menu entry and the Apps entry":
        'fail "the uninstaller left the Apps entry',
}


def test_the_native_smoke_test_makes_the_checks_the_readme_names():
    assert "runs `windows/smoke_native.sh`: the same checks natively" in README
    for check, command in CHECKS.items():
        assert check in README, f"the README no longer names {check!r}"
        assert command in NATIVE, f"smoke_native.sh does not check {check!r}"
    assert "NOT RUN YET" in NATIVE and "never run" in README
