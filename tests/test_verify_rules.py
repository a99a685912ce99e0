"""The deterministic rules of one verify step, on hand-made distributions."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.diagnostics import describe, entropy
from app.engine.drafters import Draft
from app.engine.records import ORIGIN_ACCEPTED, ORIGIN_BONUS, ORIGIN_PLAIN, ORIGIN_REPLACEMENT
from app.engine.sampling import SamplingParams
from app.engine.speculative import verify

GREEDY = SamplingParams(temperature=0.0)
SAMPLE = SamplingParams(temperature=1.0)
V = 8


def text_of(token: int) -> str:
    return f"<{token}>"


def peaked(best: int, mass: float = 0.6, vocab: int = V) -> np.ndarray:
    row = np.full(vocab, (1.0 - mass) / (vocab - 1))
    row[best] = mass
    return row


def rows(*bests: int) -> np.ndarray:
    return np.stack([peaked(b) for b in bests])


def uniform_rows(n: int) -> np.ndarray:
    return np.full((n, V), 1.0 / V)


class FixedUniform:
    """A stand-in generator whose random() always returns the same value."""

    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


# --- greedy ------------------------------------------------------------------------------


def test_greedy_accepts_while_draft_is_argmax_and_emits_argmax_at_first_mismatch():
    p_rows = rows(2, 3, 4, 5)
    verdict = verify([2, 3, 1], uniform_rows(3), p_rows, GREEDY, np.random.default_rng(0),
                     text_of)
    assert verdict.emitted == [2, 3, 4]
    assert verdict.origins == [ORIGIN_ACCEPTED, ORIGIN_ACCEPTED, ORIGIN_REPLACEMENT]
    assert [r.accepted for r in verdict.records] == [True, True, False]
    rejected = verdict.records[-1]
    assert rejected.replacement == 4 and rejected.replacement_text == "<4>"
    assert not rejected.residual_used
    assert all(r.u is None for r in verdict.records)


def test_greedy_bonus_is_argmax_of_row_after_last_draft_when_all_pass():
    verdict = verify([2, 3, 4], uniform_rows(3), rows(2, 3, 4, 6), GREEDY,
                     np.random.default_rng(0), text_of)
    assert verdict.emitted == [2, 3, 4, 6]
    assert verdict.origins == [ORIGIN_ACCEPTED] * 3 + [ORIGIN_BONUS]
    assert all(r.accepted and r.replacement is None for r in verdict.records)


def test_greedy_rejects_at_first_position_and_judges_nothing_after():
    verdict = verify([0, 3, 4], uniform_rows(3), rows(2, 3, 4, 6), GREEDY,
                     np.random.default_rng(0), text_of)
    assert verdict.emitted == [2]
    assert verdict.origins == [ORIGIN_REPLACEMENT]
    assert len(verdict.records) == 1


def test_greedy_ignores_q_entirely():
    # the draft's own confidence never matters under greedy, only p's argmax
    q_rows = np.stack([peaked(7, 0.99)] * 2)
    verdict = verify([2, 3], q_rows, rows(2, 3, 1), GREEDY, np.random.default_rng(0), text_of)
    assert verdict.emitted == [2, 3, 1]


def test_no_draft_is_a_plain_step():
    verdict = verify([], uniform_rows(0), rows(5), GREEDY, np.random.default_rng(0), text_of)
    assert verdict.emitted == [5]
    assert verdict.origins == [ORIGIN_PLAIN]
    assert verdict.records == []


# --- records -----------------------------------------------------------------------------


def test_records_carry_p_q_u_position_text_and_top_alternatives():
    rng = np.random.default_rng(5)
    p_rows = np.stack([rng.dirichlet(np.ones(V)) for _ in range(4)])
    q_rows = np.stack([rng.dirichlet(np.ones(V)) for _ in range(3)])
    draft = [1, 4, 6]
    verdict = verify(draft, q_rows, p_rows, SAMPLE, np.random.default_rng(1), text_of,
                     start_pos=17)
    assert all(not r.top and r.p_entropy == 0.0 for r in verdict.records)  # not yet: shown
    describe(verdict.judged, text_of, top_n=3)
    assert len(verdict.records) >= 1
    for i, record in enumerate(verdict.records):
        token = draft[i]
        assert record.pos == 17 + i
        assert record.token == token and record.text == text_of(token)
        assert record.p == pytest.approx(p_rows[i][token])
        assert record.q == pytest.approx(q_rows[i][token])
        assert record.u is not None and 0.0 <= record.u < 1.0
        assert record.accepted == (record.u * record.q < record.p)
        best = np.argsort(-p_rows[i], kind="stable")[:3]
        assert [a.token for a in record.top] == best.tolist()
        for alt in record.top:
            assert alt.text == text_of(alt.token)
            assert alt.p == pytest.approx(p_rows[i][alt.token])
            assert alt.q == pytest.approx(q_rows[i][alt.token])
        assert record.p_entropy == pytest.approx(entropy(p_rows[i]), rel=1e-5)
        assert record.q_entropy == pytest.approx(entropy(q_rows[i]), rel=1e-5)


def test_emitted_is_accepted_prefix_plus_exactly_one_target_token():
    rng = np.random.default_rng(11)
    for _ in range(300):
        p_rows = np.stack([rng.dirichlet(np.ones(V)) for _ in range(5)])
        q_rows = np.stack([rng.dirichlet(np.ones(V)) for _ in range(4)])
        draft = [int(rng.choice(V, p=q)) for q in q_rows]
        verdict = verify(draft, q_rows, p_rows, SAMPLE, rng, text_of)
        n = sum(r.accepted for r in verdict.records)
        assert [r.accepted for r in verdict.records] == [True] * n + [False] * (
            len(verdict.records) - n)
        assert len(verdict.emitted) == n + 1
        assert verdict.emitted[:n] == draft[:n]
        last = verdict.records[-1]
        if last.accepted:
            assert n == 4 and verdict.origins[-1] == ORIGIN_BONUS
        else:
            assert verdict.emitted[-1] == last.replacement and last.residual_used
            assert verdict.origins[-1] == ORIGIN_REPLACEMENT


def test_distribution_rows_after_a_rejection_are_never_read():
    # Session computes target rows lazily and relies on this
    class Recording:
        def __init__(self, data):
            self.data, self.read = data, []

        def __getitem__(self, i):
            self.read.append(i)
            return self.data[i]

    p_rows = Recording(rows(2, 3, 4, 5, 6))
    q_rows = Recording(uniform_rows(4))
    verdict = verify([2, 0, 4, 5], q_rows, p_rows, GREEDY, np.random.default_rng(0), text_of)
    assert verdict.emitted == [2, 3]
    assert max(p_rows.read) == 1 and max(q_rows.read) == 1


# --- sampling ----------------------------------------------------------------------------


def test_sampling_always_accepts_when_q_equals_p():
    rng = np.random.default_rng(3)
    for _ in range(500):
        p_rows = np.stack([rng.dirichlet(np.full(V, 0.5)) for _ in range(4)])
        draft = [int(rng.choice(V, p=p)) for p in p_rows[:3]]
        verdict = verify(draft, p_rows[:3].copy(), p_rows, SAMPLE, rng, text_of)
        assert all(r.accepted for r in verdict.records)
        assert verdict.emitted[:3] == draft and verdict.origins[-1] == ORIGIN_BONUS


def test_sampling_always_accepts_when_p_at_least_q_at_the_token():
    p = peaked(3, 0.5)
    q = peaked(3, 0.4)
    for seed in range(300):
        verdict = verify([3], q[None], np.stack([p, p]), SAMPLE, np.random.default_rng(seed),
                         text_of)
        assert verdict.records[0].accepted


def test_sampling_always_rejects_a_token_the_target_gives_zero_probability():
    p = peaked(2)
    p[5] = 0.0
    p /= p.sum()
    q = peaked(5, 0.9)
    for seed in range(300):
        verdict = verify([5], q[None], np.stack([p, p]), SAMPLE, np.random.default_rng(seed),
                         text_of)
        assert not verdict.records[0].accepted
        assert verdict.emitted[0] != 5


def test_zero_probability_token_is_rejected_even_when_u_is_zero():
    p = np.array([0.5, 0.5, 0.0, 0.0])
    q = np.array([0.0, 0.0, 0.5, 0.5])
    verdict = verify([2], q[None], np.stack([p, p]), SAMPLE, FixedUniform(0.0), text_of)
    assert not verdict.records[0].accepted
    assert verdict.records[0].u == 0.0
    assert verdict.emitted[0] in (0, 1)


def test_acceptance_is_u_below_p_over_q():
    p = np.array([0.3, 0.7, 0.0, 0.0])
    q = np.array([0.6, 0.4, 0.0, 0.0])
    # p/q at token 0 is 0.5
    assert verify([0], q[None], np.stack([p, p]), SAMPLE, FixedUniform(0.49), text_of) \
        .records[0].accepted
    assert not verify([0], q[None], np.stack([p, p]), SAMPLE, FixedUniform(0.51), text_of) \
        .records[0].accepted


def test_replacement_comes_from_residual_support_only():
    # residual max(0, p - q) is positive only on tokens 0 and 1
    p = np.array([0.4, 0.3, 0.2, 0.1, 0.0])
    q = np.array([0.1, 0.1, 0.3, 0.2, 0.3])
    seen = set()
    for seed in range(400):
        verdict = verify([4], q[None], np.stack([p, p]), SAMPLE, np.random.default_rng(seed),
                         text_of)
        assert verdict.records[0].residual_used
        seen.add(verdict.emitted[0])
    assert seen == {0, 1}


def test_rejected_token_is_never_its_own_replacement():
    rng = np.random.default_rng(8)
    for _ in range(500):
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        token = int(rng.choice(V, p=q))
        verdict = verify([token], q[None], np.stack([p, p]), SAMPLE, rng, text_of)
        if not verdict.records[0].accepted:
            assert verdict.emitted[0] != token


# --- one-hot q (n-gram drafts: Draft.q_rows is None) ---------------------------------------


def one_hot_rows(draft: Draft, vocab: int) -> np.ndarray:
    return np.stack([draft.q_row(i, vocab) for i in range(len(draft.tokens))])


def test_one_hot_draft_row_is_one_at_the_token():
    draft = Draft([3, 1], None)
    q = one_hot_rows(draft, V)
    assert q.shape == (2, V)
    assert q[0, 3] == 1.0 and q[1, 1] == 1.0 and q.sum() == 2.0


def test_one_hot_draft_accepted_with_probability_p_of_token():
    draft = Draft([3], None)
    q_rows = one_hot_rows(draft, V)
    p = peaked(3, 0.3)
    p_rows = np.stack([p, p])
    rng = np.random.default_rng(21)
    n = 4000
    accepted = 0
    for _ in range(n):
        verdict = verify(draft.tokens, q_rows, p_rows, SAMPLE, rng, text_of)
        record = verdict.records[0]
        assert record.q == 1.0
        accepted += record.accepted
        if not record.accepted:
            # the residual of a one-hot q is p without the drafted token
            assert verdict.emitted[0] != 3
    # binomial(4000, 0.3): sd 29; 6 sd bound
    assert abs(accepted - 0.3 * n) < 6 * np.sqrt(n * 0.3 * 0.7)


def test_one_hot_draft_under_greedy_matches_argmax_rule():
    draft = Draft([3, 4], None)
    verdict = verify(draft.tokens, one_hot_rows(draft, V), rows(3, 6, 1), GREEDY,
                     np.random.default_rng(0), text_of)
    assert verdict.emitted == [3, 6]
    assert [r.accepted for r in verdict.records] == [True, False]


def test_one_hot_draft_on_the_only_target_token_is_always_accepted():
    draft = Draft([2], None)
    p = np.zeros(V)
    p[2] = 1.0
    for seed in range(100):
        verdict = verify(draft.tokens, one_hot_rows(draft, V), np.stack([p, p]), SAMPLE,
                         np.random.default_rng(seed), text_of)
        assert verdict.records[0].accepted and verdict.emitted == [2, 2]
