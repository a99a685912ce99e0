"""The measured disagreement between one-token steps and verify passes (app.analysis.kernel_noise)
and the greedy verdict built on it: a flip is a near-tie only if both runs' margins together
fit within what the kernels were measured to move, and a wrong verifier is not excused."""

from __future__ import annotations

import numpy as np
import pytest

from app.analysis import kernel_noise
from app.analysis.divergence import MarginTap, explain_divergence
from app.analysis.kernel_noise import cached_kernel_noise, measure_kernel_noise
from tests.helpers import SwappingVerifier, greedy_accepts_everything, greedy_runs

POSITIONS = 48


class NoisyPasses(MarginTap):
    """A model whose passes over several tokens add Gaussian noise of `sigma` to every logit
    (a stand-in for kernels that sum a batch in another order, by a known amount)."""

    def __init__(self, model, sigma: float) -> None:
        super().__init__(model)
        self.sigma = sigma
        self.rng = np.random.default_rng(0)

    def extend(self, ids, n_logits):
        logits = self.model.extend(ids, n_logits)
        if len(ids) > 1 and n_logits > 1:
            logits = logits + self.rng.normal(0.0, self.sigma, logits.shape).astype(np.float32)
        return logits


def test_exact_kernels_measure_no_noise_at_all(gguf_pair):
    target = gguf_pair[0]  # the fixture loads llama.cpp's batch-invariant kernels
    noise = measure_kernel_noise(target, POSITIONS)
    assert noise.chain_bound == 0.0
    assert sorted(noise.fresh) == sorted(noise.carried) == list(kernel_noise.PASS_SIZES)
    assert noise.cache_lengths == [16]  # a context of 512 holds no window past 512 cells
    for stats in (*noise.fresh.values(), *noise.carried.values()):
        assert stats.positions == POSITIONS
        assert stats.top_logit_max == stats.gap_max == stats.flips == 0
    # tree passes: rows off the first path may sum over another cache layout, never more
    assert noise.tree is not None and noise.tree.positions > 0
    assert noise.tree.flips == 0 and noise.bound == noise.tree.gap_max < 1e-3
    assert target.n_cached == 0


def test_the_measurement_reports_progress_and_can_be_cancelled(gguf_pair):
    target = gguf_pair[0]
    seen: list[tuple[float, str]] = []
    measure_kernel_noise(target, 12, (2, 5), progress=lambda f, what: seen.append((f, what)))
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and len(seen) > 5
    assert any("tree" in what for _, what in seen)
    asked = []

    def cancel_on_third() -> bool:
        asked.append(1)
        return len(asked) >= 3

    with pytest.raises(kernel_noise.MeasurementCancelled):
        cached_kernel_noise(target, 12, cancelled=cancel_on_third)
    assert len(asked) == 3
    assert kernel_noise.cached_noise(target, 12) is None  # a cancelled measurement is not kept


def test_a_bound_beyond_the_arithmetic_is_past_its_ceiling(gguf_pair, hf_pair):
    assert kernel_noise.noise_ceiling(gguf_pair[0]) == kernel_noise.LOW_PRECISION_CEILING
    assert kernel_noise.noise_ceiling(hf_pair[0]) == kernel_noise.CEILINGS["float32"]


def test_a_known_disagreement_between_the_paths_is_measured(gguf_pair):
    sigma = 0.1
    noise = measure_kernel_noise(NoisyPasses(gguf_pair[0], sigma), POSITIONS)
    # |Δ (A - B)| of two independent N(0, sigma) errors has sd sigma * sqrt(2): over hundreds
    # of positions the largest is a few sigma, never zero and never an order above
    assert sigma < noise.bound < 10 * sigma
    for stats in (*noise.fresh.values(), *noise.carried.values()):
        assert 0 < stats.gap_p99 <= stats.gap_max <= noise.bound
    assert noise.describe().endswith(f"bound {noise.bound:.4f}")


def test_the_fast_kernels_measurement_is_cached_per_model(gguf_files, monkeypatch):
    from backends.llamacpp import LlamaCppModel

    model = LlamaCppModel(gguf_files[0], n_gpu_layers=0, n_ctx=512, batch_invariant=False)
    try:
        first = cached_kernel_noise(model, POSITIONS)
        assert np.isfinite(first.bound) and first.bound >= 0.0
        assert "batch-invariant=False" in kernel_noise._key(model)
        assert kernel_noise.runtime_version(model).startswith("llama_cpp 0.")
        assert kernel_noise.runtime_version(model) in kernel_noise._key(model)

        def measured_again(*args, **kwargs):
            raise AssertionError("measured again although cached")

        monkeypatch.setattr(kernel_noise, "measure_kernel_noise", measured_again)
        assert cached_kernel_noise(model, POSITIONS) == first
    finally:
        model.close()


def test_a_wrong_verify_pass_at_a_wide_margin_is_not_a_near_tie(gguf_pair):
    # power check: the bound is measured on the real kernels; the verifier is wrong on top
    target, draft = gguf_pair
    bound = measure_kernel_noise(target, POSITIONS).bound
    prompt, plain, plain_top, spec, spec_top = greedy_runs(target, draft, SwappingVerifier)
    d = explain_divergence(len(prompt), plain, spec, plain_top, spec_top, target.token_text,
                           bound)
    assert d is not None and not d.near_tie
    # the runner-up was chosen: the two tokens are the two best in both runs, swapped
    assert d.gap_moved == pytest.approx(d.plain_logit_gap + d.other_logit_gap)
    assert d.gap_moved > max(0.1, 10 * bound)
    assert "NOT a near-tie" in d.describe() and f"{bound:.4f}" in d.describe()


def test_a_verify_rule_that_accepts_every_draft_is_not_a_near_tie(gguf_pair, monkeypatch):
    greedy_accepts_everything(monkeypatch)
    target, draft = gguf_pair
    prompt, plain, plain_top, spec, spec_top = greedy_runs(target, draft, MarginTap)
    d = explain_divergence(len(prompt), plain, spec, plain_top, spec_top, target.token_text,
                           measure_kernel_noise(target, POSITIONS).bound)
    assert d is not None and not d.near_tie
    assert "verify rule chose it" in d.reason


def test_bench_report_names_the_divergence_the_margins_and_the_bound(gguf_pair, monkeypatch):
    from app.analysis.measure import Tally
    from app.cli.bench import divergence_line, divergence_report

    monkeypatch.setattr(kernel_noise, "DEFAULT_POSITIONS", POSITIONS)  # a quicker measurement
    target, draft = gguf_pair
    prompt, plain, plain_top, spec, spec_top = greedy_runs(target, draft, SwappingVerifier)
    tallies = [Tally(outputs=[out], tops=[top], prompt_lengths=[len(prompt)])
               for out, top in ((plain, plain_top), (spec, spec_top))]
    report = divergence_report(*tallies, MarginTap(target))
    assert report["divergences_near_ties"] is False
    # exact kernels: chain passes bit-identical; tree rows off the first path round apart
    assert report["kernel_noise"]["chain_bound"] == 0.0
    assert report["kernel_noise_bound"] == report["kernel_noise"]["bound"] < 1e-3
    (d,) = report["divergences"]
    assert d["noise_bound"] < 1e-3 and d["gap_moved"] > 0.1 and not d["near_tie"]
    line = divergence_line(d)
    assert f"margins add to {d['gap_moved']:.4f}" in line and line.endswith("NOT a near-tie")
    identical = Tally(outputs=[plain], tops=[plain_top], prompt_lengths=[len(prompt)])
    assert divergence_report(tallies[0], identical, target)["kernel_noise_bound"] is None
