"""Padded passes: where the verify curve prices a larger pass below a smaller one (CPU kernels
take rows in blocks), a drafting chain pass reads filler tokens after its draft and runs at
the cheaper size. The filler's rows are never judged and its cache entries are dropped, so
the output is the plain target's: greedy bit for bit, sampled in distribution."""

from __future__ import annotations

import numpy as np
import pytest

from app.analysis.decision_audit import decision_problems
from app.analysis.reasons import describe_decision
from app.analysis.stats import g_test
from app.engine.adaptive import DraftLengthController
from app.engine.cost_curve import PAD_MARGIN, PAD_RETIME, VerifyCostCurve, cheapest_size
from app.engine.decode_config import DecodeConfig
from app.engine.drafters import DraftKind
from app.engine.drafters.draft_model import ModelDrafter
from app.engine.drafters.lookup.edits import EditAwareLookup
from app.engine.records import RULE_BEST_RATE, RULE_MEASURE
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from app.engine.trace import step_from_dict, step_to_dict
from tests.helpers import (
    BROKEN_P,
    EXACT_P,
    PROMPT,
    exact_distributions,
    first_two_tokens,
    resample_from_p,
)

# a pass of 16 priced below every pass of 2 to 15 tokens (the Xeon's curve has such a step
# at 16, and at 4), so every drafting pass of fewer tokens is padded to 16
STEP_AT_16 = {1: 0.010, 2: 0.015, 3: 0.020, 4: 0.025, 8: 0.045, 15: 0.080, 16: 0.014}


def step_curve() -> VerifyCostCurve:
    return VerifyCostCurve(dict(STEP_AT_16))


def priced_step_curve() -> VerifyCostCurve:
    """STEP_AT_16 with the draft model's token already priced (as after earlier runs on the
    pair), so that a session's first pass is priced, not timed, and may be padded."""
    curve = step_curve()
    for _ in range(3):
        curve.draft_first_samples("model").append(0.001)
        curve.draft_samples("model").append(0.001)
    return curve


# -- which size a pass runs at --

def test_a_pass_runs_at_the_cheapest_measured_size_at_or_above_its_own():
    prices = {1: 1.0, 2: 1.45, 3: 1.87, 4: 1.57, 8: 3.6, 12: 4.24, 15: 4.9, 16: 3.95}
    assert cheapest_size(prices, 3, largest=65) == 4
    assert cheapest_size(prices, 3, largest=3) == 3  # no room to pad
    assert cheapest_size(prices, 13, largest=65) == 16  # 13 interpolated at 4.46
    assert cheapest_size(prices, 9, largest=65) == 9  # 3.76: 16 is not PAD_MARGIN below it
    assert cheapest_size(prices, 12, largest=15) == 12  # 16 is past what the pass may read
    assert cheapest_size(prices, 2, largest=65) == 2  # nothing larger is cheaper
    assert cheapest_size(prices, 16, largest=65) == 16


def test_a_saving_within_the_margin_does_not_pad():
    close = {3: 1.0, 4: 1.0 - PAD_MARGIN / 2}
    assert cheapest_size(close, 3, largest=16) == 3
    clear = {3: 1.0, 4: 1.0 - 2 * PAD_MARGIN}
    assert cheapest_size(clear, 3, largest=16) == 4


def test_an_interpolated_size_is_never_a_pad_target():
    # 4 lies between 3 and 5 and is priced below 3 only by interpolation: nothing measured
    # says a pass of 4 is cheap
    prices = {3: 1.0, 5: 0.5}
    assert cheapest_size(prices, 3, largest=4) == 3
    assert cheapest_size(prices, 3, largest=5) == 5


# -- the controller prices padded passes and says so --

def _copy_controller(prices: dict[int, float]) -> DraftLengthController:
    controller = DraftLengthController(64, adaptive=True, curve=VerifyCostCurve(dict(prices)),
                                       draft_cost=0.0)
    controller.fixed_prices = True
    controller.pad_room = 1000
    return controller


