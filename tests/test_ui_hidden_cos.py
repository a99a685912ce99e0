"""The rejection view's per-token diagnostics, by kind of draft, on real runs of tiny models:
the draft's own q(x) for every draft with probabilities of its own; hidden_cos beside it only
for a self-draft (comparable hidden states, the one kind where it measured better than
chance), and for the others a note that says why there is none; for n-gram drafts, which
have neither, only the note."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from app.engine.decode_config import DecodeConfig, StopRule
from app.engine.drafters.draft_model import ModelDrafter  # noqa: E402
from app.engine.drafters.heads import HeadsDrafter  # noqa: E402
from app.engine.drafters.lookup.edits import EditAwareLookup  # noqa: E402
from app.engine.drafters.self_draft import SelfDrafter  # noqa: E402
from app.engine.session import Session  # noqa: E402
from app.engine.similarity import auc_interval  # noqa: E402
from tests.helpers import random_heads  # noqa: E402
from ui.rejection_view import (  # noqa: E402
    CONFIDENCE_NOTE,
    HIDDEN_NOTE,
    NO_DIAGNOSTIC_NOTE,
    NO_HIDDEN_NOTE,
    RULE,
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


def self_draft_steps(hf_dirs):
    from backends.torch_hf import TorchModel
    from tests.tiny_hf import write_tiny_hf

    target = TorchModel(write_tiny_hf(hf_dirs[0].parent / "deep-ui", seed=3, n_layer=4),
                        device="cpu")
    try:
        return steps_of(target, SelfDrafter(target.skip_draft(frozenset({1, 2})), StopRule(),
                                            target.n_vocab))
    finally:
        target.close()


def assert_plots(plot, name, values, accepted):
    """The plot shows these values by decision, its title the AUC with its interval."""
    d = plot.diagnostic
    assert d is not None and d.name == name and not plot.view.isHidden()
    assert sorted(d.values) == sorted(values) and plot.count() == len(values)
    x_rejected, y_rejected = plot.rejected.getData()
    assert sorted(x_rejected) == sorted(v for v, ok in zip(values, accepted, strict=True) if not ok)
    assert np.all(np.abs(y_rejected) <= 0.15)
    x_accepted, y_accepted = plot.accepted.getData()
    if any(accepted):
        assert sorted(x_accepted) == sorted(v for v, ok in zip(values, accepted, strict=True) if ok)
        assert np.all(np.abs(y_accepted - 1) <= 0.15)
    assert plot.title().startswith(f"{name} by decision")
    fit = auc_interval(values, accepted)
    if fit is not None:
        assert f"AUC {fit[0]:.2f} [{fit[1]:.2f}, {fit[2]:.2f}]" in plot.title()


def test_a_self_draft_shows_q_and_hidden_cos(qtbot, hf_dirs):
    steps = self_draft_steps(hf_dirs)
    tokens = judged(steps)
    assert tokens and all(t.hidden_cos is not None for t in tokens)
    panel = shown(qtbot, steps)
    accepted = [bool(t.accepted) for t in tokens]
    assert_plots(panel.confidence_plot, "q(x)", [t.q for t in tokens], accepted)
    assert_plots(panel.hidden_plot, "hidden_cos", [t.hidden_cos for t in tokens], accepted)
    assert panel.hidden_plot.diagnostic.low == -1.0
    assert panel.diagnostic_note.text() == f"{RULE} {CONFIDENCE_NOTE} {HIDDEN_NOTE}"
    assert not panel.diagnostic_note.isHidden()


@pytest.mark.parametrize("kind", ["draft model", "draft heads"])
def test_other_drafts_show_q_and_say_why_no_hidden_cos(qtbot, kind, gguf_pair):
    target, draft = gguf_pair
    drafter = ModelDrafter(draft) if kind == "draft model" else HeadsDrafter(random_heads(target))
    steps = steps_of(target, drafter)
    tokens = judged(steps)
    assert tokens and all(t.hidden_cos is None for t in tokens)
    assert len({t.q for t in tokens}) > 1  # drafts with probabilities of their own
    panel = shown(qtbot, steps)
    assert_plots(panel.confidence_plot, "q(x)", [t.q for t in tokens],
                 [bool(t.accepted) for t in tokens])
    assert panel.hidden_plot.diagnostic is None and panel.hidden_plot.view.isHidden()
    assert panel.hidden_plot.count() == 0
    note = panel.diagnostic_note.text()
    assert note == f"{RULE} {CONFIDENCE_NOTE} {NO_HIDDEN_NOTE}"
    assert not panel.diagnostic_note.isHidden()
    assert "No hidden_cos for this draft" in note


def test_ngram_drafts_show_no_diagnostic_and_say_why(qtbot, gguf_pair):
    target, _ = gguf_pair
    steps = steps_of(target, EditAwareLookup(), prompt="a b c a b c a b c a b", n=30)
    assert judged(steps)
    panel = shown(qtbot, steps)
    for plot in (panel.confidence_plot, panel.hidden_plot):
        assert plot.count() == 0 and plot.view.isHidden()
    assert panel.diagnostic_note.text() == NO_DIAGNOSTIC_NOTE
    assert not panel.diagnostic_note.isHidden()


def test_an_empty_view_shows_no_diagnostic(qtbot):
    panel = shown(qtbot, [])
    assert panel.confidence_plot.view.isHidden() and panel.hidden_plot.view.isHidden()
    assert panel.diagnostic_note.isHidden()


def test_the_title_says_when_a_diagnostic_is_no_better_than_chance():
    rng = np.random.default_rng(0)
    accepted = rng.random(300) < 0.7
    noise = Diagnostic("q(x)", rng.random(300), accepted)
    signal = Diagnostic("q(x)", rng.random(300) + accepted, accepted)
    assert diagnostic_title(noise).endswith("no better than chance here")
    assert "chance" not in diagnostic_title(signal)
