"""The verify-cost curve the adaptive draft length prices passes with, and what the controller
makes of it: a calibration from a busy moment must not be trusted for ever, and a fresh
controller must price a chain pass at k + 1 tokens."""

from __future__ import annotations

import json
from collections import deque

import numpy as np
import pytest

from app.engine import cost_curve as calibration
from app.engine.adaptive import DraftLengthController, PassOutcome
from app.engine.cost_curve import MIN_SAMPLES, SizeSamples, VerifyCostCurve
from app.engine.diagnostics import top_indices
from app.engine.drafters import DraftKind
from app.engine.drafters.draft_model import DRAFT_MODEL
from app.engine.drafters.heads import DRAFT_HEADS
from app.engine.drafters.lookup import NGRAM_COPY, NGRAM_GUESS, STRONG_ANCHOR
from app.engine.drafters.lookup.edits import NGRAM_EDIT
from app.paths import cache_dir
from tests.helpers import pass_outcome


def observe_priced(curve: VerifyCostCurve, n: int, seconds: float) -> None:
    """A size's warm-up pass, then enough kept passes to price it."""
    for _ in range(MIN_SAMPLES + 1):
        curve.observe(n, seconds)


def test_live_passes_set_the_level_of_the_whole_stored_curve():
    curve = VerifyCostCurve({1: 1.0, 9: 3.0, 17: 4.0})
    curve.observe(1, 2.0)
    curve.observe(1, 2.0)
    assert curve.cost(1) == 1.0 and curve.load == 1.0  # one kept pass sets no price
    curve.observe(1, 2.0)
    curve.observe(1, 2.0)  # the machine is twice as busy as when the curve was stored
    assert curve.cost(1) == 2.0 and curve.load == 2.0
    assert curve.cost(9) == pytest.approx(3.0 * curve.load)
    assert curve.cost(17) == pytest.approx(4.0 * curve.load)
    for _ in range(30):
        curve.observe(1, 3.0)  # busier still: later passes move it
    assert curve.cost(17) == pytest.approx(12.0, rel=0.01)


def test_rescaling_keeps_the_calibrated_shape_where_longer_passes_cost_less():
    # CPU kernels take rows in blocks: 16 tokens can cost less than 17, and barely more
    # than 9 (measured on llama.cpp); a busy machine scales the level, not the shape
    curve = VerifyCostCurve({1: 45.0, 9: 308.0, 16: 319.0, 17: 388.0})
    observe_priced(curve, 9, 616.0)
    assert curve.cost(16) / curve.cost(9) == pytest.approx(319 / 308)
    assert curve.cost(16) < curve.cost(17)


@pytest.mark.parametrize("kind", [DRAFT_MODEL, NGRAM_COPY, NGRAM_GUESS, NGRAM_EDIT, DRAFT_HEADS])
def test_a_fresh_controller_starts_from_the_declared_prior_and_k_plus_one_passes(kind):
    ctl = DraftLengthController(16, adaptive=True, curve=VerifyCostCurve({1: 1.0, 17: 2.0}),
                                draft_cost=0.3)
    cost, estimate = ctl.pass_cost(kind), ctl.estimate(kind)
    assert cost.extra_per_level == 0.0
    assert [cost.pass_size(k) for k in (1, 4, 16)] == [2, 5, 17]
    assert estimate.prior == kind.prior and estimate.accept_at == [kind.prior] * 16
    assert cost.draft_cost == (0.0 if kind.free else 0.3)  # a free kind costs no steps
    assert not ctl.estimates  # reading learnt nothing


def test_copies_on_a_cpu_curve_reach_the_cheap_long_passes():
    # llama-bench's pp times on the demo target (ms): long passes cost least per token
    ms = {1: 45, 2: 67, 3: 84, 4: 117, 5: 145, 8: 257, 9: 308, 16: 319, 17: 388, 32: 549,
          33: 600}
    ctl = DraftLengthController(32, adaptive=True, curve=VerifyCostCurve(dict(ms)))
    ks = []
    for i in range(5):
        # the copy's anchor is its first evidence: the run the target wrote that it predicts
        k = ctl.decide(1000, NGRAM_COPY, copied=STRONG_ANCHOR + sum(ks) + i).k
        ks.append(k)
        ctl.observe(PassOutcome(NGRAM_COPY, [True] * k))
    assert ks[0] >= 1 and max(ks) >= 31, ks


# the demo target's calibrated curve in ms (Q4_K_M, 2 threads): a size one past a multiple
# of 16 pays for its odd row
DEMO_CURVE = {1: 41, 2: 81, 3: 106, 4: 143, 5: 139, 8: 337, 9: 352, 16: 393, 17: 399, 32: 570,
              33: 692, 64: 1116, 65: 1205}


