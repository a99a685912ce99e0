"""A draft model: a smaller model with the target's vocabulary (or the target with layers
skipped, a self-draft: app.engine.drafters.self_draft) proposes tokens autoregressively, each drawn
from its processed row."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from app.engine.decode_config import NO_EARLY_STOP, StopRule, TreeShape
from app.engine.drafters import EMPTY_DRAFT, Budget, Draft, Drafter, DraftKind, common_prefix
from app.engine.protocol import HiddenStateModel, LanguageModel
from app.engine.sampling import SamplingParams, choose, draw, finite_logits, process
from app.engine.tree import DraftTree, TreeBuilder, without_earlier_siblings

# a draft model's draft: a step per token, a q for each (so its draft may end on its
# confidence), and a prior of 0.6 before anything is measured
DRAFT_MODEL = DraftKind("model", free=False, prior=0.6, confident=True)


class ModelDraft(Drafter):
    """The one drafting loop of every drafter that draws its tokens from a model's
    next-token distributions (a draft model, the target's MTP layers, draft heads, a draft
    of another vocabulary through a bridge), with one stop rule. A subclass is the source:
    the q for the first position (_first), the q after a drawn one (_next), the target's
    token and q row for what was drawn (_emit)."""

    rule = StopRule()

    @property
    def ends(self) -> frozenset[int]:
        """Target tokens a draft ends after (the end of a text)."""
        return frozenset()

    def propose(
        self, context: list[int], budget: Budget, params: SamplingParams,
        rng: np.random.Generator,
    ) -> Draft:
        k = min(budget.max_tokens, self._room(context))
        start = time.perf_counter()
        q = self._first(context, params) if k > 0 else None
        first_seconds = time.perf_counter() - start
        stop, rule = budget.stop, self.rule
        tokens: list[int] = []
        rows: list[np.ndarray] = []
        while q is not None:
            # decided before the draw, from the best candidate (as llama.cpp's p-min):
            # stopping on the drawn token's own q would bias what is drafted, and q no
            # longer describes it
            if len(tokens) >= rule.draft_min and q.max() < rule.p_min:
                break
            chosen = choose(q, params, rng)
            token, row = self._emit(chosen, q)
            tokens.append(token)
            rows.append(row)
            if len(tokens) == k or token in self.ends:
                break
            if (stop is not None and not stop.keep_drafting(len(tokens), float(q[chosen]))
                    and len(tokens) >= rule.draft_min):
                break
            q = self._next(chosen, params)
        if not tokens:
            return EMPTY_DRAFT
        draft = self._finish(tokens, rows)
        draft.first_seconds = first_seconds
        return draft

    def _room(self, context: list[int]) -> int:
        """The most tokens a draft after `context` may have (its context's room)."""
        return 1 << 30

    def _first(self, context: list[int], params: SamplingParams) -> np.ndarray | None:
        """q for the token after `context`, over the ids drawn among; None: no draft."""
        raise NotImplementedError

    def _next(self, chosen: int, params: SamplingParams) -> np.ndarray | None:
        """q for the token after the one just drawn; None: the draft cannot go on."""
        raise NotImplementedError

    def _emit(self, chosen: int, q: np.ndarray) -> tuple[int, np.ndarray]:
        """The target's token for the id drawn from q, and q as a row over the target's."""
        return chosen, q

    def _finish(self, tokens: list[int], rows: list[np.ndarray]) -> Draft:
        return Draft(tokens, np.stack(rows))


class ModelDrafter(ModelDraft):
    """A smaller model with the same vocabulary proposes tokens autoregressively.

    `target_vocab` is the target's logit width when it differs by vocabulary padding: the
    draft then draws only among the ids the target has (q is that distribution, so verify
    stays exact), and proposes nothing while the context holds an id only the target has.
    """

    kind = DRAFT_MODEL

    def __init__(
        self,
        model: LanguageModel,
        rule: StopRule = NO_EARLY_STOP,
        target_vocab: int | None = None,
        with_hidden: bool = False,
    ) -> None:
        self.model = model
        # keep the draft's hidden states: only for a self-draft, whose final norm output is
        # comparable with the target's (app.engine.similarity)
        self.with_hidden = with_hidden and isinstance(model, HiddenStateModel)
        self._last_hidden: np.ndarray | None = None
        self._states: list[np.ndarray] = []
        self.width = min(model.n_vocab, target_vocab or model.n_vocab)
        self.name = f"draft model ({model.name})"
        self.rule = rule
        self.cost_hint = 0.0
        self._cached: list[int] = []

    def begin(self, prompt_ids: Sequence[int]) -> None:
        """The prompt goes into the draft's cache now, as the target's does before the first
        step, so the first step's draft time is drafting, not the prompt's prefill (which on
        a fresh model also pays llama.cpp's first buffer allocations)."""
        self.model.truncate(0)
        self._cached = []
        prefix = list(prompt_ids[:-1])
        if prefix and max(prefix) < self.model.n_vocab:
            self.model.extend(prefix, 0)
            self._cached = prefix

    def _extend_one(self, ids: list[int]) -> np.ndarray:
        """The next-token logits after ids; the hidden state too when kept (_last_hidden)."""
        if self.with_hidden and isinstance(self.model, HiddenStateModel):
            logits, hidden = self.model.extend_hidden(ids, 1)
            self._last_hidden = hidden[0]
            return finite_logits(logits[0], self.model.name)
        return finite_logits(self.model.extend(ids, 1)[0], self.model.name)

    @property
    def ends(self) -> frozenset[int]:
        return self.model.eos_ids

    def _room(self, context: list[int]) -> int:
        return self.model.n_ctx - len(context) - 1

    def _first(self, context: list[int], params: SamplingParams) -> np.ndarray | None:
        """Bring the draft's cache to context[:-1] + context[-1]; q after it, or None if the
        context holds an id only the target has (its vocabulary padding): the draft cannot
        read it, so it proposes nothing and the target decodes alone."""
        self._states = []
        keep = min(common_prefix(self._cached, context), len(context) - 1)
        if max(context[keep:]) >= self.model.n_vocab:
            return None
        self.model.truncate(keep)
        logits = self._extend_one(context[keep:])
        self._cached = list(context)
        return process(logits[: self.width], params)

    def _next(self, chosen: int, params: SamplingParams) -> np.ndarray:
        logits = self._extend_one([chosen])
        self._cached.append(chosen)
        return process(logits[: self.width], params)

    def _emit(self, chosen: int, q: np.ndarray) -> tuple[int, np.ndarray]:
        if self.with_hidden and self._last_hidden is not None:
            self._states.append(self._last_hidden)
        return chosen, q

    def _finish(self, tokens: list[int], rows: list[np.ndarray]) -> Draft:
        states = self._states
        return Draft(tokens, np.stack(rows),
                     np.stack(states) if len(states) == len(tokens) else None)

    def propose_tree(
        self, context: list[int], depth: int, shape: TreeShape, params: SamplingParams,
        rng: np.random.Generator,
    ) -> DraftTree:
        """The chain, plus sibling leaves beside each chain token where the draft gave
        another candidate at least p_split (siblings cost no draft passes)."""
        chain = self.propose(context, Budget(min(depth, shape.max_nodes)), params, rng)
        return branch_chain(chain, shape, params, rng)[0]


def branch_chain(
    chain: Draft, shape: TreeShape, params: SamplingParams, rng: np.random.Generator
) -> tuple[DraftTree, list[int]]:
    """A tree of the chain's tokens, with sibling leaves beside each chain token where its
    q row gave another candidate at least p_split; and per node, the chain level its row
    came from."""
    builder = TreeBuilder(shape.width, shape.max_nodes)
    rows = chain.q_rows if chain.q_rows is not None else np.zeros((0, 0))
    levels: list[int] = []
    for level, token in enumerate(chain.tokens):
        builder.add(level - 1, token, rows[level])
        levels.append(level)
    for level, token in enumerate(chain.tokens):
        drawn = [token]
        while not builder.full:
            sibling = _another_candidate(rows[level], drawn, shape.p_split, params, rng)
            if sibling is None or builder.add(level - 1, sibling, rows[level]) is None:
                break
            drawn.append(sibling)
            levels.append(level)
    return builder.tree(), levels


def _another_candidate(
    q: np.ndarray, drawn: list[int], p_split: float, params: SamplingParams,
    rng: np.random.Generator,
) -> int | None:
    """One more candidate for a position, or None when the draft is sure enough. Whether to
    branch is decided before the draw (from the tokens not drawn yet), and the candidate is
    then drawn from q without the earlier ones: the row the verdict will test it against."""
    rest = q.copy()
    rest[drawn] = 0.0
    best = int(np.argmax(rest))
    if rest[best] < p_split:
        return None
    if params.greedy:
        return best
    return draw(without_earlier_siblings(q, drawn), rng)
