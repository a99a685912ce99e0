"""Choosing the draft length k from measured costs and measured acceptance.

The model has three parts: what a pass costs (app.engine.cost_curve), how often each kind of
draft is accepted per position (app.engine.acceptance_estimate), and when to draft anyway
while plain decoding wins (app.engine.probes). With E(k) the expected tokens of a pass that
drafts k (app.engine.metrics) and time(k) = k * t_draft + t_verify(pass size):

    k = argmax E(k) / time(k),   k = 0 (plain decoding) when no k beats one plain step.

A draft model's pass, once k > 0, may draft up to draft_max: its draft then ends on the
draft's own confidence (app.engine.draft_stop), priced with the same costs and rate.
Queries (estimate, pass_cost, best_k, could_pay) read; next_k, record and observe learn.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.engine.acceptance_estimate import POOL_MEMORY, AcceptanceEstimate
from app.engine.cost_curve import RECENT_PASSES, VerifyCostCurve, interpolate, verify_slope
from app.engine.draft_model import DRAFT_MODEL
from app.engine.draft_stop import ConfidenceCalibration, ConfidenceStop
from app.engine.drafters import DraftKind
from app.engine.metrics import expected_tokens_for_each_k
from app.engine.probes import ProbePolicy
from app.engine.records import StepRecord

__all__ = ["DraftLengthController", "PassCost", "VerifyCostCurve", "paying_k", "rates_by_k"]

_EMA = 0.15
# a draft must be expected to beat plain decoding by this much: the curve and the acceptance
# estimates are measurements that move by more than a few percent (the demo target's 2-token
# pass costs 1.9-2.0 single steps from one minute to the next), and a guess drafted on a
# streak of passes at a few percent of expected gain lost 4% of a fresh-code run to plain
# decoding (a 2-token pass at 57% acceptance where 94% was needed to pay)
_MIN_GAIN = 1.05
# a probe is worth a pass only if drafting could pay at near-perfect acceptance
_OPTIMISTIC_ACCEPT = 0.95


def paying_k(rates: np.ndarray, min_gain: float = _MIN_GAIN) -> int:
    """The k of the best rate in `rates` (k = 0..), or 0 where it beats plain decoding's
    (rates[0]) by less than `min_gain`."""
    k = int(np.argmax(rates))
    return k if rates[k] >= min_gain * rates[0] else 0


def rates_by_k(accept_at: Sequence[float], seconds: Sequence[float]) -> np.ndarray:
    """E(k) / time(k) for k = 0..len(accept_at), given each k's pass time in `seconds`."""
    rates: np.ndarray = expected_tokens_for_each_k(accept_at) / np.asarray(seconds)
    return rates


@dataclass
class PassCost:
    """What one kind's pass costs beyond the verify curve: drafting, and the tokens a pass
    reads beyond the k + 1 of a chain, per draft level (tree siblings, and committed tokens a
    tree step left for the next pass to re-read)."""

    draft_cost: float  # seconds per drafted token
    extra_per_level: float = 0.0

    def pass_size(self, k: int) -> int:
        return k + 1 + round(self.extra_per_level * k)

    def seconds(self, k: int, curve: dict[int, float]) -> float:
        return k * self.draft_cost + interpolate(curve, self.pass_size(k))


