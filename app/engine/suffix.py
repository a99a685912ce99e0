"""Suffix decoding (Oliaro et al., SuffixDecoding): drafts copied from whatever earlier text
went on from the context's last tokens — the prompt, this run's output, earlier runs' outputs
(a memory of the same target's generations) — as a tree of those continuations, each branch
weighted by how often it followed, or the likeliest path as a chain. The longer the match,
the longer the draft may be. Nothing is sampled: q is one-hot, so verification stays exact.

Each drafted token says where it was copied from (records.CopySource), for the inspector.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from app.engine.drafters import EMPTY_DRAFT, Draft, DraftStop, TreeShape
from app.engine.records import (
    COPIED_FROM_MEMORY,
    COPIED_FROM_OUTPUT,
    COPIED_FROM_PROMPT,
    CopySource,
)
from app.engine.sampling import SamplingParams
from app.engine.suffix_index import (
    CandidateTree,
    Label,
    Occurrences,
    SuffixIndex,
    TokenBuffer,
    TreeBudget,
)
from app.engine.tree import DraftTree

SUFFIX_LABEL = "suffix decoding"
# a match of at least this many tokens is a copy (source "suffix"), a shorter one a guess
# ("suffix-weak"): the controller learns their acceptance apart (as lookup._STRONG_ANCHOR)
_STRONG_MATCH = 6
# a branch followed by fewer than this share of the matched occurrences is not drafted
# (SuffixDecoding's min_token_prob; vLLM's default)
_MIN_SHARE = 0.1


@dataclass(frozen=True)
class RememberedRun:
    """An earlier run's output, as the memory keeps it (app.draft_memory)."""

    run: int
    tokens: Sequence[int]


def memory_buffer(runs: Sequence[RememberedRun]) -> TokenBuffer:
    """The earlier runs, indexed once and shared by every drafter that reads them."""
    buffer = TokenBuffer()
    for remembered in runs:
        buffer.start_sequence(Label(COPIED_FROM_MEMORY, remembered.run))
        buffer.extend(remembered.tokens)
    return buffer


class SuffixDrafter:
    """Drafts from a suffix index over the prompt and output (rebuilt for every run) and a
    memory of earlier runs (read only). `limit` says how many of a copy's tokens a draft may
    take (lookup.block_limit)."""

    cost_hint = 0.0

    def __init__(self, memory: TokenBuffer | None = None, max_match: int = 64,
                 limit: Callable[[list[int]], int] | None = None) -> None:
        self.name = SUFFIX_LABEL
        self.memory = memory if memory is not None else TokenBuffer()
        self.max_match = max_match
        self.limit = limit
        self.reset()

    def reset(self) -> None:
        self._live = TokenBuffer()
        self._index = SuffixIndex([self.memory, self._live], self.max_match)
        self._begun = False
        self._found: tuple[int, Occurrences] | None = None

    def _occurrences(self, context: list[int]) -> Occurrences:
        """Bring the live buffer up to the context (the first context after reset is the
        prompt; later ones extend it by what the target wrote) and find its suffix."""
        n = len(self._live)
        if not self._begun or n > len(context) or (n and context[n - 1] != self._live.last):
            self._begin(context)
        else:
            self._live.extend(context[n:])
        if self._found is None or self._found[0] != len(context):
            self._found = (len(context), self._index.occurrences(context))
        return self._found[1]

    def _begin(self, prompt: list[int]) -> None:
        self.reset()
        self._begun = True
        self._live.start_sequence(Label(COPIED_FROM_PROMPT))
        self._live.extend(prompt)
        self._live.relabel_from_here(Label(COPIED_FROM_OUTPUT))

    def match_length(self, context: list[int]) -> int:
        found = self._occurrences(context)
        return int(found.matches[0]) if len(found) else 0

    def source_for(self, context: list[int]) -> str:
        return "suffix" if self.match_length(context) >= _STRONG_MATCH else "suffix-weak"

    def copied(self, context: list[int]) -> int:
        """The match, when it is a copy: its length is the evidence the controller reads
        (a draft follows its match length, as SuffixDecoding's)."""
        match = self.match_length(context)
        return match if match >= _STRONG_MATCH else 0

    def candidates(self, context: list[int], budget: TreeBudget) -> CandidateTree:
        found = self._occurrences(context)  # may begin a new index: look it up after
        return self._index.candidates_from(found, budget)

    def propose(
        self, context: list[int], k: int, params: SamplingParams, rng: np.random.Generator,
        stop: DraftStop | None = None,
    ) -> Draft:
        if k <= 0:
            return EMPTY_DRAFT
        tree = self.candidates(context, TreeBudget(depth=k, nodes=k, min_share=_MIN_SHARE))
        path = tree.first_path()
        tokens = [node.token for node in path]
        if self.limit is not None:
            path = path[: self.limit(tokens)]
        if not path:
            return EMPTY_DRAFT
        return Draft([node.token for node in path], None,
                     copied_from=[_source(tree, i) for i in range(len(path))])

    def propose_tree(
        self, context: list[int], depth: int, shape: TreeShape, params: SamplingParams,
        rng: np.random.Generator,
    ) -> DraftTree:
        """The continuations merged, likeliest first, within the shape's width and nodes."""
        tree = self.candidates(context, TreeBudget(depth, shape.max_nodes, shape.width,
                                                   min_share=_MIN_SHARE))
        if self.limit is not None:  # as deep as the likeliest path may go
            depth = self.limit([node.token for node in tree.first_path()])
        kept = [i for i, node in enumerate(tree.nodes) if node.depth <= depth]
        # preorder keeps parents before children, so dropping the deep ones renumbers simply
        new_index = {-1: -1, **{old: new for new, old in enumerate(kept)}}
        return DraftTree([tree.nodes[i].token for i in kept],
                         [new_index[tree.nodes[i].parent] for i in kept],
                         [None] * len(kept), [_source(tree, i) for i in kept])


def _source(tree: CandidateTree, i: int) -> CopySource:
    node = tree.nodes[i]
    return CopySource(kind=node.label.kind, run=node.label.run, count=node.count,
                      of=tree.occurrences, match=tree.match)
