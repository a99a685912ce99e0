"""String-level drafting from a draft model of any vocabulary (as transformers' universal
assisted generation): the draft continues the context's text greedily with its own tokens,
and that text is tokenized by the target.

The target's tokens for the context's text plus the drafted text must begin with its tokens
for the context's text alone; where they do not (the context's last token would merge with
the drafted text), nothing is drafted. The last target token is dropped: the drafted text
may end inside a word, and its last target token could be the prefix of a longer one.
The guess is a function of the context alone (the draft's argmax), so q is one-hot at each
drafted token and the usual rule keeps the target's output exact, greedy or sampled (as for
a lookup's guess); only a draft token the target's tokenizer spells identically can pass.
"""

from __future__ import annotations

import numpy as np

from app.engine.cross_vocab import ForeignDraftModel
from app.engine.drafters import EMPTY_DRAFT, Budget, Draft, DraftKind
from app.engine.protocol import LanguageModel
from app.engine.records import Translation
from app.engine.sampling import SamplingParams

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
