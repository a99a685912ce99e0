"""Prompt lookup that follows the target's edits of a copy (a layer over app.engine.drafters.lookup:
its own finder over the lookup's index, composed with the lookup for `--spec-type ngram`):
code asked back with a rename keeps its place in the source across the renamed tokens, and
applies the rename again wherever the copy meets the old tokens.

Past the first disagreement, an edit may be skipped once: up to two tokens on either side
(context, source), since a renamed identifier is often another number of tokens, if at least
AGREE_PAST_EDIT tokens agree beyond it. A copy resumed past an edit the target just made is
its own kind (NGRAM_EDIT): it guesses where the edit ends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from app.engine.decode_config import DrafterOptions, StopRule
from app.engine.drafters import DraftKind, Entry
from app.engine.drafters.lookup import (
    AGREEMENT_WINDOW,
    STRONG_ANCHOR,
    LookupDrafter,
    Match,
    NgramIndex,
    best_occurrence,
    block_limit,
    copied,
    kind_of,
    run_back,
)
from app.engine.protocol import LanguageModel

# learnt apart from copies and guesses, from the free kinds' prior (docs/ablation.md)
NGRAM_EDIT = DraftKind("ngram-edit", free=True)

EDIT_SKIPS = ((1, 1), (2, 1), (1, 2), (2, 2), (1, 0), (0, 1), (2, 0), (0, 2))
AGREE_PAST_EDIT = 4
# source tokens read beyond k, so a copy with renames applied still has k tokens
RENAME_SLACK = 8

Tokens = tuple[int, ...]


def replaced(tokens: list[int], edits: dict[Tokens, Tokens]) -> list[int]:
    """The tokens with each occurrence of a key replaced by its value, left to right, the
    longest key first where several start at a token (an empty key replaces nothing)."""
    by_first: dict[int, list[Tokens]] = {}
    for old in sorted((old for old in edits if old), key=len, reverse=True):
        by_first.setdefault(old[0], []).append(old)
    out: list[int] = []
    i = 0
    while i < len(tokens):
        for old in by_first.get(tokens[i], ()):
            if tuple(tokens[i : i + len(old)]) == old:
                out.extend(edits[old])
                i += len(old)
                break
        else:
            out.append(tokens[i])
            i += 1
    return out


def renamed_by(tokens: list[int], edits: dict[Tokens, Tokens]) -> list[int]:
    """replaced(), or the tokens themselves where no key can start in them (the common case,
    checked first since it is checked every step)."""
    if not edits or not {old[0] for old in edits if old} & set(tokens):
        return tokens
    return replaced(tokens, edits)


@dataclass
class EditMatch(Match):
    """A match found past an edit the target just made: the source tokens it replaced, and
    the target's own."""

    old: Tokens = ()
    new: Tokens = ()


@dataclass
class _Unsettled:
    """The last edit learnt, until the token after it shows where the copy went on."""

    source_at: int  # where its source tokens start
    new_at: int  # where the target's own start
    old: Tokens
    new: Tokens
    before: Tokens | None  # what the source tokens were renamed to before it, if anything


