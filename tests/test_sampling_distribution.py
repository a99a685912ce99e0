"""Speculative sampling must emit tokens distributed exactly as the target alone would.

Three levels, all with fixed seeds (so each verdict is deterministic) and a G-test:
  - verify() on hand-made small-vocabulary distribution pairs, 20,000 draws per case and k:
    the first emitted token ~ p_1; after a rejection at position 1 the replacement ~
    norm(max(0, p_1 - q_1)); after an acceptance at position 1 the next token ~ p_2; and the
    acceptance rate equals sum(min(p, q)).
  - the same statistics applied to deliberately broken samplers must reject (p < 1e-6), so
    we know the tests have power.
  - end to end through Session with the tiny torch models: the first and second generated
    tokens against the target's exact processed distributions.
A correct sampler passes when p > 1e-3.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pytest
from scipy.stats import binomtest

import app.engine.speculative as speculative
from app.analysis.stats import g_test
from app.engine.decode_config import DecodeConfig
from app.engine.drafters.draft_model import ModelDrafter
from app.engine.drafters.lookup.edits import EditAwareLookup
from app.engine.drafters.suffix import SuffixDrafter
from app.engine.drafters.suffix.retry_copy import EarlierAnswer
from app.engine.records import COPIED_ON_RETRY
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from tests.helpers import (
    BROKEN_P,
    EXACT_P,
    PROMPT,
    Exact,
    always_accept,
    exact_distributions,
    first_two_tokens,
    resample_from_p,
)

N_DRAWS = 20_000  # verify-level draws per (case, k)
# draws per broken-sampler run: the expected G-statistic (noncentrality) is then >= 160 for
# every case and statistic; "close" (total variation 0.06) needs 4x the draws for that
N_BROKEN = {"close": 40_000}
N_BROKEN_DEFAULT = 10_000
SAMPLING = SamplingParams(temperature=1.0)


# --- the statistics ----------------------------------------------------------------------


def normalise(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / x.sum()


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """norm(max(0, p - q)), written out here so a broken engine cannot hide behind it."""
    return normalise(np.maximum(p - q, 0.0))


# --- verify-level simulation -------------------------------------------------------------

_rng = np.random.default_rng(7)
CASES: dict[str, tuple[np.ndarray, np.ndarray]] = {
    "q_mass_where_p_zero": (
        normalise([0.3, 0.25, 0.2, 0.15, 0.1, 0, 0, 0]),
        normalise([0.1, 0.1, 0.1, 0.1, 0.1, 0.2, 0.2, 0.1]),
    ),
    "p_mass_where_q_zero": (
        normalise([0.1, 0.1, 0.1, 0.2, 0.2, 0.1, 0.1, 0.1]),
        normalise([0.4, 0.3, 0.2, 0.1, 0, 0, 0, 0]),
    ),
    "p_equals_q": (
        normalise([0.05, 0.1, 0.15, 0.2, 0.25, 0.1, 0.1, 0.05]),
        normalise([0.05, 0.1, 0.15, 0.2, 0.25, 0.1, 0.1, 0.05]),
    ),
    "close": (
        normalise([0.2, 0.18, 0.16, 0.14, 0.12, 0.1, 0.06, 0.04]),
        normalise([0.17, 0.2, 0.15, 0.15, 0.1, 0.11, 0.07, 0.05]),
    ),
    "very_different": (
        normalise([0.7, 0.1, 0.05, 0.05, 0.04, 0.03, 0.02, 0.01]),
        normalise([0.01, 0.02, 0.03, 0.04, 0.05, 0.05, 0.1, 0.7]),
    ),
    "random_v10": (_rng.dirichlet(np.full(10, 0.7)), _rng.dirichlet(np.full(10, 0.7))),
    # an n-gram draft: q is one-hot on the proposed token
    "one_hot_q": (
        normalise([0.1, 0.15, 0.3, 0.2, 0.1, 0.05, 0.05, 0.05]),
        normalise([0, 0, 1, 0, 0, 0, 0, 0]),
    ),
}
WITH_REJECTIONS = [name for name, (p, q) in CASES.items() if not np.allclose(p, q)]


@dataclass
class Runs:
    p_rows: np.ndarray  # (k+1, V)
    q_rows: np.ndarray  # (k, V)
    first: np.ndarray  # first emitted token of each draw
    rejected: np.ndarray  # whether draft position 1 was rejected
    second: np.ndarray  # second emitted token, -1 where the step emitted only one


def rows_for(case: str, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Context-free rows: position i uses the case's pair rotated by i."""
    p, q = CASES[case]
    p_rows = np.stack([np.roll(p, i) for i in range(k + 1)])
    q_rows = np.stack([np.roll(q, i) for i in range(k)])
    return p_rows, q_rows


