"""Ways to guess the next k tokens. Each returns the tokens and the q rows they came from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from app.engine.protocol import HiddenStateModel, LanguageModel
from app.engine.records import CopySource
from app.engine.sampling import SamplingParams, choose, draw, finite_logits, fit_width, process
from app.engine.tree import DraftTree, TreeBuilder, one_hot, without_earlier_siblings


@dataclass
class Draft:
    tokens: list[int]
    # q_rows[i] is the distribution tokens[i] was drawn from; None means one-hot at tokens[i]
    q_rows: np.ndarray | None
    # per token, a hidden state comparable with the target's final hidden state at the same
    # position, for hidden_cos: a self-draft's final-norm output; None for every other draft
    # (app.engine.similarity says why)
    hidden: np.ndarray | None = None
    # per token, where a copying drafter found it (app.engine.suffix); None for the others
    copied_from: list[CopySource] | None = None

    def q_row(self, i: int, vocab: int) -> np.ndarray:
        """q for tokens[i] over the target's `vocab` logit rows (the widths may differ by
        vocabulary padding; see fit_width)."""
        if self.q_rows is not None:
            return fit_width(np.asarray(self.q_rows[i]), vocab)
        return one_hot(self.tokens[i], vocab)


EMPTY_DRAFT = Draft([], None)


@dataclass(frozen=True)
class TreeShape:
    """How wide a draft tree may grow: children per node, nodes per pass, and (for a draft
    model) how likely a further candidate must be to get a branch (llama.cpp's p-split)."""

    width: int = 1
    max_nodes: int = 16
    p_split: float = 0.1


class Drafter(Protocol):
    name: str
    # seconds one drafted token costs, for the adaptive controller before it has measured
    cost_hint: float

    def source_for(self, context: list[int]) -> str:
        """Which kind of guess propose() would make now; the controller keeps statistics
        per source, so k can differ between a free lookup and a costly draft model."""
        ...

    def propose(
        self, context: list[int], k: int, params: SamplingParams, rng: np.random.Generator,
        stop: DraftStop | None = None,
    ) -> Draft:
        """Up to k tokens. A drafter that draws from a model may take `stop` instead: then it
        drafts up to stop.limit tokens and ends where stop says; the others ignore it."""
        ...

    def reset(self) -> None: ...


class DraftStop(Protocol):
    """Ends a draft model's draft on its own confidence (app.engine.draft_stop)."""

    limit: int

    def keep_drafting(self, drafted: int, q: float) -> bool:
        """Asked after each drafted token, drawn with probability q: draft another?"""
        ...


@runtime_checkable
class CopyingDrafter(Drafter, Protocol):
    """A drafter that copies from the context (prompt lookup)."""

    def copied(self, context: list[int]) -> int:
        """How many of the context's last tokens, in a row, equal the source text that the
        copy proposed now continues (0 when what it would propose is not such a copy)."""
        ...


@runtime_checkable
class TreeDrafter(Drafter, Protocol):
    def propose_tree(
        self, context: list[int], depth: int, shape: TreeShape, params: SamplingParams,
        rng: np.random.Generator,
    ) -> DraftTree:
        """Up to `depth` tokens deep, branching where the guess is unsure; the first path is
        what propose() would have drafted."""
        ...


@runtime_checkable
class TargetHiddenDrafter(Drafter, Protocol):
    """A drafter that guesses from the target's own final hidden state: the session then
    asks the verify pass for hidden states and hands over the row that produced the last
    emitted token (the target must be a HiddenStateModel)."""

    def take_target_hidden(self, hidden: np.ndarray, n_context: int) -> None:
        """`hidden` produced context[n_context - 1], the last token of the context."""
        ...


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


class ModelDrafter:
    """A smaller model with the same vocabulary proposes tokens autoregressively.

    `target_vocab` is the target's logit width when it differs by vocabulary padding: the
    draft then draws only among the ids the target has (q is that distribution, so verify
    stays exact), and proposes nothing while the context holds an id only the target has.
    """

    def __init__(
        self,
        model: LanguageModel,
        p_min: float = 0.0,
        draft_min: int = 0,
        target_vocab: int | None = None,
        with_hidden: bool = False,
    ) -> None:
        self.model = model
        # keep the draft's hidden states: only for a self-draft, whose final norm output is
        # comparable with the target's (app.engine.similarity)
        self.with_hidden = with_hidden and isinstance(model, HiddenStateModel)
        self._last_hidden: np.ndarray | None = None
        self.width = min(model.n_vocab, target_vocab or model.n_vocab)
        self.name = f"draft model ({model.name})"
        self.p_min = p_min
        self.draft_min = draft_min
        self.cost_hint = 0.0
        self._cached: list[int] = []

    def source_for(self, context: list[int]) -> str:
        return "model"

    def reset(self) -> None:
        self.model.truncate(0)
        self._cached = []

    def _extend_one(self, ids: list[int]) -> np.ndarray:
        """The next-token logits after ids; the hidden state too when kept (_last_hidden)."""
        if self.with_hidden and isinstance(self.model, HiddenStateModel):
            logits, hidden = self.model.extend_hidden(ids, 1)
            self._last_hidden = hidden[0]
            return finite_logits(logits[0], self.model.name)
        return finite_logits(self.model.extend(ids, 1)[0], self.model.name)

    def _sync(self, context: list[int]) -> np.ndarray | None:
        """Bring the draft's cache to context[:-1] + context[-1]; return the next-token logits,
        or None if the context holds an id only the target has (its vocabulary padding): the
        draft cannot read it, so it proposes nothing and the target decodes alone."""
        keep = min(common_prefix(self._cached, context), len(context) - 1)
        if max(context[keep:]) >= self.model.n_vocab:
            return None
        self.model.truncate(keep)
        logits = self._extend_one(context[keep:])
        self._cached = list(context)
        return logits

    def propose(
        self, context: list[int], k: int, params: SamplingParams, rng: np.random.Generator,
        stop: DraftStop | None = None,
    ) -> Draft:
        if stop is not None:
            k = stop.limit
        k = min(k, self.model.n_ctx - len(context) - 1)
        if k <= 0:
            return EMPTY_DRAFT
        logits = self._sync(context)
        if logits is None:
            return EMPTY_DRAFT
        tokens: list[int] = []
        rows: list[np.ndarray] = []
        states: list[np.ndarray] = []
        while True:
            q = process(logits[: self.width], params)
            # decided before the draw, from the draft's best candidate (as llama.cpp's p-min):
            # stopping on the drawn token's own q would bias what is drafted, and q no longer
            # describes it
            if len(tokens) >= self.draft_min and q.max() < self.p_min:
                break
            token = choose(q, params, rng)
            tokens.append(token)
            rows.append(q)
            if self.with_hidden and self._last_hidden is not None:
                states.append(self._last_hidden)
            if len(tokens) == k or token in self.model.eos_ids:
                break
            if (stop is not None and not stop.keep_drafting(len(tokens), float(q[token]))
                    and len(tokens) >= self.draft_min):
                break
            logits = self._extend_one([token])
            self._cached.append(token)
        if not tokens:
            return EMPTY_DRAFT
        return Draft(tokens, np.stack(rows),
                     np.stack(states) if len(states) == len(tokens) else None)

    def propose_tree(
        self, context: list[int], depth: int, shape: TreeShape, params: SamplingParams,
        rng: np.random.Generator,
    ) -> DraftTree:
        """The chain, plus sibling leaves beside each chain token where the draft gave
        another candidate at least p_split (siblings cost no draft passes)."""
        chain = self.propose(context, min(depth, shape.max_nodes), params, rng)
        builder = TreeBuilder(shape.width, shape.max_nodes)
        rows = chain.q_rows if chain.q_rows is not None else np.zeros((0, 0))
        for level, token in enumerate(chain.tokens):
            builder.add(level - 1, token, rows[level])
        for level, token in enumerate(chain.tokens):
            drawn = [token]
            while not builder.full:
                sibling = _another_candidate(rows[level], drawn, shape.p_split, params, rng)
                if sibling is None or builder.add(level - 1, sibling, rows[level]) is None:
                    break
                drawn.append(sibling)
        return builder.tree()


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
