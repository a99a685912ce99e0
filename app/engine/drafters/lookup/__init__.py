"""Prompt lookup decoding: find the context's last n tokens earlier in the prompt and output,
and propose what followed them. Free (no model step), with q one-hot at each token.

The longest n-gram that matches wins (n_max down to n_min); among its occurrences, the one
whose earlier tokens agree longest with the context's own, the latest on a tie, so copying a
repeated line follows the right copy. A match anchored on many agreeing tokens is a copy, a
shorter one a guess: the controller learns their acceptance apart.

The lookup itself is a pure function, `find(index, context)`: the context's best match in an
NgramIndex of it (kept up to date as the context grows, so a step costs O(n_max) lookups,
not a scan). LookupDrafter drafts what a Finder finds: NgramFinder is the lookup alone; the
edit layer (app.engine.drafters.lookup.edits.EditFinder) is a finder of its own over the same index,
and the registry composes the two for `--spec-type ngram`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from app.engine.decode_config import TreeShape
from app.engine.drafters import EMPTY_DRAFT, Budget, Draft, Drafter, DraftKind, Outlook
from app.engine.estimates import CopyEvidence
from app.engine.protocol import LanguageModel
from app.engine.records import COPIED_FROM_OUTPUT, COPIED_FROM_PROMPT
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


class NgramIndex:
    """Where each n-gram (n_min to n_max tokens) of a token sequence occurred: the starts of
    its last few occurrences. Every n-gram that ends before the last token is indexed, so a
    match always has a continuation."""

    def __init__(self, n_min: int = 1, n_max: int = 6) -> None:
        self.n_min = n_min
        self.n_max = n_max
        self.clear()

    def clear(self) -> None:
        self.seen: list[int] = []
        self.table: dict[int, dict[tuple[int, ...], list[int]]] = {
            n: {} for n in range(self.n_min, self.n_max + 1)
        }

    def update(self, context: list[int]) -> bool:
        """Index the context's new tokens; True when it no longer extends what was indexed
        and the index began again."""
        # a slice comparison: no array built from the whole context at every step
        restarted = context[: len(self.seen)] != self.seen
        if restarted:
            self.clear()
        for end in range(max(1, len(self.seen)), len(context)):
            for n, table in self.table.items():
                if end - n >= 0:
                    starts = table.setdefault(tuple(context[end - n : end]), [])
                    starts.append(end - n)
                    del starts[:-_KEEP_OCCURRENCES]
        self.seen.extend(context[len(self.seen):])
        return restarted

    def starts(self, tail: Sequence[int]) -> list[int]:
        """Where the n-gram `tail` (n_min to n_max tokens) occurred, oldest first."""
        return self.table[len(tail)].get(tuple(tail), [])


Agreement = Callable[[int, int], int]  # (start of an occurrence, n) -> tokens agreeing before


def agreement(context: list[int], start: int, n: int) -> int:
    """How many tokens before an occurrence at `start` equal those before the context's own
    last n tokens."""
    return run_back(context, start - 1, context, len(context) - n - 1, AGREEMENT_WINDOW)


def best_occurrence(index: NgramIndex, tail: list[int], agree: Agreement) -> Match | None:
    """The occurrence of the longest indexed n-gram that ends `tail` whose earlier tokens
    agree longest by `agree(start, n)`, the latest on a tie."""
    for n in range(min(index.n_max, len(tail) - 1), index.n_min - 1, -1):
        starts = index.starts(tail[-n:])
        if starts:
            best, agreed = starts[-1], -1
            for s in reversed(starts):
                a = agree(s, n)
                if a > agreed:
                    best, agreed = s, a
            return Match(best + n, n + agreed)
    return None


def find(index: NgramIndex, context: list[int]) -> Match | None:
    """Prompt lookup: the best match for a context its index holds."""
    return best_occurrence(index, context, lambda s, n: agreement(context, s, n))


def ranked_starts(index: NgramIndex, context: list[int], found: Match | None,
                  agree: Agreement) -> list[int]:
    """Starts of every remembered continuation, best first: `found`'s, then longer n-grams
    first, then by agreement before the occurrence, the latest first."""
    ranked: list[int] = [] if found is None else [found.start]
    for n in range(min(index.n_max, len(context) - 1), index.n_min - 1, -1):
        by_agreement = sorted(reversed(index.starts(context[-n:])), key=lambda s: -agree(s, n))
        ranked.extend(s + n for s in by_agreement if s + n not in ranked)
    return ranked


def kind_of(found: Match | None, prompt_length: int | None) -> DraftKind:
    """A copy of the prompt, of the output (its source lies past the prompt), or a guess."""
    if found is None:
        return NGRAM_COPY
    if found.anchor < STRONG_ANCHOR:
        return NGRAM_GUESS
    in_output = prompt_length is not None and found.start >= prompt_length
    return NGRAM_SELF if in_output else NGRAM_COPY


def copied(context: list[int], found: Match | None) -> int:
    """How many of the context's last tokens in a row equal the text a copy continues (the
    copy's evidence); 0 for a guess or no match."""
    if found is None or found.anchor < STRONG_ANCHOR:
        return 0
    return run_back(context, found.start - 1, context, len(context) - 1, AGREEMENT_WINDOW)