def test_a_two_token_copy_drafts_where_its_pass_is_padded_to_a_cheaper_size():
    # the Xeon's curve: 3 tokens 140 ms, 4 tokens 118 ms; a copy of 2 tokens accepted half
    # the time does not pay in a 3-token pass (1.5 tokens in 1.87 steps) but pays in 4
    prices = {1: 0.0749, 2: 0.1086, 3: 0.1404, 4: 0.1177, 16: 0.2955}
    kind = DraftKind("copy", free=True, prior=0.5)
    unpadded = DraftLengthController(64, adaptive=True, curve=VerifyCostCurve(dict(prices)),
                                     draft_cost=0.0)
    assert unpadded.decide(100, kind, available=2).k == 0
    d = _copy_controller(prices).decide(100, kind, available=2)
    assert d.rule == RULE_BEST_RATE and d.k == 2
    assert d.padded_to == 4
    assert d.pass_seconds == pytest.approx(0.1177)
    assert d.unpadded_seconds == pytest.approx(0.1404)
    assert decision_problems(d) == []
    why = describe_decision(d)
    assert ("Priced as a pass of 4 tokens, filler after the draft that is never judged: "
            "117.7 ms, below 140.4 ms at its own size.") in why


def test_a_padded_price_that_is_not_cheaper_fails_the_audit():
    prices = {1: 0.0749, 2: 0.1086, 3: 0.1404, 4: 0.1177}
    d = _copy_controller(prices).decide(100, DraftKind("copy", free=True, prior=0.5),
                                        available=2)
    d.unpadded_seconds = d.pass_seconds * 0.9
    assert any("padded" in p for p in decision_problems(d))


def test_a_pass_being_timed_is_never_padded():
    # a draft model whose draft token has no price yet: the controller times a drafting pass
    # (3 tokens drafted, what is left to write), and a padded pass would time another size
    controller = DraftLengthController(15, adaptive=True, curve=step_curve())
    controller.pad_room = 1000
    d = controller.decide(4, DraftKind("draft", free=False, prior=0.6))
    assert d.rule == RULE_MEASURE and d.k == 3
    assert controller.padded_size(4) == 4
    controller.decide(4, DraftKind("copy", free=True, prior=0.9), available=3)
    assert controller.padded_size(4) == 16  # a priced pass of the same size is padded


def test_a_size_padded_away_is_timed_again_now_and_then():
    controller = DraftLengthController(15, adaptive=True, curve=step_curve(), draft_cost=0.0)
    controller.pad_room = 1000
    runs = []
    for _ in range(2 * PAD_RETIME):
        controller.decide(100, DraftKind("copy", free=True, prior=0.9), available=3)
        runs.append(controller.padded_size(4))
    assert runs.count(4) == 2 and runs[PAD_RETIME - 1] == 4 and runs[-1] == 4
    assert set(runs) == {4, 16}


# -- sessions: greedy output identical to plain, on both backends --

@pytest.fixture(params=["torch", "llamacpp"])
def pair(request):
    return request.getfixturevalue("hf_exact_pair" if request.param == "torch" else "gguf_pair")


def _greedy(target, drafter, n_predict, draft_max, curve=None):
    config = DecodeConfig(n_predict=n_predict, draft_max=draft_max,
                          sampling=SamplingParams(temperature=0.0))
    session = Session(target, drafter, config, cost_curve=curve)
    steps = list(session.steps(target.tokenize("the cat sat on the mat. the cat")))
    return session.output_ids, steps


@pytest.mark.parametrize("drafter", ["ngram", "draft model"])
def test_padded_passes_write_the_plain_output(pair, drafter):
    target, draft = pair
    expected, _ = _greedy(target, None, 30, 1)
    # the lookup drafts what it found, often under 15 tokens; the draft model drafts 15 until
    # less is left to write, and its passes of fewer tokens (once its draft token is priced:
    # until then they time their own size) are padded to 16
    make = (lambda: EditAwareLookup()) if drafter == "ngram" else (lambda: ModelDrafter(draft))
    got, steps = _greedy(target, make(), 30, 15, step_curve())
    assert got == expected
    padded = [s for s in steps if s.pads]
    assert padded, "no pass was padded"
    for s in padded:
        assert s.n_pass == 16 and s.k + 1 + s.pads == 16
        assert len(s.tokens) <= s.k  # judged up to the first rejection; the filler never
        assert s.decision is not None
        if s.k == s.decision.k:  # else the drafter had less than asked, and the pass padded
            assert s.decision.padded_to == 16  # to what its own size priced
        assert step_from_dict(step_to_dict(s)).pads == s.pads
    # the filler left nothing in the cache: it holds the prompt and the output but the last
    # token (the next pass starts from it)
    assert target.n_cached == len(target.tokenize("the cat sat on the mat. the cat")) \
        + len(got) - 1


