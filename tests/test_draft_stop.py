"""A draft model's draft ends on its own confidence (app.engine.estimates.ConfidenceStop).

Under sampling the output keeps the target's distribution, because the token whose
confidence ended the draft is kept: the length is a stopping time of what was drafted. The
broken twin, which leaves that token out, offers a biased draw and is caught. In a real
adaptive session the rule ends drafts, greedy output stays that of plain decoding, and the
trace keeps why a draft ended."""

from __future__ import annotations

import numpy as np

from app.engine.decode_config import DecodeConfig
from app.engine.drafters import EMPTY_DRAFT, Budget, Draft
from app.engine.drafters.draft_model import ModelDrafter
from app.engine.estimates import ConfidenceStop
from app.engine.sampling import SamplingParams, choose
from app.engine.session import Session
from app.engine.trace import step_from_dict, step_to_dict
from tests.helpers import (
    BROKEN_P,
    EXACT_P,
    PROMPT,
    adaptive_session,
    assert_drafted,
    first_two_pvalues,
)

TEMPERATURE = 0.3  # the tiny draft is then sure of some tokens and unsure of others
N_RUNS = 1500


def straight(limit: int, per_token: float, base: float = 1.0) -> list[float]:
    """Pass seconds for m = 0..limit drafted tokens, on a straight line."""
    return [base + per_token * m for m in range(limit + 1)]


def a_stop(limit: int = 3) -> ConfidenceStop:
    # one more token pays while the chance that all drafted pass (the product of their q's)
    # is at least 0.2: the draft ends after a token it gave less than 0.2
    return ConfidenceStop(limit, next_accept=1.0, rate=1.0, seconds=straight(limit, 0.2))


class StopsOnConfidence(ModelDrafter):
    """A draft model whose every draft may end on its confidence (up to three tokens)."""

    def propose(self, context, budget, params, rng):
        stop = a_stop()
        return super().propose(context, Budget(stop.limit, stop), params, rng)


class LeavesOutTheUnsureToken(ModelDrafter):
    """The broken rule: when a drawn token's confidence ends the draft, drop that token."""

    def propose(self, context, budget, params, rng):
        stop = a_stop()
        q = self._first(context, params)
        tokens, rows = [], []
        while q is not None and len(tokens) < stop.limit:
            token = choose(q, params, rng)
            if not stop.keep_drafting(len(tokens) + 1, float(q[token])):
                break
            tokens.append(token)
            rows.append(q)
            q = self._next(token, params)
        return Draft(tokens, np.stack(rows)) if tokens else EMPTY_DRAFT


def test_the_rule_ends_some_drafts_and_not_others(hf_pair):
    target, draft = hf_pair
    params = SamplingParams(temperature=TEMPERATURE, seed=1)
    rng = np.random.default_rng(1)
    lengths = {len(StopsOnConfidence(draft).propose(target.tokenize(PROMPT), Budget(3), params, rng)
                   .tokens) for _ in range(200)}
    assert {1, 2} <= lengths  # otherwise the tests below test nothing


def test_a_confidence_stop_keeps_the_target_distribution(hf_pair):
    target, draft = hf_pair
    first, second = first_two_pvalues(target, StopsOnConfidence(draft),
                                      SamplingParams(temperature=TEMPERATURE), N_RUNS, 40_000)
    assert first > EXACT_P
    assert second > EXACT_P


def test_power_leaving_out_the_unsure_token_is_caught(hf_pair):
    target, draft = hf_pair
    first, _ = first_two_pvalues(target, LeavesOutTheUnsureToken(draft),
                                 SamplingParams(temperature=TEMPERATURE), N_RUNS, 40_000)
    assert first < BROKEN_P


def test_one_more_token_must_earn_what_its_time_earns_at_the_expected_rate():
    sure = ConfidenceStop(8, next_accept=0.9, rate=10.0, seconds=straight(8, 0.05))
    assert all(sure.keep_drafting(n, 0.999) for n in range(1, 6))  # 0.9 * 0.995 >= 0.5
    assert not sure.keep_drafting(6, 0.3) and sure.stopped  # the chance falls to ~0.3
    busy = ConfidenceStop(8, next_accept=0.9, rate=10.0, seconds=straight(8, 0.1))
    assert not busy.keep_drafting(1, 0.999)  # a token costing a whole expected token: no


def test_a_draft_runs_on_to_a_longer_pass_that_costs_little_more():
    # the demo target on 2 threads: a 4-token pass (3 drafted) costs less than a 3-token one,
    # so one token more costs 0.06 s at 14 tok/s (0.84 tokens' time) but two cost 0.02 s
    seconds = [0.075, 0.153, 0.228, 0.250, 0.340, 0.420]
    stop = ConfidenceStop(5, next_accept=0.9, rate=14.0, seconds=seconds)
    assert stop.keep_drafting(1, 0.95)  # 0.95 * (0.9 + 0.81) = 1.62 tokens for 0.10 s
    assert stop.keep_drafting(2, 0.95)  # 0.81 for 0.02 s
    assert not stop.keep_drafting(3, 0.95) and stop.stopped  # 0.77 for 0.09 s (1.26 tokens' time)
    # the slope alone said stop after the first token: 0.95 * 0.9 < 14 * (0.228 - 0.153)
    line = ConfidenceStop(5, next_accept=0.9, rate=14.0, seconds=straight(5, 0.075, 0.075))
    assert not line.keep_drafting(1, 0.95)


def test_adaptive_session_ends_drafts_on_confidence_and_stays_greedy_exact(hf_pair):
    target, draft = hf_pair
    prompt_ids = target.tokenize(PROMPT)
    plain = Session(target, None,
                    DecodeConfig(n_predict=40, sampling=SamplingParams(temperature=0.0)))
    list(plain.steps(prompt_ids))
    session = adaptive_session(target, draft)
    steps = list(session.steps(prompt_ids))
    assert session.output_ids == plain.output_ids
    assert_drafted(steps)
    ended = [s for s in steps if s.stop_chance is not None]
    assert ended and all(s.k < 8 for s in ended)
    again = step_from_dict(step_to_dict(ended[0]))
    assert again.stop_chance == ended[0].stop_chance
