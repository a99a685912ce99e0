"""Suffix decoding's index (Oliaro et al., SuffixDecoding; the interface is vLLM's and
ArcticInference's four calls): a *local* suffix tree over this request's prompt and output,
and a *global* one over the memory of earlier runs (app.engine.drafters.suffix.tree).

Terms, used throughout:
  - a *match* is a suffix of the context found in a tree; its length is m. Every match
    length found from MIN_MATCH up is tried, in each tree;
  - from a match, a *candidate* grows best-first by estimated probability: a token's is its
    parent's times the continuation frequency (child count / parent count), and a token
    below `min_prob` is not drafted;
  - a candidate from a match of m tokens is at most `factor * m + offset` tokens deep
    (SuffixDecoding's max_spec_factor and max_spec_offset);
  - its *score* is the sum of its tokens' probabilities (the expected number accepted, if
    the frequencies are right); the best-scoring candidate of both trees is taken, the
    longer match on a tie, the local tree's on a tie between trees.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from app.engine.drafters.suffix.memory_edits import MemoryEdits
from app.engine.drafters.suffix.token_buffer import Label
from app.engine.drafters.suffix.tree import Cursor, Matcher, SuffixTree
from app.engine.records import COPIED_FROM_MEMORY, COPIED_FROM_OUTPUT, COPIED_FROM_PROMPT

LOCAL = 0  # the local tree's one sequence: the prompt, then the output
# SuffixDecoding tries matches from one token up; a one-token match drafts one token
# (factor 1.0), a pass of 2 that costs 1.74 steps on the demo target's curve, so it pays only
# above 74% acceptance, and its verdicts (shadowed, as a guess) drag down the guesses of
# longer matches. Replayed (packaging/replay_suffix.py, 7 repetitive tasks): 1.087x plain
# trying them, 1.108x from two tokens; fresh code 0.999x and 1.003x
MIN_MATCH = 2
# a match of at least this many tokens is a copy, a shorter one a guess (the suffix drafter's
# two kinds, app.engine.drafters.suffix); renames are learnt only where a copy breaks (memory_edits)
STRONG_MATCH = 6


@dataclass(slots=True)
class Candidate:
    """A node of a candidate tree."""

    token: int
    parent: int  # index of the parent node; -1: a child of the context's last token
    depth: int
    count: int  # occurrences that went on through this token
    prob: float  # estimated chance that the text goes on to this token
    label: Label  # where it was first seen
    position: int  # and at which position of that sequence


@dataclass
class CandidateTree:
    """Tokens in preorder, likeliest child first, so the first path (each node's likeliest
    child, from the root down) takes indexes 0, 1, 2, ...; each token's node (Candidate:
    its count and where it was seen) is built when asked for."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)  # -1: a child of the context's end
    match: int = 0  # context tokens the candidate's match is long
    occurrences: int = 0  # occurrences of the match (the first tokens' counts are of these)
    score: float = 0.0  # the sum of the tokens' probabilities
    node_at: Callable[[int], Candidate] | None = None

    @property
    def nodes(self) -> list[Candidate]:
        return [self.node(i) for i in range(len(self.tokens))]

    def node(self, i: int) -> Candidate:
        assert self.node_at is not None
        return self.node_at(i)

    def first_path_length(self) -> int:
        n = 0
        while n < len(self.tokens) and self.parents[n] == n - 1:
            n += 1
        return n

    def first_path(self) -> list[Candidate]:
        return [self.node(i) for i in range(self.first_path_length())]


@dataclass(frozen=True)
class TreeBudget:
    depth: int  # tokens deep at most
    nodes: int = 1  # nodes at most
    width: int = 1  # children per node at most (1: a chain)
    min_prob: float = 0.1  # a token whose estimated probability is lower is not drafted
    factor: float = 1.0  # a match of m tokens grows a candidate at most factor * m + offset
    offset: float = 0.0

    def depth_for(self, match: int) -> int:
        return max(0, min(self.depth, int(self.factor * match + self.offset + 1e-6)))


Labeller = Callable[[int, int], Label]  # (sequence id, position) -> where it came from


