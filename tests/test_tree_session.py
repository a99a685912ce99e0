"""Tree speculation through the real session on both backends: greedy output equals plain
decoding token for token, paths through a sibling really happen and are kept in the cache,
and sampled output keeps the target's distribution end to end."""

from __future__ import annotations

import numpy as np
import pytest

from app.analysis.stats import g_test
from app.engine.decode_config import DecodeConfig
from app.engine.drafters.chain import ChainDrafter
from app.engine.drafters.draft_model import DRAFT_MODEL, ModelDrafter
from app.engine.drafters.lookup.edits import EditAwareLookup
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from tests.helpers import EXACT_P, assert_drafted, exact_distributions

PROMPTS = ["def add(a, b):\n    return", "the cat sat on the mat. the cat"]


def generate(target, drafter, n_predict, prompt, width, depth=4, nodes=16, p_split=0.0,
             params=None):
    config = DecodeConfig(n_predict=n_predict, draft_max=depth, tree_width=width,
                          tree_nodes=nodes, draft_p_split=p_split,
                          sampling=params or SamplingParams())
    session = Session(target, drafter, config)
    steps = list(session.steps(target.tokenize(prompt)))
    return session.output_ids, steps


@pytest.fixture(params=["torch", "llamacpp"])
def pair(request):
    return request.getfixturevalue("hf_exact_pair" if request.param == "torch" else "gguf_pair")


def went_through_a_sibling(steps) -> bool:
    """Whether some accepted node was not its parent's first child."""
    for step in steps:
        firsts = {}
        for i, t in enumerate(step.tokens):
            firsts.setdefault(t.parent, i)
            if t.accepted and firsts[t.parent] != i:
                return True
    return False


@pytest.mark.parametrize("width", [2, 3])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_model_tree_greedy_equals_plain(pair, width, prompt):
    target, draft = pair
    plain, _ = generate(target, None, 40, prompt, 1)
    got, steps = generate(target, ModelDrafter(draft), 40, prompt, width)
    assert got == plain
    assert_drafted(steps)
    assert any(s.is_tree and len(s.tokens) > s.draft_depth for s in steps)


def test_paths_through_siblings_are_taken_and_stay_exact(pair):
    target, draft = pair
    prompt = PROMPTS[0]
    plain, _ = generate(target, None, 60, prompt, 1)
    got, steps = generate(target, ModelDrafter(draft), 60, prompt, 4, depth=3, nodes=12)
    assert got == plain
    assert_drafted(steps)
    assert went_through_a_sibling(steps)
    # the cache afterwards holds exactly the committed text, whatever the path
    assert target.n_cached <= len(target.tokenize(prompt)) + len(got) - 1


@pytest.mark.parametrize("width", [2, 4])
def test_ngram_tree_greedy_equals_plain(pair, width):
    target, _ = pair
    prompt = "a b c a b d a b c a b d a b e a b"
    plain, _ = generate(target, None, 50, prompt, 1)
    got, steps = generate(target, EditAwareLookup(n_min=1), 50, prompt, width, depth=6)
    assert got == plain
    assert_drafted(steps)
    assert any(s.is_tree for s in steps)


def test_hybrid_tree_greedy_equals_plain(pair):
    target, draft = pair
    plain, _ = generate(target, None, 40, PROMPTS[1], 1)
    chain = ChainDrafter([EditAwareLookup(n_min=2), ModelDrafter(draft)])
    got, steps = generate(target, chain, 40, PROMPTS[1], 3)
    assert got == plain
    assert_drafted(steps)


def test_width_one_is_the_chain(pair):
    target, draft = pair
    _, steps = generate(target, ModelDrafter(draft), 20, PROMPTS[0], 1)
    assert not any(s.is_tree for s in steps)


def test_tree_records_describe_the_tree(gguf_pair):
    target, draft = gguf_pair
    _, steps = generate(target, ModelDrafter(draft), 30, PROMPTS[0], 3)
    for step in (s for s in steps if s.is_tree):
        for i, t in enumerate(step.tokens):
            assert -1 <= t.parent < i
            parent_depth = 0 if t.parent == -1 else step.tokens[t.parent].depth
            assert t.depth == parent_depth + 1
        path = [t for t in step.tokens if t.accepted]
        assert len(step.emitted) in (len(path), len(path) + 1)


N_TREE_SESSIONS = 1200


def test_tree_sampling_end_to_end_matches_target(hf_pair):
    """Branching forced everywhere (p_split 0): the first two tokens against the target's
    exact distributions."""
    target, draft = hf_pair
    prompt_ids = target.tokenize(PROMPTS[0])
    params = SamplingParams(temperature=1.0)
    exact = exact_distributions(target, prompt_ids, params)
    drafter = ModelDrafter(draft)
    tokens = np.empty((N_TREE_SESSIONS, 2), dtype=np.int64)
    trees = 0
    for i in range(N_TREE_SESSIONS):
        config = DecodeConfig(n_predict=4, draft_max=3, tree_width=3, tree_nodes=9,
                              draft_p_split=0.0, stop_at_eos=False,
                              sampling=SamplingParams(temperature=1.0, seed=20_000 + i))
        session = Session(target, drafter, config)
        for step in session.steps(prompt_ids):
            trees += step.is_tree
            if len(session.output_ids) >= 2:
                break
        tokens[i] = session.output_ids[:2]
    assert trees >= N_TREE_SESSIONS  # every first step was a tree
    assert g_test(tokens[:, 0], exact.first).p_value > EXACT_P
    assert g_test(tokens[:, 1], exact.second).p_value > EXACT_P


def test_adaptive_tree_counts_the_extra_nodes_it_verifies(gguf_pair):
    target, draft = gguf_pair
    plain, _ = generate(target, None, 40, PROMPTS[0], 1)
    config = DecodeConfig(n_predict=40, draft_max=4, tree_width=3, draft_p_split=0.0,
                          adaptive=True)
    session = Session(target, ModelDrafter(draft), config)
    steps = list(session.steps(target.tokenize(PROMPTS[0])))
    assert session.output_ids == plain
    assert_drafted(steps)
    assert any(s.is_tree for s in steps)
    cost = session.controller.pass_cost(DRAFT_MODEL)
    assert cost.extra_per_level > 0
    assert cost.pass_size(4) > 5  # the cost model prices the siblings too
