"""The rejection view plots hidden_cos against the decisions of a real run, with its AUC."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from app.engine.drafters import ModelDrafter  # noqa: E402
from app.engine.session import DecodeConfig, Session  # noqa: E402
from app.engine.similarity import roc_auc  # noqa: E402
from ui.rejection_view import RejectionPanel, hidden_cos_points  # noqa: E402


def test_hidden_cos_is_plotted_by_decision_with_its_auc(qtbot, gguf_pair):
    target, draft = gguf_pair
    session = Session(target, ModelDrafter(draft), DecodeConfig(n_predict=40, draft_max=4))
    steps = list(session.steps(target.tokenize("def add(a, b):\n    return")))
    cos, accepted = hidden_cos_points(steps)
    assert cos.size > 0 and np.all(np.abs(cos) <= 1.0 + 1e-9)
    panel = RejectionPanel()
    qtbot.addWidget(panel)
    panel.show()
    panel.show_steps(steps)
    assert panel.hidden_count() == cos.size
    assert not panel.hidden_view.isHidden()
    x_accepted, y_accepted = panel.hidden_accepted.getData()
    assert sorted(x_accepted) == sorted(cos[accepted])
    assert np.all(np.abs(y_accepted - 1) <= 0.15)
    title = panel.hidden_view.getPlotItem().titleLabel.text
    auc = roc_auc(list(cos), list(accepted))
    assert "not the acceptance rule" in title
    assert (auc is None) or f"AUC {auc:.2f}" in title


def test_runs_without_hidden_cos_hide_the_plot(qtbot, gguf_pair):
    target, _ = gguf_pair
    from app.engine.lookup import NgramDrafter

    session = Session(target, NgramDrafter(), DecodeConfig(n_predict=30, draft_max=4))
    steps = list(session.steps(target.tokenize("a b c a b c a b c a b")))
    panel = RejectionPanel()
    qtbot.addWidget(panel)
    panel.show()
    panel.show_steps(steps)
    assert panel.hidden_count() == 0 and panel.hidden_view.isHidden()
