"""A suffix tree of bounded depth over token sequences, as SuffixDecoding builds it (Oliaro et
al.; ArcticInference's suffix_tree): every substring of up to `max_depth` tokens is a path
from the root, and a node's *count* is how many suffixes of the sequences reach it (its
occurrences, those that end there included). A child's count over its parent's is the
empirical chance that the text goes on with that token: the *continuation frequency*.

Memory stays linear in practice by keeping a node whose count is 1 as a *tail*: its one
occurrence goes on as its reference sequence does, so nothing below it is stored until a
second occurrence passes through it (then its next token becomes a node). Appending a token
updates only the sequence's *active* suffixes that occurred before (a suffix seen once is a
tail and needs nothing): O(repeated suffixes) per token, 0 to `max_depth`.

Terms: a *node* is an int; a *cursor* (node, extra) is a position `extra` tokens down a
tail below `node` (extra is 0 on a node with children); its *depth* is the match length.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Cursor = tuple[int, int]  # (node, tokens further down its tail)

ROOT = 0
_KEY_SHIFT = 21  # a child is keyed parent << _KEY_SHIFT | token (vocabularies < 2M tokens)


class SuffixTree:
    """Sequences by id, each appended token by token; counts per node (see the module)."""

    def __init__(self, max_depth: int = 64) -> None:
        self.max_depth = max_depth
        self.tokens: list[int] = [-1]  # per node: the token that leads to it
        self.counts: list[int] = [0]
        self.depths: list[int] = [0]
        self.ref_seq: list[int] = [-1]  # per node: the first occurrence's sequence,
        self.ref_pos: list[int] = [0]  # and where its continuation starts there
        # per node: when an occurrence last reached it (tokens appended so far, all
        # sequences), so that of equally frequent continuations the latest leads
        self.stamps: list[int] = [0]
        self.clock = 0
        self.kids: list[list[int]] = [[]]
        self._child: dict[int, int] = {}
        self.seqs: dict[int, list[int]] = {}
        self._active: dict[int, list[int]] = {}  # per sequence: repeated suffixes' nodes

    def __len__(self) -> int:
        """Tokens held, in all sequences."""
        return sum(len(seq) for seq in self.seqs.values())

    @property
    def n_nodes(self) -> int:
        return len(self.tokens)

    def child(self, node: int, token: int) -> int:
        return self._child.get(node << _KEY_SHIFT | token, -1)

    def extend(self, seq_id: int, tokens: Iterable[int]) -> None:
        for token in tokens:
            self.append(seq_id, token)

    def append(self, seq_id: int, token: int) -> None:
        """One more token at the end of sequence `seq_id` (a new one when not seen yet)."""
        seq = self.seqs.setdefault(seq_id, [])
        seq.append(token)
        self.clock += 1
        at = len(seq)  # where what follows `token` will start
        active = self._active.get(seq_id, [])
        active.append(ROOT)
        kept: list[int] = []
        counts, depths, children, stamps = self.counts, self.depths, self._child, self.stamps
        counts[ROOT] += 1
        for node in active:
            child = children.get(node << _KEY_SHIFT | token, -1)
            if child < 0:  # a new continuation: a tail of this sequence
                self._new_node(node, token, seq_id, at)
                continue
            if counts[child] == 1:  # a tail met a second time: its next token becomes a node
                self._open_tail(child)
            counts[child] += 1
            stamps[child] = self.clock
            if depths[child] < self.max_depth:
                kept.append(child)
        self._active[seq_id] = kept

    def _new_node(self, parent: int, token: int, seq_id: int, at: int,
                  stamp: int | None = None) -> int:
        node = len(self.tokens)
        self._child[parent << _KEY_SHIFT | token] = node
        self.tokens.append(token)
        self.counts.append(1)
        self.depths.append(self.depths[parent] + 1)
        self.ref_seq.append(seq_id)
        self.ref_pos.append(at)
        self.stamps.append(self.clock if stamp is None else stamp)
        self.kids.append([])
        self.kids[parent].append(node)
        return node

    def _open_tail(self, node: int) -> None:
        """A tail's one occurrence as a child node, where it goes on (within max_depth). An
        occurrence at the end of its sequence goes on when that sequence does: it becomes
        one of that sequence's active suffixes."""
        seq_id, at = self.ref_seq[node], self.ref_pos[node]
        seq = self.seqs[seq_id]
        if self.depths[node] >= self.max_depth:
            return
        if at < len(seq):  # seen when the tail was
            self._new_node(node, seq[at], seq_id, at + 1, self.stamps[node])
            return
        active = self._active.setdefault(seq_id, [])
        place = 0
        while place < len(active) and self.depths[active[place]] > self.depths[node]:
            place += 1
        active.insert(place, node)

    def rank(self, node: int) -> tuple[int, int]:
        """A child's order among its siblings: the most frequent first, then the latest."""
        return self.counts[node], self.stamps[node]

    def is_tail(self, node: int) -> bool:
        return self.counts[node] == 1 and node != ROOT

    def tail_token(self, node: int, extra: int) -> int:
        """The token `extra` tokens below a tail node; -1 past its end or max_depth."""
        seq, at = self.seqs[self.ref_seq[node]], self.ref_pos[node] + extra
        if at >= len(seq) or self.depths[node] + extra >= self.max_depth:
            return -1
        return seq[at]

    def step(self, cursor: Cursor, token: int) -> Cursor | None:
        """The cursor one token further, or None where the tree does not go on so."""
        node, extra = cursor
        if extra == 0 and not self.is_tail(node):
            child = self.child(node, token)
            return (child, 0) if child >= 0 else None
        return (node, extra + 1) if self.tail_token(node, extra) == token else None

    def depth(self, cursor: Cursor) -> int:
        return self.depths[cursor[0]] + cursor[1]

    def active_cursors(self, seq_id: int) -> list[Cursor]:
        """The sequence's suffixes that occurred before (longest first), as cursors."""
        return [(node, 0) for node in self._active.get(seq_id, ())]

    def source(self, cursor: Cursor) -> tuple[int, int]:
        """Where the token at the cursor was first seen: (sequence id, position)."""
        node, extra = cursor
        return self.ref_seq[node], self.ref_pos[node] + extra - 1


class Matcher:
    """A context's suffixes found in a tree that does not hold the context (the memory of
    earlier runs): one cursor per suffix length present, moved along as tokens come, so a
    look-up is free and an update costs one step per cursor."""

    def __init__(self, tree: SuffixTree) -> None:
        self.tree = tree
        self.cursors: list[Cursor] = []  # longest first

    def reset(self, context: Sequence[int]) -> None:
        self.cursors = []
        self.extend(context[-self.tree.max_depth:])

    def extend(self, tokens: Iterable[int]) -> None:
        tree = self.tree
        for token in tokens:
            moved: list[Cursor] = []
            for cursor in [*self.cursors, (ROOT, 0)]:
                after = tree.step(cursor, token)
                if after is not None and tree.depth(after) < tree.max_depth:
                    moved.append(after)
            self.cursors = moved
