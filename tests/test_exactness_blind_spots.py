"""check-exact has no blind spot a real bug can pass through: each defect planted here
(tests/planted_bugs.py) passed the check as it was at 9635703, and must now fail it, through
the CLI, with a message that names what is wrong."""

from __future__ import annotations

import json

import pytest

from app.analysis.compare import explain_difference
from app.analysis.divergence import END_OF_TEXT, explain_divergence
from app.cli.main import main
from tests.planted_bugs import plant, plant_in_children


def run_check(capsys, *argv):
    code = main(["check-exact", *map(str, argv), "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out.strip().splitlines()[-1]), err


def torch_check(capsys, hf_dirs, *extra):
    target, draft = hf_dirs
    return run_check(capsys, "--backend", "torch", "--device", "cpu", "-m", target, "-md", draft,
                     "--samples", 60, "-n", 16, "--draft-max", 4, *extra)


def test_check_exact_on_a_torch_pair_passes_and_checks_the_batched_path(hf_dirs, capsys):
    code, report, _ = torch_check(capsys, hf_dirs)
    assert report["passed"] is True and code == 0, report["failures"]
    assert report["exact_mode"].endswith("one token per pass")
    # the child measured the batched chain and tree passes in float64 against single steps
    assert "float64" in report["batched_what"] and "tree" in report["batched_what"]
    assert 0.0 <= report["batched_bound"] <= report["batched_ceiling"] == 1e-6
    # every part drafted, and says how much
    assert set(report["settings"]) == {"your settings", "tree width 2", "adaptive k"}
    assert report["settings"]["tree width 2"][0] > 0
    assert report["exact_drafted"] > 0 and report["sampled_drafted"] > 0
    assert f"sampled {report['sampled_drafted']} / {report['sampled_accepted']}" in (
        report["verdict"])


@pytest.mark.parametrize("bug", ["tree-mask", "position"])
def test_a_bug_in_torchs_batched_path_fails_check_exact(bug, hf_dirs, capsys, monkeypatch,
                                                       tmp_path):
    plant(monkeypatch, 0.0, bug)
    plant_in_children(tmp_path / "planted", monkeypatch, bug=bug)
    code, report, _ = torch_check(capsys, hf_dirs)
    assert report["passed"] is False and code == 3
    # the child's one-token-per-pass runs never reach the bug; the float64 check does, on
    # the rows the bug moves: tree rows (a wrong mask), or every batched row (positions)
    assert report["exact_kernels_identical"] is True
    moved = {"tree-mask": "batched_tree_bound", "position": "batched_bound"}[bug]
    assert report[moved] > 1.0e-3
    assert any("differ" in reason and "from single steps" in reason
               and "torch float64" in reason for reason in report["failures"])


def test_an_exact_child_that_drafts_nothing_fails_check_exact(gguf_files, capsys, monkeypatch,
                                                              tmp_path):
    plant_in_children(tmp_path / "planted", monkeypatch, bug="no-drafts")
    target, draft = gguf_files
    code, report, _ = run_check(capsys, "-m", target, "-md", draft, "--samples", 40, "-n", 12)
    assert report["exact_kernels_identical"] is True and report["exact_drafted"] == 0
    assert report["drafted"] > 0  # the parent's own runs drafted
    assert report["passed"] is False and code == 3
    assert any("(a child process) drafted nothing" in reason for reason in report["failures"])


def test_a_run_that_differs_only_in_length_is_a_divergence_and_no_near_tie(
        gguf_files, gguf_pair, capsys, monkeypatch):
    plant(monkeypatch, 0.0, "ends-early")
    target, draft = gguf_files
    code, report, _ = run_check(capsys, "-m", target, "-md", draft, "--samples", 40, "-n", 12,
                                "--exact-kernels")
    assert report["passed"] is False and code == 3
    (first, *_) = report["divergences"]
    assert first["near_tie"] is False and first["other_text"] == ""
    assert "ends after" in first["reason"] and "not kernel noise" in first["reason"]
    assert any("speculative run ends after" in reason for reason in report["failures"])

    # the bench and the window explain it the same way, without measuring any noise
    def never(*args, **kwargs):
        raise AssertionError("a length-only difference needs no kernel noise")

    monkeypatch.setattr("app.analysis.compare.kernel_noise", never)
    d = explain_difference(gguf_pair[0], 3, [5, 6, 7], [5, 6], {}, {}, say=print)
    assert d is not None and not d.near_tie and d.other_token == END_OF_TEXT
    assert explain_divergence(3, [5, 6], [5, 6, 7], {}, {}, str, 0.5).plain_token == END_OF_TEXT
