"""Every step with a drafter carries the controller's decision (app.engine.records.Decision):
the rule that fired and the figures it compared, and those figures imply the k taken."""

from __future__ import annotations

import pytest

from app.engine.adaptive import DraftLengthController, PassOutcome
from app.engine.cost_curve import MIN_SAMPLES, VerifyCostCurve
from app.engine.decode_config import DecodeConfig
from app.engine.drafters.draft_model import DRAFT_MODEL, ModelDrafter
from app.engine.estimates import wilson_interval
from app.engine.records import (
    RULE_BEST_RATE,
    RULE_END_OF_OUTPUT,
    RULE_FIXED,
    RULE_MEASURE,
    RULE_NO_GAIN,
    RULE_NOTHING_TO_DRAFT,
    RULE_PROBE,
    Decision,
    StepRecord,
)
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from app.engine.trace import step_from_dict, step_to_dict

GREEDY = SamplingParams(temperature=0.0)
PROMPT = "def add(a, b):\n    return"


def expected_from(accept_at: list[float], k: int) -> float:
    """E(k) from per-position acceptance, computed here, not by the engine's function."""
    total, reach = 1.0, 1.0
    for a in accept_at[:k]:
        reach *= a
        total += reach
    return total


def assert_figures_imply_k(step: StepRecord, decision: Decision) -> None:
    """The rule and its figures account for the k this step took, and reproduce each other:
    gain = E(k) x plain / pass within 2%, E(k) from the stated acceptance within 3%."""
    if decision.rule in (RULE_END_OF_OUTPUT, RULE_NOTHING_TO_DRAFT):
        assert decision.k == step.k == 0
        return
    if decision.gain is None:  # a pass timed to price it, or fixed k before prices exist
        assert decision.rule in (RULE_MEASURE, RULE_FIXED) and not decision.prices
        assert decision.rule == RULE_FIXED or decision.measuring == step.n_pass
        return
    assert decision.gain == pytest.approx(
        decision.expected_tokens * decision.plain_seconds / decision.pass_seconds, rel=0.02)
    assert decision.expected_tokens == pytest.approx(
        expected_from(decision.accept_at, decision.k), rel=0.03)
    assert decision.prices[decision.k] == decision.pass_seconds
    assert decision.prices[0] == decision.plain_seconds
    if decision.alternative_k is not None:
        assert decision.alternative_gain == pytest.approx(
            decision.alternative_tokens * decision.plain_seconds
            / decision.alternative_seconds, rel=0.02)
        assert decision.alternative_tokens == pytest.approx(
            expected_from(decision.accept_at, decision.alternative_k), rel=0.03)
    assert decision.acceptance_low <= decision.acceptance_high
    if decision.rule == RULE_FIXED:
        assert step.k <= decision.k == decision.limit  # a drafter may offer less
        return
    if decision.stop_limit is None:
        assert step.k <= decision.k  # k, or less where the drafter ran out (an end of text)
    else:
        assert step.k <= decision.stop_limit  # the draft model's confidence ended it
    if decision.rule == RULE_BEST_RATE:
        assert decision.k > 0 and decision.gain >= decision.min_gain
        assert decision.alternative_k is None or decision.gain >= decision.alternative_gain
    elif decision.rule == RULE_NO_GAIN:
        assert decision.k == step.k == 0 and decision.gain == 1.0
        assert decision.alternative_gain < decision.min_gain  # the best drafting k fell short
    else:
        assert decision.rule == RULE_PROBE
        assert decision.k > 0 and decision.gain < decision.min_gain  # priced not to pay


def judged_before(steps: list[StepRecord], i: int) -> tuple[int, int]:
    """Accepted and judged draft tokens in the steps before step i (one kind of draft)."""
    outcomes = [ok for s in steps[:i] if s.k for ok in s.depth_outcomes()]
    return sum(outcomes), len(outcomes)


@pytest.fixture(params=["noisy draft", "the target's own weights"])
def pair(request, gguf_pair, gguf_files):
    """The tiny target with a draft that is often rejected, or one that never is."""
    if request.param == "noisy draft":
        yield gguf_pair
        return
    from backends.llamacpp import LlamaCppModel

    twin = LlamaCppModel(gguf_files[0], n_gpu_layers=0, n_ctx=512)
    yield gguf_pair[0], twin
    twin.close()


def test_every_adaptive_step_records_the_rule_and_figures_that_chose_its_k(pair):
    target, draft = pair
    prompt = target.tokenize(PROMPT)
    config = DecodeConfig(n_predict=48, draft_max=6, adaptive=True, sampling=GREEDY)
    session = Session(target, ModelDrafter(draft), config,
                      cost_curve=VerifyCostCurve({1: 0.002, 7: 0.002}))
    steps = list(session.steps(prompt))
    assert all(s.decision is not None for s in steps)
    rules = {s.decision.rule for s in steps}
    # the first passes price the draft token and the pass sizes from the run's own timings
    assert steps[0].decision.rule == RULE_MEASURE and steps[0].k > 0  # a draft at once
    assert rules & {RULE_BEST_RATE, RULE_NO_GAIN} and RULE_END_OF_OUTPUT in rules, rules
    for i, s in enumerate(steps):
        decision = s.decision
        assert decision.kind == DRAFT_MODEL.name
        assert_figures_imply_k(s, decision)
        if decision.rule in (RULE_BEST_RATE, RULE_NO_GAIN, RULE_PROBE):
            assert decision.prior == DRAFT_MODEL.prior
            # the evidence is every draft token judged before this step, and the interval
            # is theirs
            hits, judged = judged_before(steps, i)
            assert decision.evidence == judged
            assert (decision.acceptance_low, decision.acceptance_high) == \
                pytest.approx(wilson_interval(hits, judged))
        assert step_from_dict(step_to_dict(s)).decision == decision