def test_a_copy_is_drafted_from_its_first_strong_match():
    ctl = DraftLengthController(64, adaptive=True, curve=VerifyCostCurve(dict(DEMO_CURVE)))
    assert ctl.decide(1000, NGRAM_COPY, copied=STRONG_ANCHOR).k >= 1
    assert ctl.decide(1000, NGRAM_GUESS).k == 0


def test_near_the_end_the_best_k_is_chosen_within_what_is_left():
    # k = 63 is best with tokens to spare; with 50 left, k = 49 would read 50 tokens, which
    # cost more per token here than the 32 of k = 31
    curve = VerifyCostCurve({1: 40, 16: 390, 17: 400, 32: 550, 33: 800, 64: 1000, 65: 1200})
    ctl = DraftLengthController(64, adaptive=True, curve=curve)
    for _ in range(4):
        ctl.observe(PassOutcome(NGRAM_COPY, [True] * 64))
    assert ctl.decide(1000, NGRAM_COPY).k == 63
    assert ctl.decide(50, NGRAM_COPY).k == 31


def test_runs_store_only_quiet_prices_and_read_them_back(gguf_pair, monkeypatch):
    """Nothing is measured before a run: a session reads the stored curve, and what its
    passes priced on a quiet machine is stored for the next; a busy machine stores nothing."""
    target, _ = gguf_pair
    store = cache_dir() / "verify_cost.json"
    assert not calibration.stored_verify_curve(target).points
    quiet = VerifyCostCurve()
    observe_priced(quiet, 1, 0.01)
    observe_priced(quiet, 4, 0.02)
    busy = VerifyCostCurve()
    for _ in range(MIN_SAMPLES + 1):
        busy.observe(2, 0.5, busy=True)
    calibration.store_verify_curve(target, busy.quiet_medians())
    assert not store.exists()
    calibration.store_verify_curve(target, quiet.quiet_medians())
    stored = calibration.stored_verify_curve(target)
    assert stored.points == {1: 0.01, 4: 0.02} and stored.stored_at is not None
    assert json.loads(store.read_text())


@pytest.mark.parametrize("peak", [0.0, 5.0, 40.0, 300.0])
def test_top_indices_equal_a_full_sort(peak):
    rng = np.random.default_rng(int(peak))
    for vocab in (3, 7, 200, 151_936):
        logits = rng.standard_normal(vocab) * 3
        logits[rng.integers(vocab)] += peak
        probs = np.exp(logits - logits.max())
        probs /= probs.sum()
        expected = np.argsort(-probs, kind="stable")[:5]
        assert list(top_indices(probs, 5)) == list(expected)


def _feed(ctl: DraftLengthController, passes: int, kind: DraftKind = DRAFT_MODEL) -> list[int]:
    ks = []
    for _ in range(passes):
        k = ctl.decide(1000, kind).k
        ks.append(k)
        ctl.observe(PassOutcome(kind, [True] * k))
    return ks


def test_short_passes_that_all_pass_lead_to_longer_drafts():
    # a draft at 0.45 of a target step, a flat verify curve (a GPU, or torch on a CPU): one
    # token per pass must not cap what the controller can learn
    flat = {n: 1.0 + 0.03 * (n - 1) for n in (1, 2, 3, 5, 9, 17)}
    ctl = DraftLengthController(16, adaptive=True, curve=VerifyCostCurve(dict(flat)),
                                draft_cost=0.45)
    ks = _feed(ctl, 12)
    assert ks[0] >= 1 and ks[-1] >= 12, ks


def test_a_position_that_once_looked_bad_is_tried_again():
    flat = {n: 1.0 + 0.03 * (n - 1) for n in (1, 2, 3, 5, 9, 17)}
    ctl = DraftLengthController(16, adaptive=True, curve=VerifyCostCurve(dict(flat)),
                                draft_cost=0.2)
    for _ in range(3):
        ctl.observe(PassOutcome(DRAFT_MODEL, [True, True, False]))  # position 2 fails three times
    assert ctl.decide(1000, DRAFT_MODEL).k <= 3
    ks = _feed(ctl, 15)
    assert ks[-1] > 3, ks


def test_one_slow_pass_moves_neither_the_level_nor_the_price_of_other_sizes():
    curve = VerifyCostCurve({1: 1.0, 2: 1.2, 5: 1.8})
    for _ in range(5):
        curve.observe(1, 1.0)
    curve.observe(1, 50.0)  # a stall: another process took the cores for one step
    assert curve.load == 1.0
    assert curve.cost(2) / curve.cost(1) == pytest.approx(1.2)


