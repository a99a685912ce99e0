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
from app.engine.cost_curve import MIN_SAMPLES, RECENT_PASSES, cheapest_size, interpolate
from app.engine.metrics import expected_tokens_for_each_k


def paying_k(rates: np.ndarray, min_gain: float = MIN_GAIN) -> int:
    """The k of the best rate in `rates` (k = 0..), or 0 where it beats plain decoding's
    (rates[0]) by less than `min_gain`."""
    k = int(np.argmax(rates))
    return k if rates[k] >= min_gain * rates[0] else 0


def rates_by_k(accept_at: Sequence[float], seconds: Sequence[float]) -> np.ndarray:
    """E(k) / time(k) for k = 0..len(accept_at), given each k's pass time in `seconds`."""
    return Pricing(expected_tokens_for_each_k(accept_at), list(seconds)).rates


def draft_seconds(k: int, first: float, each: float) -> float:
    """Drafting k tokens: the first token's pass, then each further token's."""
    return first + (k - 1) * each if k > 0 else 0.0


@dataclass
class PassCost:
    """What one kind's pass costs beyond the verify curve: drafting, and the tokens a pass
    reads beyond the k + 1 of a chain, per draft level (tree siblings, and committed tokens a
    tree step left for the next pass to re-read).

    A draft model's first token costs more than the others: its pass also reads what the
    target wrote since the last draft (the token it chose, and the last drafted token when
    every one was accepted), and on a CPU a 2-token pass costs about 1.6 single ones. Priced
    per token from 4-token drafts, the demo draft's 1-token drafts cost 30-36 ms against 24 ms
    as priced, and an adaptive run drafted 27 of them in a row at a loss (22.5 tok/s against
    plain decoding's 31.6). So the first token is priced apart, from drafters that time it
    (Draft.first_seconds)."""

    draft_cost: float  # seconds per drafted token after the first (0 for a free kind)
    extra_per_level: float = 0.0
    priced: bool = False  # the median of MIN_SAMPLES drafting passes or more
    # seconds per drafted token after the first, and of the first, of the kept drafting
    # passes (VerifyCostCurve.draft_samples: shared by the runs on one pair); a run's first
    # drafting pass is not kept (the drafter's cold start), `warmed` once it was seen
    draft_times: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_PASSES),
                                      repr=False)
    first_times: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_PASSES),
                                      repr=False)
    first_cost: float | None = None  # seconds of the first drafted token (None: draft_cost)
    # seconds per token that a probe's first pass spent reading what the target wrote while
    # the kind sat idle (VerifyCostCurve.catch_up_samples): a draft model reads it all before
    # it drafts again, 6.3 ms a token for the demo draft, a fifth of a plain step; a probe 55
    # tokens after the last draft spent 344 ms on it, and adaptive bench calls that probed
    # ran 0.58-0.99x plain
    catch_up_times: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_PASSES),
                                         repr=False)
    warmed: bool = False

    def __post_init__(self) -> None:
        self._price()

    def _price(self) -> None:
        # one cold or loaded pass moves nothing: medians of MIN_SAMPLES or more
        if len(self.first_times) >= MIN_SAMPLES:
            self.first_cost, self.priced = float(np.median(self.first_times)), True
        if len(self.draft_times) >= MIN_SAMPLES:
            self.draft_cost = float(np.median(self.draft_times))
        elif self.first_cost is not None:  # only 1-token drafts so far
            self.draft_cost = self.first_cost

    def learn(self, t_draft: float, depth: int, pass_tokens: int, keep_time: bool,
              average: float, t_first: float | None = None) -> None:
        """One drafting pass: `depth` tokens drafted in `t_draft` seconds, `t_first` of them
        the first token's (None: a drafter that does not time it, priced per token), kept
        unless `keep_time` is false (a probe's draft time includes catching up on the tokens
        emitted while it sat idle); the pass's `pass_tokens`, averaged in at weight
        `average`."""
        if keep_time and self.warmed:
            if t_first is None:
                first = t_draft / depth
            elif depth == 1:
                first = t_draft  # the step's time beyond the draft call is the first token's
            else:
                first = min(t_first, t_draft)
            self.first_times.append(first)
            if depth > 1:
                self.draft_times.append((t_draft - first) / (depth - 1))
            self._price()
        self.warmed = True
        extra = (pass_tokens - depth - 1) / depth
        self.extra_per_level = (1 - average) * self.extra_per_level + average * extra

    def learn_catch_up(self, t_first: float, behind: int) -> None:
        """A probe's first token took `t_first` seconds, `behind` tokens after the last draft."""
        if self.priced and behind > 0:
            self.catch_up_times.append(max(0.0, t_first - self.first) / behind)

    def catch_up(self, behind: int) -> float:
        """Seconds a draft `behind` tokens behind spends reading them before it drafts (0
        until a probe measured it, or for a drafter that does not time its first token)."""
        if not self.catch_up_times:
            return 0.0
        return behind * float(np.median(self.catch_up_times))

    def pass_size(self, k: int) -> int:
        return k + 1 + round(self.extra_per_level * k)

    @property
    def first(self) -> float:
        return self.draft_cost if self.first_cost is None else self.first_cost

    def run_size(self, k: int, curve: dict[int, float], largest: int | None = None,
                 own: float | None = None) -> int:
        """The size a pass that drafts k runs at: its own, or with `largest` (the most
        tokens a padded pass may read; None: passes are not padded) a cheaper larger one
        (cost_curve.cheapest_size; `own`: the own size's price, where known). A drafting
        chain pass only: a tree reads its own nodes."""
        size = self.pass_size(k)
        if largest is None or not k or self.extra_per_level:
            return size
        return cheapest_size(curve, size, largest, own)

    def drafting(self, k: int) -> float:
        """Seconds to draft k tokens."""
        return draft_seconds(k, self.first, self.draft_cost)

    def seconds(self, k: int, curve: dict[int, float]) -> float:
        """A pass that drafts k, at its own size."""
        return self.drafting(k) + interpolate(curve, self.pass_size(k))


