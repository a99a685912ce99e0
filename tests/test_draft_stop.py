"""A draft model's draft ends on its own confidence (app.engine.adaptive.ConfidenceStop).

Under sampling the output keeps the target's distribution, because the token whose
confidence ended the draft is kept: the length is a stopping time of what was drafted. The
broken twin, which leaves that token out, offers a biased draw and is caught. In a real
adaptive session the rule ends drafts, greedy output stays that of plain decoding, and the
trace keeps why a draft ended."""

from __future__ import annotations

import numpy as np

from app.engine.adaptive import ConfidenceCalibration, ConfidenceStop
from app.engine.decode_config import DecodeConfig
from app.engine.draft_model import ModelDrafter
from app.engine.drafters import EMPTY_DRAFT, Budget, Draft
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


def a_stop(limit: int = 3) -> ConfidenceStop:
    # one more token pays while the chance that all drafted pass is at least 0.2: with the
    # calibration's prior, the draft ends after a token it gave less than 0.2
    return ConfidenceStop(ConfidenceCalibration(), limit, next_accept=1.0, rate=1.0,
                          token_seconds=0.2)


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


def test_calibration_learns_how_often_sure_tokens_pass():
    calibration = ConfidenceCalibration()
    assert calibration.accept(0.97) > calibration.accept(0.5)  # the prior: as sure as it says
    for _ in range(40):
        calibration.observe(0.97, False)
        calibration.observe(0.5, True)
    assert calibration.accept(0.97) < 0.1 < 0.9 < calibration.accept(0.5)


def test_one_more_token_must_earn_what_its_time_earns_at_the_expected_rate():
    calibration = ConfidenceCalibration()
    sure = ConfidenceStop(calibration, 8, next_accept=0.9, rate=10.0, token_seconds=0.05)
    assert all(sure.keep_drafting(n, 0.999) for n in range(1, 6))  # 0.9 * ~0.97 >= 0.5
    assert not sure.keep_drafting(6, 0.3) and sure.stopped  # the chance falls to ~0.3
    busy = ConfidenceStop(calibration, 8, next_accept=0.9, rate=10.0, token_seconds=0.1)
    assert not busy.keep_drafting(1, 0.999)  # a token costing a whole expected token: no


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
