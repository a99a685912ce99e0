"""The cost view from comparable measurements, and a first run that shows why it is (not)
faster (pytest-qt, offscreen, tiny real models): a plain step and a draft step timed in turns,
the verdict following the run's own step timings (medians, so a cold first draft step does not
decide it), "provisional" on a busy machine, and the notice beside the empty views when adaptive
k decoded plainly, with one click to watch the draft at the cost view's k."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from app.analysis.cost import MIN_RUN_STEPS, measure_pair_costs  # noqa: E402
from app.analysis.reasons import plain_run_reason  # noqa: E402
from app.engine.cost_curve import measure_step_costs  # noqa: E402
from app.engine.registry import DrafterChoice  # noqa: E402
from app.models.loading import ModelSpec, load_pair  # noqa: E402
from app.settings import Settings  # noqa: E402
from tests.helpers import choose_pair, run, set_decoding  # noqa: E402
from ui.main_window import MainWindow  # noqa: E402
from ui.plain_notice import PlainRunNotice, watch_k  # noqa: E402
from ui.run_data import run_costs  # noqa: E402


@pytest.fixture
def window(qtbot, tmp_path, dialogs):
    win = MainWindow(Settings(), save_path=tmp_path / "settings.json")
    qtbot.addWidget(win)
    win.resize(1400, 900)
    win.show_workspace()
    win.show()
    qtbot.waitExposed(win)
    yield win
    win.close()


@pytest.fixture(scope="module")
def costly_draft_pair(gguf_files, tmp_path_factory):
    """The tiny target with a draft many times its cost (same vocabulary, other weights):
    no draft length can pay, as for the demo pair on a 2-core CPU."""
    from tests.tiny_gguf import write_tiny_gguf

    target, _ = gguf_files
    draft = write_tiny_gguf(tmp_path_factory.mktemp("costly") / "draft.gguf", seed=1,
                            n_layer=8, hidden=256)
    return target, draft


def loaded_run(window, qtbot, pair_files, *, k=3, adaptive=False, tokens=20, backend="torch"):
    """A finished run, after the cost view got the pair's costs."""
    choose_pair(window, qtbot, *pair_files, backend=backend)
    set_decoding(window, tokens=tokens, k=k, adaptive=adaptive)
    with qtbot.waitSignal(window.why.cost.costs_shown, timeout=60_000):
        run(window, qtbot)
    window.why.refresh()


def test_a_plain_step_and_a_draft_step_are_timed_in_turns(gguf_files):
    target, draft = gguf_files
    pair = load_pair(ModelSpec(str(target), str(draft), backend="llamacpp", device="cpu"))
    try:
        t_plain, t_draft = measure_step_costs(pair.target, pair.draft, rounds=5)
        assert t_plain > 0 and t_draft > 0
        costs = measure_pair_costs(pair, DrafterChoice(("draft",)), k_max=4)
        # the view's ratios are of the two figures measured together...
        view = costs.view(None, k_max=4)
        assert view.t_plain == costs.t_plain and view.cost_ratio == costs.t_draft / costs.t_plain
        # ...its verify curve is the calibrated shape at the level of that plain step...
        base = costs.curve.cost(1)
        for point in view.points:
            assert point.verify_in_steps == pytest.approx(costs.curve.cost(point.k + 1) / base)
        # ...and adaptive k starts from the same ratio, in the calibrated curve's time
        assert pair.step_cost(pair.draft) / base == pytest.approx(costs.t_draft / costs.t_plain)
        assert "side by side" in view.verdict()
    finally:
        pair.close()


def test_after_a_run_the_verdict_rests_on_the_runs_own_step_timings(window, qtbot, hf_dirs,
                                                                      dialogs):
    loaded_run(window, qtbot, hf_dirs, k=3)
    assert dialogs == []
    cols = window.run.columns
    drafting = cols["k"] > 0
    steady = drafting & np.concatenate(([False], drafting[:-1]))  # after a drafting step
    assert steady.sum() >= 3
    view = window.why.cost.view_data
    expected_draft = float(np.median(cols["t_draft"][steady] / cols["k"][steady]))
    assert view.t_draft == pytest.approx(expected_draft)
    # no plain step in a fixed-k run: the plain step is the calibrated curve scaled to the
    # run's own verify passes
    costs = window.why.pair_costs
    scale = np.median([t / costs.curve.cost(int(n)) for t, n in
                       zip(cols["t_verify"][drafting], cols["n_pass"][drafting], strict=True)])
    assert view.t_plain == pytest.approx(costs.curve.cost(1) * scale)
    assert f"this run's {cols.n} steps" in window.why.verdict.text()
    # and the speedup chart's c is the same ratio
    assert f"c = {view.cost_ratio:.2f}" in window.charts.plots["theory"].getAxis("bottom").labelText


