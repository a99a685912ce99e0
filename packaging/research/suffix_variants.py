"""The suffix-decoding variants replay_suffix.py compares: the app's drafter and controller,
and changes to either that were measured against them (kept here so a claim about one can be
checked again; see the commit messages for the figures)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_lookup import DEMO_CURVE  # noqa: E402

from app.engine.adaptive import DraftLengthController  # noqa: E402
from app.engine.controller_options import ControllerOptions  # noqa: E402
from app.engine.cost_curve import VerifyCostCurve  # noqa: E402
from app.engine.decode_config import SuffixOptions  # noqa: E402
from app.engine.drafters import Budget, Draft, Drafter, DraftKind, Outlook  # noqa: E402
from app.engine.drafters.lookup import NGRAM_COPY  # noqa: E402
from app.engine.drafters.lookup.edits import EditAwareLookup  # noqa: E402
from app.engine.drafters.suffix import SUFFIX_COPY, SUFFIX_GUESS, SuffixDrafter  # noqa: E402
from app.engine.drafters.suffix.index import CandidateTree  # noqa: E402
from app.engine.drafters.suffix.retry_copy import RETRY_COPY  # noqa: E402
from app.engine.drafters.suffix.token_buffer import SEPARATOR  # noqa: E402
from app.engine.drafters.suffix.tree import SuffixTree  # noqa: E402
from app.engine.records import COPIED_FROM_MEMORY, COPIED_FROM_PROMPT  # noqa: E402

Limit = Callable[[list[int]], int] | None
Pair = tuple[SuffixDrafter, DraftLengthController]


class EvidenceInPlace(DraftLengthController):
    """The rule before: a copy's run replaced the kind's pooled counts when it said more."""

    def _lift(self, kind: DraftKind, copied: int) -> None:
        super()._lift(kind, 0)
        if copied:
            run = min(float(copied), self.options.pool_memory)
            self.estimates[kind.name].raise_pool(run, run)


class NoRunEvidence(DraftLengthController):
    """Acceptance learnt from verdicts only."""

    def _lift(self, kind: DraftKind, copied: int) -> None:
        super()._lift(kind, 0)


class UntilJudged(DraftLengthController):
    """The run counts only until the kind's own verdicts have judged this many tokens."""

    judged = 8.0

    def _lift(self, kind: DraftKind, copied: int) -> None:
        seen = self.estimates[kind.name].pool_seen
        super()._lift(kind, copied if seen < self.judged else 0)