class EditFinder:
    """The edit layer: finds a copy past the target's edits in the lookup's index, and
    applies its renames to what a copy continues with (a Finder, app.engine.drafters.lookup).
    `limit` is the drafter's: an edit that closed the copy's block does not resume it."""

    def __init__(self, limit: Callable[[list[int]], int] | None = None) -> None:
        self.limit = limit
        self.reset()

    def reset(self) -> None:
        # edits the target made to a copy (source tokens -> its tokens), the latest per source
        # tokens: a copy applies them further on, so a renamed identifier passes every time
        self._renames: dict[Tokens, Tokens] = {}
        self._undo: dict[Tokens, Tokens] = {}  # _renames inverted
        self._unsettled: _Unsettled | None = None

    def kind(self, context: list[int], found: Match | None,
             prompt_length: int | None) -> DraftKind:
        return NGRAM_EDIT if isinstance(found, EditMatch) else kind_of(found, prompt_length)

    def copied(self, context: list[int], found: Match | None) -> int:
        return 0 if isinstance(found, EditMatch) else copied(context, found)

    def find(self, index: NgramIndex, context: list[int]) -> Match | None:
        found = best_occurrence(index, context, lambda s, n: self.agreement(context, s, n))
        self._settle_edit(context)
        if found is None or found.anchor < STRONG_ANCHOR:
            resumed = self._past_edit(index, context) or self._through_renames(index, context)
            if resumed is not None:
                return resumed
        return found

    def agreement(self, context: list[int], start: int, n: int) -> int:
        """As the lookup's, allowing one edit (EDIT_SKIPS)."""
        a, b = start - 1, len(context) - n - 1
        before = run_back(context, a, context, b, AGREEMENT_WINDOW)
        a, b = a - before, b - before  # the first disagreement
        beyond = 0
        for skip_context, skip_source in EDIT_SKIPS:
            run = run_back(context, a - skip_source, context, b - skip_context,
                           AGREEMENT_WINDOW - before)
            if run >= AGREE_PAST_EDIT:
                beyond = max(beyond, run)
        return before + beyond

    def _through_renames(self, index: NgramIndex, context: list[int]) -> Match | None:
        """The copy the context continues once the edits the target made are undone in its
        last tokens: where a renamed name meets another edit within a few tokens (a rename
        that also reached a string key, `{"subtotal": subtotal`), neither an n-gram nor one
        skipped edit finds the source, which reads `{"total": total`. Found there, the
        continuation has the renames applied again (continuation)."""
        tail = context[-AGREEMENT_WINDOW:]
        if not self._undo or not {new[0] for new in self._undo}.intersection(tail):
            return None
        undone = replaced(tail, self._undo)
        if undone == tail:
            return None
        found = best_occurrence(index, undone, lambda s, n: run_back(
            context, s - 1, undone, len(undone) - n - 1, AGREEMENT_WINDOW))
        return found if found is not None and found.anchor >= STRONG_ANCHOR else None

    def _past_edit(self, index: NgramIndex, context: list[int]) -> Match | None:
        """Where a copy goes on after the target replaced its last one or two tokens (a
        rename): the occurrence of the tokens before them that agrees longest, resumed past
        one to two source tokens or none (EDIT_SKIPS). None unless it is a long copy."""
        span = AGREE_PAST_EDIT
        if not index.n_min <= span <= index.n_max:
            return None
        found: EditMatch | None = None
        for skip_context, skip_source in EDIT_SKIPS:
            if skip_context == 0 or len(context) < skip_context + span + 1:
                continue
            end = len(context) - skip_context
            for s in index.starts(context[end - span : end]):
                resume = s + span + skip_source
                old = context[s + span : resume]
                if resume >= end or old == context[end:] or self._ends_block(
                        [*context[end:], context[resume]]):
                    continue
                anchor = span + run_back(context, s - 1, context, end - span - 1,
                                         AGREEMENT_WINDOW)
                if anchor >= STRONG_ANCHOR and (found is None or anchor > found.anchor):
                    found = EditMatch(resume, anchor, tuple(old), tuple(context[end:]))
        if found is not None:
            self._unsettled = _Unsettled(found.start - len(found.old),
                                         len(context) - len(found.new), found.old, found.new,
                                         self._renames.get(found.old))
            self._learn_edit(found.old, found.new)
        return found

    def _learn_edit(self, old: Tokens, new: Tokens | None) -> None:
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
        the first of EDIT_SKIPS. Once the target has written the token after its edit, the
        source tokens it replaced are those the source has before that token (renamed as
        known), and a wrong guess is replaced by them."""
        edit = self._unsettled
        if edit is None or len(context) <= edit.new_at + len(edit.new):
            return
        after = edit.new_at + len(edit.new)
        self._unsettled = None
        self._learn_edit(edit.old, edit.before)  # judged on the renames known without it
        skips = sorted({skip for _, skip in EDIT_SKIPS}, key=lambda skip: skip != len(edit.old))
        for skip in skips:
            at = edit.source_at + skip
            old = tuple(context[edit.source_at : at])
            if at >= edit.new_at or old == edit.new:
                continue
            following = self.renamed(context[at : min(at + RENAME_SLACK, edit.new_at)])[0]
            if following == context[after] and not self._ends_block([*edit.new, following]):
                self._learn_edit(old, edit.new)
                return
        self._learn_edit(edit.old, edit.new)  # no skip fits: the copy did not go on

    def _ends_block(self, edit_and_next: list[int]) -> bool:
        """Whether the target's edit closed the block the copy was in (its fence, an end of
        generation): the copy then does not go on past it."""
        return self.limit is not None and self.limit(edit_and_next) < len(edit_and_next)

    def continuation(self, context: list[int], start: int, k: int) -> list[int]:
        return self.renamed(context[start : start + k + RENAME_SLACK])[:k]

    def renamed(self, tokens: list[int]) -> list[int]:
        """The tokens with every edit the target made to a copy applied again."""
        return renamed_by(tokens, self._renames)




class EditAwareLookup(LookupDrafter):
    """Prompt lookup that resumes a copy past the target's edits and applies its renames:
    the lookup with the edit layer (EditFinder) as its finder."""

    def __init__(self, n_max: int = 6, n_min: int = 1,
                 limit: Callable[[list[int]], int] | None = None) -> None:
        self.edits = EditFinder(limit)
        super().__init__(self.edits, n_max, n_min, limit)

    def renamed(self, tokens: list[int]) -> list[int]:
        """The tokens with every edit the target made to a copy applied again."""
        return self.edits.renamed(tokens)


NGRAM_LABEL = "n-gram lookup"


class TargetSource(Protocol):
    @property
    def target(self) -> LanguageModel: ...


def ngram_drafter(sources: TargetSource, options: DrafterOptions, rule: StopRule,
                  fallback: bool) -> LookupDrafter:
    """The lookup composed with the edit layer, its copies kept within a block
    (lookup.block_limit). With a drafter behind it, a one-token match is left to that one
    (n-grams of 2 and more)."""
    limit = block_limit(sources.target)
    return LookupDrafter(EditFinder(limit), n_min=2 if fallback else 1, limit=limit)


ENTRY = Entry("ngram", ngram_drafter, lambda options, draft_file: NGRAM_LABEL, free=True)