def test_the_plain_step_and_longer_passes_are_priced_from_their_own_live_times():
    """The demo target calibrated while this machine's cores were in one state (a single step
    34.4 ms, a 2-token pass 55.8: 1.62x) and run in the other (30.4 and 56.7: 1.87x): once a
    few of each are timed, the curve prices the run's state, where a 1-token guess at 80%
    acceptance loses; priced at the calibration's shape it looked worth drafting."""
    calibrated = {1: 34.4e-3, 2: 55.8e-3, 3: 74.8e-3, 5: 110.3e-3, 9: 257.6e-3}
    curve = VerifyCostCurve(dict(calibrated))
    guess = DraftKind("guess at 80%", free=True, prior=0.8)
    ctl = DraftLengthController(1, adaptive=True, curve=curve)
    assert ctl.best_k(guess) == 1  # the calibration's shape: (1 + 0.8) / 1.62 = 1.11x
    for _ in range(MIN_SAMPLES + 1):
        curve.observe(1, 30.4e-3)
        curve.observe(2, 56.7e-3)
    assert curve.cost(2) / curve.cost(1) == pytest.approx(56.7 / 30.4)
    assert curve.cost(9) == pytest.approx(257.6e-3 * 56.7 / 55.8)
    assert ctl.best_k(guess) == 0  # (1 + 0.8) / 1.87 = 0.97x


def test_a_cold_first_plain_step_does_not_make_a_draft_that_never_passes_look_cheap():
    """The tiny pair of test_ui_costs as CI saw it: a plain step 0.17 ms once warm, a draft
    token 2.2 ms (13 plain steps), every draft rejected, and the run's first plain step cold
    (20 ms). Plain decoding must win after at most a probe or two; when the cold step was kept
    as the plain step's price while drafting passes were timed warm, k = 1 drafted in 15 of
    24 steps with nothing accepted."""
    curve = {1: 0.141e-3, 2: 0.169e-3, 3: 0.223e-3, 4: 0.253e-3, 5: 0.241e-3}
    ctl = DraftLengthController(4, adaptive=True, curve=VerifyCostCurve(dict(curve)),
                                draft_cost=2.0e-3)
    drafted = 0
    for i in range(24):
        k = ctl.decide(24 - i, DRAFT_MODEL).k
        if k == 0:
            ctl.observe(pass_outcome(None, 0, [], t_verify=20e-3 if i == 0 else 0.17e-3))
        else:
            drafted += 1
            ctl.observe(pass_outcome(DRAFT_MODEL, k, [False] * k, t_draft=2.2e-3 * k,
                                     t_verify=curve[k + 1] * 1.2))
    assert drafted <= 2


# the demo target's pass times in ms, every size measured (llama.cpp, Q4_K, AVX2, 2 threads)
_BLOCKED_CURVE = {1: 33.0, 2: 52.8, 3: 71.3, 4: 86.7, 5: 106.2, 6: 126.0, 7: 148.2, 8: 237.6,
                  9: 249.1, 10: 261.3, 11: 278.2, 12: 280.9, 13: 295.7, 14: 306.6, 15: 322.9,
                  16: 265.2, 17: 335.9}


def test_calibrated_sizes_price_every_short_pass_as_measured():
    """Interpolated from 5, 8, 9 and 16 alone, 7 tokens looked like 194 ms (they cost 148)
    and 15 like 263 (they cost 323), which priced drafts of 9-14 above 6 and 15."""
    sizes = calibration.calibration_sizes(16)
    calibrated = VerifyCostCurve({n: _BLOCKED_CURVE[n] for n in sizes})
    for n, ms in _BLOCKED_CURVE.items():
        assert calibrated.cost(n) == pytest.approx(ms)
    ctl = DraftLengthController(16, adaptive=True, curve=calibrated)
    copy = DraftKind("copy", prior=0.9, free=True)
    ctl.estimates[copy.name] = ctl.estimate(copy)
    rates = ctl.rates(copy)
    assert rates[6] > rates[12]  # a 7-token pass beats a 13-token one; interpolated, it lost


def _timings(count: int) -> list[tuple[int, float]]:
    """Pass sizes and times as a run times them: sizes 1-17 and 33 in turn, a level that
    drifts, every fifth pass stalled."""
    rng = np.random.default_rng(5)
    return [(int(n), float(t) * (1 + 0.02 * i) * (5.0 if i % 5 == 4 else 1.0))
            for i, (n, t) in enumerate(zip(rng.choice([*range(1, 18), 33], size=count),
                                           rng.uniform(0.02, 0.4, size=count), strict=True))]