class ByMatch(SuffixDrafter):
    """A kind per class of match length (at least each bound), each learnt apart."""

    def __init__(self, *args: Any, bounds: tuple[int, ...] = (2, 6, 16), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.classes: list[tuple[int, DraftKind]] = []
        weaker = None
        for b in bounds:
            weaker = DraftKind(f"suffix-{b}", free=True)
            self.classes.append((b, weaker))

    def outlook(self, context: list[int]) -> Outlook:
        seen = super().outlook(context)
        if seen.kind is RETRY_COPY:
            return seen
        match = self.match_length(context)
        kind = [k for i, (b, k) in enumerate(self.classes) if match >= b or i == 0][-1]
        return Outlook(kind, seen.copied, seen.available)


RECALL = DraftKind("suffix-recall", free=True)


class PromptFactor(SuffixDrafter):
    """Only a copy of the prompt may draft `factor` * m tokens, others m."""

    def _likeliest(self, context: list[int]) -> tuple[CandidateTree, int]:
        tree, kept = super()._likeliest(context)
        if tree.tokens and tree.node(0).label.kind != COPIED_FROM_PROMPT:
            kept = min(kept, tree.match)
        return tree, kept


class BySource(PromptFactor):
    """A copy of the prompt (SUFFIX_COPY) apart from one recalled from an earlier run or this
    output (RECALL)."""

    def outlook(self, context: list[int]) -> Outlook:
        seen = super().outlook(context)
        tree, _ = self._likeliest(context)
        if seen.kind is SUFFIX_COPY and tree.node(0).label.kind != COPIED_FROM_PROMPT:
            return Outlook(RECALL, seen.copied, seen.available)
        return seen


def variant(drafter: type[SuffixDrafter] = SuffixDrafter,
            controller: type[DraftLengthController] = DraftLengthController,
            factor: float = 1.0, **options: Any) -> Callable[[SuffixTree, Limit, int], Pair]:
    def make(memory: SuffixTree, limit: Limit, draft_max: int) -> Pair:
        return (drafter(memory, limit=limit, options=SuffixOptions(factor=factor, **options)),
                controller(draft_max, adaptive=True, curve=VerifyCostCurve(dict(DEMO_CURVE)),
                           free_kinds_shadowed=True))
    return make


VARIANTS: dict[str, Callable[[SuffixTree, Limit, int], Pair]] = {
    "app": variant(),
    "factor 2": variant(factor=2), "factor 4": variant(factor=4),
    "factor 16": variant(factor=16),
    "evidence in place": variant(controller=EvidenceInPlace),
    "until judged": variant(controller=UntilJudged),
    "no run evidence": variant(controller=NoRunEvidence),
    "by match 2/6/16": variant(ByMatch),
    "by source": variant(BySource), "by source, prompt f4": variant(BySource, factor=4),
    "prompt f2": variant(PromptFactor, factor=2), "prompt f4": variant(PromptFactor, factor=4),
    "prompt f16": variant(PromptFactor, factor=16),
    "min prob 0.3": variant(min_prob=0.3), "min prob 0.5": variant(min_prob=0.5),
    "offset 1": variant(offset=1.0),
}


class MemoryLookup(Drafter):
    """The edit-aware prompt lookup (--ngram's) reading the earlier runs as if they came
    before the prompt, for every copy: copies from memory follow the target's renames as
    copies from the prompt do. Its oracle is the highest (repetitive 1.375x against the app's
    1.275x, edit 1.92x), but no controller here earned it: 0.86-0.99x on the repetitive suite,
    its recalled copies drafting long and breaking at the first differing value."""

    kind = NGRAM_COPY
    cost_hint = 0.0

    def __init__(self, memory: SuffixTree, limit: Limit = None, **_: Any) -> None:
        self.name = "memory lookup"
        self.prefix = [t for seq in memory.seqs.values() for t in (*seq, SEPARATOR)]

        def cut(draft: list[int]) -> int:
            n = draft.index(SEPARATOR) if SEPARATOR in draft else len(draft)
            return n if limit is None else min(n, limit(draft[:n]) if n else 0)

        self.inner = EditAwareLookup(limit=cut)

    def begin(self, prompt_ids: Any) -> None:
        self.inner.begin([*self.prefix, *prompt_ids])

    def outlook(self, context: list[int]) -> Outlook:
        return self.inner.outlook([*self.prefix, *context])

    def match_length(self, context: list[int]) -> int:
        found = self.inner.find([*self.prefix, *context])
        return 0 if found is None else found.anchor

    def propose(self, context: list[int], budget: Budget, params: Any, rng: Any) -> Draft:
        return self.inner.propose([*self.prefix, *context], budget, params, rng)

    def accept(self, context: list[int], hidden: Any) -> None:
        self.inner.accept([*self.prefix, *context], hidden)


def small_probes(base: type[DraftLengthController], top: int) -> type[DraftLengthController]:
    class SmallProbe(base):  # type: ignore[valid-type,misc]
        """A probe drafts at most `top` tokens: it asks whether the kind passes again, at the
        price of a small pass."""

        def could_pay(self, kind: DraftKind, limit: int | None = None) -> int:
            return min(top, super().could_pay(kind, limit))
    return SmallProbe


def lookup_variant(controller: type[DraftLengthController] = DraftLengthController
                   ) -> Callable[[SuffixTree, Limit, int], Any]:
    def make(memory: SuffixTree, limit: Limit, draft_max: int) -> Any:
        return (MemoryLookup(memory, limit),
                controller(draft_max, adaptive=True, curve=VerifyCostCurve(dict(DEMO_CURVE)),
                           free_kinds_shadowed=True))
    return make


VARIANTS["memory lookup"] = lookup_variant()
VARIANTS["memory lookup, no run evidence"] = lookup_variant(NoRunEvidence)
for _top in (1, 2):
    VARIANTS[f"probe {_top}"] = variant(controller=small_probes(DraftLengthController, _top))


def with_margin(base: type[DraftLengthController], margin: float) -> type[DraftLengthController]:
    class Margin(base):  # type: ignore[valid-type,misc]
        """Draft only where the expected rate beats plain decoding's by `margin`."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs,
                             options=ControllerOptions(min_gain=1 + margin))
    return Margin


for _margin in (0.03, 0.05, 0.1):
    VARIANTS[f"margin {_margin}"] = variant(controller=with_margin(DraftLengthController,
                                                                   _margin))
    VARIANTS[f"margin {_margin}, probe 1"] = variant(controller=with_margin(
        small_probes(DraftLengthController, 1), _margin))


def with_options(**options: float) -> type[DraftLengthController]:
    class Options(DraftLengthController):
        """The app's controller with some of its constants (ControllerOptions) moved."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs, options=ControllerOptions(**options))
    return Options


# the estimate's constants moved (on the Xeon's huge-pages curve: pool memory 64 and 128
# replayed 69% and 70% of the oracle's gain on the repetitive session against the app's 68%,
# but 59% against 61% on the EPYC Zen 5's; docs/benchmarks.md)
for _name, _options in {"pool memory 64": {"pool_memory": 64.0},
                        "pool memory 128": {"pool_memory": 128.0},
                        "position decay 0.9": {"position_decay": 0.9},
                        "copy rate tokens 8": {"copy_rate_tokens": 8.0}}.items():
    VARIANTS[_name] = variant(controller=with_options(**_options))


class LongestMatchKind(SuffixDrafter):
    """The kind and the copy's evidence from the longest match found, not the match of the
    best-scoring candidate. Replayed: no change (1.105x either way over the repetitive
    suite's first 4 tasks, code 0.999x either way)."""

    def outlook(self, context: list[int]) -> Outlook:
        seen = super().outlook(context)
        if seen.kind not in (SUFFIX_COPY, SUFFIX_GUESS) or not seen.available:
            return seen
        match = self.match_length(context)
        kind = SUFFIX_COPY if match >= 6 else SUFFIX_GUESS
        return Outlook(kind, match if kind is SUFFIX_COPY else 0, seen.available)


VARIANTS["longest match kind"] = variant(LongestMatchKind)


class LongerRecall(SuffixDrafter):
    """A copy recalled from an earlier answer goes first where its match is longer than the
    prompt copy's anchor (a retried request: the earlier answer went on past the edit where
    the prompt's text does not). Replayed on this machine's curve, draft-max 64: verbatim
    2.701x -> 2.780x before the retry copy (app.engine.drafters.suffix.retry_copy), 2.996x ->
    2.984x with
    it; edits 3.014x -> 3.000x. Not adopted: the retry copy takes its gain."""

    margin = 0

    def _copy_of_prompt(self, context: list[int]) -> Outlook | None:
        seen = super()._copy_of_prompt(context)
        if seen is None:
            return None
        found = self._prompt_copy.find(context)
        tree, available = self._likeliest(context)
        if (available and tree.tokens and tree.node(0).label.kind == COPIED_FROM_MEMORY
                and found is not None and tree.match > found.anchor + self.margin):
            return None
        return seen


VARIANTS["longer recall"] = variant(LongerRecall)
