"""What drafting can buy on this device: the cost model over the measured verify-cost curve.

Every formula is app.engine.metrics' (E(k), the textbook line, the cost-model speedup); this
module evaluates them over k for one pair, finds the best k and says it in one line.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.engine.adaptive import VerifyCostCurve
from app.engine.calibration import cached_verify_curve, measure_token_cost
from app.engine.metrics import expected_tokens_per_pass, predicted_speedup, theory_speedup
from app.models.loading import LoadedPair

# acceptance assumed before any run has measured it (the adaptive controller's prior)
ASSUMED_ALPHA = 0.6
COST_K_MAX = 16


@dataclass
class PairCosts:
    """What a pass costs on this device: the target's verify-cost curve and one draft token."""

    curve: VerifyCostCurve
    t_draft: float
    drafter: str

    def view(self, alpha: float | None, k_max: int = COST_K_MAX, alpha_tokens: int = 0) -> CostView:
        view = cost_view(self.curve, self.t_draft, alpha, k_max)
        view.alpha_tokens = alpha_tokens
        return view


def draft_step_seconds(pair: LoadedPair) -> float:
    """One draft-model step, measured once per loaded pair (0 for lookup drafts)."""
    if pair.draft is None:
        return 0.0
    if not pair.draft_step_seconds:
        pair.draft_step_seconds = measure_token_cost(pair.draft)
    return pair.draft_step_seconds


def measure_pair_costs(pair: LoadedPair, k_max: int = COST_K_MAX) -> PairCosts:
    """The calibrated curve (cached per model file and device) and the draft's step time."""
    drafter = "draft model" if pair.draft is not None else ("lookup" if pair.spec.ngram else "")
    return PairCosts(cached_verify_curve(pair.target, k_max), draft_step_seconds(pair), drafter)


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
            return (f"On this device this pair can reach at most {best.predicted_speedup:.2f}× "
                    f"(k = {best.k}) at acceptance {self.alpha:.2f} ({source}): {why} — "
                    "plain decoding is faster; adaptive k falls back to it")
        return (f"On this device this pair can reach {best.predicted_speedup:.2f}× at a fixed "
                f"k = {best.k}, at acceptance {self.alpha:.2f} ({source}): {why}; adaptive k "
                "can go further, ending each draft where the draft's confidence drops")


def cost_view(curve: VerifyCostCurve, t_draft: float, alpha: float | None,
              k_max: int = 16) -> CostView:
    """The cost model at each k from 1 to k_max; alpha None means not measured yet."""
    measured = alpha is not None
    a = alpha if alpha is not None else ASSUMED_ALPHA
    t_plain = curve.cost(1)
    c = t_draft / t_plain if t_plain > 0 else 0.0
    points = []
    for k in range(1, k_max + 1):
        t_verify = curve.cost(k + 1)
        points.append(CostPoint(
            k=k, t_verify=t_verify,
            verify_in_steps=t_verify / t_plain if t_plain > 0 else 0.0,
            expected_tokens=expected_tokens_per_pass(a, k),
            predicted_speedup=predicted_speedup(a, k, t_plain, t_draft, t_verify),
            theory_speedup=theory_speedup(a, k, c),
        ))
    return CostView(t_plain, t_draft, a, measured, points)


def predicted_curve(curve: VerifyCostCurve, t_plain: float, t_draft: float, k: float,
                    alphas: list[float]) -> list[float]:
    """The cost-model speedup at draft length k for each acceptance rate (the chart's line),
    with a run's own plain step and draft cost and the curve's verify cost scaled to that
    plain step (so the line and the textbook line differ only in what verifying costs)."""
    base = curve.cost(1)
    scale = t_plain / base if base > 0 else 1.0
    t_verify = curve.cost(max(1, round(k)) + 1) * scale
    return [predicted_speedup(a, k, t_plain, t_draft, t_verify) for a in alphas]
