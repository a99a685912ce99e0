"""Self-speculation: the target drafts for itself with a set of its layers skipped (its
first layer, its final norm and output head kept), chosen by measurement on the run's text or
given by hand (app.engine.drafters.self_skip says how the set is chosen and written).

The skipped model drafts as any draft model does (app.engine.drafters.draft_model's
ModelDrafter). Where it runs inside the target's own forward and KV cache (torch: a
BorrowingDraft), the target's cache holds the committed text, so the draft starts from the
target's tokens, and drops what it appended before the target verifies. Elsewhere
(llama.cpp: a file of the kept blocks) it keeps a cache of its own, as a draft model does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from app.engine.decode_config import DrafterOptions, StopRule
from app.engine.drafters import Budget, Draft, Entry
from app.engine.drafters.draft_model import ModelDrafter
from app.engine.drafters.self_skip import SkipChoice, parse_skip
from app.engine.protocol import BorrowingDraft, LanguageModel
from app.engine.sampling import SamplingParams
from app.errors import SettingsError

AUTO = "auto"  # --self-skip: chosen by measurement on the run's text (the default)


class SelfDraftSource(Protocol):
    """What a self-draft reads of a run: the target, the skipped model of a set, and the
    figures that set was chosen by."""

    @property
    def target(self) -> LanguageModel: ...

    def self_draft(self, skip: str) -> LanguageModel: ...

    def skip_choice(self, skip: str) -> SkipChoice | None: ...


class SelfDrafter(ModelDrafter):
    """The skipped model drafting; its final-norm states are kept, to compare with the
    target's (app.engine.similarity)."""

    def __init__(self, model: LanguageModel, rule: StopRule, target_vocab: int) -> None:
        super().__init__(model, rule, target_vocab=target_vocab, with_hidden=True)
        self.borrows = isinstance(model, BorrowingDraft)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        if not self.borrows:
            super().begin(prompt_ids)  # its own cache takes the prompt now
        # else the target's prefill is its cache too

    def _first(self, context: list[int], params: SamplingParams) -> np.ndarray | None:
        if self.borrows:  # what the target holds is the draft's: only the rest is passed
            self._cached = list(context[: self.model.n_cached])
        return super()._first(context, params)

    def propose(self, context: list[int], budget: Budget, params: SamplingParams,
                rng: np.random.Generator) -> Draft:
        try:
            return super().propose(context, budget, params, rng)
        finally:
            if isinstance(self.model, BorrowingDraft):
                self.model.release()


def is_auto(skip: str) -> bool:
    return skip in ("", AUTO)


def self_label(options: DrafterOptions, draft_file: str = "") -> str:
    if is_auto(options.skip):
        return "self-draft (layers to skip chosen on the prompt)"
    return f"self-draft (skips layers {options.skip})"


def self_drafter(sources: SelfDraftSource, options: DrafterOptions, rule: StopRule,
                 fallback: bool) -> SelfDrafter:
    if is_auto(options.skip):
        raise SettingsError("the self-draft's layers are chosen on the prompt before a run "
                            "(draftlens run and bench do so); here give them by hand: "
                            "--self-skip 6-11,15-20 (run prints the set it chose)")
    drafter = SelfDrafter(sources.self_draft(options.skip), rule, sources.target.n_vocab)
    choice = sources.skip_choice(options.skip)
    drafter.name = choice.label() if choice is not None else self_label(options)
    return drafter


def _self_needs(options: DrafterOptions) -> str:
    """What is wrong with the options as given (the set's layers are checked against the
    target's once it is known: parse_skip with n_layers)."""
    if not 0.0 < options.skip_cost < 1.0:
        return (f"--self-cost is the self-draft's cost in target steps the search aims for, "
                f"between 0 and 1 (got {options.skip_cost})")
    if not is_auto(options.skip):
        try:
            parse_skip(options.skip)
        except SettingsError as exc:
            return str(exc)
    return ""


ENTRY = Entry("self", self_drafter, self_label, needs=_self_needs)
