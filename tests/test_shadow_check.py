"""Free drafts the controller declined, checked against what the target wrote
(app.engine.session.ShadowCheck): their verdicts teach the controller without a verify pass,
so a free kind is never probed, and a kind whose drafts would pass starts drafting on that
evidence."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.engine.adaptive import DraftLengthController
from app.engine.controller_options import DEFAULT_OPTIONS
from app.engine.cost_curve import VerifyCostCurve
from app.engine.decode_config import DecodeConfig
from app.engine.drafters import Budget, Draft, Drafter, DraftKind
from app.engine.drafters.chain import ChainDrafter
from app.engine.drafters.lookup.edits import EditAwareLookup
from app.engine.sampling import SamplingParams
from app.engine.session import Session, ShadowCheck

GUESS = DraftKind("test-guess", free=True, prior=0.05)
# a GPU-like curve: a 5-token pass costs 1.4 single steps
GPU_CURVE = {n: 0.010 * (1 + 0.1 * (n - 1)) for n in range(1, 10)}


def test_a_held_draft_settles_at_the_first_token_written_otherwise():
    check = ShadowCheck()
    check.hold(GUESS, 2, [7, 8, 9])
    assert check.settle([1, 2, 7]) is None  # agrees so far: wait
    assert check.settle([1, 2, 7, 5]) == (GUESS, [True, False])
    assert check.idle


def test_a_held_draft_that_the_output_repeats_in_full_settles_all_accepted():
    check = ShadowCheck()
    check.hold(GUESS, 0, [4, 5])
    assert check.settle([4]) is None
    assert check.settle([4, 5, 6]) == (GUESS, [True, True])
    check.hold(GUESS, 0, [])  # nothing drafted: nothing held
    assert check.idle


def test_free_kinds_are_not_probed_when_shadowed_and_costly_kinds_still_are():
    curve = {n: 1.0 + 0.1 * (n - 1) for n in range(1, 10)}  # drafting could pay
    hopeless = DraftKind("hopeless-free", free=True, prior=0.02)
    costly = DraftKind("hopeless-model", free=False, prior=0.02)
    shadowed = DraftLengthController(8, True, VerifyCostCurve(dict(curve)), draft_cost=0.01,
                                     free_kinds_shadowed=True)
    assert shadowed.shadows(hopeless) and not shadowed.shadows(costly)
    assert not any(shadowed.decide(100, hopeless).k for _ in range(200))
    assert any(shadowed.decide(100, costly).k for _ in range(200))  # a probe, at least
    probed = DraftLengthController(8, True, VerifyCostCurve(dict(curve)), draft_cost=0.01)
    assert any(probed.decide(100, hopeless).k for _ in range(200))
    assert not DraftLengthController(8, False, free_kinds_shadowed=True).shadows(hopeless)


class _Oracle(Drafter):
    """A free drafter that knows `truth` (the plain output) and drafts it, right or
    `wrong`ly: its kind's prior is hopeless, so only evidence can make it draft."""

    kind = GUESS

    def __init__(self, prompt_length: int, truth: Sequence[int], wrong: bool) -> None:
        self.name = "oracle"
        self.prompt_length, self.truth, self.wrong = prompt_length, list(truth), wrong
        self.proposals = 0

    def propose(self, context: list[int], budget: Budget, params: SamplingParams,
                rng: np.random.Generator) -> Draft:
        self.proposals += 1
        at = len(context) - self.prompt_length
        tokens = self.truth[at : at + budget.max_tokens]
        if self.wrong:
            tokens = [(t + 1) % 100 for t in tokens]
        return Draft(tokens, None)


def _run(target, drafter: Drafter | None, prompt: list[int], n: int) -> tuple[Session, int]:
    """The session, and the index of its first drafting step (n if none)."""
    config = DecodeConfig(n_predict=n, draft_max=4, adaptive=True,
                          sampling=SamplingParams(temperature=0.0), stop_at_eos=False)
    session = Session(target, drafter, config, VerifyCostCurve(dict(GPU_CURVE)),
                      diagnostics=False)
    first = n
    for step in session.steps(prompt):
        if step.k and first == n:
            first = step.index
    return session, first


def test_a_run_learns_a_free_kind_from_its_declined_drafts(gguf_pair):
    target = gguf_pair[0]
    prompt = target.tokenize("the cat sat on the mat")
    truth = _run(target, None, prompt, 40)[0].output_ids
    right = _Oracle(len(prompt), truth, wrong=False)
    session, first = _run(target, right, prompt, 40)
    assert session.output_ids == truth
    # its prior says never: the drafts the controller declined, found right, made it draft
    # once the first (4 tokens) settled, sooner than the first probe
    assert session.stats.drafted > 0 and first <= 4 < DEFAULT_OPTIONS.first_probe_gap - 1
    wrong = _Oracle(len(prompt), truth, wrong=True)
    session, _ = _run(target, wrong, prompt, 40)
    assert session.output_ids == truth
    assert session.stats.drafted == 0  # not one probe paid for
    assert wrong.proposals > 10  # every declined draft was checked, one at a time


class _CountingDrafter(Drafter):
    """A draft model stand-in that counts how often it is asked to draft."""

    kind = DraftKind("counted model", free=False, prior=0.9)

    def __init__(self) -> None:
        self.name = "counted"
        self.calls = 0

    def propose(self, context: list[int], budget: Budget, params: SamplingParams,
                rng: np.random.Generator) -> Draft:
        self.calls += 1
        return Draft([1] * budget.max_tokens, None)


def test_where_the_hybrid_names_the_lookup_its_draft_runs_no_model():
    """A lookup match whose continuation is cut to nothing (it would close the block the copy
    is in): the outlook names a free kind, so the proposal, checked in shadow or verified,
    must not fall back on the draft model."""
    model = _CountingDrafter()
    hybrid = ChainDrafter([EditAwareLookup(n_min=2, limit=lambda tokens: 0), model])
    context = [5, 6, 7, 8, 9, 5, 6, 7, 8]
    hybrid.begin(context)
    assert hybrid.outlook(context).kind.free
    greedy, rng = SamplingParams(temperature=0.0), np.random.default_rng(0)
    assert hybrid.propose(context, Budget(4), greedy, rng).tokens == []
    assert model.calls == 0
    fresh = [1, 2, 3, 4]
    hybrid.begin(fresh)
    assert not hybrid.outlook(fresh).kind.free
    assert hybrid.propose(fresh, Budget(2), greedy, rng).tokens == [1, 1]
    assert model.calls == 1
