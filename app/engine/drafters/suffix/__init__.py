"""Suffix decoding (Oliaro et al., SuffixDecoding): drafts copied from whatever earlier text
went on from the context's last tokens — the prompt and this run's output (a local suffix
tree), earlier runs' outputs (the memory: a global one) — as a tree of those continuations,
each branch weighted by how often it followed, or the likeliest path as a chain. Every match
length is tried in both trees and the best-scoring candidate taken
(app.engine.drafters.suffix.index);
a match of m tokens drafts at most `factor * m + offset` tokens, none below `min_prob`
(SuffixOptions: --spec-factor, --spec-offset, --spec-min-prob, the paper's defaults).
Nothing is sampled: q is one-hot, so verification stays exact.

A copy of the prompt is drafted by the edit-aware prompt lookup (app.engine.drafters.lookup.edits,
--ngram's): code asked back with a rename keeps its place in the prompt across the renamed
tokens, where a suffix match breaks at each of them (the edit tasks: 1.72x plain modelled
against 1.44x, packaging/research/replay_suffix.py). Its kinds are --ngram's, learnt apart from the
suffix kinds, and a lookup's run since the last edit is its evidence as it is --ngram's.
The renames it learns apply to copies from the memory too (lookup_edits.replaced), as do the
renames the target makes to copies from the memory (app.engine.drafters.suffix.memory_edits).

A retried request (its prompt the same as a remembered run's) drafts the answer that run got,
from its first token, ahead of everything else (app.engine.drafters.suffix.retry_copy), until
it departs.

Where neither tree holds a suffix of the context of MIN_MATCH (2) tokens or more, the outlook
says so at once (nothing available: no pass is priced, no shadow draft, no tree grown).

Each drafted token says where it was copied from (records.CopySource), for the inspector.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from app.engine.decode_config import DrafterOptions, StopRule, SuffixOptions, TreeShape
from app.engine.drafters import EMPTY_DRAFT, Budget, Draft, Drafter, DraftKind, Entry, Outlook
from app.engine.drafters.lookup import NGRAM_GUESS, block_limit
from app.engine.drafters.lookup.edits import EditAwareLookup
from app.engine.drafters.suffix.index import STRONG_MATCH, CandidateTree, SuffixCache, TreeBudget
from app.engine.drafters.suffix.retry_copy import EarlierAnswer, Recall, RetryCopy
from app.engine.drafters.suffix.tree import SuffixTree
from app.engine.estimates import CopyEvidence
from app.engine.protocol import LanguageModel
from app.engine.records import COPIED_FROM_MEMORY, COPIED_FROM_PROMPT, CopySource
from app.engine.sampling import SamplingParams
from app.engine.tree import DraftTree

SUFFIX_LABEL = "suffix decoding"
# a match of at least STRONG_MATCH tokens (suffix_index) is a copy (SUFFIX_COPY), a shorter
# one a guess (SUFFIX_GUESS): the controller learns their acceptance apart (as
# lookup._STRONG_ANCHOR)
# The two kinds of draft suffix decoding makes, declared as the lookup's are (from the free
# kinds' prior, docs/ablation.md): a guess from a short match, and a copy (a match of at
# least STRONG_MATCH tokens). A copy's match is no evidence: a match recalled from an earlier
# answer says little of how far it goes on (packaging/research/replay_suffix.py: of the
# repetitive suite's copies from memory with a 6+ token match, 35% agree for 8 tokens, 6% for
# 16); it learns from its verdicts alone
SUFFIX_GUESS = DraftKind("suffix-weak", free=True)
SUFFIX_COPY = DraftKind("suffix", free=True, run_is_evidence=False)

def tree_budget(options: SuffixOptions, depth: int, nodes: int = 1,
                width: int = 1) -> TreeBudget:
    """A candidate's reach: `depth` tokens deep, `nodes` and `width` for a tree, within the
    options' factor, offset and least probability."""
    return TreeBudget(depth, nodes, width, options.min_prob, options.factor, options.offset)


@dataclass(frozen=True)
class RememberedRun:
    """An earlier run's output, as the memory keeps it (app.draft_memory)."""

    run: int
    tokens: Sequence[int]


def memory_buffer(runs: Sequence[RememberedRun], max_depth: int = 64) -> SuffixTree:
    """The earlier runs in one global suffix tree, each a sequence named by its run id;
    built once and shared by every drafter that reads them (and extended as runs end)."""
    tree = SuffixTree(max_depth)
    for remembered in runs:
        tree.extend(remembered.run, remembered.tokens)
    return tree


