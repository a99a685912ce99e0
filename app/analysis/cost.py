"""What drafting can buy on this device: the cost model over the measured verify-cost curve.

Every formula is app.engine.metrics' (E(k), the textbook line, the cost-model speedup); this
module evaluates them over k for one pair, finds the best k and says it in one line.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from app.engine.controller_options import MIN_GAIN
from app.engine.cost_curve import MIN_SAMPLES, VerifyCostCurve
from app.engine.metrics import expected_tokens_per_pass, predicted_speedup, theory_speedup
from app.engine.pass_pricing import draft_seconds
from app.engine.records import Decision

# acceptance assumed before any run has measured it (the adaptive controller's prior)
ASSUMED_ALPHA = 0.6
COST_K_MAX = 16
# a run's own figure is used once this many steps measure it (a median of 3 outvotes one
# outlier, such as a cold first step: 20 s once, on a busy machine)
MIN_RUN_STEPS = 3
# below this many judged draft tokens the cost view says "not enough drafts yet to tell": the
# 95% interval for acceptance is then wider than 0.6 near 0.5 (3 of 6 accepted: 0.19-0.81),
# and two runs of the same pair gave verdicts from 0.96x to 1.33x on 2 to 10 tokens
MIN_VERDICT_TOKENS = 8
_Z95 = 1.959964  # the standard normal's 97.5% quantile: a two-sided 95% interval


@dataclass(frozen=True)
class AcceptanceSeen:
    """Acceptance as a run measured it: `accepted` of `judged` draft tokens."""

    accepted: int
    judged: int

    @property
    def rate(self) -> float:
        return self.accepted / self.judged if self.judged else 0.0

    @property
    def enough(self) -> bool:
        return self.judged >= MIN_VERDICT_TOKENS

    def interval(self, z: float = _Z95) -> tuple[float, float]:
        """Wilson's score interval for the acceptance rate (sound at 0 or all accepted,
        where the normal approximation's collapses to a point)."""
        n = self.judged
        if n == 0:
            return 0.0, 1.0
        p = self.accepted / n
        scale = 1 + z * z / n
        centre = (p + z * z / (2 * n)) / scale
        half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / scale
        return max(0.0, centre - half), min(1.0, centre + half)


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
    t_first_extra: float = 0.0  # what a draft's first token costs beyond the others


    def t_verify(self, n: int) -> float:
        """One target pass over n tokens, at the level of t_plain."""
        base = self.curve.cost(1)
        return self.curve.cost(n) * (self.t_plain / base if base > 0 else 1.0)

    def view(self, seen: AcceptanceSeen | None, k_max: int = COST_K_MAX) -> CostView:
        """The cost view at the acceptance a run measured (None: none yet, the prior)."""
        alpha = seen.rate if seen is not None and seen.judged else None
        if self.curve.points:  # the k's priced, no further
            k_max = max(1, min(k_max, max(self.curve.points) - 1))
        view = cost_view(self.curve, self.t_draft, alpha, k_max, self.t_plain, self.conditions,
                         seen=seen, t_first_extra=self.t_first_extra)
        view.confident_drafts = self.drafter == "draft model"
        return view


def costs_from_decision(decision: Decision, drafter: str,
                        conditions: Conditions | None = None) -> PairCosts | None:
    """The costs a run's controller priced its last decision on (None where it priced none
    yet): the plain step, a draft token and each k's verify pass, the very figures its Why
    line states. So the cost view, the notices and the Why line show one price per pass."""
    prices, t_draft = decision.prices, decision.draft_token_seconds or 0.0
    if len(prices) < 2 or not prices[0]:
        return None
    first = decision.first_draft_seconds
    extra = first - t_draft if first is not None else 0.0
    verify = {k + 1: seconds - draft_seconds(k, t_draft + extra, t_draft)
              for k, seconds in enumerate(prices)}
    if conditions is None:
        conditions = conditions_now(priced_from(decision))
    return PairCosts(VerifyCostCurve(verify), prices[0], t_draft, drafter, conditions, extra)


