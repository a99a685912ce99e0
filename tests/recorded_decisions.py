"""Decisions as the controller records them, and a run of them read back through the trace
format, for the tests of the window's reasons (tests/test_reasons.py, tests/test_ui_reasons.py)."""

from __future__ import annotations

import json

from app.engine.records import RULE_NO_GAIN, RULE_PROBE, Decision
from app.engine.trace import step_from_dict, step_to_dict
from tests.helpers import step

PRIOR = 0.6


def no_gain(evidence: int, acceptance: float, alternative_gain: float = 0.97) -> Decision:
    """k = 0: the best draft (k = 3, 2.4 expected tokens) priced below the 1.05x margin; its
    pass time is what that gain implies (gain = E(k) * plain / pass), as the controller's."""
    plain, tokens = 0.073, 2.4
    return Decision(RULE_NO_GAIN, 0, kind="draft model", limit=8, acceptance=acceptance,
                    acceptance_low=0.35, acceptance_high=0.98, evidence=evidence, prior=PRIOR,
                    plain_seconds=plain, pass_seconds=plain, expected_tokens=1.0, gain=1.0,
                    alternative_k=3, alternative_gain=alternative_gain,
                    alternative_seconds=tokens * plain / alternative_gain,
                    alternative_tokens=tokens, min_gain=1.05)


def probe(k: int, evidence: int) -> Decision:
    return Decision(RULE_PROBE, k, kind="draft model", limit=8, acceptance=PRIOR,
                    evidence=evidence, prior=PRIOR, plain_seconds=0.073, pass_seconds=0.19,
                    gain=0.96, alternative_k=0, alternative_gain=1.0, min_gain=1.05)


def replayed(steps):
    """The steps as a trace gives them back: each through its JSON line."""
    return [step_from_dict(json.loads(json.dumps(step_to_dict(s)))) for s in steps]


def all_accepted_few_drafted():
    """The issue's first run: 96 steps, 4 drafted (1, 2, 6 and 1 tokens, every one accepted,
    10 in all), the other 92 plain because no k beat plain decoding by the margin."""
    drafted = {10: 1, 30: 2, 60: 6, 90: 1}
    steps, seen = [], 0
    for i in range(96):
        if i in drafted:
            k = drafted[i]
            s = step(i, k, [True] * k)
            s.decision = probe(k, seen)
            seen += k
        else:
            s = step(i, 0, [])
            s.decision = no_gain(seen, PRIOR if seen == 0 else 0.61)
        steps.append(s)
    return replayed(steps)