def best_candidate(tree: SuffixTree, matches: Sequence[Cursor], budget: TreeBudget,
                   label: Labeller, own: int = 0) -> CandidateTree:
    """The best-scoring candidate over every match (longest first), then built in full.
    A candidate's score is at most its depth, and a shorter match's depth is no deeper, so
    the search stops once none can beat the best. A shorter match with as many occurrences
    as the last one tried is the same occurrences (each is preceded by the longer match),
    so it can do no better unless the depth bound leaves it more room: it is skipped."""
    best: _Grown | None = None
    tried_count, tried_room = -1, -1
    for cursor in matches:
        match = tree.depth(cursor)
        if match < MIN_MATCH:
            break
        depth = budget.depth_for(match)
        if best is not None and depth <= best.score:
            break
        count = tree.counts[cursor[0]] if cursor[1] == 0 else 1
        room = min(depth, tree.max_depth - match)
        if count == tried_count and room <= tried_room:
            continue
        tried_count, tried_room = count, room
        grown = _grow(tree, cursor, depth, budget, own)
        if best is None or grown.score > best.score:
            best = grown
    if best is None or not best.raw:
        return CandidateTree()
    return _emit(tree, best, label, own)


@dataclass
class _Grown:
    """A candidate before it is built: its tokens' (cursor, parent, prob, depth)."""

    start: Cursor
    raw: list[tuple[Cursor, int, float, int]]
    score: float


def _continuations(tree: SuffixTree, cursor: Cursor,
                   own: int = 0) -> list[tuple[Cursor, float]]:
    """Where the text went on from the cursor, likeliest first, with the frequency of each
    (among the occurrences less `own` of them: see SuffixCache.speculate)."""
    node, extra = cursor
    if extra == 0 and not tree.is_tail(node):
        counts = tree.counts
        total = counts[node] - own
        kids = sorted(tree.kids[node], key=tree.rank, reverse=True)
        return [((kid, 0), counts[kid] / total) for kid in kids]
    return [((node, extra + 1), 1.0)] if tree.tail_token(node, extra) >= 0 else []


def _token(tree: SuffixTree, cursor: Cursor) -> int:
    node, extra = cursor
    return tree.tokens[node] if extra == 0 else tree.tail_token(node, extra - 1)


def _grow(tree: SuffixTree, start: Cursor, depth: int, budget: TreeBudget,
          own: int = 0) -> _Grown:
    """Best-first by probability (SuffixDecoding's tree speculation), within the depth, the
    nodes and the width; a chain (width 1) follows the likeliest continuation. `own`: the
    context's own occurrences counted at the start, which have no continuation yet."""
    if budget.width == 1:
        return _grow_chain(tree, start, depth, budget.min_prob, own)
    heap: list[tuple[float, int, Cursor, int, int]] = [(-1.0, 0, start, -1, 0)]
    order = 0
    grown = _Grown(start, [], 0.0)
    while heap and len(grown.raw) < budget.nodes:
        negative, _, cursor, parent, level = heapq.heappop(heap)
        prob = -negative
        if level:  # the start is the context's last token: not drafted
            grown.raw.append((cursor, parent, prob, level))
            grown.score += prob
            parent = len(grown.raw) - 1
        if level >= depth:
            continue
        for taken, (after, share) in enumerate(_continuations(tree, cursor,
                                                               0 if level else own)):
            if taken >= budget.width or prob * share < budget.min_prob:
                break
            order += 1
            heapq.heappush(heap, (-prob * share, order, after, parent, level + 1))
    return grown


def _grow_chain(tree: SuffixTree, cursor: Cursor, depth: int, min_prob: float,
                own: int = 0) -> _Grown:
    grown = _Grown(cursor, [], 0.0)
    prob = 1.0
    counts, kids = tree.counts, tree.kids
    for level in range(1, depth + 1):
        node, extra = cursor
        if extra == 0 and not tree.is_tail(node):
            if not kids[node]:
                break
            child = max(kids[node], key=tree.rank)
            prob *= counts[child] / (counts[node] - (own if level == 1 else 0))
            cursor = (child, 0)
        elif tree.tail_token(node, extra) >= 0:
            cursor = (node, extra + 1)
        else:
            break
        if prob < min_prob:
            break
        grown.raw.append((cursor, level - 2, prob, level))
        grown.score += prob
    return grown


def _emit(tree: SuffixTree, grown: _Grown, label: Labeller, own: int = 0) -> CandidateTree:
    """The grown tokens in preorder, likeliest child first (the first path leads)."""
    start = grown.start
    found = CandidateTree(match=tree.depth(start), score=grown.score,
                          occurrences=tree.counts[start[0]] - own if start[1] == 0 else 1)
    raw = grown.raw
    if all(parent == i - 1 for i, (_, parent, _, _) in enumerate(raw)):  # a chain
        order = list(range(len(raw)))
        found.parents = [i - 1 for i in order]
    else:
        order, found.parents = _preorder([parent for _, parent, _, _ in raw])
    found.tokens = [_token(tree, raw[i][0]) for i in order]

    def node_at(i: int) -> Candidate:
        cursor, _, prob, level = raw[order[i]]
        seq_id, position = tree.source(cursor)
        return Candidate(token=found.tokens[i], parent=found.parents[i], depth=level,
                         count=tree.counts[cursor[0]] if cursor[1] == 0 else 1, prob=prob,
                         label=label(seq_id, position), position=position)

    found.node_at = node_at
    return found


