"""Choosing the draft length k from measured costs and measured acceptance.

Expected tokens from a pass with k drafts: E(k) = 1 + sum_{j<=k} prod_{i<=j} a_i, where a_i
is the measured chance that draft position i is accepted once reached (this captures
acceptance that is correlated along a draft, as in copying, which a single alpha does not).
Time of that pass: k * t_draft + t_verify(k+1), with t_verify measured per pass size.
k = argmax E(k) / time(k); k = 0 (plain decoding) when no k beats one plain step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from app.trace import StepRecord

_EMA = 0.15
_PRIOR_ACCEPT = 0.6
# while plain decoding wins, try a draft again after this many steps, doubling each time
# the probe does not pay (bounded), so a wrong guess costs little
_FIRST_PROBE_GAP = 8
_MAX_PROBE_GAP = 128


@dataclass
class VerifyCostCurve:
    """Seconds for one target pass over n tokens, keyed by n; interpolated between points."""

    points: dict[int, float] = field(default_factory=dict)

    def cost(self, n: int) -> float:
        if not self.points:
            return float(n)  # unknown: assume linear, which makes no k pay less than it should
        sizes = sorted(self.points)
        if n in self.points:
            return self.points[n]
        values = [self.points[s] for s in sizes]
        if n > sizes[-1] and len(sizes) > 1:
            slope = (values[-1] - values[-2]) / (sizes[-1] - sizes[-2])
            return values[-1] + slope * (n - sizes[-1])
        return float(np.interp(n, sizes, values))

    def observe(self, n: int, seconds: float) -> None:
        old = self.points.get(n)
        self.points[n] = seconds if old is None else (1 - _EMA) * old + _EMA * seconds


class DraftLengthController:
    """Fixed k, or adaptive k that drops to plain decoding when drafting does not pay."""

    def __init__(
        self,
        draft_max: int,
        adaptive: bool,
        curve: VerifyCostCurve | None = None,
        draft_cost: float = 0.0,
    ) -> None:
        self.draft_max = draft_max
        self.adaptive = adaptive
        self.curve = curve or VerifyCostCurve()
        self.draft_cost = draft_cost
        self.accept_at = [_PRIOR_ACCEPT] * draft_max
        self._plain_streak = 0
        self._probe_gap = _FIRST_PROBE_GAP
        self.last_choice_reason = ""

    def expected_tokens(self, k: int) -> float:
        reach = np.cumprod(self.accept_at[:k])
        return 1.0 + float(reach.sum())

    def throughput(self, k: int) -> float:
        return self.expected_tokens(k) / (k * self.draft_cost + self.curve.cost(k + 1))

    def best_k(self) -> int:
        rates = [self.throughput(k) for k in range(self.draft_max + 1)]
        return int(np.argmax(rates))

    def next_k(self, remaining: int) -> int:
        limit = max(0, min(self.draft_max, remaining - 1))
        if not self.adaptive:
            return limit
        k = self.best_k()
        if k == 0:
            self._plain_streak += 1
            if self._plain_streak >= self._probe_gap:
                self._plain_streak = 0
                self._probe_gap = min(2 * self._probe_gap, _MAX_PROBE_GAP)
                k = max(1, int(np.argmax([self.expected_tokens(j) / (j + 1) for j in
                                          range(1, self.draft_max + 1)])) + 1)
        else:
            self._probe_gap = _FIRST_PROBE_GAP
        return min(k, limit)

    def observe(self, step: StepRecord) -> None:
        n = len(step.emitted) if step.k == 0 else step.k + 1
        self.curve.observe(n, step.t_verify)
        if step.k == 0:
            return
        per_token = step.t_draft / step.k
        self.draft_cost = per_token if self.draft_cost == 0 else (
            (1 - _EMA) * self.draft_cost + _EMA * per_token
        )
        for record in step.tokens:
            i = record.pos - step.tokens[0].pos
            if i < len(self.accept_at):
                hit = 1.0 if record.accepted else 0.0
                self.accept_at[i] = (1 - _EMA) * self.accept_at[i] + _EMA * hit
