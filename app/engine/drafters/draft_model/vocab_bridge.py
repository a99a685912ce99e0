"""The tokens two vocabularies share, by text, and the maps between their ids.

A token's text is compared as the bytes it stands for (app.models.token_bytes turns each
tokenizer's notation, byte-level BPE or SentencePiece, into bytes), so "Ġthe" in one
vocabulary and "▁the" in another are the same token " the". Special tokens have no text
and are never shared.

TLI (Timor et al., ICML 2025) drafts only among the shared tokens: the draft's processed
distribution over its own vocabulary, kept where the token is shared and renormalised there
(`restrict`), is carried to the target's ids (`target_row`); that row is exactly what the
drafted target token was drawn from, so the usual min(1, p/q) rule keeps the target's
distribution.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class VocabBridge:
    """Shared tokens, one per draft id: draft_ids[i] has the text of target_ids[i].

    draft_ids are distinct and ascending; target_ids may repeat where the draft has two
    tokens of one text (a SentencePiece byte token <0x41> beside "A")."""

    draft_ids: np.ndarray  # (S,) int64
    target_ids: np.ndarray  # (S,) int64
    draft_vocab: int  # tokens in the draft's vocabulary
    target_vocab: int  # tokens in the target's vocabulary

    @property
    def n_shared(self) -> int:
        return int(self.draft_ids.shape[0])

    @property
    def share_of_draft(self) -> float:
        """The fraction of the draft's tokens that the target has too."""
        return self.n_shared / self.draft_vocab if self.draft_vocab else 0.0

    def target_row(self, q_shared: np.ndarray, width: int) -> np.ndarray:
        """A distribution over the shared tokens (S,) as a row over `width` target ids."""
        return np.bincount(self.target_ids, weights=q_shared, minlength=width)[:width]

    def target_id(self, shared_index: int) -> int:
        return int(self.target_ids[shared_index])

    def draft_id(self, shared_index: int) -> int:
        return int(self.draft_ids[shared_index])


def restrict(q_draft: np.ndarray, bridge: VocabBridge) -> tuple[np.ndarray, float]:
    """The draft's distribution (V_draft,) kept on the shared tokens and renormalised there,
    as a row over the shared tokens (S,), and the mass it had outside them. All zeros when
    the draft put no mass on a shared token."""
    shared = np.asarray(q_draft[bridge.draft_ids], dtype=np.float64)
    inside = float(shared.sum())
    if inside <= 0.0:
        return np.zeros_like(shared), 1.0
    return shared / inside, max(0.0, 1.0 - inside)


def build_bridge(
    target_bytes: Sequence[bytes | None], draft_bytes: Sequence[bytes | None]
) -> VocabBridge:
    """Pair each draft token with the target token of the same bytes (None: a special token,
    never shared). Where the target has two tokens of one text, the later id wins: in a
    SentencePiece vocabulary that is the ordinary token "A" over the byte-fallback token
    <0x41> (byte tokens come first), the one its tokenizer produces."""
    by_text = {text: token_id for token_id, text in enumerate(target_bytes) if text}
    pairs = [(d, by_text[text]) for d, text in enumerate(draft_bytes)
             if text and text in by_text]
    draft_ids = np.array([d for d, _ in pairs], dtype=np.int64)
    target_ids = np.array([t for _, t in pairs], dtype=np.int64)
    return VocabBridge(draft_ids, target_ids, len(draft_bytes), len(target_bytes))