def _preorder(parents: list[int]) -> tuple[list[int], list[int]]:
    """Nodes grown best-first (each parent before its children, siblings by falling
    probability) in preorder: (the order, each one's parent in it)."""
    children: list[list[int]] = [[] for _ in parents]
    roots: list[int] = []
    for i, parent in enumerate(parents):
        (roots if parent < 0 else children[parent]).append(i)
    order: list[int] = []
    new_parents: list[int] = []
    stack = [(i, -1) for i in reversed(roots)]
    while stack:
        i, parent = stack.pop()
        order.append(i)
        new_parents.append(parent)
        stack.extend((c, len(order) - 1) for c in reversed(children[i]))
    return order, new_parents


@functools.lru_cache(maxsize=4096)
def _memory_run(run: int) -> Label:
    return Label(COPIED_FROM_MEMORY, run)


def memory_label(run: int, position: int) -> Label:
    """A sequence of the global tree is an earlier run, its id the run's."""
    return _memory_run(run)


class SuffixCache:
    """One request at a time over a shared global tree (the memory), behind suffix
    decoding's four calls: start_request, add_active_response, speculate, stop_request.
    The memory is also matched across the renames the target made to copies from it
    (app.engine.drafters.suffix.memory_edits: learnt where a match of STRONG_MATCH tokens or
    more breaks)."""

    def __init__(self, memory: SuffixTree | None = None, max_depth: int = 64) -> None:
        self.memory = memory if memory is not None else SuffixTree(max_depth)
        self.max_depth = max_depth
        self.local = SuffixTree(max_depth)
        self._in_memory = Matcher(self.memory)
        self.edits = MemoryEdits(self.memory, STRONG_MATCH)
        self.prompt_length = 0
        self.length = 0  # tokens of this request indexed so far

    def start_request(self, prompt_ids: Sequence[int]) -> None:
        self.local = SuffixTree(self.max_depth)
        self.local.extend(LOCAL, prompt_ids)
        self._in_memory.reset(prompt_ids)
        self.edits.reset()
        self.prompt_length = self.length = len(prompt_ids)

    def add_active_response(self, token_ids: Sequence[int]) -> None:
        for token in token_ids:
            before = self._in_memory.cursors[0] if self._in_memory.cursors else None
            self.local.append(LOCAL, token)
            self._in_memory.extend((token,))
            self.edits.see(before, self._context)
        self.length += len(token_ids)

    def stop_request(self) -> None:
        """The request's trees go; what it wrote joins the memory through the caller
        (app.runs keeps it with the run's id)."""
        self.local = SuffixTree(self.max_depth)
        self._in_memory.cursors = []
        self.edits.reset()
        self.prompt_length = self.length = 0

    @property
    def _context(self) -> list[int]:
        return self.local.seqs.get(LOCAL, [])

    def has_match(self) -> bool:
        """Whether either tree holds a suffix of the context of MIN_MATCH tokens or more."""
        return self.longest_match() >= MIN_MATCH

    def longest_match(self) -> int:
        lengths = [self.local.depth(c) for c in self.local.active_cursors(LOCAL)[:1]]
        lengths += [self.memory.depth(c) for c in self._in_memory.cursors[:1]]
        lengths += [self.memory.depth(c) for c in self.edits.cursors(self._context)[:1]]
        return max(lengths, default=0)

    def speculate(self, budget: TreeBudget) -> CandidateTree:
        """The best-scoring candidate: the local tree's, the memory's, or (a chain only) the
        memory's across renames, whose tokens are the memory's (edits.renamed() makes them
        the target's)."""
        # the local tree holds the context itself: its occurrence at each match is counted
        # there and has no continuation yet, so it is left out of the frequencies (the
        # ArcticInference tree counts it, which halves a copy seen once before)
        best = best_candidate(self.local, self.local.active_cursors(LOCAL), budget,
                              self._local_label, own=1)
        found = [best_candidate(self.memory, self._in_memory.cursors, budget, memory_label)]
        if budget.width == 1:
            found.append(best_candidate(self.memory, self.edits.cursors(self._context),
                                        budget, memory_label))
        for remembered in found:
            if remembered.score > best.score:
                best = remembered
        return best

    def _local_label(self, seq_id: int, position: int) -> Label:
        return _FROM_PROMPT if position < self.prompt_length else _FROM_OUTPUT


_FROM_PROMPT = Label(COPIED_FROM_PROMPT)
_FROM_OUTPUT = Label(COPIED_FROM_OUTPUT)