def sample_rows(probs: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n independent draws from one row, vectorised (inverse CDF)."""
    cumulative = np.cumsum(probs)
    index = np.searchsorted(cumulative, rng.random(n) * cumulative[-1], side="right")
    return np.minimum(index, probs.shape[0] - 1)


def simulate(case: str, k: int, n: int, seed: int, verify=None) -> Runs:
    """n verify steps of k draft tokens, each drawn from its q row."""
    verify = verify or speculative.verify
    p_rows, q_rows = rows_for(case, k)
    rng = np.random.default_rng(seed)
    drafts = np.stack([sample_rows(q_rows[i], n, rng) for i in range(k)], axis=1).tolist()
    first = np.empty(n, dtype=np.int64)
    second = np.full(n, -1, dtype=np.int64)
    rejected = np.empty(n, dtype=bool)
    for i, draft in enumerate(drafts):
        verdict = verify(draft, q_rows, p_rows, SAMPLING, rng, str)
        first[i] = verdict.emitted[0]
        rejected[i] = not verdict.records[0].accepted
        if len(verdict.emitted) > 1:
            second[i] = verdict.emitted[1]
    return Runs(p_rows, q_rows, first, rejected, second)


@functools.cache
def correct_runs(case: str, k: int) -> Runs:
    return simulate(case, k, N_DRAWS, seed=1000 * k + sorted(CASES).index(case))


# the statistics each test applies; the broken-sampler tests apply the very same functions


def first_token_pvalue(runs: Runs) -> float:
    return g_test(runs.first, runs.p_rows[0]).p_value


def replacement_pvalue(runs: Runs) -> float:
    replacements = runs.first[runs.rejected]
    return g_test(replacements, residual(runs.p_rows[0], runs.q_rows[0])).p_value


def after_acceptance_pvalue(runs: Runs) -> float:
    return g_test(runs.second[~runs.rejected], runs.p_rows[1]).p_value


def acceptance_rate_pvalue(runs: Runs) -> float:
    beta = float(np.minimum(runs.p_rows[0], runs.q_rows[0]).sum())
    accepted = int((~runs.rejected).sum())
    if beta >= 1.0:
        return 1.0 if accepted == runs.rejected.size else 0.0
    return float(binomtest(accepted, runs.rejected.size, beta).pvalue)


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("case", list(CASES))
def test_first_emitted_token_follows_target_distribution(case, k):
    assert first_token_pvalue(correct_runs(case, k)) > EXACT_P


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("case", WITH_REJECTIONS)
def test_replacement_after_rejection_follows_residual_distribution(case, k):
    runs = correct_runs(case, k)
    assert runs.rejected.sum() >= 1000
    assert replacement_pvalue(runs) > EXACT_P


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("case", list(CASES))
def test_token_after_an_accepted_first_draft_follows_next_target_row(case, k):
    runs = correct_runs(case, k)
    assert (~runs.rejected).sum() >= 1000
    assert (runs.second[~runs.rejected] >= 0).all()
    assert after_acceptance_pvalue(runs) > EXACT_P


@pytest.mark.parametrize("case", list(CASES))
def test_acceptance_rate_is_sum_of_min_p_q(case):
    assert acceptance_rate_pvalue(correct_runs(case, 2)) > EXACT_P


def test_equal_distributions_never_reject():
    assert not correct_runs("p_equals_q", 3).rejected.any()


# --- the tests have power: broken samplers are caught --------------------------------------


@pytest.mark.parametrize("case", WITH_REJECTIONS)
def test_resampling_from_p_instead_of_residual_is_detected(case, monkeypatch):
    broken = resample_from_p(monkeypatch)
    runs = simulate(case, 2, N_BROKEN.get(case, N_BROKEN_DEFAULT), seed=99, verify=broken)
    assert first_token_pvalue(runs) < BROKEN_P
    assert replacement_pvalue(runs) < BROKEN_P


@pytest.mark.parametrize("case", WITH_REJECTIONS)
def test_always_accepting_is_detected(case, monkeypatch):
    broken = always_accept(monkeypatch)
    runs = simulate(case, 2, N_BROKEN.get(case, N_BROKEN_DEFAULT), seed=98, verify=broken)
    assert first_token_pvalue(runs) < BROKEN_P
    assert acceptance_rate_pvalue(runs) < BROKEN_P


def test_broken_samplers_agree_with_correct_one_when_p_equals_q(monkeypatch):
    # sanity check of the mutants: with q == p nothing is ever rejected, so neither bug shows
    for make in (resample_from_p, always_accept):
        with monkeypatch.context() as patched:
            runs = simulate("p_equals_q", 2, 5000, seed=97, verify=make(patched))
        assert first_token_pvalue(runs) > EXACT_P


# --- end to end through Session with the tiny torch models -------------------------------

NGRAM_PROMPT = "the cat sat on the mat. the cat"  # ends in a repeat, so lookup finds a draft
N_SESSION = 1500  # Session runs per configuration (k = 3 on the first step)
SESSION_CONFIGS = {
    "t1.0": SamplingParams(temperature=1.0),
    "t0.7": SamplingParams(temperature=0.7),
    "t1.0-top_k5": SamplingParams(temperature=1.0, top_k=5),
    "t0.7-top_p0.8": SamplingParams(temperature=0.7, top_p=0.8),
}


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """The tiny models run thousands of one-token passes: one thread is several times faster
    than several (no thread wake-ups per op), and far faster on a busy machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def session_runs(hf_pair):
    """Per configuration: exact distributions and N_SESSION sampled runs, computed on demand."""
    target, draft = hf_pair
    cache: dict[str, tuple[Exact, np.ndarray]] = {}

    def get(name: str, drafter_kind: str = "model"):
        key = f"{name}/{drafter_kind}"
        if key not in cache:
            params = SESSION_CONFIGS[name]
            if drafter_kind == "model":
                drafter, prompt_ids = ModelDrafter(draft), target.tokenize(PROMPT)
            else:
                drafter, prompt_ids = EditAwareLookup(), target.tokenize(NGRAM_PROMPT)
            exact = exact_distributions(target, prompt_ids, params)
            tokens = first_two_tokens(target, drafter, prompt_ids, params, N_SESSION, 10_000)
            cache[key] = (exact, tokens)
        return cache[key]

    return get


@pytest.mark.parametrize("name", list(SESSION_CONFIGS))
def test_session_first_token_matches_target_distribution(session_runs, name):
    exact, tokens = session_runs(name)
    assert set(tokens[:, 0].tolist()) <= set(np.flatnonzero(exact.first).tolist())
    assert g_test(tokens[:, 0], exact.first).p_value > EXACT_P


@pytest.mark.parametrize("name", list(SESSION_CONFIGS))
def test_session_second_token_matches_target_marginal(session_runs, name):
    exact, tokens = session_runs(name)
    assert set(tokens[:, 1].tolist()) <= set(np.flatnonzero(exact.second).tolist())
    assert g_test(tokens[:, 1], exact.second).p_value > EXACT_P


def test_session_with_ngram_drafter_matches_target_distribution(hf_pair, session_runs):
    target, _ = hf_pair
    config = DecodeConfig(n_predict=4, draft_max=3, sampling=SamplingParams(1.0, seed=1))
    session = Session(target, EditAwareLookup(), config)
    first_step = next(session.steps(target.tokenize(NGRAM_PROMPT)))
    assert first_step.k > 0 and first_step.tokens[0].q == 1.0  # a one-hot draft is judged
    exact, tokens = session_runs("t1.0", "ngram")
    assert g_test(tokens[:, 0], exact.first).p_value > EXACT_P
    assert g_test(tokens[:, 1], exact.second).p_value > EXACT_P


def test_session_with_a_retry_copy_matches_target_distribution(hf_pair):
    """A retried prompt drafts its remembered answer whole and one-hot
    (app.engine.drafters.suffix.retry_copy); sampled, the answer is judged as any copy is, so the
    output
    keeps the target's distribution whether the copy passes or departs."""
    target, _ = hf_pair
    params = SESSION_CONFIGS["t1.0"]
    prompt_ids = target.tokenize(PROMPT)
    exact = exact_distributions(target, prompt_ids, params)
    likeliest = int(np.argmax(exact.first))
    answer = EarlierAnswer(1, [likeliest, int(np.argmax(exact.second)), likeliest])
    drafter = SuffixDrafter(recall=lambda ids: [answer] if list(ids) == list(prompt_ids) else [])
    config = DecodeConfig(n_predict=4, draft_max=3, sampling=SamplingParams(1.0, seed=1))
    first_step = next(Session(target, drafter, config).steps(prompt_ids))
    assert first_step.k == 3 and all(t.copied_from is not None
                                     and t.copied_from.kind == COPIED_ON_RETRY
                                     for t in first_step.tokens)
    tokens = first_two_tokens(target, drafter, prompt_ids, params, N_SESSION, 20_000)
    assert g_test(tokens[:, 0], exact.first).p_value > EXACT_P
    assert g_test(tokens[:, 1], exact.second).p_value > EXACT_P


def test_session_level_test_detects_resampling_from_p(hf_pair, monkeypatch):
    target, draft = hf_pair
    prompt_ids = target.tokenize(PROMPT)
    # top-k 5 makes the tiny draft's and target's supports differ: expected G about 170
    params = SESSION_CONFIGS["t1.0-top_k5"]
    exact = exact_distributions(target, prompt_ids, params)
    resample_from_p(monkeypatch)
    tokens = first_two_tokens(target, ModelDrafter(draft), prompt_ids, params, 800, 50_000)
    assert g_test(tokens[:, 0], exact.first).p_value < BROKEN_P
