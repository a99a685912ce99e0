"""What a pass that drafts k tokens is priced at: its seconds (drafting plus the verify curve,
app.engine.cost_curve), its expected tokens E(k) (app.engine.metrics) and their rate, which
k pays against a plain step, and when a kind priced not to pay is tried again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.engine.controller_options import MIN_GAIN, ControllerOptions
from app.engine.cost_curve import MIN_SAMPLES, RECENT_PASSES, interpolate
from app.engine.metrics import expected_tokens_for_each_k


def paying_k(rates: np.ndarray, min_gain: float = MIN_GAIN) -> int:
    """The k of the best rate in `rates` (k = 0..), or 0 where it beats plain decoding's
    (rates[0]) by less than `min_gain`."""
    k = int(np.argmax(rates))
    return k if rates[k] >= min_gain * rates[0] else 0


def rates_by_k(accept_at: Sequence[float], seconds: Sequence[float]) -> np.ndarray:
    """E(k) / time(k) for k = 0..len(accept_at), given each k's pass time in `seconds`."""
    return Pricing(expected_tokens_for_each_k(accept_at), list(seconds)).rates


@dataclass
class PassCost:
    """What one kind's pass costs beyond the verify curve: drafting, and the tokens a pass
    reads beyond the k + 1 of a chain, per draft level (tree siblings, and committed tokens a
    tree step left for the next pass to re-read)."""

    draft_cost: float  # seconds per drafted token (0 until priced, and for a free kind)
    extra_per_level: float = 0.0
    priced: bool = False  # draft_cost is the median of MIN_SAMPLES drafting passes or more
    # seconds per drafted token of the kept drafting passes (VerifyCostCurve.draft_samples:
    # shared by the runs on one pair); a run's first drafting pass is not kept (the drafter's
    # cold start), `warmed` once it was seen
    draft_times: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_PASSES),
                                      repr=False)
    warmed: bool = False

    def __post_init__(self) -> None:
        self._price()

    def _price(self) -> None:
        if len(self.draft_times) >= MIN_SAMPLES:  # one cold or loaded pass moves nothing
            self.draft_cost, self.priced = float(np.median(self.draft_times)), True

    def learn(self, t_draft: float, depth: int, pass_tokens: int, keep_time: bool,
              average: float) -> None:
        """One drafting pass: `depth` tokens drafted in `t_draft` seconds (kept unless
        `keep_time` is false: a probe's draft time includes catching up on the tokens emitted
        while it sat idle), and the pass's `pass_tokens`, averaged in at weight `average`."""
        if keep_time and self.warmed:
            self.draft_times.append(t_draft / depth)
            self._price()
        self.warmed = True
        extra = (pass_tokens - depth - 1) / depth
        self.extra_per_level = (1 - average) * self.extra_per_level + average * extra

    def pass_size(self, k: int) -> int:
        return k + 1 + round(self.extra_per_level * k)

    def seconds(self, k: int, curve: dict[int, float]) -> float:
        return k * self.draft_cost + interpolate(curve, self.pass_size(k))


@dataclass
class Pricing:
    """Each k's expected tokens and pass seconds, k = 0..top, as the controller priced them,
    from the acceptance it priced at each position."""

    tokens: np.ndarray
    seconds: list[float]
    accept_at: Sequence[float] = ()

    @classmethod
    def of(cls, accept_at: Sequence[float], cost: PassCost, curve: dict[int, float]
           ) -> Pricing:
        return cls(expected_tokens_for_each_k(accept_at),
                   [cost.seconds(k, curve) for k in range(len(accept_at) + 1)], accept_at)

    @property
    def rates(self) -> np.ndarray:
        rates: np.ndarray = self.tokens / np.asarray(self.seconds)
        return rates

    def figures(self, k: int) -> dict[str, Any]:
        """The Decision fields that state this pricing for a pass that drafts k: its time,
        expected tokens and gain over a plain step, every k's price, and the best other k."""
        rates = self.rates
        gains = rates / rates[0]
        fields: dict[str, Any] = dict(
            plain_seconds=self.seconds[0], pass_seconds=self.seconds[k],
            expected_tokens=float(self.tokens[k]), gain=float(gains[k]),
            prices=list(self.seconds))
        if len(rates) > 1:
            others = rates.copy()
            others[k] = -np.inf
            other = int(np.argmax(others))
            fields.update(alternative_k=other, alternative_gain=float(gains[other]),
                          alternative_seconds=self.seconds[other],
                          alternative_tokens=float(self.tokens[other]))
        return fields


@dataclass
class ProbeSchedule:
    """Per kind: plain steps since it last drafted, and the gap before its next probe (a
    lookup that found nothing this step must not reset the probes of one that did). Probes
    of a kind space out, the gap doubling each time one does not pay (up to a bound)."""

    options: ControllerOptions
    streak: dict[str, int] = field(default_factory=dict)
    gap: dict[str, int] = field(default_factory=dict)

    def drafted(self, kind: str) -> None:
        self.streak[kind] = 0
        self.gap[kind] = self.options.first_probe_gap

    def probe_now(self, kind: str) -> bool:
        """Another step in which plain decoding wins for this kind: whether to probe it."""
        streak = self.streak.get(kind, 0) + 1
        gap = self.gap.get(kind, self.options.first_probe_gap)
        if streak < gap:
            self.streak[kind] = streak
            return False
        self.streak[kind] = 0
        self.gap[kind] = min(2 * gap, self.options.max_probe_gap)
        return True
