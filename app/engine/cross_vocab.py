"""A draft model with another vocabulary than the target's: TLI (Timor et al., ICML 2025,
"lossless speculative decoding for heterogeneous vocabularies").

The draft runs on its own tokens: the target's context, as text, is tokenized by the draft
(ContextTranslator). At each position the draft's processed distribution is restricted to
the tokens both vocabularies share and renormalised there (app.engine.vocab_bridge); the
drafted token is drawn from that, and handed to the engine as the target token of the same
text, with q the same distribution over the target's ids. q is then exactly the distribution
the target token was drawn from, so the usual p/q rule keeps the target's distribution; a
greedy draft is the draft's best shared token.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.engine import vocab_bridge
from app.engine.draft_model import branch_chain
from app.engine.drafters import (
    EMPTY_DRAFT,
    Budget,
    Draft,
    Drafter,
    DraftKind,
    TreeShape,
    common_prefix,
)
from app.engine.protocol import LanguageModel
from app.engine.records import Translation
from app.engine.sampling import SamplingParams, choose, finite_logits, process
from app.engine.tree import DraftTree
from app.engine.vocab_bridge import VocabBridge

# a draft model of another vocabulary, drafting among the shared tokens: it pays a step per
# token and knows its q, as a same-vocabulary draft does; its prior is lower (tokens split
# differently, and the draft's mass outside the shared tokens is lost)
TLI = DraftKind("tli", free=False, prior=0.4, confident=True)


class ContextTranslator:
    """The target's context as the draft's tokens: its text, tokenized by the draft. The
    tokens the target's tokenizer adds to any text (its BOS) are left to the draft's own."""

    def __init__(self, target: LanguageModel, draft: LanguageModel) -> None:
        self.target = target
        self.draft = draft
        self._lead = target.tokenize("", add_special=True)

    def text(self, context: Sequence[int]) -> str:
        lead = len(self._lead)
        start = lead if list(context[:lead]) == self._lead else 0
        # a context ending inside a character leaves a replacement mark the draft would read
        return self.target.detokenize(context[start:]).rstrip("\ufffd")

    def draft_ids(self, context: Sequence[int]) -> list[int]:
        return self.draft.tokenize(self.text(context), add_special=True)


class ForeignDraftModel(Drafter):
    """A draft model of another vocabulary, kept in step with the target's context: its
    cache holds the draft's tokens for the context's text (ContextTranslator)."""

    def __init__(self, target: LanguageModel, model: LanguageModel) -> None:
        self.model = model
        self.target = target
        self.translator = ContextTranslator(target, model)
        self._cached: list[int] = []

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self.model.truncate(0)
        self._cached = []

    def _sync(self, context: list[int]) -> np.ndarray | None:
        """Bring the draft's cache to the context's text; the next-token logits, or None
        when the text gives the draft no token to start from or fills its context."""
        ids = self.translator.draft_ids(context)
        if not ids or len(ids) >= self.model.n_ctx - 1:
            return None
        keep = min(common_prefix(self._cached, ids), len(ids) - 1)
        self.model.truncate(keep)
        logits = finite_logits(self.model.extend(ids[keep:], 1)[0], self.model.name)
        self._cached = ids
        return logits

    def _step(self, token: int) -> np.ndarray:
        """Feed one drafted token of the draft's own; the next-token logits."""
        self._cached.append(token)
        return finite_logits(self.model.extend([token], 1)[0], self.model.name)


class TLIDrafter(ForeignDraftModel):
    """A draft model of another vocabulary, drafting among the tokens both share."""

    kind = TLI

    def __init__(
        self,
        target: LanguageModel,
        model: LanguageModel,
        bridge: VocabBridge,
        p_min: float = 0.0,
        draft_min: int = 0,
    ) -> None:
        super().__init__(target, model)
        self.bridge = bridge
        self.name = f"draft model ({model.name}, TLI)"
        self.p_min = p_min
        self.draft_min = draft_min

    def propose(
        self, context: list[int], budget: Budget, params: SamplingParams,
        rng: np.random.Generator,
    ) -> Draft:
        k = budget.max_tokens
        if k <= 0 or self.bridge.n_shared == 0:
            return EMPTY_DRAFT
        logits = self._sync(context)
        if logits is None:
            return EMPTY_DRAFT
        width = self.target.n_vocab
        tokens: list[int] = []
        rows: list[np.ndarray] = []
        translated: list[Translation] = []
        while len(self._cached) < self.model.n_ctx - 1:
            q_draft = process(logits[: self.bridge.draft_vocab], params)
            q_shared, outside = vocab_bridge.restrict(q_draft, self.bridge)
            if not q_shared.any():
                break
            # decided before the draw, as the same-vocabulary draft does (see ModelDrafter)
            if len(tokens) >= self.draft_min and q_shared.max() < self.p_min:
                break
            index = choose(q_shared, params, rng)
            draft_token = self.bridge.draft_id(index)
            tokens.append(self.bridge.target_id(index))
            rows.append(self.bridge.target_row(q_shared, width))
            translated.append(Translation(self.model.token_text(draft_token), outside))
            if len(tokens) == k:
                break
            stop = budget.stop
            if (stop is not None and len(tokens) >= self.draft_min
                    and not stop.keep_drafting(len(tokens), float(q_shared[index]))):
                break
            logits = self._step(draft_token)
        if not tokens:
            return EMPTY_DRAFT
        return Draft(tokens, np.stack(rows), translated=translated)

    def propose_tree(
        self, context: list[int], depth: int, shape: TreeShape, params: SamplingParams,
        rng: np.random.Generator,
    ) -> DraftTree:
        """The chain, with siblings drawn from each level's row over the target's ids (a
        sibling is a shared token, so its text is the draft's too)."""
        chain = self.propose(context, Budget(min(depth, shape.max_nodes)), params, rng)
        tree, levels = branch_chain(chain, shape, params, rng)
        chain_translated = chain.translated or []
        tree.translated = [
            chain_translated[level] if i < len(chain.tokens) else Translation(
                self.target.token_text(tree.tokens[i]), chain_translated[level].outside_mass)
            for i, level in enumerate(levels)
        ]
        return tree
