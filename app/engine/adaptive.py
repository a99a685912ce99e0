"""Choosing the draft length k from measured costs and measured acceptance, and saying why.

With E(k) the expected tokens of a pass that drafts k (app.engine.metrics) and
time(k) = k * t_draft + t_verify(pass size) (app.engine.cost_curve):

    k = argmax E(k) / time(k),   k = 0 (plain decoding) when no k beats one plain step
                                 by MIN_GAIN.

Acceptance is learnt per kind of draft (DraftKind) and per draft position from one narrow
signal, a PassOutcome per pass (or per free draft checked against the output without a
pass). Each choice comes back as a Decision (app.engine.records): the rule that fired and
the figures it compared, so whatever explains a step reads the reason, never guesses it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from app.engine.copy_pricing import CopyEvidence, copy_accept_at
from app.engine.cost_curve import (
    MIN_SAMPLES,
    RECENT_PASSES,
    PassCost,
    VerifyCostCurve,
    machine_busy,
)
from app.engine.drafters import DraftKind
from app.engine.estimates import (
    POOL_MEMORY,
    AcceptanceEstimate,
    ConfidenceStop,
    wilson_interval,
)
from app.engine.metrics import expected_tokens_for_each_k
from app.engine.records import (
    RULE_BEST_RATE,
    RULE_END_OF_OUTPUT,
    RULE_FIXED,
    RULE_MEASURE,
    RULE_NO_GAIN,
    RULE_NOTHING_TO_DRAFT,
    RULE_PROBE,
    Decision,
)

__all__ = ["AcceptanceEstimate", "DraftLengthController", "PassCost", "PassOutcome",
           "paying_k", "rates_by_k", "wilson_interval"]

# Each constant below with its measurement: docs/ablation.md replays the demo target's
# recorded outputs (lookup and suffix decoding: its table 1; the demo draft on a GPU-like
# profile: table 2) with the constant moved one way and the other.

# a tree pass's extra tokens per draft level, averaged over passes (not measured: no replay
# models trees)
_EMA = 0.15
# a draft must be expected to beat plain decoding by this much: the curve and the acceptance
# estimates are measurements that move by more than a few percent (the demo target's 2-token
# pass costs 1.9-2.0 single steps from one minute to the next), and a guess drafted on a
# streak of passes at a few percent of expected gain lost 4% of a fresh-code run to plain
# decoding (a 2-token pass at 57% acceptance where 94% was needed to pay). Replays, which
# have no timing noise, favour less: 1.00 +3% on the GPU-like draft, -0.4% on suffix edits
MIN_GAIN = 1.05
# a probe is worth a pass only if drafting could pay at near-perfect acceptance (0.9 or 0.99
# replayed the same)
_OPTIMISTIC_ACCEPT = 0.95
# plain steps before a kind that does not pay is drafted again (4: +3.1%, 16: -3.8% on the
# GPU-like draft; free kinds are never probed), the gap doubling up to MAX_PROBE_GAP (32 or
# 512 replayed the same)
FIRST_PROBE_GAP = 8
MAX_PROBE_GAP = 128

# with fixed k and plain steps asked for (the window's inspect mode): a plain step after the
# first draft (the plain size's warm-up pass), then one after every PLAIN_EVERY drafting steps
# until plain decoding is priced from MIN_SAMPLES of them (by about the tenth step), then one
# after every PLAIN_REFRESH to follow the machine (a share of the run, not measured)
PLAIN_EVERY = 2
PLAIN_REFRESH = 32


@dataclass(frozen=True)
class PassOutcome:
    """All the controller learns from one pass: the kind drafted (None: a plain step), the
    verdict at each draft depth judged (up to the first rejection), the pass's size and
    times.
    pass_tokens = 0: no pass ran (a free draft checked against the output,
    app.engine.session.ShadowCheck)."""

    kind: DraftKind | None
    verdicts: Sequence[bool] = ()
    pass_tokens: int = 0
    draft_depth: int = 0  # draft tokens in a row (k for a chain, the deepest node of a tree)
    t_draft: float = 0.0
    t_verify: float = 0.0
    busy: bool = False  # the machine was busy (app.engine.cost_curve.machine_busy)


def paying_k(rates: np.ndarray, min_gain: float = MIN_GAIN) -> int:
    """The k of the best rate in `rates` (k = 0..), or 0 where it beats plain decoding's
    (rates[0]) by less than `min_gain`."""
    k = int(np.argmax(rates))
    return k if rates[k] >= min_gain * rates[0] else 0


def rates_by_k(accept_at: Sequence[float], seconds: Sequence[float]) -> np.ndarray:
    """E(k) / time(k) for k = 0..len(accept_at), given each k's pass time in `seconds`."""
    rates: np.ndarray = expected_tokens_for_each_k(accept_at) / np.asarray(seconds)
    return rates


