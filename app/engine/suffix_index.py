"""Suffix matching over token sequences, for suffix decoding (Oliaro et al., SuffixDecoding).

Terms, used throughout:
  - a *buffer* holds token sequences end to end, separated by SEPARATOR, each sequence
    labelled with where it came from (the prompt, this run's output, an earlier run);
  - an *occurrence* is a position `end` in a buffer whose tokens, read backwards from `end`,
    equal the context's last tokens; its *match* is how many agree (up to `max_match`);
  - the *continuation* of an occurrence is what followed it: buffer[end + 1 :], up to the
    next separator;
  - a *candidate tree* merges the continuations of the occurrences whose match is at least
    some length m into a trie; a node's *count* is how many of them went on that way, its
    *share* count / occurrences (the empirical chance that the text goes on so).

Where SuffixDecoding keeps a bounded-depth suffix tree whose node counts give the shares,
this keeps, per token and per pair of tokens, the positions where they occur (appended in
O(1) amortised per token), and reads the match of every occurrence of the context's last
two tokens in one vectorised comparison, with memory linear in the tokens. The counts are
SuffixDecoding's over a window: the latest `max_occurrences` occurrences per buffer are
compared, and at most `tree_occurrences` of them (longest match, then latest) merged.
As SuffixDecoding, match lengths among the occurrences are tried (the longest few) and the
tree with the highest score (the sum of its nodes' shares: the expected number of accepted
tokens if the shares are right) is kept; a tree from a match of m tokens is at most
`factor * m` deep. The context's last pair (else its last token) must occur: a match is at
least two tokens long wherever the pair occurs anywhere.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from app.engine.token_buffer import SEPARATOR, Label, TokenBuffer

# SuffixDecoding tries every match length; the longest few carry nearly all the score, and
# each try costs a trie
_MATCH_LENGTHS_TRIED = 4
# tokens compared for every occurrence; only those that agree on all are compared further
_FIRST_COMPARED = 8


@dataclass(frozen=True)
class Occurrence:
    buffer: int  # which of the index's buffers
    end: int
    match: int


@dataclass
class Occurrences:
    """Occurrences as arrays [n], longest match first, then the latest buffer and position."""

    buffers: np.ndarray
    ends: np.ndarray
    matches: np.ndarray

    def __len__(self) -> int:
        return int(self.ends.shape[0])

    def at(self, i: int) -> Occurrence:
        return Occurrence(int(self.buffers[i]), int(self.ends[i]), int(self.matches[i]))


@dataclass
class Candidate:
    """A node of the candidate tree."""

    token: int
    parent: int  # index of the parent node; -1: a child of the context's last token
    depth: int
    count: int  # occurrences whose continuation passes through this node
    share: float  # count / occurrences the tree was built from
    # the first of those occurrences (longest match, then latest): where the token is copied
    # from, and its position in that buffer
    label: Label
    position: int


@dataclass
class CandidateTree:
    """Nodes in an order where parents come first and the first path (each node's likeliest
    child, from the root down) takes indexes 0, 1, 2, ..."""

    nodes: list[Candidate] = field(default_factory=list)
    match: int = 0  # context tokens the tree's occurrences match (at least)
    occurrences: int = 0
    score: float = 0.0  # the sum of the nodes' shares

    def first_path(self) -> list[Candidate]:
        path: list[Candidate] = []
        while len(path) < len(self.nodes) and self.nodes[len(path)].parent == len(path) - 1:
            path.append(self.nodes[len(path)])
        return path


@dataclass(frozen=True)
class TreeBudget:
    depth: int  # tokens deep at most
    nodes: int = 1  # nodes at most
    width: int = 1  # children per node at most (1: a chain)
    min_share: float = 0.1  # a node whose share is lower is not proposed
    factor: float = 1.0  # a match of m tokens grows a tree at most factor * m deep


class SuffixIndex:
    """Several buffers searched as one (an earlier-runs buffer shared between runs, and this
    run's prompt and output); the latest occurrences are kept first."""

    def __init__(self, buffers: Sequence[TokenBuffer], max_match: int = 64,
                 max_occurrences: int = 256, tree_occurrences: int = 32) -> None:
        self.buffers = list(buffers)
        self.max_match = max_match  # context tokens compared at most
        self.max_occurrences = max_occurrences  # per buffer, the latest
        self.tree_occurrences = tree_occurrences  # merged into one tree at most

    def occurrences(self, context: Sequence[int]) -> Occurrences:
        """Occurrences of the context's last tokens; at most max_occurrences per buffer (the
        latest)."""
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        tail = np.asarray(context[-self.max_match:], dtype=np.int64)[::-1]  # [m], newest first
        for b, buffer in enumerate(self.buffers if len(context) else ()):
            ends = buffer.ends_of(context)[-self.max_occurrences:]  # [c]
            if ends.size == 0:
                continue
            matches = _agreement(buffer.tokens, ends, tail[:_FIRST_COMPARED])
            longer = np.flatnonzero(matches == _FIRST_COMPARED)
            if longer.size and tail.shape[0] > _FIRST_COMPARED:
                # only those that agree so far are compared further
                matches[longer] += _agreement(buffer.tokens, ends[longer] - _FIRST_COMPARED,
                                              tail[_FIRST_COMPARED:])
            parts.append((np.full_like(ends, b), ends, matches))
        if not parts:
            empty = np.empty(0, dtype=np.int64)
            return Occurrences(empty, empty, empty)
        buffers, ends, matches = (np.concatenate(column) for column in zip(*parts, strict=True))
        order = np.lexsort((-ends, -buffers, -matches))
        return Occurrences(buffers[order], ends[order], matches[order])

    def longest_match(self, context: Sequence[int]) -> int:
        found = self.occurrences(context)
        return int(found.matches[0]) if len(found) else 0

    def candidates(self, context: Sequence[int], budget: TreeBudget) -> CandidateTree:
        """The best-scoring candidate tree over the longest few match lengths."""
        return self.candidates_from(self.occurrences(context), budget)

    def candidates_from(self, found: Occurrences, budget: TreeBudget) -> CandidateTree:
        """Occurrences are merged longest match first, so the tree for a shorter match
        length grows the one for the longer: each is scored as it stands, the best kept."""
        best = CandidateTree()
        trie = _Trie()
        n = 0
        for m in np.unique(found.matches)[::-1][:_MATCH_LENGTHS_TRIED].tolist():
            depth = min(budget.depth, int(budget.factor * m + 1e-6))
            if depth < 1:
                break
            # the occurrences matching m tokens or more, each distinct continuation once
            distinct: dict[tuple[int, ...], tuple[Occurrence, int]] = {}
            while n < min(len(found), self.tree_occurrences) and found.matches[n] >= m:
                o = found.at(n)
                tokens = self._continuation(o, depth)
                first, count = distinct.get(tokens, (o, 0))
                distinct[tokens] = (first, count + 1)
                n += 1
            for tokens, (first, count) in distinct.items():
                trie.insert(tokens, first, count)
            kept = trie.best_nodes(n, replace(budget, depth=depth))
            score = sum(trie.counts[node] for node in kept) / n
            if score > best.score:
                best = CandidateTree(match=m, occurrences=n, score=score)
                trie.emit(kept, n, self.buffers, best)
        return best

    def _continuation(self, o: Occurrence, depth: int) -> tuple[int, ...]:
        tokens: list[int] = self.buffers[o.buffer].tokens[o.end + 1 : o.end + 1 + depth].tolist()
        return tuple(tokens[: tokens.index(SEPARATOR)] if SEPARATOR in tokens else tokens)


def _agreement(tokens: np.ndarray, ends: np.ndarray, tail: np.ndarray) -> np.ndarray:
    """How many tokens agree with `tail` [m] (newest first) going back from each of `ends` [c]."""
    back = ends[:, None] - np.arange(tail.shape[0])[None, :]  # [c, m]
    agree = (tokens[np.maximum(back, 0)] == tail[None, :]) & (back >= 0)
    return np.asarray(np.where(agree.all(axis=1), tail.shape[0], agree.argmin(axis=1)))


class _Trie:
    """Continuations merged: node 0 is the root (the context's last token)."""

    def __init__(self) -> None:
        self.tokens = [SEPARATOR]
        self.counts = [0]
        self.parents = [-1]
        self.depths = [0]
        self.first: list[Occurrence | None] = [None]
        self.children: list[list[int]] = [[]]
        self._child: dict[tuple[int, int], int] = {}

    def insert(self, tokens: Sequence[int], o: Occurrence, count: int = 1) -> None:
        """Add `count` occurrences that went on with `tokens`, `o` the first of them."""
        node = 0
        self.counts[0] += count
        for token in tokens:
            child = self._child.get((node, token))
            if child is None:
                child = len(self.tokens)
                self._child[(node, token)] = child
                self.tokens.append(token)
                self.counts.append(0)
                self.parents.append(node)
                self.depths.append(self.depths[node] + 1)
                self.first.append(o)
                self.children.append([])
                self.children[node].append(child)
            self.counts[child] += count
            node = child

    def best_nodes(self, total: int, budget: TreeBudget) -> set[int]:
        """Best-first by share, within the budget (as SuffixDecoding's tree speculation)."""
        kept: set[int] = set()
        taken = {0: 0}  # children kept per node
        heap = [(-self.counts[c], c) for c in self.children[0]]
        heapq.heapify(heap)
        while heap and len(kept) < budget.nodes:
            negative, node = heapq.heappop(heap)
            parent = self.parents[node]
            if -negative / total < budget.min_share or taken[parent] >= budget.width:
                continue
            kept.add(node)
            taken[parent] += 1
            taken[node] = 0
            if self.depths[node] < budget.depth:
                for c in self.children[node]:
                    heapq.heappush(heap, (-self.counts[c], c))
        return kept

    def emit(self, kept: set[int], total: int, buffers: Sequence[TokenBuffer],
             tree: CandidateTree) -> None:
        """The kept nodes in preorder, likeliest child first (the first path leads)."""
        stack = [(c, -1) for c in reversed(self._ranked(0, kept))]
        while stack:
            node, parent = stack.pop()
            o = self.first[node]
            assert o is not None
            index = len(tree.nodes)
            tree.nodes.append(Candidate(
                token=self.tokens[node], parent=parent, depth=self.depths[node],
                count=self.counts[node], share=self.counts[node] / total,
                label=buffers[o.buffer].label_at(o.end + self.depths[node]),
                position=o.end + self.depths[node]))
            stack.extend((c, index) for c in reversed(self._ranked(node, kept)))

    def _ranked(self, node: int, kept: set[int]) -> list[int]:
        # by count, then by insertion (longest match, latest first): sorted() is stable
        return sorted((c for c in self.children[node] if c in kept),
                      key=lambda c: -self.counts[c])
