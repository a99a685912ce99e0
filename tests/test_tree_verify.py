"""Tree verification keeps the target's distribution: many draws on a small synthetic model
(branching forced at every node) against the exact joint distribution of the first two
tokens, with power checks that the classic mistakes are caught."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chisquare

from app.engine import tree as tree_module
from app.engine.sampling import SamplingParams
from app.engine.tree import DraftTree, verify_tree
from tests.helpers import always_accept, resample_from_p

VOCAB = 6
LAST = 0  # the last committed token


def _table(seed: int, sharpness: float) -> np.ndarray:
    logits = np.random.default_rng(seed).normal(size=(VOCAB, VOCAB)) * sharpness
    probs = np.exp(logits)
    return probs / probs.sum(axis=1, keepdims=True)


P = _table(1, 1.2)  # target: P[prev] is the next-token distribution
Q = _table(2, 1.5)  # draft, deliberately different


def _draw_without_replacement(q: np.ndarray, n: int, rng: np.random.Generator) -> list[int]:
    drawn: list[int] = []
    for _ in range(n):
        rest = q.copy()
        rest[drawn] = 0.0
        drawn.append(int(rng.choice(VOCAB, p=rest / rest.sum())))
    return drawn


def full_tree(rng: np.random.Generator, width: int = 2) -> DraftTree:
    """Depth 2, `width` children at every node, drawn as a drafter draws them."""
    firsts = _draw_without_replacement(Q[LAST], width, rng)
    seconds = [_draw_without_replacement(Q[x], width, rng) for x in firsts]
    tokens, parents, rows = [firsts[0], seconds[0][0]], [-1, 0], [Q[LAST], Q[firsts[0]]]
    for x in firsts[1:]:
        tokens.append(x)
        parents.append(-1)
        rows.append(Q[LAST])
    for branch, children in enumerate(seconds):
        parent = 0 if branch == 0 else branch + 1
        for y in children[1 if branch == 0 else 0:]:
            tokens.append(y)
            parents.append(parent)
            rows.append(Q[firsts[branch]])
    return DraftTree(tokens, parents, rows)


class _Rows:
    def __init__(self, tree: DraftTree) -> None:
        self.tree = tree

    def __getitem__(self, i: int) -> np.ndarray:
        return P[LAST] if i == 0 else P[self.tree.tokens[i - 1]]


def _first_two(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    params = SamplingParams(temperature=1.0)
    counts = np.zeros((VOCAB, VOCAB))
    for _ in range(n):
        tree = full_tree(rng)
        verdict = verify_tree(tree, _Rows(tree), params, rng, str)
        first = verdict.emitted[0]
        second = (verdict.emitted[1] if len(verdict.emitted) > 1
                  else int(rng.choice(VOCAB, p=P[first])))
        counts[first, second] += 1
    return counts


def _p_value(counts: np.ndarray) -> float:
    expected = (P[LAST][:, None] * P) * counts.sum()
    return float(chisquare(counts.ravel(), expected.ravel()).pvalue)


N_DRAWS = 12000


def test_tree_sampling_matches_the_target_distribution():
    assert _p_value(_first_two(N_DRAWS)) > 1e-3


def test_power_a_missing_residual_update_is_caught(monkeypatch):
    resample_from_p(monkeypatch)
    assert _p_value(_first_two(N_DRAWS)) < 1e-6


def test_power_a_wrong_accept_rule_is_caught(monkeypatch):
    always_accept(monkeypatch)  # the same judge as the chain's: one swap breaks both
    assert _p_value(_first_two(N_DRAWS)) < 1e-6


def test_power_testing_siblings_against_the_wrong_q_is_caught(monkeypatch):
    # the trap: the second sibling was drawn without the first, so its q is renormalised
    monkeypatch.setattr(tree_module, "without_earlier_siblings", lambda q, earlier: q)
    assert _p_value(_first_two(N_DRAWS)) < 1e-6


def test_greedy_follows_the_child_equal_to_the_argmax():
    target_first = int(np.argmax(P[LAST]))
    other = (target_first + 1) % VOCAB
    # the first child is wrong, its sibling right: the path goes through the sibling
    tree = DraftTree([other, 3, target_first], [-1, 0, -1], [None, None, None])
    verdict = verify_tree(tree, _Rows(tree), SamplingParams(), np.random.default_rng(0), str)
    assert verdict.path[0] == 2
    assert verdict.emitted[:2] == [target_first, int(np.argmax(P[target_first]))]
    first, untested, sibling = verdict.records
    assert first.accepted is False and sibling.accepted is True
    assert untested.accepted is None and untested.parent == 0 and untested.depth == 2
    assert sibling.parent == -1 and sibling.depth == 1


def test_greedy_near_tie_in_an_inexact_row_ends_the_step():
    tied = np.full(VOCAB, 0.1)
    tied[2] = tied[3] = 0.25
    tree = DraftTree([4, 2], [-1, 0], [None, None])

    class Rows:
        def __getitem__(self, i: int) -> np.ndarray:
            return one_hot_row(4) if i == 0 else tied

    params, rng = SamplingParams(), np.random.default_rng(0)
    trusted = verify_tree(tree, Rows(), params, rng, str, exact_rows=[True, True, True])
    assert trusted.emitted == [4, 2, 2]  # tie broken by the lower id, then the bonus
    doubted = verify_tree(tree, Rows(), params, rng, str, exact_rows=[True, False, False])
    assert doubted.emitted == [4] and doubted.path == [0]


def one_hot_row(token: int) -> np.ndarray:
    row = np.full(VOCAB, 0.01)
    row[token] = 1.0
    return row / row.sum()


def test_parents_must_come_first():
    with pytest.raises(ValueError, match="parents must come first"):
        DraftTree([1, 2], [1, -1], [None, None])


def test_the_torch_backend_passes_its_cache_by_the_name_transformers_takes(hf_dirs):
    """transformers 5.2x renamed forward()'s past_key_values to cache: the old name warns
    (FutureWarning) on every load and is to go in 5.40. Chain and tree passes use the new one."""
    import warnings

    from backends.torch_hf import TorchModel

    model = TorchModel(hf_dirs[0], device="cpu")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            model.extend([1, 2, 3], n_logits=1)
            model.extend_tree([4, 5, 6], parents=[-1, 0, 0], n_skip=0)
            model.keep_path([0, 1])
            model.extend([7], n_logits=1)
        assert model.n_cached == 6
    finally:
        model.close()