def test_fixed_k_steps_record_the_fixed_rule_with_the_measured_acceptance(gguf_pair):
    target, draft = gguf_pair
    config = DecodeConfig(n_predict=20, draft_max=3, sampling=GREEDY)
    steps = list(Session(target, ModelDrafter(draft), config).steps(target.tokenize(PROMPT)))
    fixed = [s for s in steps if s.decision.rule == RULE_FIXED]
    assert len(fixed) >= len(steps) - 2  # the last step or two may have only one token left
    assert all(s.decision.k == min(3, s.decision.limit) for s in fixed)
    for _i, s in enumerate(fixed):
        assert_figures_imply_k(s, s.decision)
    assert fixed[-1].decision.evidence == judged_before(steps, steps.index(fixed[-1]))[1] > 0


def test_a_plain_session_records_no_decision(gguf_pair):
    target, _ = gguf_pair
    steps = list(Session(target, None, DecodeConfig(n_predict=4, sampling=GREEDY))
                 .steps(target.tokenize(PROMPT)))
    assert all(s.decision is None for s in steps)


# the demo target's calibrated verify curve, seconds
# (packaging/research/replay_lookup.py DEMO_CURVE)
DEMO_CURVE = {1: .0314, 2: .0547, 3: .0716, 4: .0857, 5: .1095, 6: .1353, 7: .1555, 8: .2401,
              9: .2567, 10: .2713, 11: .2863, 12: .2903, 13: .3048, 14: .3228, 15: .3343,
              16: .2815, 17: .3481}
DRAFT_HINT = 0.004  # the draft's step as timed before the run: one token, a quiet moment
DRAFT_STEP = 1 / 64  # what a drafted token then cost in passes (the demo draft: 64 tok/s)


def test_a_first_run_where_every_draft_passed_but_few_drafted_says_what_kept_k_at_zero():
    """The run the issue describes: adaptive k on the demo pair decoded plainly in almost
    every step although every draft it tried was accepted. The records say what kept k at 0
    here: not acceptance (all 6 tokens passed; priced at 0.94 with the prior's weight, the
    interval still wide), but the pass cost once drafting was timed: even at the top of the
    interval the best drafting k would not gain min_gain."""
    ctl = DraftLengthController(16, adaptive=True, curve=VerifyCostCurve(dict(DEMO_CURVE)),
                                draft_cost=DRAFT_HINT)
    decisions = []
    for step in range(96):
        decision = ctl.decide(96 - step, DRAFT_MODEL)
        decisions.append(decision)
        if decision.k:  # every draft token passes
            ctl.observe(PassOutcome(DRAFT_MODEL, [True] * decision.k,
                                    pass_tokens=decision.k + 1, draft_depth=decision.k,
                                    t_draft=DRAFT_STEP * decision.k,
                                    t_verify=DEMO_CURVE[decision.k + 1]))
        else:
            ctl.observe(PassOutcome(None, pass_tokens=1, t_verify=DEMO_CURVE[1]))
    drafted = [d for d in decisions if d.k]
    # the hint is a draft token's price until MIN_SAMPLES drafting passes after the first
    # (a cold one) are timed; then their median says drafting does not pay here
    assert len(drafted) <= 2 + MIN_SAMPLES
    last = max(i for i, d in enumerate(decisions) if d.k)
    assert all(d.rule == RULE_NO_GAIN for d in decisions[last + 1:-1])
    assert decisions[last + 1].draft_token_seconds == DRAFT_STEP
    tokens = sum(d.k for d in drafted)
    mid = decisions[50]
    assert mid.evidence == tokens and mid.acceptance_high == 1.0  # every one accepted
    assert mid.acceptance_low == pytest.approx(wilson_interval(tokens, tokens)[0])
    assert mid.acceptance_low < 0.8  # a dozen tokens leave a wide interval
    assert mid.prior < mid.acceptance < 1.0  # the prior still weighs one token
    # what kept k at 0: the best drafting k's pass, at the measured draft cost, fell short of
    # the margin at the acceptance priced, and would even if every token passed
    assert mid.alternative_gain < mid.min_gain
    assert mid.alternative_seconds == pytest.approx(
        mid.alternative_k * DRAFT_STEP + DEMO_CURVE[mid.alternative_k + 1])
    at_best = (mid.alternative_k + 1) * mid.plain_seconds / mid.alternative_seconds
    assert at_best < mid.min_gain
