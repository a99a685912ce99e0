"""A draft's first token is priced apart from the others: its pass also reads what the target
wrote since the last draft (the chosen token, and the last drafted one when all passed), so on
a CPU a 1-token draft costs more than a share of a 4-token draft's time says. Priced per token
from 4-token drafts, the demo pair's 1-token drafts cost 31 ms against 24 ms as priced, and an
adaptive run drafted k = 1 at a loss."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from app.analysis.reasons import describe_decision
from app.engine.adaptive import DraftLengthController, PassOutcome
from app.engine.cost_curve import MIN_SAMPLES, VerifyCostCurve
from app.engine.decode_config import DecodeConfig
from app.engine.drafters import Budget
from app.engine.drafters.draft_model import DRAFT_MODEL, ModelDrafter
from app.engine.records import RULE_NO_GAIN, RULE_PROBE
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from app.engine.trace import step_from_dict, step_to_dict

GREEDY = SamplingParams(temperature=0.0)
# seconds, shaped like the demo pair on the 2-core EPYC: a plain step 33 ms, a 2-token pass
# 51 ms; the draft's first token 31 ms (it reads 2 tokens), each further one 20 ms
CURVE = {1: 0.033, 2: 0.051, 3: 0.066, 5: 0.090, 9: 0.150}
FIRST, EACH = 0.031, 0.020


def drafting_pass(k: int, first: float | None) -> PassOutcome:
    return PassOutcome(DRAFT_MODEL, [True] * k, pass_tokens=k + 1, draft_depth=k,
                       t_draft=FIRST + (k - 1) * EACH, t_verify=CURVE[k + 1], t_draft_first=first)


def learnt(k: int, first: float | None) -> DraftLengthController:
    ctl = DraftLengthController(4, adaptive=True, curve=VerifyCostCurve(dict(CURVE)))
    for _ in range(MIN_SAMPLES + 1):  # the first drafting pass is the cold one, not kept
        ctl.observe(drafting_pass(k, first))
    return ctl


def test_the_first_token_and_the_others_are_priced_from_their_own_times():
    cost = learnt(4, FIRST).pass_cost(DRAFT_MODEL)
    assert cost.priced
    assert cost.first == pytest.approx(FIRST) and cost.draft_cost == pytest.approx(EACH)
    assert cost.seconds(1, CURVE) == pytest.approx(FIRST + CURVE[2])
    assert cost.seconds(4, CURVE) == pytest.approx(FIRST + 3 * EACH + CURVE[5])
    assert cost.seconds(0, CURVE) == pytest.approx(CURVE[1])


def test_a_drafter_that_does_not_time_its_first_token_is_priced_per_token():
    cost = learnt(4, None).pass_cost(DRAFT_MODEL)
    per_token = (FIRST + 3 * EACH) / 4
    assert cost.first == pytest.approx(per_token) and cost.draft_cost == pytest.approx(per_token)


def test_one_token_drafts_alone_price_every_token_at_the_first_ones_price():
    cost = learnt(1, FIRST).pass_cost(DRAFT_MODEL)
    assert cost.first == pytest.approx(FIRST) and cost.draft_cost == pytest.approx(FIRST)


# a GPU-like pair, where drafting at near-perfect acceptance pays: a probe is worth its pass
FAST_CURVE = {1: 0.030, 2: 0.032, 3: 0.034, 5: 0.038, 9: 0.046}
FAST_FIRST, FAST_EACH = 0.004, 0.003
CATCH_UP = 0.02  # seconds per token the draft reads before it drafts again (a slow prefill)


def probes_after_rejections(time_first: bool) -> list:
    """A controller that learnt its prices and a low acceptance, then 200 steps in which
    every draft is rejected; the decisions of those steps."""
    ctl = DraftLengthController(8, adaptive=True, curve=VerifyCostCurve(dict(FAST_CURVE)))
    for _ in range(30):
        ctl.observe(PassOutcome(DRAFT_MODEL, [False], pass_tokens=5, draft_depth=4,
                                t_draft=FAST_FIRST + 3 * FAST_EACH, t_verify=FAST_CURVE[5],
                                t_draft_first=FAST_FIRST if time_first else None))
    decisions, behind = [], 0
    for _ in range(200):
        decision = ctl.decide(1000, DRAFT_MODEL)
        decisions.append(decision)
        if not decision.k:
            ctl.observe(PassOutcome(None, pass_tokens=1, t_verify=FAST_CURVE[1]))
            behind += 1
            continue
        first = FAST_FIRST + behind * CATCH_UP
        ctl.observe(PassOutcome(DRAFT_MODEL, [False], pass_tokens=decision.k + 1,
                                draft_depth=decision.k,
                                t_draft=first + (decision.k - 1) * FAST_EACH,
                                t_verify=ctl.curve.cost(decision.k + 1),
                                t_draft_first=first if time_first else None))
        behind = 0
    return decisions


def test_a_probe_is_priced_with_the_tokens_its_draft_must_catch_up_on():
    # every token written while the draft sat idle is read before it drafts again: once a
    # probe timed that, a probe that cannot pay for it even at near-perfect acceptance is
    # not taken, and the decision says what the catch-up was priced at
    timed = probes_after_rejections(time_first=True)
    probes = [d for d in timed if d.rule == RULE_PROBE]
    assert len(probes) == 1 and probes[0].catch_up_seconds is None  # not measured before it
    assert all(d.rule == RULE_NO_GAIN for d in timed[timed.index(probes[0]) + 1:])
    # a drafter that does not time its first token is probed as before, every gap
    untimed = [d for d in probes_after_rejections(time_first=False) if d.rule == RULE_PROBE]
    assert len(untimed) >= 3


def test_a_probe_on_a_busy_machine_sets_no_catch_up_price():
    # a probe stalled on busy cores would price every later probe out of the run
    ctl = DraftLengthController(8, adaptive=True, curve=VerifyCostCurve(dict(FAST_CURVE)))
    cost = ctl.pass_cost(DRAFT_MODEL)
    ctl.costs[DRAFT_MODEL.name] = cost
    for _ in range(MIN_SAMPLES + 1):
        cost.learn(FAST_FIRST + 3 * FAST_EACH, 4, 5, True, 0.1, FAST_FIRST)
    ctl._probing, ctl._behind = True, 20  # the step being observed was a probe
    busy = PassOutcome(DRAFT_MODEL, [False], pass_tokens=2, draft_depth=1, t_draft=2.0,
                       t_verify=FAST_CURVE[2], busy=True, t_draft_first=2.0)
    ctl.observe(busy)
    assert ctl.pass_cost(DRAFT_MODEL).catch_up(20) == 0.0
    ctl.observe(replace(busy, busy=False))
    assert ctl.pass_cost(DRAFT_MODEL).catch_up(20) > 0.0


def test_a_probe_the_catch_up_leaves_paying_is_taken_and_states_its_price():
    ctl = DraftLengthController(8, adaptive=True, curve=VerifyCostCurve(dict(FAST_CURVE)))
    cost = ctl.pass_cost(DRAFT_MODEL)
    for _ in range(MIN_SAMPLES + 1):
        cost.learn(FAST_FIRST + 3 * FAST_EACH, 4, 5, True, 0.1, FAST_FIRST)
    cost.learn_catch_up(FAST_FIRST + 8 * 0.001, 8)  # a cheap catch-up: 1 ms a token
    assert cost.catch_up(10) == pytest.approx(0.010)
    for _ in range(30):
        ctl.estimates.setdefault(DRAFT_MODEL.name, ctl.estimate(DRAFT_MODEL)).observe([False])
    decisions = [ctl.decide(1000, DRAFT_MODEL) for _ in range(20)]
    probe = next(d for d in decisions if d.rule == RULE_PROBE)
    assert probe.k > 0 and probe.catch_up_seconds == pytest.approx(0.001 * 8)
    assert "reads what the target wrote since it last drafted" in describe_decision(probe)


def test_a_draft_model_times_its_first_token_and_the_trace_keeps_it(gguf_pair):
    target, draft = gguf_pair
    drafter = ModelDrafter(draft)
    context = list(range(5, 25))
    drafter.begin(context)
    proposed = drafter.propose(context, Budget(3), GREEDY, np.random.default_rng(0))
    assert len(proposed.tokens) == 3
    assert proposed.first_seconds is not None and proposed.first_seconds > 0

    session = Session(target, ModelDrafter(draft), DecodeConfig(n_predict=12, draft_max=3,
                                                                 sampling=GREEDY))
    steps = list(session.steps(context))
    drafted = [s for s in steps if s.k]
    assert drafted and all(s.t_draft_first is not None for s in drafted)
    assert all(0 < s.t_draft_first <= s.t_draft for s in drafted)
    assert all(s.t_draft_first is None for s in steps if not s.k)
    again = step_from_dict(step_to_dict(drafted[0]))
    assert again.t_draft_first == drafted[0].t_draft_first


def test_run_stats_time_the_tokens_after_each_drafts_first_apart(gguf_pair):
    target, draft = gguf_pair
    session = Session(target, ModelDrafter(draft), DecodeConfig(n_predict=16, draft_max=3,
                                                                 sampling=GREEDY))
    steps = list(session.steps(list(range(5, 25))))
    stats = session.stats
    later = [s for s in steps if s.k > 1]
    assert later and stats.drafted_later == sum(s.k - 1 for s in later)
    assert stats.later_draft_time_per_token == pytest.approx(
        sum(s.t_draft - s.t_draft_first for s in later) / stats.drafted_later)
