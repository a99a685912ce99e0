"""--draft-p-min under sampling: the decision to stop drafting is made from the draft's best
candidate before drawing (as llama.cpp does), so every drafted token is a plain draw from the
q row the verdict uses and the output keeps the target's distribution. Stopping on the drawn
token's own probability instead biases what is drafted, and the test catches it."""

from __future__ import annotations

import numpy as np

from app.engine.decode_config import StopRule
from app.engine.drafters import EMPTY_DRAFT, Budget, Draft
from app.engine.drafters.draft_model import ModelDrafter
from app.engine.sampling import SamplingParams, choose
from tests.helpers import BROKEN_P, EXACT_P, PROMPT, first_two_pvalues

P_MIN = 0.1
TEMPERATURE = 0.3  # the tiny draft then gives about half its mass to tokens above P_MIN
N_RUNS = 1500


class StopsOnTheDrawnToken(ModelDrafter):
    """The broken rule: draw, then stop if the drawn token's q is below p-min."""

    def propose(self, context, budget, params, rng):
        k = budget.max_tokens
        q = self._first(context, params)
        tokens, rows = [], []
        while q is not None:
            token = choose(q, params, rng)
            if q[token] < self.rule.p_min:
                break
            tokens.append(token)
            rows.append(q)
            if len(tokens) == k:
                break
            q = self._next(token, params)
        return Draft(tokens, np.stack(rows)) if tokens else EMPTY_DRAFT


def test_p_min_keeps_the_target_distribution(hf_pair):
    target, draft = hf_pair
    first, second = first_two_pvalues(target, ModelDrafter(draft, StopRule(p_min=P_MIN)),
                                      SamplingParams(temperature=TEMPERATURE), N_RUNS, 30_000)
    assert first > EXACT_P
    assert second > EXACT_P


def test_power_stopping_on_the_drawn_token_is_caught(hf_pair):
    target, draft = hf_pair
    first, _ = first_two_pvalues(target, StopsOnTheDrawnToken(draft, StopRule(p_min=P_MIN)),
                                 SamplingParams(temperature=TEMPERATURE), N_RUNS, 30_000)
    assert first < BROKEN_P


def test_p_min_that_stops_at_once_drafts_nothing(hf_pair):
    target, draft = hf_pair
    drafter = ModelDrafter(draft, StopRule(p_min=0.999))
    rng = np.random.default_rng(0)
    draft = drafter.propose(target.tokenize(PROMPT), Budget(4), SamplingParams(1.0), rng)
    assert draft is EMPTY_DRAFT
