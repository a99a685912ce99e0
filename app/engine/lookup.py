"""Drafting by lookup: prompt lookup (n-gram), free, with q one-hot at each token."""

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
_AGREEMENT_WINDOW = 64
# a match anchored on at least this many tokens (the n-gram plus the agreeing tokens before
# it) is a copy; a shorter one a guess, whose acceptance the controller learns separately.
# One passed 4-token guess makes an edit's copy strong (at 8 it took two, each a pass of 5)
_STRONG_ANCHOR = 6

# The three kinds of guess a lookup makes, whose acceptance the controller learns apart:
# a guess (a short match) is trusted at even odds;
NGRAM_GUESS = DraftKind("ngram-weak", free=True, prior=0.5)
# a copy (anchored on at least _STRONG_ANCHOR agreeing tokens) continues with Laplace's
# rule-of-succession chance (6 + 1) / (6 + 2), and is a guess that kept agreeing, so it is
# accepted at least as often as the guesses are;
NGRAM_COPY = DraftKind("ngram", free=True, prior=0.875, at_least=NGRAM_GUESS)
# a copy resumed past the target's edit guesses where the edit ends: trusted less than a
# copy and more than a guess, until its own passes say
NGRAM_EDIT = DraftKind("ngram-edit", free=True, prior=0.75)


# Past the first disagreement, an edit may be skipped once: up to two tokens on either side
# (context, source), since a renamed identifier is often another number of tokens, if at
# least _AGREE_PAST_EDIT tokens agree beyond it. So a copy keeps its anchor, and its place
# in the source, across a rename.
_EDIT_SKIPS = ((1, 1), (2, 1), (1, 2), (2, 2), (1, 0), (0, 1), (2, 0), (0, 2))
_AGREE_PAST_EDIT = 4
# source tokens read beyond k, so a copy with renames applied still has k tokens
_RENAME_SLACK = 8


def _run_back(context: list[int], a: int, b: int, limit: int) -> int:
    """How many tokens agree going back from context[a] and context[b] (at most limit)."""
    return _run_back_between(context, a, context, b, limit)


def _run_back_between(one: list[int], a: int, other: list[int], b: int, limit: int) -> int:
    """How many tokens agree going back from one[a] and other[b] (at most limit)."""
    count = 0
    while count < limit and a >= 0 and b >= 0 and one[a] == other[b]:
        a, b, count = a - 1, b - 1, count + 1
    return count


def _replaced(tokens: list[int], edits: dict[tuple[int, ...], tuple[int, ...]]) -> list[int]:
    """The tokens with each occurrence of a key replaced by its value, left to right, the
    longest key first where several start at a token (an empty key replaces nothing)."""
    keys = sorted((old for old in edits if old), key=len, reverse=True)
    out: list[int] = []
    i = 0
    while i < len(tokens):
        for old in keys:
            new = edits[old]
            if tuple(tokens[i : i + len(old)]) == old:
                out.extend(new)
                i += len(old)
                break
        else:
            out.append(tokens[i])
            i += 1
    return out


def _agreement(context: list[int], start: int, n: int) -> int:
    """How many tokens before an occurrence at `start` equal those before the context's own
    last n tokens, allowing one edit (_EDIT_SKIPS)."""
    a, b = start - 1, len(context) - n - 1
    before = _run_back(context, a, b, _AGREEMENT_WINDOW)
    a, b = a - before, b - before  # the first disagreement
    beyond = 0
    for skip_context, skip_source in _EDIT_SKIPS:
        run = _run_back(context, a - skip_source, b - skip_context,
                        _AGREEMENT_WINDOW - before)
        if run >= _AGREE_PAST_EDIT:
            beyond = max(beyond, run)
    return before + beyond


@dataclass
class Match:
    start: int  # where the proposed continuation starts in the context
    # how many tokens before it agree with the context's last ones (with the known renames
    # undone in the context, for a match found through them)
    anchor: int
    # found past an edit the target just made (NgramDrafter._past_edit), not by an n-gram:
    # the source tokens it replaced and its own
    edit: tuple[tuple[int, ...], tuple[int, ...]] | None = None

    @property
    def past_edit(self) -> bool:
        return self.edit is not None


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


