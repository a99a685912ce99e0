"""What drafting can buy on this device: the cost model over the measured verify-cost curve.

Every formula is app.engine.metrics' (E(k), the textbook line, the cost-model speedup); this
module evaluates them over k for one pair, finds the best k and says it in one line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np

from app.engine.calibration import cached_verify_curve, measure_step_costs
from app.engine.cost_curve import VerifyCostCurve
from app.engine.metrics import expected_tokens_per_pass, predicted_speedup, theory_speedup
from app.models.loading import LoadedPair

# acceptance assumed before any run has measured it (the adaptive controller's prior)
ASSUMED_ALPHA = 0.6
COST_K_MAX = 16
# a run's own figure is used once this many steps measure it (a median of 3 outvotes one
# outlier, such as a cold first step: 20 s once, on a busy machine)
MIN_RUN_STEPS = 3


@dataclass(frozen=True)
class Conditions:
    """Where the figures come from and how busy the machine was when they were measured."""

    source: str  # e.g. "measured side by side when the pair loaded", "this run's 67 steps"
    load: float  # os.getloadavg()[0] at the time
    cores: int

    @property
    def busy(self) -> bool:
        """More runnable work than cores: the timings are the machine's, not the pair's."""
        return self.load > self.cores

    def provisional_note(self) -> str:
        if not self.busy:
            return ""
        return (f"Provisional: the machine is busy (load {self.load:.1f} on {self.cores} "
                "cores), so these timings may not hold on a quiet machine.")


def conditions_now(source: str) -> Conditions:
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):  # no load average (Windows has no os.getloadavg)
        load = 0.0
    return Conditions(source, load, os.cpu_count() or 1)


@dataclass
class PairCosts:
    """What a pass costs on this device. Every ratio is of figures measured together: one
    plain target step and one draft token timed in turns (or taken from the same run), and the
    target's verify-cost curve, calibrated once on this device, scaled to that plain step."""

    curve: VerifyCostCurve  # the calibrated shape (seconds when it was measured)
    t_plain: float  # one plain target step, seconds, measured with t_draft
    t_draft: float  # one draft token, seconds
    drafter: str
    conditions: Conditions

    def t_verify(self, n: int) -> float:
        """One target pass over n tokens, at the level of t_plain."""
        base = self.curve.cost(1)
        return self.curve.cost(n) * (self.t_plain / base if base > 0 else 1.0)

    def view(self, alpha: float | None, k_max: int = COST_K_MAX, alpha_tokens: int = 0) -> CostView:
        view = cost_view(self.curve, self.t_draft, alpha, k_max, self.t_plain, self.conditions)
        view.alpha_tokens = alpha_tokens
        return view


def measure_pair_costs(pair: LoadedPair, k_max: int = COST_K_MAX) -> PairCosts:
    """The calibrated curve (cached per model file and device), and a plain target step and a
    draft step measured now, in turns. The draft's step, in the calibrated curve's time, is
    what adaptive k starts from (pair.draft_step_seconds), so its first guess compares like
    with like too."""
    copying = pair.spec.ngram or pair.spec.suffix
    drafter = "draft model" if pair.draft is not None else ("lookup" if copying else "")
    curve = cached_verify_curve(pair.target, k_max)
    conditions = conditions_now("measured side by side when the pair loaded")
    t_plain, t_draft = measure_step_costs(pair.target, pair.draft)
    if pair.draft is not None and t_plain > 0:
        pair.draft_step_seconds = t_draft * curve.cost(1) / t_plain
    return PairCosts(curve, t_plain, t_draft, drafter, conditions)


def costs_from_run(costs: PairCosts, k: np.ndarray, t_draft: np.ndarray, t_verify: np.ndarray,
                   n_pass: np.ndarray, conditions: Conditions) -> PairCosts:
    """The same costs from a run's own steps (one entry per step; k = 0 for a plain step):
    the plain step is the median plain step of the run, or else the calibrated curve scaled to
    the run's verify passes; the draft token is the median over its drafting steps that
    followed a drafting step. A side the run has too few steps for keeps the ratio measured
    when the pair loaded."""
    plain = t_verify[k == 0]
    drafting = k > 0
    base = costs.curve.cost(1)
    if len(plain) >= MIN_RUN_STEPS or (len(plain) and not drafting.any()):
        t_plain = float(np.median(plain))
    elif drafting.any():
        sizes, where = np.unique(n_pass[drafting], return_inverse=True)  # few pass sizes
        calibrated = np.array([costs.curve.cost(int(n)) for n in sizes])[where]
        t_plain = base * float(np.median(t_verify[drafting] / calibrated))
    else:
        return costs
    # a draft token's cost from drafting steps that followed a drafting step: a draft model
    # that sat idle (plain steps, or before the first draft) first re-reads what was emitted
    # meanwhile, which is no draft token's cost (the first step also carries the cold start)
    steady = drafting & np.concatenate(([False], drafting[:-1]))
    if steady.sum() >= MIN_RUN_STEPS and costs.drafter == "draft model":
        t_draft_token = float(np.median(t_draft[steady] / k[steady]))
    else:
        t_draft_token = costs.t_draft * t_plain / costs.t_plain if costs.t_plain > 0 else 0.0
    return replace(costs, t_plain=t_plain, t_draft=t_draft_token, conditions=conditions)


