"""Suffix decoding (Oliaro et al., SuffixDecoding): drafts copied from whatever earlier text
went on from the context's last tokens — the prompt, this run's output, earlier runs' outputs
(a memory of the same target's generations) — as a tree of those continuations, each branch
weighted by how often it followed, or the likeliest path as a chain. The longer the match,
the longer the draft may be. Nothing is sampled: q is one-hot, so verification stays exact.

A copy of the prompt is drafted by the edit-aware prompt lookup (app.engine.lookup_edits,
--ngram's): code asked back with a rename keeps its place in the prompt across the renamed
tokens, where a suffix match breaks at each of them (the edit tasks: 1.72x plain modelled
against 1.44x, packaging/replay_suffix.py). Its kinds are --ngram's, learnt apart from the
suffix kinds, and a lookup's run since the last edit is its evidence as it is --ngram's.

Each drafted token says where it was copied from (records.CopySource), for the inspector.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from app.engine.drafters import (
    EMPTY_DRAFT,
    Budget,
    Draft,
    Drafter,
    DraftKind,
    Outlook,
    TreeShape,
)
from app.engine.lookup import NGRAM_GUESS
from app.engine.lookup_edits import EditAwareLookup
from app.engine.records import (
    COPIED_FROM_MEMORY,
    COPIED_FROM_OUTPUT,
    COPIED_FROM_PROMPT,
    CopySource,
)
from app.engine.sampling import SamplingParams
from app.engine.suffix_index import CandidateTree, Occurrences, SuffixIndex, TreeBudget
from app.engine.token_buffer import Label, TokenBuffer
from app.engine.tree import DraftTree

SUFFIX_LABEL = "suffix decoding"
# a match of at least this many tokens is a copy (SUFFIX_COPY), a shorter one a guess
# (SUFFIX_GUESS): the controller learns their acceptance apart (as lookup._STRONG_ANCHOR)
_STRONG_MATCH = 6
# The two kinds of draft suffix decoding makes, declared as the lookup's are (from the free
# kinds' prior, docs/ablation.md): a guess from a short match, and a copy (a match of at
# least _STRONG_MATCH tokens). A copy's match is no evidence: a match recalled from an earlier
# answer says little of how far it goes on (packaging/replay_suffix.py: of the repetitive
# suite's copies from memory with a 6+ token match, 35% agree for 8 tokens, 6% for 16); it
# learns from its verdicts alone
SUFFIX_GUESS = DraftKind("suffix-weak", free=True)
SUFFIX_COPY = DraftKind("suffix", free=True, run_is_evidence=False)
# a branch followed by fewer than this share of the matched occurrences is not drafted
# (SuffixDecoding's min_token_prob; vLLM's default)
_MIN_SHARE = 0.1
_SPEC_FACTOR = 1.0


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


class SuffixDrafter(Drafter):
    """Drafts from a suffix index over the prompt and output (rebuilt at every begin()) and a
    memory of earlier runs (read only). `limit` says how many of a copy's tokens a draft may
    take (lookup.block_limit).

    Its outlook names a copy (SUFFIX_COPY: a match of at least _STRONG_MATCH tokens) or a
    guess (SUFFIX_GUESS: a shorter one), so the controller learns the two apart."""

    kind = SUFFIX_COPY
    cost_hint = 0.0

    def __init__(self, memory: TokenBuffer | None = None, max_match: int = 64,
                 limit: Callable[[list[int]], int] | None = None,
                 factor: float = _SPEC_FACTOR) -> None:
        self.name = SUFFIX_LABEL
        self.memory = memory if memory is not None else TokenBuffer()
        self.max_match = max_match
        self.limit = limit
        self.factor = factor  # a match of m tokens drafts at most factor * m (TreeBudget)
        self._clear()

    def _clear(self) -> None:
        self._prompt_length = 0
        self._prompt_copy = EditAwareLookup(limit=self.limit)
        self._live = TokenBuffer()
        self._index = SuffixIndex([self.memory, self._live], self.max_match)
        self._found: tuple[int, Occurrences] | None = None
        self._chain: tuple[int, CandidateTree, int] | None = None  # (context length, tree, kept)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        """A new generation: forget the last run's prompt and output (never the memory) and
        index this prompt, whose tokens are copied as the prompt's; what follows is output."""
        self._clear()
        self._prompt_length = len(prompt_ids)
        self._live.start_sequence(Label(COPIED_FROM_PROMPT))
        self._live.extend(prompt_ids)
        self._live.relabel_from_here(Label(COPIED_FROM_OUTPUT))

    def accept(self, context: list[int], hidden: np.ndarray | None) -> None:
        """The target kept the tokens that now end `context`: index them as this output."""
        self._catch_up(context)

    def _catch_up(self, context: list[int]) -> None:
        """Bring the live buffer up to the context: it extends what was indexed by what the
        target wrote. A context that does not (a drafter used without begin(), or asked about
        another text) starts the index again from it, as a prompt."""
        n = len(self._live)
        if n == 0 or n > len(context) or context[n - 1] != self._live.last:
            self.begin(context)
        elif n < len(context):
            self._live.extend(context[n:])

    def _occurrences(self, context: list[int]) -> Occurrences:
        """The occurrences of the context's suffix, looked up once per context length."""
        self._catch_up(context)
        if self._found is None or self._found[0] != len(context):
            self._found = (len(context), self._index.occurrences(context))
        return self._found[1]

    def match_length(self, context: list[int]) -> int:
        found = self._occurrences(context)
        return int(found.matches[0]) if len(found) else 0

    def _copy_of_prompt(self, context: list[int]) -> Outlook | None:
        """The edit-aware lookup's outlook where it copies the prompt (not a guess), else
        None."""
        self._catch_up(context)
        found = self._prompt_copy.find(context)
        if found is None or found.start >= self._prompt_length:
            return None
        kind = self._prompt_copy.kind_for(context)
        return None if kind is NGRAM_GUESS else Outlook(kind, self._prompt_copy.copied(context))

    def outlook(self, context: list[int]) -> Outlook:
        prompt_copy = self._copy_of_prompt(context)
        if prompt_copy is not None:
            return prompt_copy
        match = self.match_length(context)
        available = self._likeliest(context)[1]
        if match >= _STRONG_MATCH:
            # a copy's evidence is its match: a draft follows its match length (as
            # SuffixDecoding's)
            return Outlook(SUFFIX_COPY, match, available)
        return Outlook(SUFFIX_GUESS, 0, available)

    def copied(self, context: list[int]) -> int:
        """The match, when it is a copy (see outlook)."""
        return self.outlook(context).copied

    def candidates(self, context: list[int], budget: TreeBudget) -> CandidateTree:
        found = self._occurrences(context)  # may begin a new index: look it up after
        return self._index.candidates_from(found, budget)

    def _likeliest(self, context: list[int]) -> tuple[CandidateTree, int]:
        """The likeliest chain as long as a match may draft (max_match tokens at most), and
        how many of its tokens a draft may take; built once per context length, so the
        outlook's `available` and every k's draft are the same chain."""
        found = self._occurrences(context)
        if self._chain is None or self._chain[0] != len(context):
            depth = self.max_match
            tree = self._index.candidates_from(found, TreeBudget(
                depth=depth, nodes=depth, min_share=_MIN_SHARE, factor=self.factor))
            tokens = [node.token for node in tree.first_path()]
            kept = len(tokens) if self.limit is None else self.limit(tokens)
            self._chain = (len(context), tree, kept)
        return self._chain[1], self._chain[2]

    def propose(
        self, context: list[int], budget: Budget, params: SamplingParams,
        rng: np.random.Generator,
    ) -> Draft:
        prompt_copy = self._copy_of_prompt(context)
        if prompt_copy is not None:
            draft = self._prompt_copy.propose(context, budget, params, rng)
            source = _prompt_source(prompt_copy)
            return Draft(draft.tokens, None, copied_from=[source] * len(draft.tokens))
        tree, available = self._likeliest(context)
        n = min(budget.max_tokens, available)
        if n <= 0:
            return EMPTY_DRAFT
        return Draft([node.token for node in tree.nodes[:n]], None,
                     copied_from=[_source(tree, i) for i in range(n)])

    def propose_tree(
        self, context: list[int], depth: int, shape: TreeShape, params: SamplingParams,
        rng: np.random.Generator,
    ) -> DraftTree:
        """The continuations merged, likeliest first, within the shape's width and nodes (a
        copy of the prompt: the edit-aware lookup's tree of its best matches)."""
        prompt_copy = self._copy_of_prompt(context)
        if prompt_copy is not None:
            lookup_tree = self._prompt_copy.propose_tree(context, depth, shape, params, rng)
            source = _prompt_source(prompt_copy)
            return DraftTree(lookup_tree.tokens, lookup_tree.parents, lookup_tree.q_rows,
                             [source] * len(lookup_tree.tokens))
        tree = self.candidates(context, TreeBudget(depth, shape.max_nodes, shape.width,
                                                   min_share=_MIN_SHARE, factor=self.factor))
        if self.limit is not None:  # as deep as the likeliest path may go
            depth = self.limit([node.token for node in tree.first_path()])
        kept = [i for i, node in enumerate(tree.nodes) if node.depth <= depth]
        # preorder keeps parents before children, so dropping the deep ones renumbers simply
        new_index = {-1: -1, **{old: new for new, old in enumerate(kept)}}
        return DraftTree([tree.nodes[i].token for i in kept],
                         [new_index[tree.nodes[i].parent] for i in kept],
                         [None] * len(kept), [_source(tree, i) for i in kept])


def _prompt_source(prompt_copy: Outlook) -> CopySource:
    """A copy of the prompt, as the inspector names it: one continuation, matched by the
    tokens before it that agree (the lookup's run, Outlook.copied)."""
    return CopySource(kind=COPIED_FROM_PROMPT, match=prompt_copy.copied)


def _source(tree: CandidateTree, i: int) -> CopySource:
    node = tree.nodes[i]
    return CopySource(kind=node.label.kind, run=node.label.run, count=node.count,
                      of=tree.occurrences, match=tree.match)
