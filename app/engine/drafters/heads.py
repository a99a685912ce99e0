"""Draft heads (Medusa-style multi-token prediction): small blocks trained on the target's
own final hidden state that guess the tokens after the next one.

Head i (1-based) maps the hidden state h_t the target read its token t+1 from to the token
at t+1+i: z = h + W2·SiLU(W1·h), then the target's own (frozen) output rows. The heads score
only the candidate vocabulary they were trained on (the tokens the target produced or ranked
high on the training text); every other id has probability 0 under q, which keeps q a true
distribution, so verification stays exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from app.engine.decode_config import NO_EARLY_STOP, DrafterOptions, StopRule
from app.engine.drafters import DraftKind, Entry
from app.engine.drafters.draft_model import ModelDraft
from app.engine.sampling import SamplingParams, process

# draft heads: all their tokens from one hidden state at once (no step per token to stop
# after), at a cost the controller measures
DRAFT_HEADS = DraftKind("heads", free=False, prior=0.6)


@dataclass
class HeadsWeights:
    w1: np.ndarray  # (heads, rank, n_embd)
    w2: np.ndarray  # (heads, n_embd, rank)
    vocab_ids: np.ndarray  # (m,) the candidate ids the heads score, ascending
    output_rows: np.ndarray  # (m, n_embd) the target's output matrix at those ids
    n_vocab: int  # the target's logit width
    target: str = ""  # the target file the heads were trained on

    @property
    def n_heads(self) -> int:
        return int(self.w1.shape[0])

    @property
    def rank(self) -> int:
        return int(self.w1.shape[1])

    @property
    def n_embd(self) -> int:
        return int(self.w1.shape[2])

    def logits(self, hidden: np.ndarray, head: int) -> np.ndarray:
        """Full-width logits of head `head` (0-based) for one hidden state: -inf off the
        candidate vocabulary."""
        h = np.asarray(hidden, dtype=np.float32)
        a = self.w1[head] @ h
        z = h + self.w2[head] @ (a / (1.0 + np.exp(-a)))
        row = np.full(self.n_vocab, -np.inf, dtype=np.float32)
        row[self.vocab_ids] = self.output_rows @ z
        return row


class HeadsDrafter(ModelDraft):
    """Proposes up to n_heads tokens from the target's hidden state at the row that produced
    the last emitted token: head i's top-1 under greedy, else a draw from its processed row
    (the q the verifier tests). The session hands it that row after every verify pass
    (accept, as it wants the target's hidden states)."""

    kind = DRAFT_HEADS
    wants_target_hidden = True

    def __init__(self, weights: HeadsWeights, label: str = "",
                 rule: StopRule = NO_EARLY_STOP) -> None:
        self.weights = weights
        self.name = label or f"draft heads ({weights.n_heads})"
        self.rule = rule
        self._head = 0
        self.begin([])

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self._hidden: np.ndarray | None = None
        self._n_context = -1

    def accept(self, context: list[int], hidden: np.ndarray | None) -> None:
        """hidden: the target's final hidden state that produced context[-1]."""
        if hidden is not None:
            self._hidden = np.asarray(hidden, dtype=np.float32)
            self._n_context = len(context)

    def _room(self, context: list[int]) -> int:
        return self.weights.n_heads

    def _first(self, context: list[int], params: SamplingParams) -> np.ndarray | None:
        if self._hidden is None or self._n_context != len(context):
            return None  # no hidden state for this context yet: the target decodes
        self._head = 0
        return process(self.weights.logits(self._hidden, 0), params)

    def _next(self, chosen: int, params: SamplingParams) -> np.ndarray | None:
        """Every head reads the same hidden state: the next head's row."""
        self._head += 1
        if self._hidden is None or self._head >= self.weights.n_heads:
            return None
        return process(self.weights.logits(self._hidden, self._head), params)


class HeadsSource(Protocol):
    """What the heads drafter reads of a run: the heads file, read and checked against the
    target."""

    def heads(self, path: str) -> HeadsWeights: ...


def heads_label(path: str) -> str:
    return f"draft heads ({Path(path).name})"


def heads_drafter(sources: HeadsSource, options: DrafterOptions, rule: StopRule,
                  fallback: bool) -> HeadsDrafter:
    return HeadsDrafter(sources.heads(options.heads), heads_label(options.heads), rule)


def _needs(options: DrafterOptions) -> str:
    return "" if options.heads else ("heads need their file — add --draft-heads HEADS "
                                     "(draftlens heads train makes one)")


ENTRY = Entry("heads", heads_drafter, lambda options, draft_file: heads_label(options.heads),
              needs=_needs)