@dataclass
class Pricing:
    """Each k's expected tokens and pass seconds, k = 0..top, as the controller priced them,
    from the acceptance it priced at each position."""

    tokens: np.ndarray
    seconds: list[float]
    accept_at: Sequence[float] = ()
    # the k whose pass is padded to a cheaper size: k -> (that size, the pass's seconds at
    # its own size)
    padded: dict[int, tuple[int, float]] = field(default_factory=dict)

    @classmethod
    def of(cls, accept_at: Sequence[float], cost: PassCost, curve: dict[int, float],
           catch_up: float = 0.0, largest: int | None = None) -> Pricing:
        """catch_up: seconds every drafting pass spends first, reading what it has not;
        largest: the most tokens a padded pass may read (None: passes are not padded)."""
        seconds: list[float] = []
        padded: dict[int, tuple[int, float]] = {}
        for k in range(len(accept_at) + 1):
            spent = cost.drafting(k) + (catch_up if k else 0.0)
            own = interpolate(curve, cost.pass_size(k))
            size = cost.run_size(k, curve, largest, own)
            if size == cost.pass_size(k):
                seconds.append(spent + own)
            else:  # a padded size is one the curve measured
                seconds.append(spent + curve[size])
                padded[k] = (size, spent + own)
        return cls(expected_tokens_for_each_k(accept_at), seconds, accept_at, padded)

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
        if k in self.padded:
            fields.update(padded_to=self.padded[k][0], unpadded_seconds=self.padded[k][1])
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

    def behind(self, kind: str) -> int:
        """Tokens written since this kind last drafted (one per plain step, and the one
        after its last draft)."""
        return self.streak.get(kind, 0) + 1

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
