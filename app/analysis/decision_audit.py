"""Whether each recorded decision reproduces its own figures: a reader of a trace can check
that the Why lines it shows follow from the numbers beside them.

For a decision that priced its k (every rule but the ones that need no price): the gain is
E(k) x plain step / pass within 2%, E(k) follows from the per-position acceptance it records
within 3% (E(k) = 1 + a0 + a0 a1 + ...), its prices name the plain step and the pass it states,
a step decoded plainly for no gain had no alternative at the margin, a step drafted at the
best rate met it, and a padded pass was priced below its own size. For a copy priced from its
source and match (app.engine.estimates), each position's acceptance follows from the source,
the match and the kind's own rates it records.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.engine.estimates import CopyEvidence, copy_accept_at
from app.engine.records import (
    RULE_BEST_RATE,
    RULE_FIXED,
    RULE_MEASURE,
    RULE_NO_GAIN,
    RULE_PROBE,
    Decision,
    StepRecord,
)

GAIN_TOLERANCE = 0.02
TOKENS_TOLERANCE = 0.03
_PRICED_RULES = (RULE_BEST_RATE, RULE_NO_GAIN, RULE_PROBE, RULE_FIXED)


def expected_tokens(accept_at: Sequence[float], k: int) -> float:
    """E(k) = 1 + a0 + a0 a1 + ... over the first k positions."""
    total, reach = 1.0, 1.0
    for rate in accept_at[:k]:
        reach *= rate
        total += reach
    return total


def _near(value: float, expected: float, tolerance: float) -> bool:
    return abs(value - expected) <= tolerance * abs(expected)


def copy_problems(d: Decision) -> list[str]:
    """Whether a copy's acceptance follows from its recorded source, match, splits and learnt
    rates."""
    if d.copy_source is None or d.copy_match is None or d.learnt_at is None \
            or d.learnt_evidence is None:
        return []
    copy = CopyEvidence(d.copy_source, d.copy_match, tuple(d.copy_splits or ()))
    predicted = copy_accept_at(copy, d.learnt_at, d.learnt_evidence)
    wrong = [i for i, (a, b) in enumerate(zip(d.accept_at, predicted, strict=False))
             if not _near(a, b, TOKENS_TOLERANCE)]
    if wrong or len(predicted) != len(d.accept_at):
        at = wrong[0] if wrong else min(len(predicted), len(d.accept_at))
        return [f"the acceptance at draft position {at + 1} does not follow from a copy of the "
                f"{d.copy_source} matching {d.copy_match} tokens and the rates learnt"]
    return []


def decision_problems(d: Decision) -> list[str]:
    """What in one decision does not follow from its own figures (empty: all of it does)."""
    if d.rule == RULE_MEASURE or d.rule not in _PRICED_RULES or d.gain is None:
        return []
    if None in (d.expected_tokens, d.plain_seconds, d.pass_seconds):
        return [f"rule {d.rule} states a gain without the figures it came from"]
    assert d.expected_tokens is not None and d.plain_seconds is not None
    assert d.pass_seconds is not None
    problems = copy_problems(d)
    if not _near(d.gain, d.expected_tokens * d.plain_seconds / d.pass_seconds, GAIN_TOLERANCE):
        problems.append(f"gain {d.gain:.3f} is not E(k) x plain / pass = "
                        f"{d.expected_tokens * d.plain_seconds / d.pass_seconds:.3f}")
    if not _near(d.expected_tokens, expected_tokens(d.accept_at, d.k), TOKENS_TOLERANCE):
        problems.append(f"E(k = {d.k}) {d.expected_tokens:.3f} does not follow from the stated "
                        f"acceptance ({expected_tokens(d.accept_at, d.k):.3f})")
    if d.prices and (d.prices[0] != d.plain_seconds or d.prices[d.k] != d.pass_seconds):
        problems.append("the plain step or the pass is not the price list's")
    if d.padded_to is not None and (d.unpadded_seconds is None
                                    or d.unpadded_seconds <= d.pass_seconds):
        problems.append(f"the pass was padded to {d.padded_to} tokens though not priced below "
                        "its own size")
    if d.alternative_k is not None and d.alternative_tokens is not None and \
            not _near(d.alternative_tokens, expected_tokens(d.accept_at, d.alternative_k),
                      TOKENS_TOLERANCE):
        problems.append(f"the alternative k = {d.alternative_k}'s E(k) does not follow from "
                        "the stated acceptance")
    if d.rule == RULE_NO_GAIN and d.min_gain is not None and d.alternative_gain is not None \
            and d.alternative_gain >= d.min_gain:
        problems.append(f"decoded plainly although k = {d.alternative_k} was priced at "
                        f"{d.alternative_gain:.3f}x, at least the margin {d.min_gain:.2f}x")
    if d.rule == RULE_BEST_RATE and d.min_gain is not None and d.gain < d.min_gain:
        problems.append(f"drafted at the best rate priced {d.gain:.3f}x, short of the margin "
                        f"{d.min_gain:.2f}x")
    return problems


def audit(steps: Sequence[StepRecord]) -> list[str]:
    """Every step whose decision does not reproduce its figures, one line each."""
    return [f"step {step.index + 1}: {problem}" for step in steps
            if step.decision is not None for problem in decision_problems(step.decision)]


def audit_line(steps: Sequence[StepRecord]) -> str:
    """One line for `draftlens trace FILE --analysis`."""
    priced = sum(1 for s in steps if s.decision is not None and s.decision.gain is not None)
    problems = audit(steps)
    if not problems:
        return (f"decisions: all {priced} priced decisions reproduce their own figures "
                "(gain = E(k) x plain / pass, E(k) from the stated acceptance, a copy's "
                "acceptance from its source and match)")
    return "decisions that do not reproduce their figures:\n  " + "\n  ".join(problems)
