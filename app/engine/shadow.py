"""Free drafts checked against what the target writes, without a pass.

When the controller decodes plainly, a free drafter (a lookup, suffix decoding) could still
have drafted, at no cost. Its draft is kept aside, and the tokens the target goes on to write
say how far it would have been accepted: a drafted token of a one-hot draft passes exactly
when the target's own token equals it (greedy: the argmax; sampled: accepted with chance p(x),
the chance that plain sampling writes x). So the verdicts are the ones a verify pass would
have drawn, and the kind's acceptance is learnt from every plain stretch for free, where
probing it cost a verify pass that mostly failed on text with little to copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.engine.adaptive import DraftLengthController, PassOutcome
from app.engine.drafters import Budget, Drafter, DraftKind, Outlook
from app.engine.sampling import SamplingParams


@dataclass(frozen=True)
class ShadowDraft:
    kind: DraftKind
    start: int  # the output position its first token would have filled
    tokens: tuple[int, ...]


class ShadowCheck:
    """One draft at a time, held until the output settles it."""

    def __init__(self) -> None:
        self.pending: ShadowDraft | None = None

    @property
    def idle(self) -> bool:
        return self.pending is None

    def offer(self, controller: DraftLengthController, drafter: Drafter, outlook: Outlook,
              k: int, context: list[int], written: int, remaining: int,
              params: SamplingParams, rng: np.random.Generator) -> None:
        """Where the controller chose to decode plainly (k = 0) and shadows this kind, hold
        the draft it would have proposed; `written`: the output tokens so far."""
        if k or not self.idle or not controller.shadows(outlook.kind) \
                or outlook.available == 0 or remaining < 2:
            return
        budget = Budget(min(controller.draft_max, remaining - 1))
        self.hold(outlook.kind, written, drafter.propose(context, budget, params, rng).tokens)

    def settle_into(self, controller: DraftLengthController, output: Sequence[int]) -> None:
        """After each step: a held draft the output has settled counts as the kind's pass."""
        settled = self.settle(output)
        if settled is not None:
            kind, verdicts = settled
            controller.observe(PassOutcome(kind, verdicts))

    def hold(self, kind: DraftKind, start: int, tokens: Sequence[int]) -> None:
        if tokens:
            self.pending = ShadowDraft(kind, start, tuple(tokens))

    def settle(self, output: Sequence[int]) -> tuple[DraftKind, list[bool]] | None:
        """The held draft's kind and its verdicts, position by position up to the first token
        the target wrote otherwise, once the output reaches that far (else None: wait)."""
        held = self.pending
        if held is None:
            return None
        written = output[held.start : held.start + len(held.tokens)]
        verdicts: list[bool] = []
        for drafted, wrote in zip(held.tokens, written, strict=False):
            verdicts.append(drafted == wrote)
            if drafted != wrote:
                break
        if (verdicts and not verdicts[-1]) or len(verdicts) == len(held.tokens):
            self.pending = None
            return held.kind, verdicts
        return None
