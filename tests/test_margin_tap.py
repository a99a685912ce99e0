"""The bench wraps the target in a MarginTap to explain greedy differences; the wrapper must
not take away what the model can do (hidden states for draft heads, leaving layers out
for self-drafts, its own generate() for --compare-hf), and it notes margins on every pass."""

from __future__ import annotations

import inspect
import typing

import numpy as np
import pytest

from app.analysis.divergence import MarginTap
from app.engine.protocol import (
    HiddenStateModel,
    LayerSkipModel,
    MtpModel,
    OutputHeadModel,
    ReferenceGenerator,
    SkipDraftModel,
)
from backends.llamacpp_mtp import LlamaCppMtpModel


@pytest.fixture(scope="module")
def tiny_mtp_target(mtp_file):
    model = LlamaCppMtpModel(mtp_file, n_ctx=256, n_threads=1)
    yield model
    model.close()


def test_the_tap_keeps_every_capability_of_the_model(gguf_pair, hf_pair):
    for model in (gguf_pair[0], hf_pair[0]):
        tap = MarginTap(model)
        for capability in (HiddenStateModel, LayerSkipModel, SkipDraftModel,
                           ReferenceGenerator):
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


def _has_statically(obj: object, protocol: type) -> bool:
    """isinstance() as Python 3.12 and later decide it for a runtime protocol: each member
    found on the object or its class without asking __getattr__."""
    missing = object()
    return all(inspect.getattr_static(obj, name, missing) is not missing
               for name in typing._get_protocol_attrs(protocol))  # type: ignore[attr-defined]


def test_the_capabilities_are_the_taps_own_not_borrowed_through_getattr(gguf_pair, hf_pair,
                                                                        tiny_mtp_target):
    # Python 3.12's isinstance() never asks __getattr__: draft heads were refused under the
    # tap there (no n_embd), self-drafts and --compare-hf too
    for model in (gguf_pair[0], hf_pair[0], tiny_mtp_target):
        tap = MarginTap(model)
        for capability in (HiddenStateModel, LayerSkipModel, SkipDraftModel,
                           ReferenceGenerator, OutputHeadModel, MtpModel):
            assert _has_statically(tap, capability) == isinstance(model, capability), (
                model.name, capability)
    assert _has_statically(MarginTap(gguf_pair[0]), HiddenStateModel)
    assert _has_statically(MarginTap(tiny_mtp_target), MtpModel)
    assert MarginTap(gguf_pair[0]).n_embd == gguf_pair[0].n_embd


def test_a_tree_pass_is_noted_for_the_path_kept(gguf_pair):
    # a tree's rows were not noted, so a greedy difference in a tree run was reported as
    # "not recorded" and judged NOT a near-tie where the same flip was one in a chain run
    target = gguf_pair[0]
    tap = MarginTap(target)
    ids = target.tokenize("def add(a, b):")
    tap.truncate(0)
    tap.extend(ids[:-1], 1)
    start = tap.n_cached
    a, b, c = ids[-1], 11, 12
    rows, _ = tap.extend_tree([a, b, c], [-1, 0, 0], 0)  # a, then b or c after it
    tap.keep_path([0, 2])
    assert tap.top[start + 1].first == int(np.argmax(rows[0]))
    assert tap.top[start + 2].first == int(np.argmax(rows[2]))
    # the plain run's rows at the same positions agree with the tree's kept path
    tap.truncate(start)
    plain = tap.extend([a, c], 2)
    assert int(np.argmax(plain[1])) == int(np.argmax(rows[2]))
    tap.truncate(0)
