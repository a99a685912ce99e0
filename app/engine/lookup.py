"""Prompt lookup decoding: find the context's last n tokens earlier in the prompt and output,
and propose what followed them. Free (no model step), with q one-hot at each token.

The longest n-gram that matches wins (n_max down to n_min); among its occurrences, the one
whose earlier tokens agree longest with the context's own, the latest on a tie, so copying a
repeated line follows the right copy. A match anchored on many agreeing tokens is a copy, a
shorter one a guess: the controller learns their acceptance apart. The edit-aware layer
(app.engine.lookup_edits) builds on this one.
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
    common_prefix,
)
from app.engine.protocol import LanguageModel
from app.engine.sampling import SamplingParams
from app.engine.tree import DraftTree, TreeBuilder

_KEEP_OCCURRENCES = 8
AGREEMENT_WINDOW = 64
# a match anchored on at least this many tokens (the n-gram plus the agreeing tokens before
# it) is a copy; a shorter one a guess, whose acceptance the controller learns separately.
# One passed 4-token guess makes an edit's copy strong (at 8 it took two, each a pass of 5)
STRONG_ANCHOR = 6

# a guess (a short match) and a copy (anchored on at least STRONG_ANCHOR agreeing tokens)
# start at the free kinds' prior, even odds: a copy's own prior of 7/8 and its lift from the
# guesses' rate gained under 2% on any replayed workload and lost 2% on edits and code
# (docs/ablation.md); a copy's run of agreeing tokens is what makes it draft long at once
NGRAM_GUESS = DraftKind("ngram-weak", free=True)
NGRAM_COPY = DraftKind("ngram", free=True)
# a copy of this run's own output (its source lies past the prompt) goes on for less than a
# copy of the prompt: code repeats its own phrases (`self.items`, a loop's header) for a line
# and then goes its own way, where code quoted back goes on for lines. So its run is no
# evidence (DraftKind.run_is_evidence), as a suffix copy's is not: it learns from verdicts
NGRAM_SELF = DraftKind("ngram-self", free=True, run_is_evidence=False)


def run_back(one: list[int], a: int, other: list[int], b: int, limit: int) -> int:
    """How many tokens agree going back from one[a] and other[b] (at most limit)."""
    count = 0
    while count < limit and a >= 0 and b >= 0 and one[a] == other[b]:
        a, b, count = a - 1, b - 1, count + 1
    return count


@dataclass
class Match:
    start: int  # where the proposed continuation starts in the context
    anchor: int  # the n-gram's length plus how many tokens before it agree


_FENCE = "```"


def block_limit(model: LanguageModel) -> Callable[[list[int]], int]:
    """How many of a copy's tokens to keep: up to an end of generation or the end of a
    markdown code fence (whose three backticks may span tokens), whichever comes first.
    Code asked back is quoted in a fenced block; the answer's block ends at its fence while
    the quoted one goes on into the asker's own words, and a draft run past it costs a long
    pass for the few tokens before the fence."""

    def keep(tokens: list[int]) -> int:
        text = ""
        for i, token in enumerate(tokens):
            text += model.token_text(token)
            if token in model.eos_ids or _FENCE in text:
                return i + 1
            text = text[-(len(_FENCE) - 1):]
        return len(tokens)

    return keep


class PromptLookup(Drafter):
    """Prompt lookup: the continuation of the best earlier occurrence of the context's last
    n tokens. Its outlook names a copy (NGRAM_COPY) or a guess (NGRAM_GUESS). `limit` says
    how many of a continuation's tokens a draft may take (see block_limit)."""

    kind = NGRAM_COPY

    def __init__(self, n_max: int = 6, n_min: int = 1,
                 limit: Callable[[list[int]], int] | None = None) -> None:
        self.name = "n-gram lookup"
        self.n_max = n_max
        self.n_min = n_min
        self.limit = limit
        self._clear()

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self._clear()
        self._prompt_length: int | None = len(prompt_ids)

    def _clear(self) -> None:
        self._prompt_length = None  # unknown without begin(): every source is the prompt
        self._seen: list[int] = []
        # n -> {ngram: start indexes of its last few occurrences}
        self._index: dict[int, dict[tuple[int, ...], list[int]]] = {
            n: {} for n in range(self.n_min, self.n_max + 1)
        }
        self._last: tuple[int, Match | None] = (-1, None)

    def outlook(self, context: list[int]) -> Outlook:
        return Outlook(self.kind_for(context), self.copied(context))

    def kind_for(self, context: list[int]) -> DraftKind:
        """Which kind of guess propose() would make now."""
        found = self.find(context)
        if found is None:
            return NGRAM_COPY
        if found.anchor < STRONG_ANCHOR:
            return NGRAM_GUESS
        in_output = self._prompt_length is not None and found.start >= self._prompt_length
        return NGRAM_SELF if in_output else NGRAM_COPY

    def copied(self, context: list[int]) -> int:
        """How many of the context's last tokens in a row equal the text a copy continues
        (the copy's evidence); 0 for a guess or no match."""
        found = self.find(context)
        if found is None or found.anchor < STRONG_ANCHOR:
            return 0
        return run_back(context, found.start - 1, context, len(context) - 1, AGREEMENT_WINDOW)

    def match(self, context: list[int]) -> int | None:
        """Start of the continuation of the best n-gram match, if any."""
        found = self.find(context)
        return None if found is None else found.start

    def find(self, context: list[int]) -> Match | None:
        """The best match for this context (computed once per context)."""
        if self._last[0] == len(context) and self._seen == context:
            return self._last[1]
        self._update(context)
        found = self._refine(context, self._best_occurrence(
            context, lambda s, n: self._agreement(context, s, n)))
        self._last = (len(context), found)
        return found

    def _refine(self, context: list[int], found: Match | None) -> Match | None:
        """Where a layer may find a better match than the n-gram's."""
        return found

    def _agreement(self, context: list[int], start: int, n: int) -> int:
        """How many tokens before an occurrence at `start` equal those before the context's
        own last n tokens."""
        return run_back(context, start - 1, context, len(context) - n - 1, AGREEMENT_WINDOW)

    def _best_occurrence(self, tail: list[int],
                         agreement: Callable[[int, int], int]) -> Match | None:
        """The occurrence of the longest indexed n-gram that ends `tail` whose earlier tokens
        agree longest by `agreement(start, n)`, the latest on a tie."""
        for n in range(min(self.n_max, len(tail) - 1), self.n_min - 1, -1):
            starts = self._index[n].get(tuple(tail[-n:]))
            if starts:
                best, agree = starts[-1], -1
                for s in reversed(starts):
                    a = agreement(s, n)
                    if a > agree:
                        best, agree = s, a
                return Match(best + n, n + agree)
        return None

    def ranked_matches(self, context: list[int]) -> list[int]:
        """Starts of every remembered continuation, best first: find()'s match, then longer
        n-grams first, then by agreement before the occurrence, the latest first."""
        found = self.find(context)
        ranked: list[int] = [] if found is None else [found.start]
        for n in range(min(self.n_max, len(context) - 1), self.n_min - 1, -1):
            starts = self._index[n].get(tuple(context[-n:]), [])
            by_agreement = sorted(reversed(starts),
                                  key=lambda s: -self._agreement(context, s, n))
            ranked.extend(s + n for s in by_agreement if s + n not in ranked)
        return ranked

    def propose_tree(
        self, context: list[int], depth: int, shape: TreeShape, params: SamplingParams,
        rng: np.random.Generator,
    ) -> DraftTree:
        """The continuations of several matches merged into a trie, best match first."""
        builder = TreeBuilder(shape.width, shape.max_nodes)
        for start in self.ranked_matches(context):
            parent = -1
            for token in self._continuation(context, start, depth):
                node = builder.child(parent, token)
                if node is None:
                    node = builder.add(parent, token, None)
                if node is None:
                    break
                parent = node
            if builder.full:
                break
        return builder.tree()

    def _update(self, context: list[int]) -> None:
        if common_prefix(self._seen, context) < len(self._seen):
            self._clear()
        # index every n-gram that ends before the last token, so a match has a continuation
        for end in range(max(1, len(self._seen)), len(context)):
            for n, table in self._index.items():
                if end - n >= 0:
                    starts = table.setdefault(tuple(context[end - n : end]), [])
                    starts.append(end - n)
                    del starts[:-_KEEP_OCCURRENCES]
        self._seen = list(context)

    def propose(
        self, context: list[int], budget: Budget, params: SamplingParams,
        rng: np.random.Generator,
    ) -> Draft:
        k = budget.max_tokens
        start = self.match(context) if k > 0 else None
        if start is None:
            return EMPTY_DRAFT
        return Draft(self._continuation(context, start, k), None)

    def _continuation(self, context: list[int], start: int, k: int) -> list[int]:
        return self._cut(context[start : start + k])

    def _cut(self, tokens: list[int]) -> list[int]:
        return tokens if self.limit is None else tokens[: self.limit(tokens)]
