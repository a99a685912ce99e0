"""Greedy speculative decoding must reproduce plain target decoding token for token."""

from __future__ import annotations

import pytest

from app.engine.decode_config import DecodeConfig
from app.engine.drafters.chain import ChainDrafter
from app.engine.drafters.draft_model import ModelDrafter
from app.engine.drafters.lookup.edits import EditAwareLookup
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from tests.helpers import assert_drafted

PROMPTS = ["def add(a, b):\n    return", "the cat sat on the mat. the cat"]


def generate(target, drafter, n_predict, k, prompt, adaptive=False):
    config = DecodeConfig(n_predict=n_predict, draft_max=k, adaptive=adaptive,
                          sampling=SamplingParams(temperature=0.0))
    session = Session(target, drafter, config)
    steps = list(session.steps(target.tokenize(prompt)))
    return session.output_ids, steps


def plain(target, n_predict, prompt):
    return generate(target, None, n_predict, 1, prompt)[0]


@pytest.fixture(params=["torch", "llamacpp"])
def pair(request):
    return request.getfixturevalue("hf_exact_pair" if request.param == "torch" else "gguf_pair")


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_draft_model_greedy_equals_plain(pair, k, prompt):
    target, draft = pair
    expected = plain(target, 40, prompt)
    got, steps = generate(target, ModelDrafter(draft), 40, k, prompt)
    assert got == expected
    assert_drafted(steps)


@pytest.mark.parametrize("k", [2, 6, 32])
def test_ngram_greedy_equals_plain(pair, k):
    target, _ = pair
    prompt = PROMPTS[1]
    expected = plain(target, 60, prompt)
    got, steps = generate(target, EditAwareLookup(), 60, k, prompt)
    assert got == expected
    assert_drafted(steps)


def test_k_larger_than_remaining_tokens(pair):
    target, _ = pair
    expected = plain(target, 5, PROMPTS[0])
    # the target drafting for itself: its drafts pass, so the last passes are cut by what is
    # left (with the tiny draft every draft could be rejected, and nothing would be tested)
    got, steps = generate(target, ModelDrafter(_clone(target)), 5, 16, PROMPTS[0])
    assert got == expected and len(got) == 5
    assert_drafted(steps)
    assert all(s.k <= 4 for s in steps)


def test_draft_equal_to_target_accepts_everything(pair):
    target, _ = pair
    # the target drafting for itself: every greedy draft token must pass
    expected = plain(target, 30, PROMPTS[0])
    got, steps = generate(target, ModelDrafter(_clone(target)), 30, 4, PROMPTS[0])
    assert got == expected
    assert_drafted(steps)
    assert all(t.accepted for s in steps for t in s.tokens)


def test_adaptive_greedy_equals_plain(pair):
    target, _ = pair
    # the controller's choices follow measured times, so with the tiny draft (accepted about
    # one time in five) a busy machine could leave it decoding plainly throughout: drafting
    # with the target's own copy, every draft it makes passes
    expected = plain(target, 40, PROMPTS[0])
    got, steps = generate(target, ModelDrafter(_clone(target)), 40, 6, PROMPTS[0],
                          adaptive=True)
    assert got == expected
    assert_drafted(steps)


def _clone(model):
    if model.backend == "torch":
        from backends.torch_hf import TorchModel

        return TorchModel(model.path, device="cpu", batch_invariant=True)
    from backends.llamacpp import LlamaCppModel

    return LlamaCppModel(model.path, n_gpu_layers=0, n_ctx=512)


def test_eos_inside_a_draft_stops_like_plain(pair, monkeypatch):
    target, draft = pair
    reference = plain(target, 20, PROMPTS[0])
    stop_token = reference[5]
    for model in (target, draft):
        monkeypatch.setattr(model, "eos_ids", frozenset({stop_token}))
    expected = plain(target, 20, PROMPTS[0])
    assert expected == reference[: reference.index(stop_token) + 1]
    got, steps = generate(target, ModelDrafter(_clone_with_eos(target, stop_token)), 20, 8,
                          PROMPTS[0])
    assert got == expected
    assert_drafted(steps)


def _clone_with_eos(model, stop_token):
    clone = _clone(model)
    clone.eos_ids = frozenset({stop_token})
    return clone


@pytest.mark.parametrize("adaptive", [False, True])
def test_hybrid_lookup_and_draft_model_greedy_equals_plain(pair, adaptive):
    target, draft = pair
    prompt = PROMPTS[1]
    expected = plain(target, 50, prompt)
    # adaptive choices follow measured times: the target's own copy drafts behind the
    # lookup there, so whatever the controller picks, what it drafts can pass
    behind = ModelDrafter(_clone(target) if adaptive else draft)
    chain = ChainDrafter([EditAwareLookup(n_min=2), behind])
    got, steps = generate(target, chain, 50, 4, prompt, adaptive=adaptive)
    assert got == expected
    assert_drafted(steps)