def priced_from(decision: Decision) -> str:
    """Where a decision's prices come from, in words."""
    if decision.plain_samples >= MIN_SAMPLES:
        source = (f"medians of this pair's timed passes ({decision.plain_samples} plain "
                  "steps kept")
    else:
        source = "the curve stored from earlier quiet runs, scaled to this run's passes ("
        source += f"{decision.plain_samples} plain steps kept"
    if decision.refused:
        source += (f", {decision.refused} stalled pass{'es' if decision.refused != 1 else ''} "
                   "refused")
    return source + ")"


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
    """The cost model for one pair at one acceptance rate, and at the two ends of its
    interval where a run measured it on enough draft tokens."""

    t_plain: float  # one plain target step, seconds
    t_draft: float  # one draft token, seconds
    alpha: float
    alpha_measured: bool
    points: list[CostPoint]
    seen: AcceptanceSeen | None = None  # what the acceptance was measured on
    conditions: Conditions | None = None
    # the cost model at the interval's ends (empty below MIN_VERDICT_TOKENS)
    low_points: list[CostPoint] = field(default_factory=list)
    high_points: list[CostPoint] = field(default_factory=list)
    confident_drafts: bool = False  # a draft model's drafts, which can end on its confidence
    t_first_extra: float = 0.0  # what a draft's first token costs beyond the others

    @property
    def alpha_tokens(self) -> int:
        return self.seen.judged if self.seen is not None else 0

    @property
    def interval(self) -> tuple[float, float] | None:
        """The 95% interval for acceptance, once enough draft tokens were judged."""
        if self.seen is None or not self.seen.enough:
            return None
        return self.seen.interval()

    @property
    def cost_ratio(self) -> float:
        return self.t_draft / self.t_plain if self.t_plain > 0 else 0.0

    @property
    def best(self) -> CostPoint:
        return max(self.points, key=lambda p: p.predicted_speedup)

    @property
    def best_low(self) -> CostPoint | None:
        return _best(self.low_points)

    @property
    def best_high(self) -> CostPoint | None:
        return _best(self.high_points)

    @property
    def settled(self) -> bool | None:
        """True: drafting pays even at the interval's low end; False: plain decoding wins even
        at its high end; None: not enough drafts yet, or the interval spans break-even. The
        verdict changes only when the interval moves wholly across."""
        low, high = self.best_low, self.best_high
        if low is None or high is None:
            return None
        if low.predicted_speedup >= 1.0:
            return True
        if high.predicted_speedup < 1.0:
            return False
        return None

    def verdict(self) -> str:
        """One line: what this pair can do here, as far as the draft tokens seen can tell."""
        best = self.best
        why = (f"verifying {best.k + 1} tokens costs {best.verify_in_steps:.1f} plain steps, "
               f"a draft token {self.cost_ratio:.2f} of a plain step")
        if self.t_first_extra > 0 and self.t_plain > 0:
            why += (f", its first {(self.t_draft + self.t_first_extra) / self.t_plain:.2f} "
                    "(it also reads what the target wrote)")
        interval, low, high = self.interval, self.best_low, self.best_high
        if interval is None or low is None or high is None:
            seen = self.alpha_tokens
            rate = (f"at the {self.alpha:.2f} they show" if self.alpha_measured
                    else f"at the acceptance assumed until then, {self.alpha:.2f},")
            line = (f"Not enough drafts yet to tell whether drafting pays here: {seen} draft "
                    f"token{'s' if seen != 1 else ''} judged, a verdict needs "
                    f"{MIN_VERDICT_TOKENS}; {rate} the cost model gives "
                    f"{best.predicted_speedup:.2f}× at k = {best.k} ({why})")
            return line + self.timings_note()
        source = (f"acceptance {interval[0]:.2f}–{interval[1]:.2f}, 95% interval from "
                  f"{self.alpha_tokens} draft tokens")
        if self.settled is True:
            line = (f"On this device this pair can reach {best.predicted_speedup:.2f}× at a "
                    f"fixed k = {best.k} (at least {low.predicted_speedup:.2f}×, at most "
                    f"{high.predicted_speedup:.2f}×; {source}): {why}")
            if self.confident_drafts:
                line += ("; adaptive k may also end each draft where the draft model's own "
                         "confidence drops")
        elif self.settled is False:
            line = (f"On this device plain decoding is {1 / high.predicted_speedup:.2f}× as "
                    f"fast as the best draft even at the interval's top (k = {high.k}, "
                    f"{high.predicted_speedup:.2f}×; {source}): {why}. Adaptive k drafts only "
                    f"where a k is priced at {MIN_GAIN:.2f}× plain or more, so it would decode "
                    "plainly here")
        else:
            line = (f"Not settled yet: between {low.predicted_speedup:.2f}× and "
                    f"{high.predicted_speedup:.2f}× ({source}), an interval that spans break-even "
                    f"— more drafts will tell; at {self.alpha:.2f} the best is "
                    f"{best.predicted_speedup:.2f}× at k = {best.k} ({why})")
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