def test_a_cold_first_draft_step_or_one_slow_step_does_not_decide_the_draft_cost(
        window, qtbot, hf_dirs, dialogs):
    loaded_run(window, qtbot, hf_dirs, k=3, tokens=40)
    run_data, costs = window.run, window.why.pair_costs
    before = run_costs(costs, run_data)
    cols = run_data.columns
    drafting = [i for i, s in enumerate(run_data.steps) if s.k > 0]
    steady = drafting[1:]  # each after a drafting step (a fixed-k run drafts in every step)
    highest = max(cols["t_draft"][i] / cols["k"][i] for i in steady)
    cols["t_draft"][drafting[0]] *= 1000  # the draft model's first, cold step
    assert run_costs(costs, run_data).t_draft == before.t_draft
    cols["t_draft"][steady[len(steady) // 2]] *= 1000  # a moment of load mid-run
    assert run_costs(costs, run_data).t_draft <= highest  # a median: one draw cannot lead it
    mean = float(cols["t_draft"].sum() / cols["k"].sum())
    assert mean > 50 * before.t_draft  # what a mean (the old chart's c) would have said


def test_a_busy_machine_makes_the_figures_provisional(window, qtbot, hf_dirs, dialogs,
                                                      monkeypatch):
    loaded_run(window, qtbot, hf_dirs, k=3)
    assert "Provisional" not in window.why.verdict.text() or os.getloadavg()[0] > os.cpu_count()
    cores = os.cpu_count() or 1
    monkeypatch.setattr(os, "getloadavg", lambda: (cores + 1.5, 0.0, 0.0))
    window.why.refresh()
    text = window.why.verdict.text()
    assert "Provisional" in text and f"on {cores} cores" in text
    assert "Provisional" in window.why.cost.verdict.text()


def test_a_plain_adaptive_run_says_why_beside_the_empty_views_and_offers_the_draft(
        window, qtbot, costly_draft_pair, dialogs):
    loaded_run(window, qtbot, costly_draft_pair, adaptive=True, k=4, tokens=24,
               backend="llamacpp")
    assert dialogs == []
    stats = window.run.stats
    view = window.why.cost.view_data
    assert not view.pays and stats.spec_steps * 4 < stats.steps
    offered = watch_k(window.run.steps, view, 4)
    notice = window.inspector.notice
    assert [n for n in window.findChildren(PlainRunNotice) if n.isVisible()] == [notice]
    # the reason is the controller's recorded decisions, in words (app.analysis.reasons)
    assert notice.text.text() == plain_run_reason(window.run.steps)
    assert notice.k == offered and f"k = {offered}" in notice.button.text()
    with qtbot.waitSignal(window.run_done, timeout=60_000):
        window.inspector.notice.button.click()
    window.flush()
    window.why.refresh()
    assert not window.decode.adaptive.isChecked()
    assert window.decode.draft_max.value() == offered
    stats = window.run.stats
    assert stats.spec_steps >= stats.steps - 1  # every step drafted (the last may not need to)
    assert not any(n.isVisible() for n in window.findChildren(PlainRunNotice))
    window.select_step(next(s.index for s in window.run.steps if s.k > 0))
    assert any(row.record is not None for row in window.inspector.model.rows)  # drafts shown
    p_heights, q_heights, _ = window.inspector.bars.series_heights()
    assert p_heights and q_heights  # p and q of the selected draft token


def test_the_notice_stays_hidden_when_a_run_drafts(window, qtbot, hf_dirs, dialogs):
    loaded_run(window, qtbot, hf_dirs, k=3)
    assert window.run.stats.spec_steps > 0
    assert not any(n.isVisible() for n in window.findChildren(PlainRunNotice))


def test_a_side_the_run_did_not_measure_keeps_the_ratio_measured_at_load(
        window, qtbot, costly_draft_pair, dialogs):
    loaded_run(window, qtbot, costly_draft_pair, adaptive=True, k=4, tokens=24,
               backend="llamacpp")
    run_data, costs = window.run, window.why.pair_costs
    cols = run_data.columns
    live = run_costs(costs, run_data)
    assert live.t_plain == pytest.approx(float(np.median(cols["t_verify"][cols["k"] == 0])))
    drafting = cols["k"] > 0
    steady = drafting & np.concatenate(([False], drafting[:-1]))
    if steady.sum() < MIN_RUN_STEPS:  # too few drafting steps: the ratio timed at load
        assert live.t_draft / live.t_plain == pytest.approx(costs.t_draft / costs.t_plain)
    else:
        per_token = cols["t_draft"][steady] / cols["k"][steady]
        assert live.t_draft == pytest.approx(float(np.median(per_token)))


def test_the_cost_charts_are_drawn_when_their_tab_is_shown_not_while_hidden(
        window, qtbot, hf_dirs, dialogs):
    loaded_run(window, qtbot, hf_dirs, k=3)
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
