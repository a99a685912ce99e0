"""A draft model with another vocabulary than the target's, and the `draft` entry of the
registry (a draft model of either vocabulary).

TLI (Timor et al., ICML 2025, "lossless speculative decoding for heterogeneous
vocabularies").

The draft runs on its own tokens: the target's context, as text, is tokenized by the draft
(ContextTranslator). At each position the draft's processed distribution is restricted to
the tokens both vocabularies share and renormalised there
(app.engine.drafters.draft_model.vocab_bridge); the
drafted token is drawn from that, and handed to the engine as the target token of the same
text, with q the same distribution over the target's ids. q is then exactly the distribution
the target token was drawn from, so the usual p/q rule keeps the target's distribution; a
greedy draft is the draft's best shared token.

String-level drafting (StringDrafter) from a draft model of any vocabulary (as
transformers' universal assisted generation): the draft continues the context's text
greedily with its own tokens, and that text is tokenized by the target.

The target's tokens for the context's text plus the drafted text must begin with its tokens
for the context's text alone; where they do not (the context's last token would merge with
the drafted text), nothing is drafted. The last target token is dropped: the drafted text
may end inside a word, and its last target token could be the prefix of a longer one.
The guess is a function of the context alone (the draft's argmax), so q is one-hot at each
drafted token and the usual rule keeps the target's output exact, greedy or sampled (as for
a lookup's guess); only a draft token the target's tokenizer spells identically can pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from app.engine.decode_config import NO_EARLY_STOP, DrafterOptions, StopRule, TreeShape
from app.engine.drafters import EMPTY_DRAFT, Budget, Draft, Drafter, DraftKind, Entry, common_prefix
from app.engine.drafters.draft_model import ModelDraft, ModelDrafter, branch_chain, vocab_bridge
from app.engine.drafters.draft_model.vocab_bridge import VocabBridge
from app.engine.protocol import LanguageModel
from app.engine.records import Translation
from app.engine.sampling import SamplingParams, finite_logits, process
from app.engine.tree import DraftTree
from app.errors import SettingsError

# a draft model of another vocabulary, drafting among the shared tokens: it pays a step per
# token and knows its q, as a same-vocabulary draft does; its prior is lower (tokens split
# differently, and the draft's mass outside the shared tokens is lost)
TLI = DraftKind("tli", free=False, prior=0.4, confident=True)


class ContextTranslator:
    """The target's context as the draft's tokens: its text, tokenized by the draft. The
    tokens the target's tokenizer adds to any text (its BOS) are left to the draft's own."""

    def __init__(self, target: LanguageModel, draft: LanguageModel) -> None:
        self.target = target
        self.draft = draft
        self._lead = target.tokenize("", add_special=True)

    def text(self, context: Sequence[int]) -> str:
        lead = len(self._lead)
        start = lead if list(context[:lead]) == self._lead else 0
        # a context ending inside a character leaves a replacement mark the draft would read
        return self.target.detokenize(context[start:]).rstrip("\ufffd")

    def draft_ids(self, context: Sequence[int]) -> list[int]:
        return self.draft.tokenize(self.text(context), add_special=True)


class ForeignDraftModel(Drafter):
    """A draft model of another vocabulary, kept in step with the target's context: its
    cache holds the draft's tokens for the context's text (ContextTranslator)."""

    def __init__(self, target: LanguageModel, model: LanguageModel) -> None:
        self.model = model
        self.target = target
        self.translator = ContextTranslator(target, model)
        self._cached: list[int] = []

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self.model.truncate(0)
        self._cached = []

    def _sync(self, context: list[int]) -> np.ndarray | None:
        """Bring the draft's cache to the context's text; the next-token logits, or None
        when the text gives the draft no token to start from or fills its context."""
        ids = self.translator.draft_ids(context)
        if not ids or len(ids) >= self.model.n_ctx - 1:
            return None
        keep = min(common_prefix(self._cached, ids), len(ids) - 1)
        self.model.truncate(keep)
        logits = finite_logits(self.model.extend(ids[keep:], 1)[0], self.model.name)
        self._cached = ids
        return logits

    def _step(self, token: int) -> np.ndarray:
        """Feed one drafted token of the draft's own; the next-token logits."""
        self._cached.append(token)
        return finite_logits(self.model.extend([token], 1)[0], self.model.name)


class TLIDrafter(ForeignDraftModel, ModelDraft):
    """A draft model of another vocabulary, drafting among the tokens both share."""

    kind = TLI

    def __init__(
        self,
        target: LanguageModel,
        model: LanguageModel,
        bridge: VocabBridge,
        rule: StopRule = NO_EARLY_STOP,
    ) -> None:
        super().__init__(target, model)
        self.bridge = bridge
        self.name = f"draft model ({model.name}, TLI)"
        self.rule = rule
        self._outside = 0.0
        self._translated: list[Translation] = []

    def _first(self, context: list[int], params: SamplingParams) -> np.ndarray | None:
        self._translated = []
        logits = self._sync(context) if self.bridge.n_shared else None
        return None if logits is None else self._shared(logits, params)

    def _next(self, chosen: int, params: SamplingParams) -> np.ndarray | None:
        if len(self._cached) + 1 >= self.model.n_ctx - 1:
            return None  # the draft's context is full
        return self._shared(self._step(self.bridge.draft_id(chosen)), params)

    def _shared(self, logits: np.ndarray, params: SamplingParams) -> np.ndarray | None:
        """The draft's processed row kept on the shared tokens, renormalised there (None
        where it puts no mass on them); the mass outside is kept for the record."""
        q_draft = process(logits[: self.bridge.draft_vocab], params)
        q_shared, self._outside = vocab_bridge.restrict(q_draft, self.bridge)
        return q_shared if q_shared.any() else None

    def _emit(self, chosen: int, q: np.ndarray) -> tuple[int, np.ndarray]:
        draft_token = self.bridge.draft_id(chosen)
        self._translated.append(Translation(self.model.token_text(draft_token), self._outside))
        return self.bridge.target_id(chosen), self.bridge.target_row(q, self.target.n_vocab)

    def _finish(self, tokens: list[int], rows: list[np.ndarray]) -> Draft:
        return Draft(tokens, np.stack(rows), translated=self._translated)

    def propose_tree(
        self, context: list[int], depth: int, shape: TreeShape, params: SamplingParams,
        rng: np.random.Generator,
    ) -> DraftTree:
        """The chain, with siblings drawn from each level's row over the target's ids (a
        sibling is a shared token, so its text is the draft's too)."""
        chain = self.propose(context, Budget(min(depth, shape.max_nodes)), params, rng)
        tree, levels = branch_chain(chain, shape, params, rng)
        chain_translated = chain.translated or []
        tree.translated = [
            chain_translated[level] if i < len(chain.tokens) else Translation(
                self.target.token_text(tree.tokens[i]), chain_translated[level].outside_mass)
            for i, level in enumerate(levels)
        ]
        return tree