class Finder(Protocol):
    """What a LookupDrafter drafts from: a match for the context in the index, how the
    context agrees with an occurrence, what a match continues with, and the match's kind."""

    def reset(self) -> None:
        """The index began again: forget what was learnt of the last text."""
        ...

    def find(self, index: NgramIndex, context: list[int]) -> Match | None: ...

    def agreement(self, context: list[int], start: int, n: int) -> int: ...

    def continuation(self, context: list[int], start: int, k: int) -> list[int]:
        """Up to k tokens a match at `start` continues with (before the drafter's limit)."""
        ...

    def kind(self, context: list[int], found: Match | None,
             prompt_length: int | None) -> DraftKind: ...

    def copied(self, context: list[int], found: Match | None) -> int: ...


class NgramFinder:
    """The lookup alone: find(), and the continuation as it stands in the context."""

    def reset(self) -> None:
        return None

    def find(self, index: NgramIndex, context: list[int]) -> Match | None:
        return find(index, context)

    def agreement(self, context: list[int], start: int, n: int) -> int:
        return agreement(context, start, n)

    def continuation(self, context: list[int], start: int, k: int) -> list[int]:
        return context[start : start + k]

    def kind(self, context: list[int], found: Match | None,
             prompt_length: int | None) -> DraftKind:
        return kind_of(found, prompt_length)

    def copied(self, context: list[int], found: Match | None) -> int:
        return copied(context, found)


class LookupDrafter(Drafter):
    """Drafts what its finder finds in an index of the prompt and output. Its outlook names a
    copy (NGRAM_COPY, NGRAM_SELF) or a guess (NGRAM_GUESS), or the finder's own kinds.
    `limit` says how many of a continuation's tokens a draft may take (see block_limit)."""

    kind = NGRAM_COPY

    def __init__(self, finder: Finder, n_max: int = 6, n_min: int = 1,
                 limit: Callable[[list[int]], int] | None = None) -> None:
        self.name = "n-gram lookup"
        self.finder = finder
        self.index = NgramIndex(n_min, n_max)
        self.limit = limit
        self._prompt_length: int | None = None
        self._last: tuple[int, Match | None] = (-1, None)
        self._clear()

    @property
    def n_min(self) -> int:
        return self.index.n_min

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self._clear()
        self._prompt_length = len(prompt_ids)

    def _clear(self) -> None:
        self._prompt_length = None  # unknown without begin(): every source is the prompt
        self.index.clear()
        self.finder.reset()
        self._last = (-1, None)

    def outlook(self, context: list[int]) -> Outlook:
        found, copied = self.find(context), self.copied(context)
        if found is None:
            return Outlook(self.kind_for(context), copied)
        in_output = self._prompt_length is not None and found.start >= self._prompt_length
        source = COPIED_FROM_OUTPUT if in_output else COPIED_FROM_PROMPT
        return Outlook(self.kind_for(context), copied, copy=CopyEvidence(source, copied))

    def has_draft(self, context: list[int]) -> bool:
        return self.find(context) is not None

    def kind_for(self, context: list[int]) -> DraftKind:
        """Which kind of guess propose() would make now."""
        return self.finder.kind(context, self.find(context), self._prompt_length)

    def copied(self, context: list[int]) -> int:
        """How many of the context's last tokens in a row equal the text a copy continues
        (the copy's evidence); 0 for a guess or no match."""
        return self.finder.copied(context, self.find(context))

    def match(self, context: list[int]) -> int | None:
        """Start of the continuation of the best match, if any."""
        found = self.find(context)
        return None if found is None else found.start

    def find(self, context: list[int]) -> Match | None:
        """The best match for this context (computed once per context)."""
        if self._last[0] == len(context) and self.index.seen == context:
            return self._last[1]
        if self.index.update(context):
            self._clear()
            self.index.update(context)
        found = self.finder.find(self.index, context)
        self._last = (len(context), found)
        return found

    def ranked_matches(self, context: list[int]) -> list[int]:
        """Starts of every remembered continuation, best first (ranked_starts)."""
        return ranked_starts(self.index, context, self.find(context),
                             lambda s, n: self.finder.agreement(context, s, n))

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
        tokens = self.finder.continuation(context, start, k)
        return tokens if self.limit is None else tokens[: self.limit(tokens)]


class PromptLookup(LookupDrafter):
    """Prompt lookup as the paper has it (no edit layer)."""

    def __init__(self, n_max: int = 6, n_min: int = 1,
                 limit: Callable[[list[int]], int] | None = None) -> None:
        super().__init__(NgramFinder(), n_max, n_min, limit)