class NgramDrafter(Drafter):
    """Prompt lookup: find an earlier occurrence of the context's last n tokens and propose
    what followed it. q is one-hot, so no second model is needed.

    Its outlook names a copy (NGRAM_COPY: a long anchored match), a guess (NGRAM_GUESS: a
    short one), or a copy resumed past an edit the target just made (NGRAM_EDIT), so the
    controller learns each apart: long drafts while copying, little on a guess. An edit it
    resumed past (a rename) is applied again wherever the copy meets the old tokens.
    `limit` says how many of a continuation's tokens a draft may take (see block_limit)."""

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

    def _clear(self) -> None:
        self._seen: list[int] = []
        # n -> {ngram: start indexes of its last few occurrences}
        self._index: dict[int, dict[tuple[int, ...], list[int]]] = {
            n: {} for n in range(self.n_min, self.n_max + 1)
        }
        self._last: tuple[int, Match | None] = (-1, None)
        # edits the target made to a copy (source tokens -> its tokens), the latest per source
        # tokens: a copy applies them further on, so a renamed identifier passes every time
        self._renames: dict[tuple[int, ...], tuple[int, ...]] = {}
        self._undo: dict[tuple[int, ...], tuple[int, ...]] = {}  # _renames inverted
        # the last edit learnt, until the token after it shows where the copy went on:
        # (where its source tokens start, where its own start, source tokens, its tokens,
        # and what the source tokens were renamed to before it, if anything)
        self._unsettled: tuple[int, int, tuple[int, ...], tuple[int, ...],
                               tuple[int, ...] | None] | None = None

    def outlook(self, context: list[int]) -> Outlook:
        return Outlook(self.kind_for(context), self.copied(context))

    def kind_for(self, context: list[int]) -> DraftKind:
        """Which kind of guess propose() would make now."""
        found = self.find(context)
        if found is not None and found.past_edit:
            return NGRAM_EDIT
        if found is None or found.anchor >= _STRONG_ANCHOR:
            return NGRAM_COPY
        return NGRAM_GUESS

    def copied(self, context: list[int]) -> int:
        found = self.find(context)
        if found is None or found.past_edit or found.anchor < _STRONG_ANCHOR:
            return 0
        # the n-gram and the tokens before it, up to the first disagreement (no edit skipped)
        return _run_back(context, found.start - 1, len(context) - 1, _AGREEMENT_WINDOW)

    def match(self, context: list[int]) -> int | None:
        """Start of the continuation of the best n-gram match, if any."""
        found = self.find(context)
        return None if found is None else found.start

    def find(self, context: list[int]) -> Match | None:
        """The best match: the longest n that matches, and among its occurrences the one
        whose earlier tokens agree longest with the context's (so copying a repeated line
        follows the right copy; on a tie, the latest)."""
        if self._last[0] == len(context) and self._seen == context:
            return self._last[1]
        self._update(context)
        self._settle_edit(context)
        found = self._best_occurrence(context, lambda s, n: _agreement(context, s, n))
        if found is None or found.anchor < _STRONG_ANCHOR:
            resumed = self._past_edit(context) or self._through_renames(context)
            if resumed is not None:
                found = resumed
        self._last = (len(context), found)
        return found

    def _through_renames(self, context: list[int]) -> Match | None:
        """The copy the context continues once the edits the target made are undone in its
        last tokens: where a renamed name meets another edit within a few tokens (a rename
        that also reached a string key, `{"subtotal": subtotal`), neither an n-gram nor one
        skipped edit finds the source, which reads `{"total": total`. Found there, the
        continuation has the renames applied again by _continuation."""
        tail = context[-_AGREEMENT_WINDOW:]
        if not self._undo or not {new[0] for new in self._undo}.intersection(tail):
            return None
        undone = _replaced(tail, self._undo)
        if undone == tail:
            return None
        found = self._best_occurrence(undone, lambda s, n: _run_back_between(
            context, s - 1, undone, len(undone) - n - 1, _AGREEMENT_WINDOW))
        return found if found is not None and found.anchor >= _STRONG_ANCHOR else None

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

    def _past_edit(self, context: list[int]) -> Match | None:
        """Where a copy goes on after the target replaced its last one or two tokens (a
        rename): the occurrence of the tokens before them that agrees longest, resumed past
        one to two source tokens or none (_EDIT_SKIPS). None unless it is a long copy."""
        span = _AGREE_PAST_EDIT
        if span not in self._index:
            return None
        found = None
        for skip_context, skip_source in _EDIT_SKIPS:
            if skip_context == 0 or len(context) < skip_context + span + 1:
                continue
            end = len(context) - skip_context
            for s in self._index[span].get(tuple(context[end - span : end]), []):
                resume = s + span + skip_source
                replaced = context[s + span : resume]
                if resume >= end or replaced == context[end:] or self._ends_block(
                        [*context[end:], context[resume]]):
                    continue
                anchor = span + _run_back(context, s - 1, end - span - 1, _AGREEMENT_WINDOW)
                if anchor >= _STRONG_ANCHOR and (found is None or anchor > found.anchor):
                    found = Match(resume, anchor, (tuple(replaced), tuple(context[end:])))
        if found is not None and found.edit is not None:
            old, new = found.edit
            self._unsettled = (found.start - len(old), len(context) - len(new), old, new,
                               self._renames.get(old))
            self._learn_edit(old, new)
        return found

    def _learn_edit(self, old: tuple[int, ...], new: tuple[int, ...] | None) -> None:
        """Remember that the target writes `new` for the source's `old` (None: forget it)."""
        if not old:  # an insertion replaced nothing: nothing to make again
            return
        if new is None:
            self._renames.pop(old, None)
        else:
            self._renames[old] = new
        self._undo = {theirs: ours for ours, theirs in self._renames.items()}

    def _settle_edit(self, context: list[int]) -> None:
        """Replacing one source token or two by the target's may fit the tokens before
        equally well (`get_total` of two tokens renamed `total` of one); _past_edit takes
        the first of _EDIT_SKIPS. Once the target has written the token after its edit, the
        source tokens it replaced are those the source has before that token (renamed as
        known), and a wrong guess is replaced by them."""
        if self._unsettled is None:
            return
        source_at, new_at, old, new, before = self._unsettled
        after = new_at + len(new)
        if len(context) <= after:
            return
        self._unsettled = None
        self._learn_edit(old, before)  # the guess is judged on the renames known without it
        skips = sorted({skip for _, skip in _EDIT_SKIPS}, key=lambda skip: skip != len(old))
        for skip in skips:
            at = source_at + skip
            replaced = tuple(context[source_at:at])
            if at >= new_at or replaced == new:
                continue
            following = self._renamed(context[at : min(at + _RENAME_SLACK, new_at)])[0]
            if following == context[after] and not self._ends_block([*new, following]):
                self._learn_edit(replaced, new)
                return
        self._learn_edit(old, new)  # no skip fits: the copy did not go on; keep the guess

    def _ends_block(self, edit_and_next: list[int]) -> bool:
        """Whether the target's edit closed the block the copy was in (its fence, an end of
        generation): the copy then does not go on past it."""
        return self.limit is not None and self.limit(edit_and_next) < len(edit_and_next)

    def ranked_matches(self, context: list[int]) -> list[int]:
        """Starts of every remembered continuation, best first: find()'s match (which may
        be past an edit or through renames), then longer n-grams first, then by agreement
        before the occurrence, the latest first among equals."""
        found = self.find(context)
        ranked: list[int] = [] if found is None else [found.start]
        for n in range(min(self.n_max, len(context) - 1), self.n_min - 1, -1):
            starts = self._index[n].get(tuple(context[-n:]), [])
            by_agreement = sorted(reversed(starts), key=lambda s: -_agreement(context, s, n))
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
        if k <= 0:
            return EMPTY_DRAFT
        start = self.match(context)
        if start is None:
            return EMPTY_DRAFT
        return Draft(self._continuation(context, start, k), None)

    def _continuation(self, context: list[int], start: int, k: int) -> list[int]:
        tokens = self._renamed(context[start : start + k + _RENAME_SLACK])[:k]
        return tokens if self.limit is None else tokens[: self.limit(tokens)]

    def _renamed(self, tokens: list[int]) -> list[int]:
        """The tokens with every edit the target made to a copy applied again."""
        return _replaced(tokens, self._renames) if self._renames else tokens
