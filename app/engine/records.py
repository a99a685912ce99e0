"""What the engine reports: one StepRecord per target pass, one TokenRecord per draft token.

Dataclasses inside the app; the trace file (app.engine.trace) turns them into JSON lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Where an emitted token came from; the UI colours tokens by this.
ORIGIN_ACCEPTED = "accepted"  # a draft token the target accepted
ORIGIN_REPLACEMENT = "replacement"  # the target's token after a rejection
ORIGIN_BONUS = "bonus"  # the target's extra token when every draft token passed
ORIGIN_PLAIN = "plain"  # plain target decoding (no draft this step)


@dataclass
class Alternative:
    token: int
    text: str
    p: float
    q: float


@dataclass
class TokenRecord:
    """One draft token and the verdict on it."""

    pos: int
    token: int
    text: str
    q: float
    p: float
    u: float | None
    accepted: bool
    replacement: int | None = None
    replacement_text: str | None = None
    residual_used: bool = False
    top: list[Alternative] = field(default_factory=list)
    p_entropy: float = 0.0
    q_entropy: float = 0.0

    @property
    def ratio(self) -> float:
        return self.p / self.q if self.q > 0 else float("inf")

    @property
    def acceptance_chance(self) -> float:
        return min(1.0, self.ratio)


@dataclass
class StepRecord:
    """One target forward pass: the draft, the verdicts and what was emitted."""

    index: int
    k: int
    tokens: list[TokenRecord]
    emitted: list[int]
    emitted_text: list[str]
    origins: list[str]
    t_draft: float
    t_verify: float
    t_overhead: float
    drafter: str = ""

    @property
    def n_accepted(self) -> int:
        return sum(1 for t in self.tokens if t.accepted)

    @property
    def t_total(self) -> float:
        return self.t_draft + self.t_verify + self.t_overhead
