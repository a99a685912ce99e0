"""Choosing the draft length k from measured costs and measured acceptance, and saying why.

With E(k) the expected tokens of a pass that drafts k (app.engine.metrics) and
time(k) = k * t_draft + t_verify(pass size) (app.engine.cost_curve):

    k = argmax E(k) / time(k),   k = 0 (plain decoding) when no k beats one plain step
                                 by ControllerOptions.min_gain.

Acceptance is learnt per kind of draft (DraftKind) and per draft position from one narrow
signal, a PassOutcome per pass (or per free draft checked against the output without a
pass). Each choice comes back as a Decision (app.engine.records): the rule that fired and
the figures it compared, so whatever explains a step reads the reason, never guesses it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.engine.controller_options import DEFAULT_OPTIONS, ControllerOptions
from app.engine.cost_curve import PAD_RETIME, VerifyCostCurve, cheapest_size, machine_busy
from app.engine.drafters import DraftKind
from app.engine.estimates import (
    AcceptanceEstimate,
    ConfidenceStop,
    CopyEvidence,
    copy_accept_at,
)
from app.engine.pass_pricing import PassCost, Pricing, ProbeSchedule, paying_k
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

__all__ = ["DraftLengthController", "PassOutcome"]


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
    t_draft_first: float | None = None  # of t_draft, the first token's (StepRecord's)
    pads: int = 0  # of pass_tokens, filler after the draft (StepRecord.pads)


class DraftLengthController:
    """Fixed k, or adaptive k that drops to plain decoding when drafting does not pay."""

    def __init__(self, draft_max: int, adaptive: bool, curve: VerifyCostCurve | None = None,
                 free_kinds_shadowed: bool = False, price_plain: bool = False,
                 draft_cost: float | None = None,
                 options: ControllerOptions = DEFAULT_OPTIONS) -> None:
        """free_kinds_shadowed: the caller checks the drafts of free kinds it did not verify
        against the output (app.engine.session.ShadowCheck) and reports their verdicts, so they
        need no probes. price_plain: with fixed k, take a plain step now and then (RULE_MEASURE)
        so that drafting can be priced against plain decoding from this run's own passes.
        draft_cost: a draft token's price known beforehand (replays, tests); runs learn it.
        options: the controller's constants (replays move them)."""
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
        self.options = options
        self.estimates: dict[str, AcceptanceEstimate] = {}  # by DraftKind.name
        self.costs: dict[str, PassCost] = {}
        self.probes = ProbeSchedule(options)
        self._probing = False
        self._behind = 0  # tokens the kind's draft had not read when this probe began
        self._measuring = False  # this step times a pass: it drafts the k chosen, no less
        self._copy: CopyEvidence | None = None  # the copy this step prices (decide's)
        # whether the machine is busy now (a session asks its app.engine.cores.CoreShare)
        self.machine_busy: Callable[[], bool] = machine_busy
        # the most tokens a pass may read now, where the caller pads chain passes to a
        # cheaper size (app.engine.session: the context's room); None: it never pads
        self.pad_room: int | None = None
        self._priced_pass = False  # this step's decision priced its pass (it may be padded)
        self._padded_runs: dict[int, int] = {}  # per size, its passes padded since it last ran

    # -- queries: they read, never learn --

    def estimate(self, kind: DraftKind) -> AcceptanceEstimate:
        """How often this kind is accepted, per position (its prior, before any pass)."""
        known = self.estimates.get(kind.name)
        return known if known is not None else AcceptanceEstimate(kind.prior, self.draft_max,
                                                                options=self.options)

    def pass_cost(self, kind: DraftKind) -> PassCost:
        known = self.costs.get(kind.name)
        if known is not None:
            return known
        if kind.free:
            return PassCost(0.0, priced=True)
        if self.known_draft_cost is not None:
            return PassCost(self.known_draft_cost, priced=True)
        name = kind.name
        return PassCost(0.0, draft_times=self.curve.draft_samples(name),
                        first_times=self.curve.draft_first_samples(name),
                        catch_up_times=self.curve.catch_up_samples(name))

    def unpriced(self, kind: DraftKind, limit: int) -> list[int]:
        """The draft lengths 0..limit this kind's passes cannot be priced for yet: their pass
        size has no price (too few kept samples, no stored curve), or the kind's draft token
        none (too few drafting passes)."""
        cost = self.pass_cost(kind)
        return [k for k in range(limit + 1)
                if not self.curve.can_price(cost.pass_size(k)) or (k and not cost.priced)]

    def pad_limit(self) -> int | None:
        """The most tokens a padded pass may read: no more than the longest draft's pass,
        nor the context's room (None: passes are not padded)."""
        return None if self.pad_room is None else min(self.draft_max + 1, self.pad_room)

    def padded_size(self, n: int) -> int:
        """The size to run a drafting chain pass of n tokens at (cost_curve.cheapest_size):
        n itself where passes are not padded, where this step's decision did not price its
        pass (a pass timed to price it times its own size), and once in PAD_RETIME passes of
        a size padded away (to time it again)."""
        limit = self.pad_limit()
        if limit is None or not self._priced_pass:
            return n
        size = cheapest_size(self.curve.current(), n, limit)
        if size == n:
            return n
        runs = self._padded_runs.get(n, 0) + 1
        self._padded_runs[n] = runs % PAD_RETIME
        return n if runs == PAD_RETIME else size

    def _pricing(self, kind: DraftKind, top: int, accept_at: Sequence[float] | None = None
                 ) -> Pricing:
        if accept_at is None:
            estimate = self.estimate(kind)
            accept_at = estimate.accept_at[:top] if self._copy is None else copy_accept_at(
                self._copy, estimate.accept_at[:top], estimate.pool_seen, self.options)
        return Pricing.of(accept_at, self.pass_cost(kind), self.curve.current(),
                          largest=self.pad_limit())

    def rates(self, kind: DraftKind, top: int | None = None) -> np.ndarray:
        """Expected tokens per second of a pass that drafts k, for k = 0..top."""
        top = self.draft_max if top is None else min(top, self.draft_max)
        return self._pricing(kind, top).rates

    def best_k(self, kind: DraftKind, limit: int | None = None) -> int:
        """The k with the best expected rate, among k <= limit (near the end of the output
        a shorter draft may fit a cheaper pass size than the unlimited best cut short), or 0
        where it beats plain decoding by less than the options' min_gain."""
        return paying_k(self.rates(kind, limit), self.options.min_gain)

    def could_pay(self, kind: DraftKind, limit: int | None = None, catch_up: float = 0.0
                  ) -> int:
        """The best k (up to limit) if acceptance were near perfect, or 0 if even then
        drafting would not gain min_gain (a probe that could at best break even, a 1-token
        guess where a 2-token pass costs 1.94 steps, only costs); `catch_up`: seconds the
        draft first spends reading what the target wrote since it last drafted."""
        top = self.draft_max if limit is None else min(limit, self.draft_max)
        optimistic = [self.options.optimistic_accept] * top
        priced = Pricing.of(optimistic, self.pass_cost(kind), self.curve.current(), catch_up,
                            self.pad_limit())
        return paying_k(priced.rates, self.options.min_gain)

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
        a copy's source and match, which price its acceptance (app.engine.estimates)."""
        self._copy, self._priced_pass = copy, False
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
        self.estimates[kind.name].lift_by_copy(copied, kind.run_is_evidence)
        unpriced = self.unpriced(kind, limit)
        self._measuring = bool(unpriced)
        if unpriced:
            self._probing = False
            return self._explain(RULE_MEASURE, self._to_measure(kind, limit, unpriced), kind,
                                 limit, self._pricing(kind, limit))
        priced = self._pricing(kind, limit)
        k, behind = paying_k(priced.rates, self.options.min_gain), self.probes.behind(kind.name)
        self._probing = (k == 0 and not self.shadows(kind)
                         and self.probes.probe_now(kind.name))
        catch_up = self.pass_cost(kind).catch_up(behind) if self._probing else 0.0
        if self._probing:
            k = self.could_pay(kind, limit, catch_up)
            self._probing, self._behind = k > 0, behind
        elif k > 0:
            self.probes.drafted(kind.name)
        rule = RULE_PROBE if self._probing else RULE_BEST_RATE if k else RULE_NO_GAIN
        decision = self._explain(rule, k, kind, limit, priced)
        decision.min_gain, decision.catch_up_seconds = self.options.min_gain, catch_up or None
        return decision

    def _plain_price_due(self) -> bool:
        """Fixed k with plain steps asked for: whether this step is one (never a run's first
        step, which shows a draft)."""
        if not self.price_plain:
            return False
        plain = self.curve.samples(1)
        every = self.options.plain_refresh if plain.priced else self.options.plain_every
        gap = every if plain.warmed else 1
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
                 priced: Pricing) -> Decision:
        """The decision with the figures it was made on: the kind's acceptance as priced,
        the evidence behind it, each k's pass cost and gain over a plain step."""
        if k == 0:
            self._since_plain = 0
        estimate = self.estimate(kind)
        low, high = estimate.interval()
        size, plain = self.pass_cost(kind).pass_size(k), self.curve.samples(1)
        stated: dict[str, Any] = dict(
            acceptance=estimate.pooled(), acceptance_low=low, acceptance_high=high,
            evidence=estimate.judged, prior=kind.prior, accept_at=list(priced.accept_at),
            plain_samples=len(plain.times), refused=self.curve.refused)
        if self._copy is not None:
            stated.update(copy_source=self._copy.source, copy_match=self._copy.match,
                          copy_splits=[j for j in self._copy.splits if j < limit],
                          learnt_at=list(estimate.accept_at[:limit]),
                          learnt_evidence=estimate.pool_seen)
        if rule == RULE_MEASURE or not self.adaptive and self.unpriced(kind, limit):
            return Decision(rule, k, kind.name, limit, measuring=size,
                            samples=len(self.curve.samples(size).times),
                            busy=self.machine_busy(), **stated)
        self._priced_pass = True
        return Decision(rule, k, kind.name, limit,
                        draft_token_seconds=self.pass_cost(kind).draft_cost,
                        first_draft_seconds=self.pass_cost(kind).first,
                        busy=self.machine_busy() or self.curve.busy(1),
                        stored_at=self.curve.stored_at if not plain.priced else None,
                        **stated, **priced.figures(k))

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
        cost = self.costs[kind.name]
        if outcome.pass_tokens and not self.fixed_prices:
            cost.learn(outcome.t_draft, outcome.draft_depth,
                       outcome.pass_tokens - outcome.pads, not self._probing,
                       self.options.tree_average, outcome.t_draft_first)
            if self._probing and outcome.t_draft_first is not None and not outcome.busy:
                cost.learn_catch_up(outcome.t_draft_first, self._behind)
        self.estimates[kind.name].observe(outcome.verdicts)
        return timing

    def _register(self, kind: DraftKind) -> None:
        if kind.name in self.estimates:
            return
        self.estimates[kind.name] = self.estimate(kind)
        self.costs[kind.name] = self.pass_cost(kind)