@dataclass
class _Pricing:
    """Each k's expected tokens, pass seconds and rate, as the controller priced them, from
    the acceptance it priced at each position."""

    tokens: np.ndarray
    seconds: list[float]
    accept_at: Sequence[float] = ()

    @property
    def rates(self) -> np.ndarray:
        rates: np.ndarray = self.tokens / np.asarray(self.seconds)
        return rates


@dataclass
class _Probes:
    """Per kind: plain steps since it last drafted, and the gap before its next probe (a
    lookup that found nothing this step must not reset the probes of one that did). Probes
    of a kind space out, the gap doubling each time one does not pay (up to a bound)."""

    streak: dict[str, int] = field(default_factory=dict)
    gap: dict[str, int] = field(default_factory=dict)

    def drafted(self, kind: str) -> None:
        self.streak[kind] = 0
        self.gap[kind] = FIRST_PROBE_GAP

    def probe_now(self, kind: str) -> bool:
        """Another step in which plain decoding wins for this kind: whether to probe it."""
        streak = self.streak.get(kind, 0) + 1
        gap = self.gap.get(kind, FIRST_PROBE_GAP)
        if streak < gap:
            self.streak[kind] = streak
            return False
        self.streak[kind] = 0
        self.gap[kind] = min(2 * gap, MAX_PROBE_GAP)
        return True


