"""The cost view's verdict carries its uncertainty: below MIN_VERDICT_TOKENS judged draft
tokens it says there are not enough yet; above, acceptance is a 95% Wilson interval and the
verdict is stated only where both ends agree, so it changes only when the interval moves
wholly across break-even. The speedup chart shows the interval as a band (a real widget)."""

from __future__ import annotations

import math

import pytest

from app.analysis.cost import (
    MIN_VERDICT_TOKENS,
    AcceptanceSeen,
    PairCosts,
    conditions_now,
)
from app.engine.cost_curve import VerifyCostCurve
from app.engine.metrics import predicted_speedup

# a CPU-like verify-cost curve: a 2-token pass costs 1.6 single steps, 17 tokens 10
CPU_CURVE = VerifyCostCurve({1: 0.1, 2: 0.16, 3: 0.2, 5: 0.31, 9: 0.55, 17: 1.0})


def costs() -> PairCosts:
    return PairCosts(CPU_CURVE, t_plain=0.1, t_draft=0.02, drafter="draft model",
                     conditions=conditions_now("a test's figures"))


def best_at(alpha: float, c: PairCosts) -> float:
    return max(predicted_speedup(alpha, k, c.t_plain, c.t_draft, c.t_verify(k + 1))
               for k in range(1, 17))


def test_two_draft_tokens_are_not_enough_to_tell():
    view = costs().view(AcceptanceSeen(2, 2))
    assert 2 < MIN_VERDICT_TOKENS
    assert view.interval is None and view.settled is None
    assert view.low_points == [] and view.high_points == []
    text = view.verdict()
    assert text.startswith("Not enough drafts yet to tell")
    assert f"2 draft tokens judged, a verdict needs {MIN_VERDICT_TOKENS}" in text
    assert "can reach" not in text and "plain decoding is faster" not in text


def test_ten_draft_tokens_give_an_interval_that_spans_break_even():
    c = costs()
    view = c.view(AcceptanceSeen(10, 10))
    low, high = view.interval
    assert low == pytest.approx(0.7225, abs=1e-3) and high == pytest.approx(1.0)  # Wilson
    assert best_at(low, c) < 1.0 <= best_at(high, c)
    assert view.best_low.predicted_speedup == pytest.approx(best_at(low, c))
    assert view.best_high.predicted_speedup == pytest.approx(best_at(high, c))
    text = view.verdict()
    assert view.settled is None and text.startswith("Not settled yet")
    assert f"between {best_at(low, c):.2f}× and {best_at(high, c):.2f}×" in text
    assert f"acceptance {low:.2f}–{high:.2f}, 95% interval from 10 draft tokens" in text


def test_forty_draft_tokens_give_a_verdict():
    c = costs()
    pays = c.view(AcceptanceSeen(39, 40))
    assert best_at(pays.interval[0], c) >= 1.0
    assert pays.settled is True and "can reach" in pays.verdict()
    assert f"at least {pays.best_low.predicted_speedup:.2f}×" in pays.verdict()
    slow = c.view(AcceptanceSeen(20, 40))
    assert best_at(slow.interval[1], c) < 1.0
    assert slow.settled is False
    top = slow.best_high
    assert (f"plain decoding is {1 / top.predicted_speedup:.2f}× as fast as the best draft even "
            "at the interval's top") in slow.verdict()
    assert "would decode plainly" in slow.verdict() and "falls back" not in slow.verdict()


def test_the_verdict_does_not_flip_with_the_point_estimate():
    """8 of 10 and 6 of 10 put the best speedup on either side of 1 at their point estimates,
    but both intervals span break-even: the verdict is the same, not settled."""
    c = costs()
    high_run, low_run = c.view(AcceptanceSeen(8, 10)), c.view(AcceptanceSeen(6, 10))
    assert high_run.pays and not low_run.pays  # what the old verdict flipped on
    assert high_run.settled is None and low_run.settled is None


def test_the_wilson_interval_is_sound_at_the_edges():
    assert AcceptanceSeen(0, 0).interval() == (0.0, 1.0)
    low, high = AcceptanceSeen(0, 20).interval()
    assert low == 0.0 and 0.1 < high < 0.2
    low, high = AcceptanceSeen(20, 40).interval()
    assert low + high == pytest.approx(1.0)  # symmetric at one half
    z = 1.959964
    n, p = 40, 0.5
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert high - low == pytest.approx(2 * half)


def test_the_speedup_chart_shades_the_interval(qtbot):
    pytest.importorskip("pytestqt")
    from ui.cost_view import CostPanel

    panel = CostPanel()
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitExposed(panel)
    c = costs()
    panel.show_costs(c, AcceptanceSeen(2, 2))
    x, _ = panel.interval_low.getData()
    assert x is None or len(x) == 0  # not enough yet: no band
    assert "Not enough drafts yet" in panel.verdict.text()
    panel.show_costs(c, AcceptanceSeen(10, 10))
    view = panel.view_data
    x, low = panel.interval_low.getData()
    _, high = panel.interval_high.getData()
    assert list(x) == [p.k for p in view.points]
    assert list(low) == pytest.approx([p.predicted_speedup for p in view.low_points])
    assert list(high) == pytest.approx([p.predicted_speedup for p in view.high_points])
    assert all(lo <= mid <= hi for lo, mid, hi in zip(
        low, [p.predicted_speedup for p in view.points], high, strict=True))
    assert "Not settled yet" in panel.verdict.text()
