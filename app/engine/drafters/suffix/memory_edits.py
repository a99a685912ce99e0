"""Copies from the draft memory across the target's renames: suffix decoding's counterpart of
the edit layer (app.engine.drafters.lookup.edits), which follows renames in copies of the prompt. An
earlier answer about `Customer` drafts the one about `Product` past each `Product`, where a
plain suffix match breaks at every renamed token and takes several tokens to grow back.

Learning: while the context goes on along a strong match in the memory (`strong` tokens or
more), a token the target writes where the memory goes on otherwise starts an edit. Once the
tokens past it agree with the memory again for AGREE_PAST_EDIT tokens, with one or two source
tokens replaced by one or two of the target's (the edit layer's skips, both sides non-empty,
and not the same tokens with one added), the edit is learnt as a rename. The context going on
through a rename's source tokens along a strong match unlearns it: the latest wins, as in the
edit layer. A new request starts with none.

Use: where the context's last TAIL tokens hold a renamed token, those tokens with the renames
undone are matched in the memory, and what the memory goes on with there is drafted with the
renames applied (renamed()).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.engine.drafters.lookup.edits import AGREE_PAST_EDIT, EDIT_SKIPS, RENAME_SLACK, renamed_by
from app.engine.drafters.suffix.tree import Cursor, Matcher, SuffixTree

Tokens = tuple[int, ...]

# renames replace tokens by tokens: an insertion or a deletion is not made again
RENAME_SKIPS = tuple((c, s) for c, s in EDIT_SKIPS if c and s)
# the context's tokens matched with renames undone: a match of 32 drafts up to 32 tokens at
# the paper's factor 1.0, and a longer one would cost a longer rebuild at every step
TAIL = 32


@dataclass
class _Break:
    """Where the context left a strong match in the memory, until the tokens after show
    whether it was a rename."""

    at: int  # the context's index of the target's first own token
    seq: int  # the memory's sequence,
    source_at: int  # and the index there of the token the memory went on with


class MemoryEdits:
    """The renames the target made to copies from `memory` in this request, learnt token by
    token (see()), and the memory's matches of the context with them undone (cursors())."""

    def __init__(self, memory: SuffixTree, strong: int) -> None:
        self.memory = memory
        self.strong = strong
        self.reset()

    def reset(self) -> None:
        self.renames: dict[Tokens, Tokens] = {}  # the memory's tokens -> the target's
        self._undo: dict[Tokens, Tokens] = {}
        self._break: _Break | None = None
        self._matched_at = -1  # the context length cursors() last matched
        self._cursors: list[Cursor] = []

    def see(self, before: Cursor | None, context: Sequence[int]) -> None:
        """The target wrote context[-1]; `before` was the memory's longest match of the
        context without it."""
        tree = self.memory
        if before is not None and tree.depth(before) >= self.strong:
            if tree.step(before, context[-1]) is None:
                if self._break is None:
                    self._start_break(before, len(context) - 1)
            elif self.renames:
                self._unlearn_kept(context)
        self._settle(context)

    def _start_break(self, before: Cursor, at: int) -> None:
        tree = self.memory
        node, extra = before
        if extra == 0 and not tree.is_tail(node):
            if not tree.kids[node]:
                return
            went_on: Cursor = (max(tree.kids[node], key=tree.rank), 0)
        elif tree.tail_token(node, extra) >= 0:
            went_on = (node, extra + 1)
        else:
            return
        seq, source_at = tree.source(went_on)
        self._break = _Break(at, seq, source_at)

    def _settle(self, context: Sequence[int]) -> None:
        edit = self._break
        if edit is None or len(context) < edit.at + 2 + AGREE_PAST_EDIT:
            return
        self._break = None
        tree_seq = self.memory.seqs[edit.seq]
        for skip_context, skip_source in RENAME_SKIPS:
            resume = edit.source_at + skip_source
            source = self.renamed(list(tree_seq[resume : resume + AGREE_PAST_EDIT
                                                     + RENAME_SLACK]))
            ours = list(context[edit.at + skip_context : edit.at + skip_context
                                + AGREE_PAST_EDIT])
            if len(ours) == AGREE_PAST_EDIT and source[:AGREE_PAST_EDIT] == ours:
                old = tuple(tree_seq[edit.source_at : resume])
                new = tuple(context[edit.at : edit.at + skip_context])
                if old != new and not _inserted(old, new) and not _inserted(new, old):
                    self._learn(old, new)
                return

    def _unlearn_kept(self, context: Sequence[int]) -> None:
        """The context went on along the memory through a rename's source tokens: the target
        kept them this time."""
        for old in [old for old in self.renames if len(context) >= len(old)
                    and tuple(context[len(context) - len(old):]) == old]:
            self._learn(old, None)

    def _learn(self, old: Tokens, new: Tokens | None) -> None:
        if new is None:
            self.renames.pop(old, None)
        else:
            self.renames[old] = new
        self._undo = {theirs: ours for ours, theirs in self.renames.items()}
        self._matched_at = -1

    def renamed(self, tokens: list[int]) -> list[int]:
        """The memory's tokens as the target writes them in this request."""
        return renamed_by(tokens, self.renames)

    def cursors(self, context: Sequence[int]) -> list[Cursor]:
        """The memory's matches of the context's last TAIL tokens with the renames undone,
        longest first; none where those tokens hold no renamed token."""
        if not self._undo:
            return []
        if self._matched_at != len(context):
            self._matched_at = len(context)
            tail = list(context[-TAIL:])
            undone = renamed_by(tail, self._undo)
            self._cursors = []
            if undone != tail:
                matcher = Matcher(self.memory)
                matcher.reset(undone)
                self._cursors = matcher.cursors
        return self._cursors


def _inserted(old: Tokens, new: Tokens) -> bool:
    """Whether `new` is `old` with tokens added before or after it: an insertion, which a
    rename would make again at every later occurrence."""
    return len(new) > len(old) and (new[:len(old)] == old or new[-len(old):] == old)