def test_the_curve_learns_the_padded_size_and_the_draft_its_own(hf_exact_pair):
    target, draft = hf_exact_pair
    config = DecodeConfig(n_predict=30, draft_max=15, sampling=SamplingParams(temperature=0.0))
    session = Session(target, ModelDrafter(draft), config, cost_curve=(curve := step_curve()))
    steps = list(session.steps(target.tokenize("the cat sat on the mat. the cat")))
    assert any(s.pads for s in steps)
    # the draft's own pass size, filler left out: a chain reads nothing beyond its k + 1
    assert session.controller.costs["model"].extra_per_level == 0
    # timings were taken at 16 (what ran), none at the unpadded sizes
    assert curve.samples(16).warmed
    assert not any(curve.samples(n).times for n in range(2, 16))


# -- sessions: sampled output in the target's distribution --

N_SAMPLED = 1500


@pytest.fixture(scope="module")
def _one_torch_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_sampled_padded_passes_keep_the_target_distribution(hf_pair, _one_torch_thread):
    target, draft = hf_pair
    params = SamplingParams(temperature=1.0)
    prompt_ids = target.tokenize(PROMPT)
    config = DecodeConfig(n_predict=4, draft_max=15, sampling=SamplingParams(1.0, seed=1))
    first = next(Session(target, ModelDrafter(draft), config, cost_curve=priced_step_curve())
                 .steps(prompt_ids))
    assert first.k == 3 and first.pads == 12  # 3 drafted (what is left), padded to 16
    exact = exact_distributions(target, prompt_ids, params)
    tokens = first_two_tokens(target, ModelDrafter(draft), prompt_ids, params, N_SAMPLED,
                              30_000, draft_max=15, curve=priced_step_curve)
    assert g_test(tokens[:, 0], exact.first).p_value > EXACT_P
    assert g_test(tokens[:, 1], exact.second).p_value > EXACT_P


def test_the_padded_sampled_test_detects_a_broken_sampler(hf_pair, monkeypatch,
                                                          _one_torch_thread):
    target, draft = hf_pair
    prompt_ids = target.tokenize(PROMPT)
    # top-k 5 makes the tiny draft's and target's supports differ (as the session-level
    # power check in test_sampling_distribution does)
    params = SamplingParams(temperature=1.0, top_k=5)
    exact = exact_distributions(target, prompt_ids, params)
    resample_from_p(monkeypatch)
    config = DecodeConfig(n_predict=4, draft_max=15, sampling=SamplingParams(1.0, top_k=5, seed=1))
    first = next(Session(target, ModelDrafter(draft), config, cost_curve=priced_step_curve())
                 .steps(prompt_ids))
    assert first.pads == 12  # the sessions below are padded as the correct ones were
    tokens = first_two_tokens(target, ModelDrafter(draft), prompt_ids, params, 800, 50_000,
                              draft_max=15, curve=priced_step_curve)
    assert g_test(tokens[:, 0], exact.first).p_value < BROKEN_P


def test_a_tree_pass_is_never_padded(hf_exact_pair):
    target, draft = hf_exact_pair
    config = DecodeConfig(n_predict=12, draft_max=15, tree_width=2,
                          sampling=SamplingParams(temperature=0.0))
    session = Session(target, ModelDrafter(draft), config, cost_curve=step_curve())
    steps = list(session.steps(target.tokenize(PROMPT)))
    assert not any(s.pads for s in steps)
    assert np.all([s.decision is None or s.decision.padded_to is None for s in steps])


def test_the_inspector_header_and_why_line_say_the_pass_was_padded(gguf_pair):
    from ui.format import step_summary

    target, _ = gguf_pair
    _, steps = _greedy(target, EditAwareLookup(), 30, 15, step_curve())
    padded = next(s for s in steps if s.pads and s.decision and s.decision.padded_to)
    assert f"pass padded to 16 tokens ({padded.pads} filler, never judged" \
        in step_summary(padded)
    assert "Priced as a pass of 16 tokens, filler after the draft that is never judged" \
        in describe_decision(padded.decision)
    plain = next(s for s in steps if not s.pads)
    assert "padded" not in step_summary(plain)