def _best(points: list[CostPoint]) -> CostPoint | None:
    return max(points, key=lambda p: p.predicted_speedup) if points else None


def cost_view(curve: VerifyCostCurve, t_draft: float, alpha: float | None,
              k_max: int = COST_K_MAX, t_plain: float | None = None,
              conditions: Conditions | None = None,
              seen: AcceptanceSeen | None = None, t_first_extra: float = 0.0) -> CostView:
    """The cost model at each k from 1 to k_max; alpha None means not measured yet (the
    prior), and `seen`, the draft tokens it was measured on, adds the interval's two ends.
    t_plain is a plain step measured together with t_draft; the curve is scaled to it (None:
    the curve's own single step, when t_draft was measured with the curve)."""
    measured = alpha is not None
    a = alpha if alpha is not None else ASSUMED_ALPHA
    base = curve.cost(1)
    if t_plain is None:
        t_plain = base
    view = CostView(t_plain, t_draft, a, measured,
                    _points(curve, t_draft, a, k_max, t_plain, t_first_extra),
                    seen=seen, conditions=conditions, t_first_extra=t_first_extra)
    interval = view.interval
    if interval is not None:
        view.low_points = _points(curve, t_draft, interval[0], k_max, t_plain, t_first_extra)
        view.high_points = _points(curve, t_draft, interval[1], k_max, t_plain, t_first_extra)
    return view


def _points(curve: VerifyCostCurve, t_draft: float, a: float, k_max: int,
            t_plain: float, t_first_extra: float = 0.0) -> list[CostPoint]:
    base = curve.cost(1)
    scale = t_plain / base if base > 0 else 1.0
    c = t_draft / t_plain if t_plain > 0 else 0.0
    points = []
    for k in range(1, k_max + 1):
        t_verify = curve.cost(k + 1) * scale
        points.append(CostPoint(
            k=k, t_verify=t_verify,
            verify_in_steps=t_verify / t_plain if t_plain > 0 else 0.0,
            expected_tokens=expected_tokens_per_pass(a, k),
            predicted_speedup=predicted_speedup(a, k, t_plain, t_draft, t_verify,
                                                t_first_extra),
            theory_speedup=theory_speedup(a, k, c),
        ))
    return points


def predicted_curve(curve: VerifyCostCurve, t_plain: float, t_draft: float, k: float,
                    alphas: list[float]) -> list[float]:
    """The cost-model speedup at draft length k for each acceptance rate (the chart's line),
    with a run's own plain step and draft cost and the curve's verify cost scaled to that
    plain step (so the line and the textbook line differ only in what verifying costs)."""
    base = curve.cost(1)
    scale = t_plain / base if base > 0 else 1.0
    t_verify = curve.cost(max(1, round(k)) + 1) * scale
    return [predicted_speedup(a, k, t_plain, t_draft, t_verify) for a in alphas]