class SuffixDrafter(Drafter):
    """Drafts from a local suffix tree over the prompt and output (a new one at every
    begin()) and a global one, the memory of earlier runs (read only here). `limit` says how
    many of a copy's tokens a draft may take (lookup.block_limit); `recall` finds the answer
    the memory kept for a prompt, for a retried one (app.engine.drafters.suffix.retry_copy).

    Its outlook names a copy (SUFFIX_COPY: a match of at least STRONG_MATCH tokens) or a
    guess (SUFFIX_GUESS: a shorter one), so the controller learns the two apart."""

    kind = SUFFIX_COPY
    cost_hint = 0.0

    def __init__(self, memory: SuffixTree | None = None,
                 limit: Callable[[list[int]], int] | None = None,
                 options: SuffixOptions | None = None, recall: Recall | None = None) -> None:
        self.name = SUFFIX_LABEL
        self.recall = recall
        self.options = options or SuffixOptions()
        self.memory = memory if memory is not None else SuffixTree(self.options.max_depth)
        self.limit = limit
        self._cache = SuffixCache(self.memory, self.options.max_depth)
        self._clear()

    def _clear(self) -> None:
        self._prompt_copy = EditAwareLookup(limit=self.limit)
        self._last = -1  # the last token indexed
        self._chain: tuple[int, CandidateTree, int] | None = None  # (context length, tree, kept)
        self._retry: RetryCopy | None = None

    def begin(self, prompt_ids: Sequence[int]) -> None:
        """A new generation: forget the last run's prompt and output (never the memory) and
        index this prompt, whose tokens are copied as the prompt's; what follows is output."""
        self._clear()
        answers = self.recall(prompt_ids) if self.recall is not None else []
        if answers:
            self._retry = RetryCopy(answers, len(prompt_ids))
        self._cache.start_request(prompt_ids)
        self._last = prompt_ids[-1] if len(prompt_ids) else -1

    def accept(self, context: list[int], hidden: np.ndarray | None) -> None:
        """The target kept the tokens that now end `context`: index them as this output."""
        self._catch_up(context)

    def _catch_up(self, context: list[int]) -> None:
        """Bring the index up to the context: it extends what was indexed by what the target
        wrote. A context that does not (a drafter used without begin(), or asked about
        another text) starts the index again from it, as a prompt."""
        n = self._cache.length
        if n == 0 or n > len(context) or context[n - 1] != self._last:
            self.begin(context)
        elif n < len(context):
            self._cache.add_active_response(context[n:])
            self._last = context[-1]

    def match_length(self, context: list[int]) -> int:
        self._catch_up(context)
        return self._cache.longest_match()

    def _copy_of_prompt(self, context: list[int]) -> Outlook | None:
        """The edit-aware lookup's outlook where it copies the prompt (not a guess), else
        None."""
        self._catch_up(context)
        found = self._prompt_copy.find(context)
        if found is None or found.start >= self._cache.prompt_length:
            return None
        kind = self._prompt_copy.kind_for(context)
        copied = self._prompt_copy.copied(context)
        return None if kind is NGRAM_GUESS else Outlook(
            kind, copied, copy=CopyEvidence(COPIED_FROM_PROMPT, copied))

    def _retry_outlook(self, context: list[int]) -> Outlook | None:
        """The retry copy's outlook while this output follows the earlier answer, else None."""
        self._catch_up(context)
        return None if self._retry is None else self._retry.outlook(context)

    def _retry_draft(self, context: list[int], n: int) -> tuple[list[int], CopySource] | None:
        """The retry copy's next n tokens and their source, while this output follows an
        earlier answer; else None."""
        self._catch_up(context)
        return None if self._retry is None else self._retry.draft(context, n)

    def outlook(self, context: list[int]) -> Outlook:
        retry = self._retry_outlook(context)
        if retry is not None:
            return retry
        prompt_copy = self._copy_of_prompt(context)
        if prompt_copy is not None:
            return prompt_copy
        if not self._cache.has_match():
            return Outlook(SUFFIX_GUESS, 0, 0)  # nothing to copy: nothing to price
        tree, available = self._likeliest(context)
        copy = CopyEvidence(tree.node(0).label.kind, tree.match,
                            splits(tree, available)) if tree.tokens else None
        if tree.match >= STRONG_MATCH:
            # a copy's evidence is its match: a draft follows its match length (as
            # SuffixDecoding's)
            return Outlook(SUFFIX_COPY, tree.match, available, copy)
        return Outlook(SUFFIX_GUESS, 0, available, copy)

    def has_draft(self, context: list[int]) -> bool:
        return self.outlook(context).available != 0

    def copied(self, context: list[int]) -> int:
        """The match, when it is a copy (see outlook)."""
        return self.outlook(context).copied

    def candidates(self, context: list[int], budget: TreeBudget) -> CandidateTree:
        self._catch_up(context)
        if not self._cache.has_match():
            return CandidateTree()
        return self._cache.speculate(budget)

    def _likeliest(self, context: list[int]) -> tuple[CandidateTree, int]:
        """The best chain as long as a match may draft, and how many of its tokens a draft
        may take; built once per context length, so the outlook's `available` and every
        k's draft are the same chain."""
        if self._chain is None or self._chain[0] != len(context):
            tree = self.candidates(context, tree_budget(self.options, self.options.max_depth))
            tokens = self._renamed(tree, tree.tokens[: tree.first_path_length()])
            kept = len(tokens) if self.limit is None else self.limit(tokens)
            self._chain = (len(context), tree, kept)
        return self._chain[1], self._chain[2]

    def _renamed(self, tree: CandidateTree, tokens: list[int]) -> list[int]:
        """A copy from the memory with the renames the target made to copies of it
        (app.engine.drafters.suffix.memory_edits) and to copies of the prompt (the edit layer's)
        applied,
        cut to the candidate's length."""
        if not tree.tokens or tree.node(0).label.kind != COPIED_FROM_MEMORY:
            return tokens
        return self._prompt_copy.renamed(self._cache.edits.renamed(tokens))[: len(tokens)]

    def propose(
        self, context: list[int], budget: Budget, params: SamplingParams,
        rng: np.random.Generator,
    ) -> Draft:
        retry = self._retry_draft(context, budget.max_tokens)
        if retry is not None:
            tokens, source = retry
            return Draft(tokens, None, copied_from=[source] * len(tokens))
        prompt_copy = self._copy_of_prompt(context)
        if prompt_copy is not None:
            draft = self._prompt_copy.propose(context, budget, params, rng)
            source = _prompt_source(prompt_copy)
            return Draft(draft.tokens, None, copied_from=[source] * len(draft.tokens))
        if not self._cache.has_match():
            return EMPTY_DRAFT
        tree, available = self._likeliest(context)
        n = min(budget.max_tokens, available)
        if n <= 0:
            return EMPTY_DRAFT
        tokens = self._renamed(tree, tree.tokens[: tree.first_path_length()])
        return Draft(tokens[:n], None, copied_from=[_source(tree, i) for i in range(n)])

    def propose_tree(
        self, context: list[int], depth: int, shape: TreeShape, params: SamplingParams,
        rng: np.random.Generator,
    ) -> DraftTree:
        """The continuations merged, likeliest first, within the shape's width and nodes (a
        copy of the prompt: the edit-aware lookup's tree of its best matches; a retry: the
        earlier answer, a chain)."""
        retry = self._retry_draft(context, min(depth, shape.max_nodes))
        if retry is not None:
            tokens, source = retry
            return DraftTree(tokens, list(range(-1, len(tokens) - 1)), [None] * len(tokens),
                             [source] * len(tokens))
        prompt_copy = self._copy_of_prompt(context)
        if prompt_copy is not None:
            lookup_tree = self._prompt_copy.propose_tree(context, depth, shape, params, rng)
            source = _prompt_source(prompt_copy)
            return DraftTree(lookup_tree.tokens, lookup_tree.parents, lookup_tree.q_rows,
                             [source] * len(lookup_tree.tokens))
        tree = self.candidates(context, tree_budget(self.options, depth, shape.max_nodes,
                                                            shape.width))
        if self.limit is not None:  # as deep as the likeliest path may go
            depth = self.limit(tree.tokens[: tree.first_path_length()])
        nodes = tree.nodes
        kept = [i for i, node in enumerate(nodes) if node.depth <= depth]
        # preorder keeps parents before children, so dropping the deep ones renumbers simply
        new_index = {-1: -1, **{old: new for new, old in enumerate(kept)}}
        return DraftTree([nodes[i].token for i in kept],
                         [new_index[nodes[i].parent] for i in kept],
                         [None] * len(kept), [_source(tree, i) for i in kept])


