"""Lookup first, a draft model behind it: prompt lookup where the context repeats itself
(free), the draft model otherwise."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.engine.drafters import Budget, Draft, Drafter, Outlook, TreeShape
from app.engine.lookup_edits import EditAwareLookup
from app.engine.sampling import SamplingParams
from app.engine.tree import DraftTree


class HybridDrafter(Drafter):
    """Prompt lookup when the context repeats itself (free), the draft model otherwise."""

    def __init__(self, model_drafter: Drafter, ngram: EditAwareLookup | None = None) -> None:
        self.model_drafter = model_drafter
        self.ngram = ngram or EditAwareLookup(n_min=2)
        self.name = f"lookup + {model_drafter.name}"
        self.cost_hint = model_drafter.cost_hint
        self.kind = model_drafter.kind

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self.model_drafter.begin(prompt_ids)
        self.ngram.begin(prompt_ids)

    def outlook(self, context: list[int]) -> Outlook:
        if self.ngram.find(context):
            return self.ngram.outlook(context)
        return self.model_drafter.outlook(context)

    def accept(self, context: list[int], hidden: np.ndarray | None) -> None:
        self.model_drafter.accept(context, hidden)
        self.ngram.accept(context, hidden)

    def propose(
        self, context: list[int], budget: Budget, params: SamplingParams,
        rng: np.random.Generator,
    ) -> Draft:
        # where the outlook named the lookup, its draft, even an empty one: the pass was priced
        # as a free one, and a declined free draft is proposed only to be checked against the
        # output (app.engine.session.ShadowCheck), which must not run the draft model
        if self.ngram.find(context):
            return self.ngram.propose(context, Budget(budget.max_tokens), params, rng)
        return self.model_drafter.propose(context, budget, params, rng)

    def propose_tree(
        self, context: list[int], depth: int, shape: TreeShape, params: SamplingParams,
        rng: np.random.Generator,
    ) -> DraftTree | None:
        tree = self.ngram.propose_tree(context, depth, shape, params, rng)
        if len(tree):
            return tree
        return self.model_drafter.propose_tree(context, depth, shape, params, rng)
