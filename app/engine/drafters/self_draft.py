"""Self-speculative decoding: the target's own first N layers draft (their final-norm
outputs through the target's head), through the draft model's loop (ModelDrafter)."""

from __future__ import annotations

from typing import Protocol

from app.engine.decode_config import DrafterOptions, StopRule
from app.engine.drafters import Entry
from app.engine.drafters.draft_model import ModelDrafter
from app.engine.protocol import LanguageModel


class SelfDraftSource(Protocol):
    """What a self-draft reads of a run: the target, and its first N layers as a model."""

    @property
    def target(self) -> LanguageModel: ...

    def self_draft(self, n_layers: int) -> LanguageModel: ...


def self_draft_label(n_layers: int) -> str:
    return f"self-draft (first {n_layers} layers)"


def self_drafter(sources: SelfDraftSource, options: DrafterOptions, rule: StopRule,
                 fallback: bool) -> ModelDrafter:
    """The target's own first N layers drafting; its final-norm states are kept, to compare
    with the target's (app.engine.similarity)."""
    drafter = ModelDrafter(sources.self_draft(options.layers), rule,
                           target_vocab=sources.target.n_vocab, with_hidden=True)
    drafter.name = self_draft_label(options.layers)
    return drafter


def _self_needs(options: DrafterOptions) -> str:
    return "" if options.layers > 0 else ("self drafts with the target's first N layers — "
                                          "add --self-draft-layers N")


ENTRY = Entry("self", self_drafter, lambda options, draft_file: self_draft_label(
    options.layers), needs=_self_needs)
