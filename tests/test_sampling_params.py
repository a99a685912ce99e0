"""process(): temperature, top-k, top-p, min-p; choose/draw; validation of the settings."""

from __future__ import annotations

import numpy as np
import pytest

import app.engine.sampling as sampling
from app.engine.decode_config import DecodeConfig
from app.engine.sampling import SamplingParams, choose, draw, process, softmax
from app.engine.session import Session
from app.errors import SettingsError


def sampled(**kwargs) -> SamplingParams:
    return SamplingParams(**{"temperature": 1.0, **kwargs})


def support(probs: np.ndarray) -> list[int]:
    return np.flatnonzero(probs).tolist()


def reference_nucleus(probs: np.ndarray, top_p: float) -> set[int]:
    """Smallest set of most likely tokens whose mass reaches top_p, by a full sort."""
    order = np.lexsort((np.arange(probs.shape[0]), -probs))
    cumulative = np.cumsum(probs[order])
    n_keep = int(np.argmax(cumulative >= top_p)) + 1 if cumulative[-1] >= top_p else len(order)
    return set(order[:n_keep].tolist())


# --- temperature ---------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.25, 0.7, 1.0, 1.5, 3.0])
def test_temperature_scales_logits(temperature):
    logits = np.random.default_rng(0).normal(size=12) * 3
    got = process(logits, sampled(temperature=temperature))
    want = np.exp(logits / temperature)
    np.testing.assert_allclose(got, want / want.sum(), rtol=1e-12)


def test_lower_temperature_is_sharper():
    logits = np.array([2.0, 1.0, 0.0, -1.0])
    cold = process(logits, sampled(temperature=0.5))
    hot = process(logits, sampled(temperature=2.0))
    assert cold[0] > softmax(logits)[0] > hot[0]


def test_greedy_reports_plain_softmax_and_chooses_argmax():
    logits = np.array([0.5, 3.0, 1.0, 2.9])
    probs = process(logits, SamplingParams(temperature=0.0, top_k=1, top_p=0.1))
    np.testing.assert_allclose(probs, softmax(logits), rtol=1e-6)  # float32: only shown
    rng = np.random.default_rng(0)
    assert all(choose(probs, SamplingParams(), rng) == 1 for _ in range(20))


def test_process_handles_a_batch_of_rows_like_single_rows():
    logits = np.random.default_rng(1).normal(size=(4, 30))
    params = sampled(temperature=0.8, top_k=10, top_p=0.9, min_p=0.05)
    batch = process(logits, params)
    assert batch.shape == logits.shape
    for row, probs in zip(logits, batch, strict=True):
        np.testing.assert_allclose(process(row, params), probs)


def test_process_does_not_modify_the_logits():
    logits = np.random.default_rng(2).normal(size=20)
    before = logits.copy()
    process(logits, sampled(temperature=0.5, top_k=3, top_p=0.5))
    np.testing.assert_array_equal(logits, before)


def test_processed_rows_are_distributions_proportional_to_softmax_on_their_support():
    logits = np.random.default_rng(3).normal(size=50) * 2
    params = sampled(temperature=0.9, top_k=20, top_p=0.8, min_p=0.02)
    probs = process(logits, params)
    assert probs.sum() == pytest.approx(1.0) and (probs >= 0).all()
    kept = probs > 0
    full = softmax(logits / 0.9)
    np.testing.assert_allclose(probs[kept], full[kept] / full[kept].sum())


# --- top-k ---------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 5, 9])
def test_top_k_keeps_the_k_most_likely(k):
    logits = np.random.default_rng(4).normal(size=10)
    probs = process(logits, sampled(top_k=k))
    assert set(support(probs)) == set(np.argsort(-logits)[:k].tolist())


def test_llamacpp_top_k_keeps_exactly_k_when_tied_lowest_ids_first():
    logits = np.array([0.0, 1.0, 1.0, 1.0, 1.0, -1.0])
    probs = process(logits, sampled(top_k=2, order=sampling.ORDER_LLAMACPP))
    assert support(probs) == [1, 2]
    np.testing.assert_allclose(probs[[1, 2]], [0.5, 0.5])
    assert support(process(np.zeros(9), sampled(top_k=4, order="llama.cpp"))) == [0, 1, 2, 3]


def test_transformers_top_k_keeps_every_token_tied_with_the_kth():
    logits = np.array([0.0, 1.0, 1.0, 1.0, 1.0, -1.0])
    probs = process(logits, sampled(top_k=2, order=sampling.ORDER_TRANSFORMERS))
    assert support(probs) == [1, 2, 3, 4]
    assert len(support(process(np.zeros(9), sampled(top_k=4)))) == 9


def test_an_unknown_sampler_order_is_refused():
    with pytest.raises(SettingsError, match="sampler order"):
        sampled(order="vllm").validate()


@pytest.mark.parametrize("k", [0, 10, 50])
def test_top_k_zero_or_at_least_vocab_keeps_everything(k):
    logits = np.random.default_rng(5).normal(size=10)
    assert len(support(process(logits, sampled(top_k=k)))) == 10


# --- top-p ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("top_p", "kept"), [(0.45, [0]), (0.55, [0, 1]), (0.75, [0, 1]),
                                             (0.85, [0, 1, 2]), (0.99, [0, 1, 2, 3])])
def test_top_p_keeps_the_smallest_nucleus(top_p, kept):
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    assert support(process(np.log(probs), sampled(top_p=top_p))) == kept


def test_top_p_nucleus_order_ignores_token_ids():
    probs = np.array([0.05, 0.15, 0.5, 0.3])
    assert support(process(np.log(probs), sampled(top_p=0.75))) == [2, 3]


