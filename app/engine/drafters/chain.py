"""Drafters chained in order of preference (`--spec-type ngram,draft`): the first that has a
draft for the context drafts. A lookup first (free, where the context repeats itself), a
model behind it for the rest."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.engine.decode_config import TreeShape
from app.engine.drafters import Budget, Draft, Drafter, Outlook
from app.engine.sampling import SamplingParams
from app.engine.tree import DraftTree


class ChainDrafter(Drafter):
    """Asks its drafters in turn; the last one drafts when none before it has anything.
    Every drafter sees every begin() and accept(), so each keeps up with the context."""

    def __init__(self, drafters: Sequence[Drafter]) -> None:
        assert drafters, "a chain needs a drafter"
        self.drafters = list(drafters)
        last = self.drafters[-1]
        self.name = " + ".join(d.name for d in self.drafters)
        self.kind = last.kind
        self.cost_hint = last.cost_hint
        self.wants_target_hidden = any(d.wants_target_hidden for d in self.drafters)

    def _drafting(self, context: list[int]) -> Drafter:
        """The first drafter with a draft for this context (the last one if none has)."""
        for drafter in self.drafters[:-1]:
            if drafter.has_draft(context):
                return drafter
        return self.drafters[-1]

    def begin(self, prompt_ids: Sequence[int]) -> None:
        for drafter in self.drafters:
            drafter.begin(prompt_ids)

    def has_draft(self, context: list[int]) -> bool:
        return any(d.has_draft(context) for d in self.drafters)

    def outlook(self, context: list[int]) -> Outlook:
        return self._drafting(context).outlook(context)

    def accept(self, context: list[int], hidden: np.ndarray | None) -> None:
        for drafter in self.drafters:
            drafter.accept(context, hidden)

    def propose(
        self, context: list[int], budget: Budget, params: SamplingParams,
        rng: np.random.Generator,
    ) -> Draft:
        # the drafter the outlook named drafts, even an empty draft: the pass was priced for
        # its kind, and a declined free draft is proposed only to be checked against the
        # output (app.engine.shadow), which must not run a model
        return self._drafting(context).propose(context, budget, params, rng)

    def propose_tree(
        self, context: list[int], depth: int, shape: TreeShape, params: SamplingParams,
        rng: np.random.Generator,
    ) -> DraftTree | None:
        tree = None
        for drafter in self.drafters:
            tree = drafter.propose_tree(context, depth, shape, params, rng)
            if tree is not None and len(tree):
                return tree
        return tree
