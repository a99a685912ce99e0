"""Drafting with the target's own multi-token-prediction (MTP / NextN) layers.

The MTP block turns the target's hidden state at the last emitted token (with that token's
embedding) into a distribution for the token after it, and then its own state with each
drafted token into the next (llama.cpp's draft-mtp). Each drafted token is drawn from the
block's processed row, with the target's sampling transforms: that row is the q the verifier
tests, so the p/q rule stays exact. Its cost is a pass of one block per drafted token (plus
the catch-up over the tokens the target accepted), which the controller measures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from app.engine.decode_config import NO_EARLY_STOP, DrafterOptions, StopRule
from app.engine.drafters import Draft, DraftKind, Entry
from app.engine.drafters.draft_model import ModelDraft
from app.engine.protocol import LanguageModel, MtpHeads, MtpModel
from app.engine.sampling import SamplingParams, finite_logits, process
from app.errors import SettingsError

# one small block per drafted token, with a q per token (so its draft may end on its own
# confidence); trained for the next-but-one token, so a prior like a good draft model's
DRAFT_MTP = DraftKind("mtp", free=False, prior=0.6, confident=True)
OWN_MTP_LABEL = "its own MTP layers"


class MtpDrafter(ModelDraft):
    kind = DRAFT_MTP

    def __init__(self, heads: MtpHeads, label: str = "", rule: StopRule = NO_EARLY_STOP,
                 eos_ids: frozenset[int] = frozenset()) -> None:
        self.heads = heads
        self.name = label or f"MTP layers ({heads.n_heads})"
        self.rule = rule
        self.eos_ids = eos_ids

    @property
    def ends(self) -> frozenset[int]:
        return self.eos_ids

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self.heads.reset()

    def _first(self, context: list[int], params: SamplingParams) -> np.ndarray | None:
        logits = self.heads.start(context)
        return None if logits is None else process(finite_logits(logits, self.name), params)

    def _next(self, chosen: int, params: SamplingParams) -> np.ndarray:
        return process(finite_logits(self.heads.step(chosen), self.name), params)

    def _finish(self, tokens: list[int], rows: list[np.ndarray]) -> Draft:
        # one trained head drafts every position (head 0), as in llama.cpp for one block
        return Draft(tokens, np.stack(rows), heads=[0] * len(tokens))


class TargetSource(Protocol):
    """What the MTP drafter reads of a run: the target (loaded with its MTP layers)."""

    @property
    def target(self) -> LanguageModel: ...


def mtp_drafter(sources: TargetSource, options: DrafterOptions, rule: StopRule,
                fallback: bool) -> MtpDrafter:
    target = sources.target
    if not isinstance(target, MtpModel):
        raise SettingsError(f"{target.name} was not loaded with its MTP layers — load it "
                            "again with --spec-type mtp (llama.cpp backend)")
    return MtpDrafter(target.mtp_heads(), f"own MTP layers ({target.n_mtp_heads})", rule,
                      eos_ids=target.eos_ids)


ENTRY = Entry("mtp", mtp_drafter, lambda options, draft_file: OWN_MTP_LABEL)
