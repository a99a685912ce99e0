"""The cost view from comparable measurements, and a first run that shows why it is (not)
faster (pytest-qt, offscreen, tiny real models): a plain step and a draft step timed in turns,
the verdict following the run's own step timings (medians, so a cold first draft step does not
decide it), "provisional" on a busy machine, and the one notice under the cost verdict
when adaptive k decoded plainly, with one click to watch the draft at the cost view's k."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("pytestqt")

from app.analysis.reasons import describe_decision, plain_run_reason  # noqa: E402
from app.engine.cost_curve import MIN_SAMPLES  # noqa: E402
from tests.helpers import choose_pair, run, set_decoding  # noqa: E402
from ui.plain_notice import PlainRunNotice, watch_k  # noqa: E402


def loaded_run(window, qtbot, pair_files, *, k=3, adaptive=False, tokens=40, backend="torch"):
    """A finished run, after the cost view got the controller's prices."""
    choose_pair(window, qtbot, *pair_files, backend=backend)
    set_decoding(window, tokens=tokens, k=k, adaptive=adaptive)
    with qtbot.waitSignal(window.why.cost.costs_shown, timeout=60_000):
        run(window, qtbot)
    window.why.refresh()


def last_priced(run_data):
    return next(s.decision for s in reversed(run_data.steps)
                if s.decision is not None and s.decision.prices)


def test_the_cost_view_the_chart_and_the_why_line_show_the_controllers_prices(
        window, qtbot, hf_dirs, dialogs):
    """One price per pass: the cost view, the speedup chart's c and the step's Why line all
    read the figures the controller recorded in its last decision, priced from medians of
    the run's own kept passes (inspect mode takes plain steps to price plain decoding)."""
    loaded_run(window, qtbot, hf_dirs, k=3, tokens=40)
    assert dialogs == []
    decision = last_priced(window.run)
    assert decision.plain_samples >= MIN_SAMPLES  # a median, never one sample
    view = window.why.cost.view_data
    assert view.t_plain == decision.plain_seconds
    assert view.t_draft == decision.draft_token_seconds
    for point in view.points:
        # a draft's first token is priced apart (it also reads what the target wrote)
        assert view.t_draft + view.t_first_extra == pytest.approx(decision.first_draft_seconds)
        assert point.t_verify + point.k * view.t_draft + view.t_first_extra == pytest.approx(
            decision.prices[point.k])
    assert f"c = {view.cost_ratio:.2f}" in window.charts.plots["theory"].getAxis("bottom").labelText
    step = next(s for s in reversed(window.run.steps) if s.decision is decision)
    why = describe_decision(step.decision)
    assert f"a plain step priced at {decision.plain_seconds * 1000:.1f} ms" in why
    assert "medians of this pair's timed passes" in window.why.verdict.text()


def test_a_busy_machine_makes_the_figures_provisional(window, qtbot, hf_dirs, dialogs,
                                                      monkeypatch):
    loaded_run(window, qtbot, hf_dirs, k=3, tokens=40)
    assert "Provisional" not in window.why.verdict.text() or os.getloadavg()[0] > os.cpu_count()
    cores = os.cpu_count() or 1
    monkeypatch.setattr(os, "getloadavg", lambda: (cores + 1.5, 0.0, 0.0))
    window.why.refresh()
    text = window.why.verdict.text()
    assert "Provisional" in text and f"on {cores} cores" in text
    assert "Provisional" in window.why.cost.verdict.text()


def test_a_plain_adaptive_run_says_why_beside_the_empty_views_and_offers_the_draft(
        window, qtbot, costly_draft_pair, dialogs):
    # long enough that the passes adaptive k first times to price them (rule measure: four
    # drafts of k = 4) are a small part of the run
    loaded_run(window, qtbot, costly_draft_pair, adaptive=True, k=4, tokens=96,
               backend="llamacpp")
    assert dialogs == []
    stats = window.run.stats
    view = window.why.cost.view_data
    assert not view.pays and stats.spec_steps * 4 < stats.steps
    offered = watch_k(window.run.steps, view, 4)
    notice = window.why.notice
    assert [n for n in window.findChildren(PlainRunNotice) if n.isVisible()] == [notice]
    # the reason is the controller's recorded decisions, in words (app.analysis.reasons)
    assert notice.text.text() == plain_run_reason(window.run.steps)
    assert notice.k == offered and f"k = {offered}" in notice.button.text()
    with qtbot.waitSignal(window.run_done, timeout=60_000):
        notice.button.click()
    window.flush()
    window.why.refresh()
    assert not window.decode.adaptive.isChecked()
    assert window.decode.draft_max.value() == offered
    stats = window.run.stats
    # every step drafted but the plain steps that price plain decoding beside a fixed k (the
    # window's fixed k does) and the last, which may not need to
    pricing = sum(1 for step in window.run.steps
                  if step.decision is not None and step.decision.rule == "measure")
    assert pricing * 8 <= stats.steps and stats.spec_steps >= stats.steps - 1 - pricing
    assert not any(n.isVisible() for n in window.findChildren(PlainRunNotice))
    window.select_step(next(s.index for s in window.run.steps if s.k > 0))
    assert any(row.record is not None for row in window.inspector.model.rows)  # drafts shown
    p_heights, q_heights, _ = window.inspector.bars.series_heights()
    assert p_heights and q_heights  # p and q of the selected draft token


def test_the_notice_stays_hidden_when_a_run_drafts(window, qtbot, hf_dirs, dialogs):
    loaded_run(window, qtbot, hf_dirs, k=3)
    assert window.run.stats.spec_steps > 0
    assert not any(n.isVisible() for n in window.findChildren(PlainRunNotice))


def test_the_cost_charts_are_drawn_when_their_tab_is_shown_not_while_hidden(
        window, qtbot, hf_dirs, dialogs):
    loaded_run(window, qtbot, hf_dirs, k=3, tokens=40)
    cost = window.why.cost
    assert window.why.tabs.currentWidget() is not cost and cost.view_data is not None
    drawn_x, _ = cost.verify_curve.getData()
    shown_sizes = [1] + [p.k + 1 for p in cost.view_data.points]
    assert drawn_x is None or list(drawn_x) != shown_sizes  # the costs came while hidden
    window.why.tabs.setCurrentWidget(cost)
    qtbot.waitUntil(cost.isVisible, timeout=5_000)
    drawn_x, drawn_y = cost.verify_curve.getData()
    assert list(drawn_x) == shown_sizes
    assert drawn_y[0] == pytest.approx(cost.view_data.t_plain * 1000)