def splits(tree: CandidateTree, depth: int) -> tuple[int, ...]:
    """The positions of the first `depth` tokens of the tree's first path at which the
    match's earlier occurrences went on in more than one way (the token's count below its
    parent's)."""
    path = tree.first_path()[:depth]
    counts = [tree.occurrences, *(node.count for node in path)]
    return tuple(j for j in range(len(path)) if counts[j + 1] < counts[j])


def _prompt_source(prompt_copy: Outlook) -> CopySource:
    """A copy of the prompt, as the inspector names it: one continuation, matched by the
    tokens before it that agree (the lookup's run, Outlook.copied)."""
    return CopySource(kind=COPIED_FROM_PROMPT, match=prompt_copy.copied)


def _source(tree: CandidateTree, i: int) -> CopySource:
    node = tree.node(i)
    return CopySource(kind=node.label.kind, run=node.label.run, count=node.count,
                      of=tree.occurrences, match=tree.match)


class MemorySource(Protocol):
    """What suffix decoding reads of a run: the target, the memory's earlier outputs of the
    target in one suffix tree (leaving out answers to the run's own prompt), and the answers
    the memory kept for a prompt (a retried request)."""

    @property
    def target(self) -> LanguageModel: ...

    def memory(self, path: str, max_depth: int) -> SuffixTree: ...

    def answers_to(self, path: str, prompt_ids: Sequence[int]) -> list[EarlierAnswer]: ...


def suffix_drafter(sources: MemorySource, options: DrafterOptions, rule: StopRule,
                   fallback: bool) -> SuffixDrafter:
    reach = options.suffix
    path = options.memory
    if not path:
        return SuffixDrafter(limit=block_limit(sources.target), options=reach)
    return SuffixDrafter(sources.memory(path, reach.max_depth), limit=block_limit(sources.target),
                         options=reach, recall=functools.partial(sources.answers_to, path))


ENTRY = Entry("suffix", suffix_drafter, lambda options, draft_file: SUFFIX_LABEL, free=True)
