"""llama.cpp's tree rows are held to a limit in both of check-exact's modes. A tree pass that
hands the nodes off its first path the wrong rows (tests/planted_bugs.py, `tree-rows`) once
passed: in the exact mode those rows, which the runtime does not call exact, only raised the
greedy tie guard (so their decisions went to single steps, and the text stayed identical);
in the fast mode their drift fed the noise bound that excuses a chain's divergences."""

from __future__ import annotations

import json

import pytest

from app.analysis.exact_mode import CHECK_POSITIONS, CHECK_SIZES
from app.analysis.exact_report import ExactReport
from app.analysis.exactness import GREEDY_PROMPTS, greedy_suite
from app.analysis.kernel_noise import LOW_PRECISION_CEILING, measure_kernel_noise
from app.cli.main import main
from app.engine.decode_config import DecodeConfig, DrafterChoice
from app.models.loading import ModelSpec, load_pair
from tests.planted_bugs import plant


@pytest.mark.parametrize("planted", [False, True], ids=["right", "tree-rows bug"])
def test_tree_rows_off_the_first_path_are_measured_apart_from_chain_rows(gguf_pair, planted,
                                                                         monkeypatch):
    """With the exact kernels, chain passes, a tree's first path and the row after keeping a
    path are bit-identical to single steps (chain_bound 0); the other tree rows drift a
    little, a wrong row far beyond what kernels can move."""
    if planted:
        plant(monkeypatch, 0.0, "tree-rows")
    target = gguf_pair[0]
    assert target.batch_invariant
    noise = measure_kernel_noise(target, CHECK_POSITIONS, CHECK_SIZES)
    assert noise.chain_bound == 0.0
    assert noise.bound == max(noise.chain_bound, noise.tree_bound)
    if planted:
        assert noise.tree_bound > LOW_PRECISION_CEILING
    else:
        assert noise.tree_bound <= 1e-4  # float32 rounding in another order: ~2e-6 here


def test_wrong_tree_rows_fail_check_exact_in_the_exact_mode(gguf_files, capsys, monkeypatch):
    plant(monkeypatch, 0.0, "tree-rows")
    target, draft = gguf_files
    code = main(["check-exact", "-m", str(target), "-md", str(draft), "--samples", "20",
                 "-n", "16", "--exact-kernels", "--json"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["settings"]["tree width 2"][0] > 0  # trees were drafted and judged
    assert report["batched_bound"] == 0.0  # chain rows are right
    assert report["batched_tree_bound"] > report["batched_tree_ceiling"] == LOW_PRECISION_CEILING
    assert any("tree rows differ from single steps" in reason
               for reason in report["failures"]), report["failures"]
    assert report["passed"] is False and code == 3


def test_the_fast_modes_noise_bound_on_chains_is_stated_apart_from_trees(gguf_files,
                                                                        monkeypatch):
    """A chain run's divergence is judged by the chain rows' noise alone; tree rows off the
    first path have a bound of their own, and fail by it."""
    plant(monkeypatch, 0.0, "tree-rows")
    target, draft = map(str, gguf_files)
    pair = load_pair(ModelSpec(target, draft, n_ctx=512))  # fast kernels
    try:
        config = DecodeConfig(n_predict=16, draft_max=4, drafter=DrafterChoice(("draft",)))
        suite = greedy_suite(pair, config, GREEDY_PROMPTS, "fast kernels", exact_kernels=False)
    finally:
        pair.close()
    assert suite.divergences and {d["setting"] for d in suite.divergences} == {"tree width 2"}
    assert suite.noise_bound is not None and suite.tree_noise_bound is not None
    assert suite.noise_bound <= suite.noise_ceiling == LOW_PRECISION_CEILING
    assert suite.tree_noise_bound > suite.noise_ceiling
    report = ExactReport(greedy=suite, exact=None, p_value=0.5, p_first=0.5, p_second=0.5,
                         samples=20, temperature=1.0, top_k=20, draft_max=4,
                         sampled_drafted=10, sampled_accepted=5)
    beyond = [r for r in report.failures() if "kernels do not explain that" in r]
    assert beyond == [f"in the fast kernels mode tree rows differ from single steps by "
                      f"{suite.tree_noise_bound:.3g} logits; "
                      f"kernels do not explain that (at most {LOW_PRECISION_CEILING:g} in this "
                      "arithmetic)"]
