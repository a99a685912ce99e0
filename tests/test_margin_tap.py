"""The bench wraps the target in a MarginTap to explain greedy differences; the wrapper must
not take away what the model can do (hidden states for draft heads, early exit for
self-drafts, its own generate() for --compare-hf), and it notes margins on every pass."""

from __future__ import annotations

from app.engine.divergence import MarginTap
from app.engine.protocol import EarlyExitModel, HiddenStateModel, ReferenceGenerator


def test_the_tap_keeps_every_capability_of_the_model(gguf_pair, hf_pair):
    for model in (gguf_pair[0], hf_pair[0]):
        tap = MarginTap(model)
        for capability in (HiddenStateModel, EarlyExitModel, ReferenceGenerator):
            assert isinstance(tap, capability) == isinstance(model, capability), capability
    assert isinstance(MarginTap(gguf_pair[0]), HiddenStateModel)
    assert isinstance(MarginTap(hf_pair[0]), ReferenceGenerator)


def test_passes_with_hidden_states_are_noted_too(gguf_pair):
    target = gguf_pair[0]
    tap = MarginTap(target)
    ids = target.tokenize("def add(a, b):")
    tap.truncate(0)
    logits, hidden = tap.extend_hidden(ids, 2)
    assert logits.shape[0] == hidden.shape[0] == 2
    assert set(tap.top) == {len(ids) - 1, len(ids)}
    tap.truncate(0)
