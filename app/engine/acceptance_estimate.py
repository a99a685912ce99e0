"""How often one kind of draft is accepted, per draft position, learnt in a few passes.

a_i, the chance that draft position i is accepted once reached, captures acceptance that is
correlated along a draft (as in copying), which a single alpha does not. It is estimated
hierarchically: a pooled rate over all positions (decayed counts, about 32 tokens of memory,
the kind's prior worth one token) serves as the prior of each position's own decayed counts,
and alone for positions never reached. Every judged token feeds the pooled rate, so while
copies keep passing it climbs towards 1 and the next draft is longer; a rejection shortens it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# pooled counts fade per judged token (a memory of about 32 tokens, however they came: 32
# one-token passes or half of one long copy); each position's own counts fade per pass
POOL_DECAY_PER_TOKEN = 1 - 1 / 32
POOL_MEMORY = 1 / (1 - POOL_DECAY_PER_TOKEN)  # what decayed counts add up to at most
_POSITION_DECAY = 0.8
_PRIOR_WEIGHT = 1.0  # the kind's prior, in tokens, inside the pooled rate
_POOL_WEIGHT = 4.0  # the pooled rate, in observations, inside a position's estimate


@dataclass
class AcceptanceEstimate:
    """a_i for positions 0..positions-1 of one kind of draft; `accept_at` is recomputed
    whenever the counts change, and reading it changes nothing."""

    prior: float
    positions: int
    accept_at: list[float] = field(default_factory=list)
    hits_at: list[float] = field(default_factory=list)
    seen_at: list[float] = field(default_factory=list)
    pool_hits: float = 0.0
    pool_seen: float = 0.0

    def __post_init__(self) -> None:
        for counts in (self.hits_at, self.seen_at):
            counts.extend([0.0] * (self.positions - len(counts)))
        self._estimate()

    def pooled(self) -> float:
        return self.pooled_from(self.pool_hits, self.pool_seen)

    def pooled_from(self, hits: float, seen: float) -> float:
        """The pooled rate these counts give with this kind's prior."""
        return (hits + _PRIOR_WEIGHT * self.prior) / (seen + _PRIOR_WEIGHT)

    def observe(self, accepted: list[bool]) -> None:
        """One pass's verdicts, position by position up to the first rejection."""
        judged = accepted[: self.positions]
        # every position fades each pass, reached or not: an estimate that once fell low would
        # otherwise keep k below that position and never be corrected (it returns to the pool)
        for i in range(self.positions):
            hit = judged[i] if i < len(judged) else None
            self.seen_at[i] = _POSITION_DECAY * self.seen_at[i] + (hit is not None)
            self.hits_at[i] = _POSITION_DECAY * self.hits_at[i] + bool(hit)
        fade = POOL_DECAY_PER_TOKEN ** len(judged)
        self.pool_seen = fade * self.pool_seen + len(judged)
        self.pool_hits = fade * self.pool_hits + sum(judged)
        self._estimate()

    def raise_pool(self, hits: float, seen: float) -> None:
        """Take these pooled counts where, with this kind's prior, they say more is accepted
        than its own."""
        if self.pooled_from(hits, seen) > self.pooled_from(self.pool_hits, self.pool_seen):
            self.pool_hits, self.pool_seen = hits, seen
            self._estimate()

    def _estimate(self) -> None:
        pooled = self.pooled()
        self.accept_at = [(hits + _POOL_WEIGHT * pooled) / (seen + _POOL_WEIGHT)
                          for hits, seen in zip(self.hits_at, self.seen_at, strict=True)]
