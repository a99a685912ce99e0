"""Token sequences end to end, indexed for suffix matching (app.engine.suffix_index).

A *buffer* holds token sequences end to end, separated by SEPARATOR, each sequence labelled
with where it came from (the prompt, this run's output, an earlier run), and keeps, per
token and per pair of adjacent tokens, the positions where they occur (appended in O(1)
amortised per token), so the occurrences of the context's last two tokens are one look-up.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SEPARATOR = -1  # between sequences; never a token, so no match or continuation crosses it

_PAIR_SHIFT = 32  # a pair of tokens (a, b) is indexed as a << 32 | b


@dataclass(frozen=True)
class Label:
    """Where a sequence came from: app.engine.records' COPIED_FROM_PROMPT, _OUTPUT or
    _MEMORY; `run` names the earlier run of a memory sequence."""

    kind: str
    run: int | None = None


class _Positions:
    """A growing int64 array (amortised O(1) append)."""

    __slots__ = ("buf", "n")

    def __init__(self) -> None:
        self.buf = np.empty(4, dtype=np.int64)
        self.n = 0

    def append(self, value: int) -> None:
        if self.n == self.buf.shape[0]:
            self.buf = np.concatenate([self.buf, np.empty_like(self.buf)])
        self.buf[self.n] = value
        self.n += 1

    def view(self) -> np.ndarray:
        return self.buf[: self.n]


class TokenBuffer:
    """Labelled token sequences end to end, with the positions of every token and every pair
    of adjacent tokens. Appending a token costs O(1) amortised."""

    def __init__(self) -> None:
        self._tokens = _Positions()
        self._single: dict[int, _Positions] = {}
        self._pairs: dict[int, _Positions] = {}
        self._starts: list[int] = []  # where each labelled sequence starts
        self._labels: list[Label] = []

    def __len__(self) -> int:
        return self._tokens.n

    @property
    def tokens(self) -> np.ndarray:
        return self._tokens.view()

    @property
    def last(self) -> int:
        return int(self._tokens.buf[self._tokens.n - 1]) if self._tokens.n else SEPARATOR

    def start_sequence(self, label: Label) -> None:
        """Later tokens belong to a new sequence (after a separator, unless it is the first)."""
        if self._tokens.n and self.last != SEPARATOR:
            self._tokens.append(SEPARATOR)
        self._starts.append(self._tokens.n)
        self._labels.append(label)

    def relabel_from_here(self, label: Label) -> None:
        """Later tokens continue the current sequence (no separator) under another label: the
        output goes on from the prompt's last token."""
        self._starts.append(self._tokens.n)
        self._labels.append(label)

    def append(self, token: int) -> None:
        previous = self.last
        at = self._tokens.n
        self._tokens.append(token)
        self._single.setdefault(token, _Positions()).append(at)
        if previous != SEPARATOR:
            self._pairs.setdefault(previous << _PAIR_SHIFT | token, _Positions()).append(at)

    def extend(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.append(token)

    def label_at(self, position: int) -> Label:
        return self._labels[bisect.bisect_right(self._starts, position) - 1]

    def ends_of(self, tail: Sequence[int]) -> np.ndarray:
        """Positions where the context's last two tokens occur (its last token, when it is
        one token long or the pair never occurs), each with a continuation after it."""
        found = None
        if len(tail) >= 2:
            found = self._pairs.get(tail[-2] << _PAIR_SHIFT | tail[-1])
        if found is None:
            found = self._single.get(tail[-1])
        if found is None:
            return np.empty(0, dtype=np.int64)
        ends = found.view()
        # the buffer's own last token has nothing after it yet
        return ends[: np.searchsorted(ends, self._tokens.n - 1)]