def _afresh(curve: VerifyCostCurve) -> VerifyCostCurve:
    """A curve of the same stored shape and kept samples that has priced nothing yet."""
    return VerifyCostCurve(dict(curve.points), sizes={
        n: SizeSamples(deque(s.times, maxlen=s.times.maxlen),
                       deque(s.busy, maxlen=s.busy.maxlen), s.warmed)
        for n, s in curve.sizes.items()})


@pytest.mark.parametrize("points", [{}, dict(_BLOCKED_CURVE), {1: 33.0, 9: 249.1}])
def test_prices_asked_after_every_pass_equal_those_of_its_samples_priced_afresh(points):
    """The controller asks for prices at every k of every step, so a curve keeps them until a
    sample is kept: asked after each pass, they must equal those its samples give priced
    afresh (a price kept past a new sample would price stale times)."""
    asked = VerifyCostCurve({n: t / 1000 for n, t in points.items()})
    for n, seconds in _timings(120):
        asked.observe(n, seconds)
        fresh = _afresh(asked)
        assert asked.current() == fresh.current()
        assert asked.load == fresh.load and asked.live == fresh.live
        for size in range(1, 40):
            assert asked.can_price(size) == fresh.can_price(size)
            if fresh.can_price(size):
                assert asked.cost(size) == fresh.cost(size)
    asked.current()[1] = -1.0  # a caller's copy: the curve's own prices stay
    assert asked.current() == fresh.current()


def test_a_decision_without_a_new_pass_computes_no_median(monkeypatch):
    """--ngram on prose drafts on few steps but is priced on each: a decision recomputed
    every size's median some 45 times (2.6-3.5 ms a step against a 27 ms target step)."""
    curve = VerifyCostCurve(dict(_BLOCKED_CURVE))
    for n in range(1, 18):
        observe_priced(curve, n, _BLOCKED_CURVE[n] * 1.1)
    ctl = DraftLengthController(64, adaptive=True, curve=curve, free_kinds_shadowed=True)
    ctl.decide(96, NGRAM_GUESS, 0, 40)
    medians = []
    median = np.median
    monkeypatch.setattr(np, "median", lambda values: medians.append(1) or median(values))
    first = ctl.decide(96, NGRAM_GUESS, 0, 40)
    assert not medians
    for _ in range(3):  # new passes of 5 tokens: that size's median again, and the level's
        curve.observe(5, _BLOCKED_CURVE[5] * 0.5)
    medians.clear()  # (a pass's own stall check reads its size's median)
    second = ctl.decide(96, NGRAM_GUESS, 0, 40)
    assert 1 <= len(medians) <= 2
    assert second.prices[4] == pytest.approx(_BLOCKED_CURVE[5] * 0.8)  # k = 4: 5 tokens
    assert first.prices[4] == pytest.approx(_BLOCKED_CURVE[5] * 1.1)


def test_a_run_merged_into_the_stored_curve_keeps_its_shape_at_one_level(gguf_pair):
    """A run that priced only some sizes, at a level of its own, moves the other stored sizes
    to that level: a step the calibration measured (4 tokens cheaper than 3) survives a run
    that timed the 4-token pass alone, 20% dearer."""
    target, _ = gguf_pair
    calibration.store_verify_curve(target, {1: 0.060, 2: 0.095, 3: 0.116, 4: 0.107, 16: 0.25})
    deeper = {1: 0.072, 4: 0.107 * 1.2}
    calibration.store_verify_curve(target, deeper)
    stored = calibration.stored_verify_curve(target).points
    assert stored[4] == pytest.approx(0.1284) and stored[1] == pytest.approx(0.072)
    assert stored[3] == pytest.approx(0.116 * 1.2) and stored[16] == pytest.approx(0.30)
    assert calibration.cheapest_size(stored, 3, 16) == 4
    # sizes merged straight in, as before, would have kept 3 below 4: no padding
    assert calibration.cheapest_size({**{1: 0.06, 3: 0.116, 16: 0.25}, **deeper}, 3, 16) == 3


def test_merged_shape_without_shared_sizes_keeps_the_stored_level():
    stored = {1: 0.06, 4: 0.107}
    assert calibration.merged_shape(stored, {2: 0.1}) == {1: 0.06, 4: 0.107, 2: 0.1}
    # only the plain step shared: it sets the level
    assert calibration.merged_shape(stored, {1: 0.03, 2: 0.05}) == pytest.approx(
        {1: 0.03, 4: 0.0535, 2: 0.05})
    # a price no pass can have sets no level and is not kept
    assert calibration.merged_shape({1: 0.0, 4: 0.107, 8: float("nan")}, {1: 0.03, 4: 0.2}) == {
        1: 0.03, 4: 0.2}
