"""Choosing the draft length k from measured costs and measured acceptance.

Expected tokens from a pass with k drafts, E(k), comes from app.engine.metrics, with a_i the
measured chance that draft position i is accepted once reached (this captures acceptance that
is correlated along a draft, as in copying, which a single alpha does not).
a_i is estimated hierarchically, so the controller learns in a few passes: a pooled rate over
all positions (decayed counts, about 32 tokens of memory, the source's prior worth one token)
serves as the prior of each position's own decayed counts, and alone for positions never
reached. Every judged token feeds the pooled rate, so while copies keep passing it climbs
towards 1 and the next draft is longer (4 -> ~9 -> ~16 -> ~28 on a CPU's verify curve), as
llama.cpp's ngram-map-k drafts on while a copy holds; a rejection shortens it again.
Time of that pass: k * t_draft + t_verify(k+1), with t_verify measured per pass size.
k = argmax E(k) / time(k); k = 0 (plain decoding) when no k beats one plain step.
A draft model's pass, once k > 0, may draft up to draft_max: its draft then ends on the
draft's own confidence (app.engine.draft_stop), priced with the same costs and this rate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from app.engine.draft_model import DRAFT_MODEL
from app.engine.draft_stop import ConfidenceCalibration, ConfidenceStop
from app.engine.drafters import DraftKind
from app.engine.metrics import (
    expected_tokens_by_position,
    expected_tokens_for_each_k,
    expected_tokens_per_pass,
)
from app.engine.records import StepRecord

_EMA = 0.15
# the first live pass sets most of the load factor: one pass already says how busy we are
_FIRST_LOAD_WEIGHT = 0.7
# pooled counts fade per judged token (a memory of about 32 tokens, however they came: 32
# one-token passes or half of one long copy), and per emitted token while another source is
# consulted; each position's own counts fade per pass
_POOL_DECAY_PER_TOKEN = 1 - 1 / 32
_POOL_MEMORY = 1 / (1 - _POOL_DECAY_PER_TOKEN)  # what decayed counts add up to at most
_POSITION_DECAY = 0.8
_PRIOR_WEIGHT = 1.0  # the source's prior, in tokens, inside the pooled rate
_POOL_WEIGHT = 4.0  # the pooled rate, in observations, inside a position's estimate
# Each kind's prior, whether drafting it is free, whether its draft may end on its own
# confidence, and which kind it is accepted at least as often as: the drafter's declaration
# (app.engine.drafters.DraftKind), read here, never looked up by name.
# a probe must be able to pay: with near-perfect acceptance some k beats plain by this much,
# because a draft model that sat idle first re-reads everything emitted since
_OPTIMISTIC_ACCEPT = 0.95
_PROBE_MARGIN = 1.15
# while plain decoding wins, try a draft again after this many steps, doubling each time
# the probe does not pay (bounded), so a wrong guess costs little
_FIRST_PROBE_GAP = 8
_MAX_PROBE_GAP = 128


@dataclass
class VerifyCostCurve:
    """Seconds for one target pass over n tokens, keyed by n; interpolated between points.

    `points` are calibrated (measured once per model and device, cached); the machine's load
    moves the level of the whole curve but seldom its shape. So a size seen in this run uses
    its live time, and every other size its calibrated time scaled by `load`, the ratio of live
    to calibrated times so far: a curve measured on a busy machine is not trusted for ever.
    """

    points: dict[int, float] = field(default_factory=dict)
    live: dict[int, float] = field(default_factory=dict)
    load: float = 1.0

    def current(self) -> dict[int, float]:
        merged = {n: t * self.load for n, t in self.points.items()}
        merged.update(self.live)
        return merged

    def cost(self, n: int) -> float:
        return _interpolate(self.current(), n)

    def observe(self, n: int, seconds: float) -> None:
        if self.points:
            ratio = seconds / max(_interpolate(self.points, n), 1e-9)
            weight = _FIRST_LOAD_WEIGHT if not self.live else _EMA
            self.load = (1 - weight) * self.load + weight * ratio
        old = self.live.get(n)
        self.live[n] = seconds if old is None else (1 - _EMA) * old + _EMA * seconds


def _interpolate(points: dict[int, float], n: int) -> float:
    if not points:
        return float(n)  # unknown: assume linear, which makes no k pay less than it should
    if n in points:
        return points[n]
    sizes = sorted(points)
    values = [points[s] for s in sizes]
    if n > sizes[-1] and len(sizes) > 1:
        slope = (values[-1] - values[-2]) / (sizes[-1] - sizes[-2])
        return values[-1] + slope * (n - sizes[-1])
    return float(np.interp(n, sizes, values))


def _verify_slope(points: dict[int, float], up_to: int) -> float:
    """Seconds one more token adds to a verify pass, fitted over the pass sizes up to
    `up_to`: neighbouring sizes, some live and some calibrated, differ by noise larger than
    the step between them (a bfloat16 CPU adds ~9 ms per token to a ~230 ms pass)."""
    sizes = sorted(n for n in points if n <= max(up_to, 2))
    if len(sizes) < 2:
        return 0.0
    slope = np.polyfit(sizes, [points[n] for n in sizes], 1)[0]
    return max(0.0, float(slope))


def _pass_cost(stats: SourceStats, k: int, curve_points: dict[int, float]) -> float:
    """Seconds of a pass that drafts k tokens of this source: drafting, then verifying."""
    return k * stats.draft_cost + _interpolate(curve_points, stats.pass_size(k))


@dataclass
class SourceStats:
    """What one kind of draft (a draft model, a lookup) has been measured to deliver."""

    accept_at: list[float]  # the current estimates, recomputed after each pass
    draft_cost: float
    # tokens a pass reads beyond the k + 1 of a chain, per draft level (tree siblings, and
    # committed tokens a tree step left for the next pass to re-read)
    extra_per_level: float = 0.0
    prior: float = 0.6
    hits_at: list[float] = field(default_factory=list)
    seen_at: list[float] = field(default_factory=list)
    pool_hits: float = 0.0
    pool_seen: float = 0.0

    def pass_size(self, k: int) -> int:
        return k + 1 + round(self.extra_per_level * k)

    def observe(self, accepted: list[bool]) -> None:
        """One pass's verdicts, position by position up to the first rejection."""
        size = len(self.accept_at)
        for counts in (self.hits_at, self.seen_at):
            counts.extend([0.0] * (size - len(counts)))
        judged = accepted[:size]
        # every position fades each pass, reached or not: an estimate that once fell low would
        # otherwise keep k below that position and never be corrected (it returns to the pool)
        for i in range(size):
            hit = judged[i] if i < len(judged) else None
            self.seen_at[i] = _POSITION_DECAY * self.seen_at[i] + (hit is not None)
            self.hits_at[i] = _POSITION_DECAY * self.hits_at[i] + bool(hit)
        fade = _POOL_DECAY_PER_TOKEN ** len(judged)
        self.pool_seen = fade * self.pool_seen + len(judged)
        self.pool_hits = fade * self.pool_hits + sum(judged)
        self._estimate()

    def fade(self, n_tokens: int) -> None:
        factor = _POOL_DECAY_PER_TOKEN ** n_tokens
        self.pool_hits *= factor
        self.pool_seen *= factor
        self._estimate()

    def pooled(self) -> float:
        return self._pooled_from(self.pool_hits, self.pool_seen)

    def _pooled_from(self, hits: float, seen: float) -> float:
        """The pooled rate of these counts with this source's prior."""
        return (hits + _PRIOR_WEIGHT * self.prior) / (seen + _PRIOR_WEIGHT)

    def raise_pool_to(self, other: SourceStats) -> None:
        """Take the other source's pooled counts where, with this source's prior, they say
        more is accepted than this source's own."""
        self._raise_pool(other.pool_hits, other.pool_seen)

    def raise_pool_to_run(self, run: int) -> None:
        """Count a run of tokens the target wrote that this source would have predicted as
        passed draft tokens, where they say more than the pooled counts (as much as the
        pool remembers): a copy 26 tokens into its source has shown what 26 accepted drafts
        would, whether the tokens came from drafts or from plain steps."""
        remembered = min(float(run), _POOL_MEMORY)
        self._raise_pool(remembered, remembered)

    def _raise_pool(self, hits: float, seen: float) -> None:
        """Take these pooled counts where, with this source's prior, they say more is
        accepted than this source's own."""
        if self._pooled_from(hits, seen) > self.pooled():
            self.pool_hits, self.pool_seen = hits, seen
            self._estimate()

    def _estimate(self) -> None:
        pooled = self.pooled()
        size = len(self.accept_at)
        for counts in (self.hits_at, self.seen_at):
            counts.extend([0.0] * (size - len(counts)))
        self.accept_at[:] = [
            (hits + _POOL_WEIGHT * pooled) / (seen + _POOL_WEIGHT)
            for hits, seen in zip(self.hits_at, self.seen_at, strict=True)
        ]


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
        self.draft_cost_hint = draft_cost
        self.sources: dict[str, SourceStats] = {}  # by DraftKind.name
        self.kinds: dict[str, DraftKind] = {}
        self.calibrations: dict[str, ConfidenceCalibration] = {}
        # per source: plain steps since its last draft, and the gap before its next probe
        # (a lookup that found nothing this step must not reset the probes of one that did)
        self._plain_streak: dict[str, int] = {}
        self._probe_gap: dict[str, int] = {}
        self._probing = False

    def stats(self, kind: DraftKind = DRAFT_MODEL) -> SourceStats:
        """What this kind of draft has been measured to deliver (its prior, unmeasured)."""
        if kind.name not in self.sources:
            self.kinds[kind.name] = kind
            cost = 0.0 if kind.free else self.draft_cost_hint
            self.sources[kind.name] = SourceStats([kind.prior] * self.draft_max,
                                                  draft_cost=cost, prior=kind.prior)
        stats = self.sources[kind.name]
        weaker = None if kind.at_least is None else self.sources.get(kind.at_least.name)
        if weaker is not None:
            stats.raise_pool_to(weaker)
        return stats

    def expected_tokens(self, k: int, kind: DraftKind = DRAFT_MODEL) -> float:
        return expected_tokens_by_position(self.stats(kind).accept_at[:k])

    def throughput(self, k: int, kind: DraftKind = DRAFT_MODEL) -> float:
        stats = self.stats(kind)
        return self.expected_tokens(k, kind) / _pass_cost(stats, k, self.curve.current())

    def best_k(self, kind: DraftKind = DRAFT_MODEL, limit: int | None = None) -> int:
        """The k with the best expected rate, among k <= limit: near the end of the output
        a shorter draft may fit a cheaper pass size than the unlimited best cut short."""
        return self._best(kind, limit)[0]

    def _best(self, kind: DraftKind, limit: int | None) -> tuple[int, float]:
        """best_k and its expected tokens per second (throughput() for every k at once:
        this runs before every step)."""
        top = self.draft_max if limit is None else min(limit, self.draft_max)
        stats = self.stats(kind)
        merged = self.curve.current()
        costs = [_pass_cost(stats, k, merged) for k in range(top + 1)]
        rates = expected_tokens_for_each_k(stats.accept_at[:top]) / np.asarray(costs)
        k = int(np.argmax(rates))
        return k, float(rates[k])

    def next_k(self, remaining: int, kind: DraftKind = DRAFT_MODEL, copied: int = 0) -> int:
        """The draft length for this step. `copied`: how many of the last tokens the target
        wrote this source's draft continues, in a row (a copy's evidence; 0 for others)."""
        limit = max(0, min(self.draft_max, remaining - 1))
        if not self.adaptive:
            return limit
        if copied:
            self.stats(kind).raise_pool_to_run(copied)
        k = self.best_k(kind, limit)
        self._probing = False
        if k == 0:
            k = self._maybe_probe(kind)
        else:
            self._plain_streak[kind.name] = 0
            self._probe_gap[kind.name] = _FIRST_PROBE_GAP
        return min(k, limit)

    def confidence_stop(self, kind: DraftKind, remaining: int) -> ConfidenceStop | None:
        """In adaptive mode, for a draft model: the rule that ends this pass's draft where
        one more token would earn less than its time does at the expected rate; the pass may
        then draft up to draft_max (within what is left). None: draft the k chosen."""
        if not self.adaptive or not kind.confident:
            return None
        limit = max(0, min(self.draft_max, remaining - 1))
        _, rate = self._best(kind, limit)
        stats = self.stats(kind)
        token_seconds = (stats.draft_cost
                         + _verify_slope(self.curve.current(), stats.pass_size(limit)))
        calibration = self.calibrations.setdefault(kind.name, ConfidenceCalibration())
        return ConfidenceStop(calibration, limit, stats.pooled(), rate, token_seconds)

    def could_pay(self, kind: DraftKind) -> int:
        """The best k if acceptance were near perfect, or 0 if even then drafting loses."""
        stats = self.stats(kind)
        merged = self.curve.current()
        plain = 1.0 / _pass_cost(stats, 0, merged)
        best_k, best_rate = 0, plain * _PROBE_MARGIN
        for k in range(1, self.draft_max + 1):
            rate = expected_tokens_per_pass(_OPTIMISTIC_ACCEPT, k) / _pass_cost(stats, k, merged)
            if rate > best_rate:
                best_k, best_rate = k, rate
        return best_k

    def _maybe_probe(self, kind: DraftKind) -> int:
        """Now and then draft anyway, so a wrong acceptance estimate can recover; never
        when the measured costs say no acceptance rate could make drafting pay."""
        streak = self._plain_streak.get(kind.name, 0) + 1
        gap = self._probe_gap.get(kind.name, _FIRST_PROBE_GAP)
        if streak < gap:
            self._plain_streak[kind.name] = streak
            return 0
        self._plain_streak[kind.name] = 0
        self._probe_gap[kind.name] = min(2 * gap, _MAX_PROBE_GAP)
        k = self.could_pay(kind)
        self._probing = k > 0
        return k

    def observe(self, step: StepRecord) -> None:
        self.curve.observe(1 if step.k == 0 else step.n_pass, step.t_verify)
        # what was learnt is about the recent text: a source this step did not consult fades
        # with the tokens the step emitted (after a copy, the guesses that opened it 150
        # tokens earlier no longer say that a guess would pass); the consulted one keeps its
        # estimate while it decodes plainly, and its probes decide when to try again
        for name, other in self.sources.items():
            if name != step.source:
                other.fade(len(step.emitted))
        if step.k == 0 or step.source not in self.kinds:
            return
        stats = self.stats(self.kinds[step.source])
        per_token = step.t_draft / max(1, step.draft_depth)
        # a probe's draft time includes catching up on the tokens emitted while it sat idle
        if not self._probing:
            stats.draft_cost = per_token if stats.draft_cost == 0 else (
                (1 - _EMA) * stats.draft_cost + _EMA * per_token
            )
        depth = max(1, step.draft_depth)
        extra = (step.n_pass - depth - 1) / depth
        stats.extra_per_level = (1 - _EMA) * stats.extra_per_level + _EMA * extra
        stats.observe(list(step.depth_outcomes()))
        calibration = self.calibrations.get(step.source)
        if calibration is not None and not step.is_tree:
            for token in step.tokens:
                if token.accepted is None:
                    break
                calibration.observe(token.q, token.accepted)