@dataclass
class CostPoint:
    k: int
    t_verify: float  # seconds to verify k + 1 tokens
    verify_in_steps: float  # that, in plain steps
    expected_tokens: float
    predicted_speedup: float
    theory_speedup: float


@dataclass
class CostView:
    """The cost model for one pair at one acceptance rate."""

    t_plain: float  # one plain target step, seconds
    t_draft: float  # one draft token, seconds
    alpha: float
    alpha_measured: bool
    points: list[CostPoint]
    alpha_tokens: int = 0  # draft tokens the acceptance was measured on
    conditions: Conditions | None = None

    @property
    def cost_ratio(self) -> float:
        return self.t_draft / self.t_plain if self.t_plain > 0 else 0.0

    @property
    def best(self) -> CostPoint:
        return max(self.points, key=lambda p: p.predicted_speedup)

    def verdict(self) -> str:
        """One line: the best this pair can do here, and why."""
        best = self.best
        source = (f"measured on {self.alpha_tokens} draft tokens" if self.alpha_measured
                  else "assumed until a run measures it")
        why = (f"verifying {best.k + 1} tokens costs {best.verify_in_steps:.1f} plain steps, "
               f"a draft token {self.cost_ratio:.2f}")
        if best.predicted_speedup < 1.0:
            line = (f"On this device this pair can reach at most {best.predicted_speedup:.2f}× "
                    f"(k = {best.k}) at acceptance {self.alpha:.2f} ({source}): {why} — "
                    "plain decoding is faster; adaptive k falls back to it")
        else:
            line = (f"On this device this pair can reach {best.predicted_speedup:.2f}× at a "
                    f"fixed k = {best.k}, at acceptance {self.alpha:.2f} ({source}): {why}; "
                    "adaptive k can go further, ending each draft where the draft's "
                    "confidence drops")
        return line + self.timings_note()

    @property
    def pays(self) -> bool:
        return self.best.predicted_speedup >= 1.0

    def timings_note(self) -> str:
        """Where the timings come from, and a warning when the machine was busy."""
        if self.conditions is None:
            return ""
        note = f" (timings: {self.conditions.source})."
        provisional = self.conditions.provisional_note()
        return note + (" " + provisional if provisional else "")


def cost_view(curve: VerifyCostCurve, t_draft: float, alpha: float | None,
              k_max: int = COST_K_MAX, t_plain: float | None = None,
              conditions: Conditions | None = None) -> CostView:
    """The cost model at each k from 1 to k_max; alpha None means not measured yet. t_plain is
    a plain step measured together with t_draft; the curve is scaled to it (None: the curve's
    own single step, when t_draft was measured with the curve)."""
    measured = alpha is not None
    a = alpha if alpha is not None else ASSUMED_ALPHA
    base = curve.cost(1)
    if t_plain is None:
        t_plain = base
    scale = t_plain / base if base > 0 else 1.0
    c = t_draft / t_plain if t_plain > 0 else 0.0
    points = []
    for k in range(1, k_max + 1):
        t_verify = curve.cost(k + 1) * scale
        points.append(CostPoint(
            k=k, t_verify=t_verify,
            verify_in_steps=t_verify / t_plain if t_plain > 0 else 0.0,
            expected_tokens=expected_tokens_per_pass(a, k),
            predicted_speedup=predicted_speedup(a, k, t_plain, t_draft, t_verify),
            theory_speedup=theory_speedup(a, k, c),
        ))
    return CostView(t_plain, t_draft, a, measured, points, conditions=conditions)


def predicted_curve(curve: VerifyCostCurve, t_plain: float, t_draft: float, k: float,
                    alphas: list[float]) -> list[float]:
    """The cost-model speedup at draft length k for each acceptance rate (the chart's line),
    with a run's own plain step and draft cost and the curve's verify cost scaled to that
    plain step (so the line and the textbook line differ only in what verifying costs)."""
    base = curve.cost(1)
    scale = t_plain / base if base > 0 else 1.0
    t_verify = curve.cost(max(1, round(k)) + 1) * scale
    return [predicted_speedup(a, k, t_plain, t_draft, t_verify) for a in alphas]
