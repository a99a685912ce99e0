"""The rejection view's per-token diagnostic, by kind of draft, on real runs of tiny models:
hidden_cos where the draft's hidden states are comparable with the target's (self-draft, draft
heads); the draft's own q(x) for a separate draft model, with the reason hidden_cos is absent;
nothing but the reason for n-gram drafts, which have neither."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from app.engine.drafters import ModelDrafter  # noqa: E402
from app.engine.heads import HeadsDrafter  # noqa: E402
from app.engine.lookup import NgramDrafter  # noqa: E402
from app.engine.session import DecodeConfig, Session  # noqa: E402
from app.engine.similarity import auc_interval  # noqa: E402
from tests.test_hidden_cos import random_heads  # noqa: E402
from ui.rejection_view import (  # noqa: E402
    CONFIDENCE_NOTE,
    HIDDEN_NOTE,
    NO_DIAGNOSTIC_NOTE,
    Diagnostic,
    RejectionPanel,
    diagnostic_title,
)

PROMPT = "def add(a, b):\n    return"


def steps_of(target, drafter, prompt=PROMPT, n=40):
    session = Session(target, drafter, DecodeConfig(n_predict=n, draft_max=4))
    return list(session.steps(target.tokenize(prompt)))


def shown(qtbot, steps):
    panel = RejectionPanel()
    qtbot.addWidget(panel)
    panel.show()
    panel.show_steps(steps)
    return panel


def judged(steps):
    return [t for s in steps for t in s.tokens if t.accepted is not None]


def title_of(panel):
    return panel.diagnostic_view.getPlotItem().titleLabel.text


def self_draft_steps(hf_dirs):
    from backends.torch_hf import TorchModel
    from tests.tiny_hf import write_tiny_hf

    target = TorchModel(write_tiny_hf(hf_dirs[0].parent / "deep-ui", seed=3, n_layer=4),
                        device="cpu")
    try:
        return steps_of(target, ModelDrafter(target.early_exit(2), with_hidden=True))
    finally:
        target.close()


@pytest.mark.parametrize("kind", ["self-draft", "draft heads"])
def test_comparable_drafts_show_hidden_cos_with_its_interval(qtbot, kind, gguf_pair, hf_dirs):
    if kind == "self-draft":
        steps = self_draft_steps(hf_dirs)
    else:
        target, _ = gguf_pair
        steps = steps_of(target, HeadsDrafter(random_heads(target)))
    tokens = judged(steps)
    assert tokens and all(t.hidden_cos is not None for t in tokens)
    panel = shown(qtbot, steps)
    d = panel.diagnostic
    assert d is not None and d.name == "hidden_cos" and d.low == -1.0
    assert sorted(d.values) == sorted(t.hidden_cos for t in tokens)
    assert panel.diagnostic_count() == len(tokens)
    assert not panel.diagnostic_view.isHidden()
    assert panel.diagnostic_note.text() == HIDDEN_NOTE and not panel.diagnostic_note.isHidden()
    x_accepted, y_accepted = panel.diagnostic_accepted.getData()
    x_rejected, y_rejected = panel.diagnostic_rejected.getData()
    assert sorted(x_rejected) == sorted(t.hidden_cos for t in tokens if not t.accepted)
    assert np.all(np.abs(y_rejected) <= 0.15)
    if x_accepted is not None:
        assert sorted(x_accepted) == sorted(t.hidden_cos for t in tokens if t.accepted)
        assert np.all(np.abs(y_accepted - 1) <= 0.15)
    assert title_of(panel).startswith("hidden_cos by decision (a diagnostic, not the")
    fit = auc_interval(d.values, d.accepted)
    if fit is not None:
        assert f"AUC {fit[0]:.2f} [{fit[1]:.2f}, {fit[2]:.2f}]" in title_of(panel)


def test_a_draft_model_shows_its_own_q_and_says_why_not_hidden_cos(qtbot, gguf_pair):
    target, draft = gguf_pair
    steps = steps_of(target, ModelDrafter(draft))
    tokens = judged(steps)
    assert tokens and all(t.hidden_cos is None for t in tokens)
    assert {t.accepted for t in tokens} == {True, False}  # the run judged both ways
    panel = shown(qtbot, steps)
    d = panel.diagnostic
    assert d is not None and d.name == "q(x)"
    assert sorted(d.values) == sorted(t.q for t in tokens)
    assert panel.diagnostic_count() == len(tokens)
    assert not panel.diagnostic_view.isHidden()
    assert title_of(panel).startswith("q(x) by decision")
    assert "hidden_cos" not in title_of(panel)
    note = panel.diagnostic_note.text()
    assert note == CONFIDENCE_NOTE and "No hidden_cos for a separate draft model" in note


def test_ngram_drafts_show_no_diagnostic_and_say_why(qtbot, gguf_pair):
    target, _ = gguf_pair
    steps = steps_of(target, NgramDrafter(), prompt="a b c a b c a b c a b", n=30)
    assert judged(steps)
    panel = shown(qtbot, steps)
    assert panel.diagnostic_count() == 0 and panel.diagnostic_view.isHidden()
    assert panel.diagnostic_note.text() == NO_DIAGNOSTIC_NOTE
    assert not panel.diagnostic_note.isHidden()


def test_an_empty_view_has_no_diagnostic_note(qtbot):
    panel = shown(qtbot, [])
    assert panel.diagnostic_view.isHidden() and panel.diagnostic_note.isHidden()


def test_the_title_says_when_a_diagnostic_is_no_better_than_chance():
    rng = np.random.default_rng(0)
    accepted = rng.random(300) < 0.7
    noise = Diagnostic("q(x)", rng.random(300), accepted, "")
    signal = Diagnostic("q(x)", rng.random(300) + accepted, accepted, "")
    assert diagnostic_title(noise).endswith("no better than chance on this run")
    assert "chance" not in diagnostic_title(signal)