# one guess per position, one-hot: no q to end a draft on its confidence
STRING = DraftKind("string", free=False, prior=0.4)


class StringDrafter(ForeignDraftModel):
    """A draft model of another vocabulary whose greedy text the target re-tokenizes."""

    kind = STRING

    def __init__(self, target: LanguageModel, model: LanguageModel) -> None:
        super().__init__(target, model)
        self.name = f"draft model ({model.name}, string-level)"

    def propose(
        self, context: list[int], budget: Budget, params: SamplingParams,
        rng: np.random.Generator,
    ) -> Draft:
        if budget.max_tokens <= 0:
            return EMPTY_DRAFT
        logits = self._sync(context)
        if logits is None:
            return EMPTY_DRAFT
        start = len(self._cached)
        # one draft token more than asked: the last target token is dropped
        while len(self._cached) - start <= budget.max_tokens:
            token = int(np.argmax(logits[: self.model.n_vocab]))
            if token in self.model.eos_ids or len(self._cached) >= self.model.n_ctx - 2:
                break
            logits = self._step(token)
        drafted = self._cached[start:]
        if not drafted:
            return EMPTY_DRAFT
        text = self.translator.text(context)
        new_text = _new_text(self.model, self._cached[:start], drafted)
        tokens = self._target_tokens(text, new_text)[: budget.max_tokens]
        if not tokens:
            return EMPTY_DRAFT
        return Draft(tokens, None, translated=self._translations(tokens, drafted))

    def _target_tokens(self, text: str, new_text: str) -> list[int]:
        """The target's tokens for new_text after text, or [] where the boundary moves."""
        before = self.target.tokenize(text, add_special=True)
        after = self.target.tokenize(text + new_text, add_special=True)
        if after[: len(before)] != before:
            return []
        return after[len(before): -1]

    def _translations(self, tokens: list[int], drafted: list[int]) -> list[Translation]:
        """For each target token, the draft tokens whose text overlaps its text."""
        spans = _spans([self.model.token_text(t) for t in drafted])
        out = []
        for start, end in _spans([self.target.token_text(t) for t in tokens]):
            parts = [self.model.token_text(drafted[i]) for i, (s, e) in enumerate(spans)
                     if s < max(end, start + 1) and e > start]
            out.append(Translation("|".join(parts)))
        return out


def _new_text(model: LanguageModel, before: list[int], drafted: list[int]) -> str:
    """The text the drafted tokens add after `before` (detokenized together, so a word-start
    space or a character split across tokens comes out as in the whole text)."""
    whole = model.detokenize([*before, *drafted])
    head = model.detokenize(before)
    if whole.startswith(head):
        return whole[len(head):].rstrip("\ufffd")
    return model.detokenize(drafted).rstrip("\ufffd")


def _spans(texts: list[str]) -> list[tuple[int, int]]:
    spans, at = [], 0
    for text in texts:
        spans.append((at, at + len(text)))
        at += len(text)
    return spans


class DraftModelSource(Protocol):
    """What a draft model's drafter reads of a run: the target, the draft model, and the
    bridge between their vocabularies where they differ (None where they are the same)."""

    @property
    def target(self) -> LanguageModel: ...

    def draft_model(self) -> LanguageModel: ...

    def bridge(self) -> VocabBridge | None: ...


CROSS_VOCAB_CHOICES = ("auto", "tli", "string")


def draft_model_drafter(sources: DraftModelSource, options: DrafterOptions, rule: StopRule,
                        fallback: bool) -> Drafter:
    """A draft model's drafter: of the target's vocabulary, or across vocabularies (TLI, or
    string-level as the cross_vocab option asks)."""
    target, draft, bridge = sources.target, sources.draft_model(), sources.bridge()
    if options.cross_vocab not in CROSS_VOCAB_CHOICES:
        raise SettingsError(f"unknown --cross-vocab {options.cross_vocab!r} — use "
                            f"{', '.join(CROSS_VOCAB_CHOICES)}")
    if bridge is None:
        if options.cross_vocab != "auto":
            raise SettingsError(f"--cross-vocab {options.cross_vocab} is for a draft with "
                                "another vocabulary; this draft shares the target's — drop "
                                "the flag")
        return ModelDrafter(draft, rule, target_vocab=target.n_vocab)
    if options.cross_vocab == "string":
        return StringDrafter(target, draft)
    return TLIDrafter(target, draft, bridge, rule)


ENTRY = Entry("draft", draft_model_drafter, lambda options, draft_file: draft_file)