class DraftLengthController:
    """Fixed k, or adaptive k that drops to plain decoding when drafting does not pay."""

    def __init__(self, draft_max: int, adaptive: bool, curve: VerifyCostCurve | None = None,
                 draft_cost: float = 0.0, free_kinds_shadowed: bool = False) -> None:
        """free_kinds_shadowed: the caller checks the drafts of free kinds it did not verify
        against the output (app.engine.shadow) and records their verdicts, so they need no
        probes."""
        self.draft_max = draft_max
        self.adaptive = adaptive
        self.free_kinds_shadowed = free_kinds_shadowed
        self.curve = curve or VerifyCostCurve()
        self.draft_cost_hint = draft_cost
        self.kinds: dict[str, DraftKind] = {}  # by DraftKind.name, once it was consulted
        self.estimates: dict[str, AcceptanceEstimate] = {}
        self.costs: dict[str, PassCost] = {}
        self.calibrations: dict[str, ConfidenceCalibration] = {}
        self.probes = ProbePolicy()
        self._draft_times: dict[str, deque[float]] = {}  # per kind: seconds per drafted token
        self._probing = False

    # -- queries: they read, never learn --

    def estimate(self, kind: DraftKind = DRAFT_MODEL) -> AcceptanceEstimate:
        """How often this kind is accepted, per position (its prior, before any pass)."""
        known = self.estimates.get(kind.name)
        return known if known is not None else AcceptanceEstimate(kind.prior, self.draft_max)

    def pass_cost(self, kind: DraftKind = DRAFT_MODEL) -> PassCost:
        known = self.costs.get(kind.name)
        return known if known is not None else PassCost(0.0 if kind.free
                                                        else self.draft_cost_hint)

    def rates(self, kind: DraftKind = DRAFT_MODEL, top: int | None = None) -> np.ndarray:
        """Expected tokens per second of a pass that drafts k, for k = 0..top."""
        top = self.draft_max if top is None else min(top, self.draft_max)
        cost, curve = self.pass_cost(kind), self.curve.current()
        seconds = [cost.seconds(k, curve) for k in range(top + 1)]
        return rates_by_k(self.estimate(kind).accept_at[:top], seconds)

    def best_k(self, kind: DraftKind = DRAFT_MODEL, limit: int | None = None) -> int:
        """The k with the best expected rate, among k <= limit (near the end of the output
        a shorter draft may fit a cheaper pass size than the unlimited best cut short), or 0
        where it beats plain decoding by less than _MIN_GAIN."""
        return paying_k(self.rates(kind, limit))

    def could_pay(self, kind: DraftKind, limit: int | None = None) -> int:
        """The best k (up to limit) if acceptance were near perfect, or 0 if even then
        drafting would not gain _MIN_GAIN (a probe that could at best break even, a 1-token
        guess where a 2-token pass costs 1.94 steps, only costs)."""
        top = self.draft_max if limit is None else min(limit, self.draft_max)
        optimistic = [_OPTIMISTIC_ACCEPT] * top
        cost, curve = self.pass_cost(kind), self.curve.current()
        seconds = [cost.seconds(k, curve) for k in range(top + 1)]
        return paying_k(rates_by_k(optimistic, seconds))

    def shadows(self, kind: DraftKind) -> bool:
        """Whether this kind's declined drafts are checked in shadow instead of probed."""
        return self.adaptive and self.free_kinds_shadowed and kind.free

    def confidence_stop(self, kind: DraftKind, remaining: int) -> ConfidenceStop | None:
        """In adaptive mode, for a draft model: the rule that ends this pass's draft where
        one more token would earn less than its time does at the expected rate; the pass may
        then draft up to draft_max (within what is left). None: draft the k chosen."""
        calibration = self.calibrations.get(kind.name)
        if not self.adaptive or not kind.confident or calibration is None:
            return None
        limit = max(0, min(self.draft_max, remaining - 1))
        rates = self.rates(kind, limit)
        cost = self.pass_cost(kind)
        token_seconds = cost.draft_cost + verify_slope(self.curve.current(),
                                                       cost.pass_size(limit))
        return ConfidenceStop(calibration, limit, self.estimate(kind).pooled(),
                              float(rates.max()), token_seconds)

    # -- learning --

    def next_k(self, remaining: int, kind: DraftKind = DRAFT_MODEL, copied: int = 0,
               available: int | None = None) -> int:
        """The draft length for this step. `copied`: how many of the last tokens the target
        wrote this kind's draft continues, in a row (a copy's evidence; 0 for others);
        `available`: the most tokens the drafter has to offer now (Outlook.available)."""
        limit = max(0, min(self.draft_max, remaining - 1))
        if available is not None:
            if available == 0:  # nothing to draft: not a step in which plain decoding won
                return 0
            limit = min(limit, available)
        if not self.adaptive:
            return limit
        self._register(kind)
        self._lift(kind, copied)
        k = self.best_k(kind, limit)
        self._probing = (k == 0 and not self.shadows(kind)
                         and self.probes.probe_now(kind.name))
        if self._probing:
            k = self.could_pay(kind, limit)
            self._probing = k > 0
        elif k > 0:
            self.probes.drafted(kind.name)
        return min(k, limit)

    def record(self, kind: DraftKind, accepted: list[bool]) -> None:
        """One pass's verdicts on this kind's draft, position by position."""
        self._register(kind)
        self.estimates[kind.name].observe(accepted)

    def observe(self, step: StepRecord) -> None:
        self.curve.observe(1 if step.k == 0 else step.n_pass, step.t_verify)
        kind = self.kinds.get(step.source)
        if step.k == 0 or kind is None:
            return
        cost = self.costs[kind.name]
        depth = max(1, step.draft_depth)
        # a probe's draft time includes catching up on the tokens emitted while it sat idle
        if not self._probing:
            samples = self._draft_times.setdefault(kind.name, deque(maxlen=RECENT_PASSES))
            samples.append(step.t_draft / depth)
            cost.draft_cost = float(np.median(samples))  # one cold or loaded pass moves nothing
        extra = (step.n_pass - depth - 1) / depth
        cost.extra_per_level = (1 - _EMA) * cost.extra_per_level + _EMA * extra
        self.record(kind, list(step.depth_outcomes()))
        calibration = self.calibrations.get(kind.name)
        if calibration is not None and not step.is_tree:
            for token in step.tokens:
                if token.accepted is None:
                    break
                calibration.observe(token.q, token.accepted)

    def _register(self, kind: DraftKind) -> None:
        if kind.name in self.kinds:
            return
        self.kinds[kind.name] = kind
        self.estimates[kind.name] = self.estimate(kind)
        self.costs[kind.name] = self.pass_cost(kind)
        if kind.confident:
            self.calibrations[kind.name] = ConfidenceCalibration()

    def _lift(self, kind: DraftKind, copied: int) -> None:
        """A copy's evidence beside its own passes: the kind it is accepted at least as often
        as (DraftKind.at_least), and for a copy of the prompt the run of tokens the target
        wrote that it would have predicted (as much as the pool remembers): code quoted back
        26 tokens into its source has shown what 26 accepted drafts would, whether the tokens
        came from drafts or from plain steps, and takes the place of the kind's pooled
        verdicts when it says more.

        A copy of the output or of an earlier answer (not DraftKind.run_is_evidence) learns
        from its verdicts alone, which shadow checks give it for free: a suffix copy recalled
        from an earlier answer often matches 16 tokens and goes on for 4 (an agent's JSON, a
        dataclass with other fields), and the output repeating a phrase of its own goes its
        own way after it. Counted at all, even beside the verdicts, a long run drafted
        31-token passes that kept 2 (packaging/research/replay_suffix.py, replay_lookup.py)."""
        estimate = self.estimates[kind.name]
        weaker = None if kind.at_least is None else self.estimates.get(kind.at_least.name)
        if weaker is not None:
            estimate.raise_pool(weaker.pool_hits, weaker.pool_seen)
        run = min(float(copied), POOL_MEMORY)
        if kind.run_is_evidence and run:
            estimate.raise_pool(run, run)
