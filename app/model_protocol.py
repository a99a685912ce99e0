"""What the engine needs from a loaded model. Backends satisfy it structurally."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np


class LanguageModel(Protocol):
    backend: str
    device: str
    name: str
    n_vocab: int
    n_ctx: int
    eos_ids: frozenset[int]

    @property
    def n_cached(self) -> int:
        """Tokens currently held in the KV cache."""
        ...

    def tokenize(self, text: str, add_special: bool = True) -> list[int]: ...

    def detokenize(self, ids: Sequence[int]) -> str: ...

    def token_text(self, token: int) -> str: ...

    def extend(self, ids: Sequence[int], n_logits: int) -> np.ndarray:
        """Append ids to the cache; return logits (n_logits, n_vocab) for the last positions."""
        ...

    def truncate(self, n: int) -> None:
        """Roll the cache back to its first n tokens."""
        ...

    def close(self) -> None: ...
