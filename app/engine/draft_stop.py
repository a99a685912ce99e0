"""Where a draft model's draft should end: after the token where its own confidence says the
next one would not pay for itself.

A draft model's probability for the token it drafted says a great deal about whether the
target will accept it: on the demo pair, greedy, 99.6% of the tokens it drafted with q >= 0.9
passed and about 80% of those below. Every further draft token costs a draft step, paid
before its own confidence is known, so the chance that the draft so far survives is what
decides whether to pay. A pass keeps drafting while

    chance(all drafted so far pass) * a_next  >=  rate * (draft step + extra verify time)

a_next being the source's pooled acceptance and rate the tokens per second the controller
expects: one more token then earns at least what the time it costs earns on average.
The token whose confidence ends the draft is kept (its step is already paid, and verifying
one more token costs little); the draft ends after it.

Ending a draft on what was drafted keeps speculative sampling exact: the draft length is a
stopping time of the draft's own tokens, and each position is still judged with the q it was
drawn from. (Leaving out the token whose own q ended the draft would not be: whether a token
is offered would then depend on the token.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# bins of the drafted token's q; the top bins are narrow, as most code tokens fall there
_EDGES = np.array([0.2, 0.4, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99])
_CENTRES = np.array([0.1, 0.3, 0.5, 0.65, 0.75, 0.85, 0.925, 0.97, 0.995])
# each bin starts at its own q, worth two tokens: a draft that is as often right as it is
# sure; a bin's counts fade per token judged in it (a memory of about 64 of them)
_PRIOR_WEIGHT = 2.0
_DECAY = 1 - 1 / 64


@dataclass
class ConfidenceCalibration:
    """How often a drafted token with probability q under the draft was accepted, by q."""

    hits: np.ndarray = field(default_factory=lambda: np.zeros(len(_CENTRES)))
    seen: np.ndarray = field(default_factory=lambda: np.zeros(len(_CENTRES)))

    @staticmethod
    def _bin(q: float) -> int:
        return int(np.searchsorted(_EDGES, q, side="right"))

    def observe(self, q: float, accepted: bool) -> None:
        b = self._bin(q)
        self.hits[b] = _DECAY * self.hits[b] + accepted
        self.seen[b] = _DECAY * self.seen[b] + 1.0

    def accept(self, q: float) -> float:
        b = self._bin(q)
        return float((self.hits[b] + _PRIOR_WEIGHT * _CENTRES[b])
                     / (self.seen[b] + _PRIOR_WEIGHT))


@dataclass
class ConfidenceStop:
    """One pass's rule: asked after each drafted token whether to draft another."""

    calibration: ConfidenceCalibration
    limit: int  # the most tokens this pass may draft
    next_accept: float  # a_next: the source's pooled acceptance
    rate: float  # tokens per second the controller expects from a pass
    token_seconds: float  # what one more drafted token costs: its draft step, its verifying
    chance: float = 1.0  # that every token drafted so far passes
    stopped: bool = False  # the last answer was to stop: the confidence ended the draft

    def keep_drafting(self, drafted: int, q: float) -> bool:
        """`drafted` tokens so far, the last of them drawn with probability q."""
        self.chance *= self.calibration.accept(q)
        # the last answer counts: a drafter held to a minimum length may draft on after a no
        self.stopped = self.chance * self.next_accept < self.rate * self.token_seconds
        return not self.stopped