class DraftLengthController:
    """Fixed k, or adaptive k that drops to plain decoding when drafting does not pay."""

    def __init__(self, draft_max: int, adaptive: bool, curve: VerifyCostCurve | None = None,
                 free_kinds_shadowed: bool = False, price_plain: bool = False,
                 draft_cost: float | None = None) -> None:
        """free_kinds_shadowed: the caller checks the drafts of free kinds it did not verify
        against the output (app.engine.session.ShadowCheck) and reports their verdicts, so they
        need no probes. price_plain: with fixed k, take a plain step now and then (RULE_MEASURE)
        so that drafting can be priced against plain decoding from this run's own passes.
        draft_cost: a draft token's price known beforehand (replays, tests); runs learn it."""
        self.draft_max = draft_max
        self.adaptive = adaptive
        self.free_kinds_shadowed = free_kinds_shadowed
        self.price_plain = price_plain
        self.curve = curve if curve is not None else VerifyCostCurve()
        self._since_plain = 0  # steps decided since the last plain one (price_plain)
        self.known_draft_cost = draft_cost
        # replays and tests that price from a given curve and draft cost set this: passes
        # then teach acceptance only, never prices
        self.fixed_prices = False
        self.min_gain = MIN_GAIN
        self.estimates: dict[str, AcceptanceEstimate] = {}  # by DraftKind.name
        self.costs: dict[str, PassCost] = {}
        self.probes = _Probes()
        self._draft_times: dict[str, deque[float]] = {}  # per kind: seconds per drafted token
        self._probing = False
        self._measuring = False  # this step times a pass: it drafts the k chosen, no less
        self._copy: CopyEvidence | None = None  # the copy this step prices (decide's)
        # whether the machine is busy now (a session asks its app.engine.cores.CoreShare)
        self.machine_busy: Callable[[], bool] = machine_busy

    # -- queries: they read, never learn --

    def estimate(self, kind: DraftKind) -> AcceptanceEstimate:
        """How often this kind is accepted, per position (its prior, before any pass)."""
        known = self.estimates.get(kind.name)
        return known if known is not None else AcceptanceEstimate(kind.prior, self.draft_max)

    def pass_cost(self, kind: DraftKind) -> PassCost:
        known = self.costs.get(kind.name)
        if known is not None:
            return known
        if kind.free or self.known_draft_cost is None:
            return PassCost(0.0, priced=kind.free)
        return PassCost(self.known_draft_cost, priced=True)

    def unpriced(self, kind: DraftKind, limit: int) -> list[int]:
        """The draft lengths 0..limit this kind's passes cannot be priced for yet: their pass
        size has no price (too few kept samples, no stored curve), or the kind's draft token
        none (too few drafting passes)."""
        cost = self.pass_cost(kind)
        return [k for k in range(limit + 1)
                if not self.curve.can_price(cost.pass_size(k)) or (k and not cost.priced)]

    def _pricing(self, kind: DraftKind, top: int, accept_at: Sequence[float] | None = None
                 ) -> _Pricing:
        cost, curve = self.pass_cost(kind), self.curve.current()
        if accept_at is None:
            estimate = self.estimate(kind)
            accept_at = estimate.accept_at[:top] if self._copy is None else copy_accept_at(
                self._copy, estimate.accept_at[:top], estimate.pool_seen)
        return _Pricing(expected_tokens_for_each_k(accept_at),
                        [cost.seconds(k, curve) for k in range(top + 1)], accept_at)

    def rates(self, kind: DraftKind, top: int | None = None) -> np.ndarray:
        """Expected tokens per second of a pass that drafts k, for k = 0..top."""
        top = self.draft_max if top is None else min(top, self.draft_max)
        return self._pricing(kind, top).rates

    def best_k(self, kind: DraftKind, limit: int | None = None) -> int:
        """The k with the best expected rate, among k <= limit (near the end of the output
        a shorter draft may fit a cheaper pass size than the unlimited best cut short), or 0
        where it beats plain decoding by less than MIN_GAIN."""
        return paying_k(self.rates(kind, limit), self.min_gain)

    def could_pay(self, kind: DraftKind, limit: int | None = None) -> int:
        """The best k (up to limit) if acceptance were near perfect, or 0 if even then
        drafting would not gain MIN_GAIN (a probe that could at best break even, a 1-token
        guess where a 2-token pass costs 1.94 steps, only costs)."""
        top = self.draft_max if limit is None else min(limit, self.draft_max)
        return paying_k(self._pricing(kind, top, [_OPTIMISTIC_ACCEPT] * top).rates,
                        self.min_gain)

    def shadows(self, kind: DraftKind) -> bool:
        """Whether this kind's declined drafts are checked in shadow instead of probed."""
        return self.adaptive and self.free_kinds_shadowed and kind.free

    def confidence_stop(self, kind: DraftKind, remaining: int) -> ConfidenceStop | None:
        """In adaptive mode, for a draft model: the rule that ends this pass's draft where
        no longer draft would earn its extra time at the expected rate; the pass may
        then draft up to draft_max (within what is left). None: draft the k chosen."""
        if not self.adaptive or not kind.confident or self._measuring:
            return None
        limit = max(0, min(self.draft_max, remaining - 1))
        priced = self._pricing(kind, limit)
        return ConfidenceStop(limit, self.estimate(kind).pooled(),
                              float(priced.rates.max()), priced.seconds)

    # -- deciding --

    def decide(self, remaining: int, kind: DraftKind, copied: int = 0,
               available: int | None = None, copy: CopyEvidence | None = None) -> Decision:
        """The draft length for this step, and why. `copied`: how many of the last tokens the
        target wrote this kind's draft continues, in a row (a copy's evidence; 0 for others);
        `available`: the most tokens the drafter has to offer now (Outlook.available); `copy`:
        a copy's source and match, which price its acceptance (app.engine.copy_pricing)."""
        self._copy = copy
        limit = max(0, min(self.draft_max, remaining - 1))
        if limit == 0:
            return Decision(RULE_END_OF_OUTPUT, 0, kind.name, 0)
        if available is not None:
            if available == 0:  # nothing to draft: not a step in which plain decoding won
                return Decision(RULE_NOTHING_TO_DRAFT, 0, kind.name, 0)
            limit = min(limit, available)
        self._register(kind)
        self._since_plain += 1
        if not self.adaptive:
            if self._plain_price_due():
                return self._explain(RULE_MEASURE, 0, kind, limit, self._pricing(kind, limit))
            return self._explain(RULE_FIXED, limit, kind, limit, self._pricing(kind, limit))
        self._lift(kind, copied)
        unpriced = self.unpriced(kind, limit)
        self._measuring = bool(unpriced)
        if unpriced:
            self._probing = False
            return self._explain(RULE_MEASURE, self._to_measure(kind, limit, unpriced), kind,
                                 limit, self._pricing(kind, limit))
        priced = self._pricing(kind, limit)
        k = paying_k(priced.rates, self.min_gain)
        self._probing = (k == 0 and not self.shadows(kind)
                         and self.probes.probe_now(kind.name))
        if self._probing:
            k = self.could_pay(kind, limit)
            self._probing = k > 0
        elif k > 0:
            self.probes.drafted(kind.name)
        rule = RULE_PROBE if self._probing else RULE_BEST_RATE if k else RULE_NO_GAIN
        decision = self._explain(rule, k, kind, limit, priced)
        decision.min_gain = self.min_gain
        return decision

    def _plain_price_due(self) -> bool:
        """Fixed k with plain steps asked for: whether this step is one (never a run's first
        step, which shows a draft)."""
        if not self.price_plain:
            return False
        plain = self.curve.samples(1)
        gap = PLAIN_REFRESH if plain.priced else PLAIN_EVERY if plain.warmed else 1
        return self._since_plain > gap

    def _to_measure(self, kind: DraftKind, limit: int, unpriced: list[int]) -> int:
        """The draft length whose pass to time next: of the lengths that price the rest (plain
        decoding and the longest draft, between which the curve interpolates), the one with the
        fewest kept samples, a draft before a plain step (the first steps then show drafts)."""
        cost = self.pass_cost(kind)
        wanted = [k for k in (limit, 0) if k in unpriced or (k and not cost.priced)]
        if not wanted:  # a size inside the range: measure it directly
            wanted = unpriced
        return min(wanted, key=lambda k: len(self.curve.samples(cost.pass_size(k)).times))

    def _explain(self, rule: str, k: int, kind: DraftKind, limit: int,
                 priced: _Pricing) -> Decision:
        """The decision with the figures it was made on: the kind's acceptance as priced,
        the evidence behind it, each k's pass cost and gain over a plain step."""
        if k == 0:
            self._since_plain = 0
        estimate = self.estimate(kind)
        low, high = estimate.interval()
        cost = self.pass_cost(kind)
        plain = self.curve.samples(1)
        if rule == RULE_MEASURE or not self.adaptive and not self._fully_priced(kind, limit):
            return Decision(
                rule, k, kind.name, limit, acceptance=estimate.pooled(), acceptance_low=low,
                acceptance_high=high, evidence=estimate.judged, prior=kind.prior,
                accept_at=list(self._pricing(kind, limit).accept_at),
                measuring=cost.pass_size(k), samples=len(self.curve.samples(
                    cost.pass_size(k)).times), plain_samples=len(plain.times),
                refused=self.curve.refused, busy=self.machine_busy(),
            )
        rates = priced.rates
        gains = rates / rates[0]
        others = rates.copy()
        others[k] = -np.inf
        alternative = int(np.argmax(others)) if len(rates) > 1 else None
        decision = Decision(
            rule, k, kind.name, limit,
            acceptance=estimate.pooled(), acceptance_low=low, acceptance_high=high,
            evidence=estimate.judged, prior=kind.prior,
            plain_seconds=priced.seconds[0], pass_seconds=priced.seconds[k],
            expected_tokens=float(priced.tokens[k]), gain=float(gains[k]),
            accept_at=list(priced.accept_at), prices=list(priced.seconds),
            draft_token_seconds=cost.draft_cost, plain_samples=len(plain.times),
            refused=self.curve.refused, busy=self.machine_busy() or self.curve.busy(1),
            stored_at=self.curve.stored_at if not plain.priced else None,
        )
        if self._copy is not None:
            decision.copy_source, decision.copy_match = self._copy.source, self._copy.match
            decision.learnt_at = list(estimate.accept_at[:limit])
            decision.learnt_evidence = estimate.pool_seen
        if alternative is not None:
            decision.alternative_k = alternative
            decision.alternative_gain = float(gains[alternative])
            decision.alternative_seconds = priced.seconds[alternative]
            decision.alternative_tokens = float(priced.tokens[alternative])
        return decision

    def _fully_priced(self, kind: DraftKind, limit: int) -> bool:
        return not self.unpriced(kind, limit)

    # -- learning --

    def observe(self, outcome: PassOutcome) -> str:
        """One pass (or one free draft checked against the output) and its verdicts; returns
        what the verify-cost curve did with the pass's time (records.TIMING_*; "": nothing)."""
        kind = outcome.kind
        timing = ""
        if outcome.pass_tokens and not self.fixed_prices:
            timing = self.curve.observe(outcome.pass_tokens if outcome.draft_depth else 1,
                                        outcome.t_verify, outcome.busy)
        if kind is None or (outcome.pass_tokens and not outcome.draft_depth):
            return timing
        self._register(kind)
        if outcome.pass_tokens and not self.fixed_prices:
            self._learn_cost(kind, outcome)
        self.estimates[kind.name].observe(outcome.verdicts)
        return timing

    def _learn_cost(self, kind: DraftKind, outcome: PassOutcome) -> None:
        cost = self.costs[kind.name]
        depth = outcome.draft_depth
        # a probe's draft time includes catching up on the tokens emitted while it sat idle,
        # and a kind's first drafting pass the drafter's cold start: neither is a price
        if not self._probing and kind.name in self._draft_times:
            samples = self._draft_times[kind.name]
            samples.append(outcome.t_draft / depth)
            if len(samples) >= MIN_SAMPLES:  # a median: one cold or loaded pass moves nothing
                cost.draft_cost, cost.priced = float(np.median(samples)), True
        self._draft_times.setdefault(kind.name, deque(maxlen=RECENT_PASSES))
        extra = (outcome.pass_tokens - depth - 1) / depth
        cost.extra_per_level = (1 - _EMA) * cost.extra_per_level + _EMA * extra

    def _register(self, kind: DraftKind) -> None:
        if kind.name in self.estimates:
            return
        self.estimates[kind.name] = self.estimate(kind)
        self.costs[kind.name] = self.pass_cost(kind)

    def _lift(self, kind: DraftKind, copied: int) -> None:
        """A copy of the prompt's evidence beside its own passes: the run of tokens the target
        wrote that it would have predicted (as much as the pool remembers). Code quoted back
        26 tokens into its source has shown what 26 accepted drafts would, whether the tokens
        came from drafts or from plain steps, and takes the place of the kind's pooled
        verdicts when it says more (without it the replayed edits ran 1.7% slower with the
        lookup and 7% with suffix decoding, docs/ablation.md).

        A copy of the output or of an earlier answer (not DraftKind.run_is_evidence) learns
        from its verdicts alone, which shadow checks give it for free: a suffix copy recalled
        from an earlier answer often matches 16 tokens and goes on for 4 (an agent's JSON, a
        dataclass with other fields), and the output repeating a phrase of its own goes its
        own way after it. Counted at all, even beside the verdicts, a long run drafted
        31-token passes that kept 2 (packaging/research/replay_suffix.py, replay_lookup.py)."""
        run = min(float(copied), POOL_MEMORY)
        if kind.run_is_evidence and run:
            self.estimates[kind.name].raise_pool(run, run)
