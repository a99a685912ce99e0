"""The analyses' pure parts: the G-test's p-value without scipy (checked against scipy), the
cost model's view and verdict, the best k, and the rejection analysis over records and traces."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import chi2, power_divergence

from app.analysis.cost import AcceptanceSeen, cost_view, predicted_curve
from app.analysis.rank import best_k
from app.analysis.rejections import analyse, report_lines, token_class
from app.analysis.stats import chi2_sf, g_test
from app.engine.cost_curve import VerifyCostCurve
from app.engine.decode_config import DecodeConfig
from app.engine.drafters.draft_model import ModelDrafter
from app.engine.metrics import RunStats, predicted_speedup
from app.engine.records import StepRecord, TokenRecord
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from app.engine.trace import TraceWriter, read_trace
from app.errors import SettingsError


@pytest.mark.parametrize("df", [1, 2, 3, 7, 30, 200])
@pytest.mark.parametrize("quantile", [1e-9, 0.01, 0.3, 0.5, 0.9, 0.999, 1 - 1e-9])
def test_chi2_survival_matches_scipy(df, quantile):
    x = float(chi2.ppf(quantile, df))
    assert chi2_sf(x, df) == pytest.approx(float(chi2.sf(x, df)), rel=1e-8, abs=1e-14)


def test_chi2_survival_edges():
    assert chi2_sf(0.0, 3) == 1.0
    assert chi2_sf(1e4, 3) < 1e-300 or chi2_sf(1e4, 3) == 0.0
    with pytest.raises(ValueError):
        chi2_sf(1.0, 0)


def test_g_test_matches_scipy_and_fails_samples_outside_the_support():
    rng = np.random.default_rng(0)
    probs = np.array([0.5, 0.2, 0.2, 0.07, 0.03, 0.0])
    samples = rng.choice(6, size=400, p=probs)
    result = g_test(samples, probs)
    counts = np.bincount(samples, minlength=6)[:5].astype(float)
    reference = power_divergence(counts, probs[:5] * 400, lambda_="log-likelihood")
    assert result.statistic == pytest.approx(reference.statistic)
    assert result.p_value == pytest.approx(reference.pvalue, rel=1e-8)
    assert g_test(np.array([5, 0, 1]), probs).p_value == 0.0


def test_g_test_rejects_a_wrong_distribution():
    rng = np.random.default_rng(1)
    samples = rng.choice(3, size=2000, p=[0.4, 0.3, 0.3])
    assert g_test(samples, np.array([0.5, 0.25, 0.25])).p_value < 1e-6
    assert g_test(samples, np.array([0.4, 0.3, 0.3])).p_value > 1e-3


# --- cost model ----------------------------------------------------------------------------

CPU_CURVE = VerifyCostCurve({1: 0.1, 2: 0.16, 3: 0.2, 5: 0.31, 9: 0.55, 17: 1.0})
FLAT_CURVE = VerifyCostCurve({1: 0.1, 2: 0.1, 3: 0.1, 5: 0.1, 9: 0.1, 17: 0.11})


def test_cost_view_uses_the_metrics_formula_and_finds_the_best_k():
    view = cost_view(CPU_CURVE, t_draft=0.02, alpha=0.7, k_max=8)
    assert [p.k for p in view.points] == list(range(1, 9))
    p4 = view.points[3]
    assert p4.t_verify == pytest.approx(0.31)
    assert p4.verify_in_steps == pytest.approx(3.1)
    assert p4.predicted_speedup == pytest.approx(predicted_speedup(0.7, 4, 0.1, 0.02, 0.31))
    assert view.best.predicted_speedup == max(p.predicted_speedup for p in view.points)
    assert view.cost_ratio == pytest.approx(0.2)


def test_verdict_says_plain_is_faster_when_no_k_pays():
    verdict = cost_view(CPU_CURVE, t_draft=0.03, alpha=0.5, k_max=8,
                        seen=AcceptanceSeen(20, 40)).verdict()
    assert "plain decoding is 1.15× as fast as the best draft even at the interval's top" \
        in verdict
    assert "interval from 40 draft tokens" in verdict


def test_verdict_on_a_flat_curve_promises_a_speedup_and_says_alpha_is_assumed():
    view = cost_view(FLAT_CURVE, t_draft=0.005, alpha=None, k_max=8)
    assert view.best.predicted_speedup > 1.0 and not view.alpha_measured
    assert "assumed" in view.verdict() and "as fast as the best draft" not in view.verdict()
    assert "Not enough drafts yet" in view.verdict()


def test_predicted_curve_rises_with_acceptance_and_scales_the_curve_to_the_run():
    line = predicted_curve(FLAT_CURVE, 0.1, 0.005, 4.0, [0.1, 0.5, 0.9])
    assert line[0] < line[1] < line[2]
    # a run whose plain step took twice the calibrated one: every cost doubles, ratios stay
    doubled = predicted_curve(FLAT_CURVE, 0.2, 0.01, 4.0, [0.1, 0.5, 0.9])
    assert doubled == pytest.approx(line)


def step(index, k, accepted_flags, t_draft=0.01, t_verify=0.1, texts=None, entropy=1.0):
    tokens = []
    for i, ok in enumerate(accepted_flags):
        text = texts[i] if texts else f"t{i}"
        tokens.append(TokenRecord(pos=i, token=i, text=text, q=0.6, p=0.5 if ok else 0.1,
                                  u=None, accepted=ok,
                                  replacement=None if ok else 99,
                                  replacement_text=None if ok else "Y",
                                  p_entropy=entropy * (i + 1)))
    emitted = list(range(sum(accepted_flags) + 1))
    return StepRecord(index, k, tokens, emitted, ["x"] * len(emitted), ["accepted"] * len(emitted),
                      t_draft, t_verify, 0.0)


def test_best_k_follows_where_acceptance_drops():
    stats = RunStats()
    for i in range(40):
        stats.add(step(i, 4, [True, True, False]))  # positions 1-2 pass, 3 fails
    assert best_k(stats, FLAT_CURVE, 0.1, 4) == 2
    assert best_k(stats, CPU_CURVE, 0.1, 4) in (1, 2)


# --- rejection analysis --------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    (" ", "whitespace"), ("\n    ", "whitespace"), ("):", "punctuation"), (" (", "punctuation"),
    ("42", "number"), (" return", "word"), ("▁hello", "word"), ("_name", "identifier"),
    ("camelCase", "identifier"), ("x1", "identifier"), ("a+b", "other"), ("", "other"),
])  # fmt: skip
def test_token_classes(text, expected):
    assert token_class(text) == expected


def test_analysis_counts_classes_confusions_and_entropy_bins():
    steps = [step(0, 3, [True, False], texts=[" def", ":"]),
             step(1, 3, [False], texts=[":"]),
             step(2, 3, [True, True, True], texts=[" x", " ", "42"])]
    a = analyse(steps)
    assert (a.judged, a.accepted) == (6, 4)
    assert a.by_class["punctuation"].judged == 2 and a.by_class["punctuation"].accepted == 0
    assert a.by_class["word"].acceptance == 1.0
    assert a.confusions == [(":", "Y", 2)]
    assert a.has_entropy and sum(b.rate.judged for b in a.by_entropy) == 6
    assert a.calibration.q.shape == (6,) and a.calibration.accepted.sum() == 4
    text = "\n".join(report_lines(a))
    assert "punctuation" in text and ":" in text and "entropy" in text


def test_analysis_of_a_plain_run_says_nothing_was_judged():
    a = analyse([StepRecord(0, 0, [], [5], ["x"], ["plain"], 0.0, 0.1, 0.0)])
    assert a.judged == 0 and a.notes


def test_analysis_of_a_real_run_and_of_a_trace_without_entropies(hf_pair, tmp_path):
    target, draft = hf_pair
    config = DecodeConfig(n_predict=24, draft_max=4, sampling=SamplingParams(1.0, seed=3))
    session = Session(target, ModelDrafter(draft), config)
    path = tmp_path / "run.jsonl"
    with TraceWriter(path) as writer:
        for s in session.steps(target.tokenize("def add(a, b):\n    return")):
            writer.step(s)
    live = analyse(read_trace(path).steps)
    assert live.judged == session.stats.judged and live.accepted == session.stats.accepted
    assert live.has_entropy
    old = tmp_path / "old.jsonl"
    lines = []
    for line in path.read_text().splitlines():
        data = json.loads(line)
        for token in data.get("tokens", []):
            token.pop("p_entropy", None)
            token.pop("q_entropy", None)
        lines.append(json.dumps(data))
    old.write_text("\n".join(lines) + "\n")
    legacy = analyse(read_trace(old).steps)
    assert legacy.judged == live.judged and not legacy.has_entropy and legacy.by_entropy == []
    assert any("older version" in note for note in legacy.notes)


def test_sweep_k_list_is_checked():
    from app.analysis.sweep import parse_ks

    assert parse_ks("8, 1,2,2") == [1, 2, 8]
    for bad in ("", "a,b", "0,1"):
        with pytest.raises(SettingsError, match="like 1,2,4,8"):
            parse_ks(bad)