@pytest.mark.parametrize("top_p", [0.3001, 0.5001, 0.9001])
def test_top_p_nucleus_larger_than_prefetch_on_flat_distribution(top_p):
    vocab = 2000
    probs = process(np.zeros(vocab), sampled(top_p=top_p))
    want = int(np.ceil(top_p * vocab))  # each token holds 1/2000 of the mass
    assert len(support(probs)) == want > sampling._NUCLEUS_PREFETCH
    np.testing.assert_allclose(probs[probs > 0], 1.0 / want)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("top_p", [0.05, 0.3, 0.6, 0.95])
def test_top_p_matches_a_full_sort_on_a_large_vocabulary(seed, top_p):
    # nearly flat: the 256 best tokens hold too little mass, so the prefetch is not enough
    logits = np.random.default_rng(seed).normal(size=2000) * 0.3
    probs = process(logits, sampled(top_p=top_p))
    assert set(support(probs)) == reference_nucleus(softmax(logits), top_p)


def test_top_p_with_ties_keeps_the_same_tokens_with_and_without_prefetch(monkeypatch):
    # the nucleus code says "the result is identical either way"; with ties at the cut
    # (a flat row) the tokens kept must not depend on the prefetch shortcut
    logits = np.zeros(2000)
    params = sampled(top_p=0.05)
    with_prefetch = support(process(logits, params))
    monkeypatch.setattr(sampling, "_NUCLEUS_PREFETCH", 10**9)
    full_sort = support(process(logits, params))
    assert len(with_prefetch) == len(full_sort) == 100
    assert with_prefetch == full_sort


def test_top_p_measures_mass_within_the_top_k_survivors():
    probs = np.array([0.4, 0.3, 0.2, 0.1])
    # alone, top-p 0.5 needs tokens 0 and 1 (0.4 < 0.5); after top-k 2 the survivors hold
    # {0: 4/7, 1: 3/7}, so token 0 alone reaches 0.5 (as in transformers and llama.cpp)
    assert support(process(np.log(probs), sampled(top_p=0.5))) == [0, 1]
    assert support(process(np.log(probs), sampled(top_k=2, top_p=0.5))) == [0]
    assert support(process(np.log(probs), sampled(top_k=2, top_p=0.6))) == [0, 1]
    assert support(process(np.log(probs), sampled(top_k=3, top_p=0.99))) == [0, 1, 2]


# --- min-p ---------------------------------------------------------------------------------


def test_min_p_keeps_tokens_at_least_min_p_times_the_best():
    probs = np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.04])
    assert support(process(np.log(probs), sampled(min_p=0.3))) == [0, 1, 2]  # >= 0.12
    assert support(process(np.log(probs), sampled(min_p=0.2))) == [0, 1, 2, 3]  # >= 0.08
    assert len(support(process(np.log(probs), sampled(min_p=0.0)))) == 6


def test_min_p_applies_to_temperature_scaled_probabilities():
    logits = np.log(np.array([0.5, 0.3, 0.2]))
    # at temperature 0.5 the probabilities are proportional to p^2: .25, .09, .04
    assert support(process(logits, sampled(temperature=0.5, min_p=0.3))) == [0, 1]


# --- choose / draw -------------------------------------------------------------------------


def test_draw_never_picks_a_zero_probability_token():
    probs = np.array([0.0, 0.3, 0.0, 0.0, 0.7, 0.0])
    rng = np.random.default_rng(0)
    drawn = {draw(probs, rng) for _ in range(2000)}
    assert drawn == {1, 4}


def test_draw_accepts_unnormalised_rows():
    rng = np.random.default_rng(1)
    counts = np.bincount([draw(np.array([2.0, 6.0]), rng) for _ in range(8000)], minlength=2)
    # binomial(8000, .75): sd 39
    assert abs(counts[1] - 6000) < 6 * 39


def test_choose_samples_when_not_greedy():
    rng = np.random.default_rng(2)
    probs = np.array([0.5, 0.5])
    assert {choose(probs, sampled(), rng) for _ in range(100)} == {0, 1}


# --- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": -0.1},
        {"temperature": float("nan")},
        {"temperature": float("inf")},
        {"top_k": -1},
        {"top_p": 0.0},
        {"top_p": -0.5},
        {"top_p": 1.01},
        {"top_p": float("nan")},
        {"min_p": -0.1},
        {"min_p": 1.0},
        {"min_p": float("nan")},
    ],
)
def test_invalid_sampling_params_raise_settings_error(kwargs):
    with pytest.raises(SettingsError):
        SamplingParams(**kwargs).validate()


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"temperature": 0.0}, {"temperature": 2.0, "top_k": 40, "top_p": 1.0},
     {"top_p": 1e-6}, {"min_p": 0.0}, {"min_p": 0.99}, {"top_k": 0}],
)
def test_valid_sampling_params_pass(kwargs):
    SamplingParams(**kwargs).validate()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n_predict": 0},
        {"draft_max": 0},
        {"draft_max": -3},
        {"draft_max": 10_000},
        {"draft_min": 9, "draft_max": 8},
        {"draft_p_min": 1.0},
        {"sampling": SamplingParams(temperature=-1.0)},
    ],
)
def test_invalid_decode_config_is_refused_before_anything_runs(kwargs):
    with pytest.raises(SettingsError):
        DecodeConfig(**kwargs).validate()
    with pytest.raises(SettingsError):
        Session(target=None, drafter=None, config=DecodeConfig(**kwargs))
