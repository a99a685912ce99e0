"""Two ways check-exact fails that no test reached: the sampled half drafting nothing (its
G-test then says nothing about the accept/reject rule), and, in the fast mode, kernels
measured noisier than the arithmetic can be (a batched pass that computes something else
would excuse any divergence as a near-tie). Real runs on the tiny GGUF pair, with the fault
planted (tests/planted_bugs.py) and the noise measured, not assumed."""

from __future__ import annotations

import json

from app.analysis.kernel_noise import LOW_PRECISION_CEILING
from app.cli.main import main
from tests.planted_bugs import plant

NOISY = 3.0  # logits: the planted verify pass swaps the top two when they are this close


def run_check(capsys, *argv):
    code = main(["check-exact", *map(str, argv), "--json"])
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_sampled_runs_that_draft_nothing_fail_the_check(gguf_files, capsys, monkeypatch):
    plant(monkeypatch, 0.0, "sampled-plain")
    target, draft = gguf_files
    code, report = run_check(capsys, "-m", target, "-md", draft, "--samples", 40, "-n", 8,
                             "--exact-kernels")
    assert report["drafted"] > 0 and report["greedy_identical"] is True  # the greedy half
    assert report["sampled_drafted"] == 0 and report["p_value"] >= 1e-3  # plain: it fits
    assert report["failures"] == ["the sampled runs drafted nothing, so the sampled test "
                                  "shows nothing about the accept/reject rule"]
    assert report["passed"] is False and code == 3


def test_kernel_noise_beyond_the_arithmetics_ceiling_fails_the_check(gguf_files, capsys,
                                                                     monkeypatch):
    """The verify pass (this process only: the exact-mode child is right) swaps near-ties
    up to 3 logits apart; the kernel-noise measurement sees that, every divergence it causes
    is then within the bound, and only the ceiling tells it from kernel noise."""
    plant(monkeypatch, NOISY)
    target, draft = gguf_files
    code, report = run_check(capsys, "-m", target, "-md", draft, "--samples", 20, "-n", 24,
                             "-c", 512)  # one window of the noise measurement
    assert report["divergences"], "the planted pass never flipped a token: raise NOISY"
    assert report["noise_bound"] > report["noise_ceiling"] == LOW_PRECISION_CEILING
    assert report["exact_kernels_identical"] is True
    beyond = [r for r in report["failures"] if "kernels do not explain that" in r]
    assert len(beyond) == 1 and f"{report['noise_bound']:.3g} logits" in beyond[0]
    assert report["passed"] is False and code == 3
