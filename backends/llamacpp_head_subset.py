"""A llama.cpp self-draft whose output head keeps a subset of the target's tokens
(app.models.early_exit writes the file; FR-Spec, arXiv 2502.14856).

The file's vocabulary is the subset, so llama.cpp can neither read a token outside it nor
score one. Inputs therefore go in as embedding rows, read from the target's own
`token_embd.weight` (dequantized once per token id, through the gguf package's memory map),
which is what llama.cpp's embedding lookup of that token computes; and each logit row comes
back widened to the target's vocabulary, -inf (q = 0) outside the subset. The engine sees a
draft model over the target's ids like any other.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from backends.base import BackendError
from backends.llamacpp import LlamaCppModel

# the file's own record (app.models.early_exit writes them; llama.cpp ignores keys it does not
# know): the target's id of each of its tokens, and the file its input embeddings are read from
HEAD_IDS_KEY = "draftlens.head.target_ids"
EMBEDDINGS_KEY = "draftlens.head.embeddings_from"


class LlamaCppHeadSubsetModel(LlamaCppModel):
    """A head-subset draft file: reads and writes the target's token ids (module doc)."""

    def __init__(self, path: str | os.PathLike[str], text_of: TargetText,
                 **options: Any) -> None:
        """text_of: the target, whose ids this model reads and writes, so whose text
        functions and end-of-generation tokens are its own."""
        import gguf

        reader = gguf.GGUFReader(path)
        ids_field, source_field = reader.fields.get(HEAD_IDS_KEY), reader.fields.get(
            EMBEDDINGS_KEY)
        if ids_field is None or source_field is None:
            raise BackendError(f"{path} is not a head-subset self-draft (no {HEAD_IDS_KEY}) "
                               "— delete it from the data folder's self-drafts/ to rewrite it")
        self._target_ids = np.asarray(ids_field.contents(), dtype=np.int64)
        self._rows = _EmbeddingRows(str(source_field.contents()))
        super().__init__(path, **options)
        if self.n_vocab != len(self._target_ids):
            raise BackendError(f"{self.name}: {self.n_vocab} tokens but {len(self._target_ids)} "
                               "target ids — delete the file to rewrite it")
        self._head_rows = self.n_vocab
        self.n_vocab = self._rows.n_vocab
        self._text_of = text_of
        self.eos_ids = text_of.eos_ids
        self._ll.llama_batch_free(self._batch)
        self._batch = self._ll.llama_batch_init(self.n_batch, self.n_embd, 1)

    @property
    def head_tokens(self) -> int:
        return self._head_rows

    def _put_inputs(self, ids: list[int]) -> None:
        rows = self._rows.rows(ids)
        ctypes.memmove(self._batch.embd, rows.ctypes.data, rows.nbytes)

    def _widened(self, rows: np.ndarray) -> np.ndarray:
        wide = np.full((rows.shape[0], self.n_vocab), -np.inf, dtype=np.float32)
        wide[:, self._target_ids] = rows
        return wide

    def extend_tree(self, ids: Sequence[int], parents: Sequence[int],
                    n_skip: int) -> tuple[np.ndarray, list[bool]]:
        raise BackendError(f"{self.name} drafts; it does not verify trees")

    def prepare_tree_passes(self) -> None:
        return None  # never verifies

    # its own vocabulary is the subset's: the text is the target's
    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        return self._text_of.tokenize(text, add_special)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self._text_of.detokenize(ids)

    def token_text(self, token: int) -> str:
        return self._text_of.token_text(token)

    def chat_prompt(self, user_text: str) -> str:
        return self._text_of.chat_prompt(user_text)


class TargetText(Protocol):
    eos_ids: frozenset[int]

    def tokenize(self, text: str, add_special: bool = True) -> list[int]: ...

    def detokenize(self, ids: Sequence[int]) -> str: ...

    def token_text(self, token: int) -> str: ...

    def chat_prompt(self, user_text: str) -> str: ...


class _EmbeddingRows:
    """The target's input embedding of each token id, dequantized on first use."""

    def __init__(self, source: str) -> None:
        import gguf

        try:
            tensors = {t.name: t for t in gguf.GGUFReader(source).tensors}
        except OSError as exc:
            raise BackendError(f"cannot read the target's embeddings from {source}: {exc} — "
                               "the self-draft reads them from the target file") from exc
        tensor = tensors.get("token_embd.weight")
        if tensor is None:
            raise BackendError(f"{source} has no token_embd.weight to read inputs from")
        self._tensor = tensor
        self.n_vocab = int(tensor.data.shape[0])
        self._cache: dict[int, np.ndarray] = {}

    def rows(self, ids: Sequence[int]) -> np.ndarray:
        from gguf.quants import dequantize

        missing = sorted({t for t in ids if t not in self._cache})
        if missing:
            if missing[0] < 0 or missing[-1] >= self.n_vocab:
                raise BackendError(f"token id outside the target's {self.n_vocab} tokens")
            data = np.asarray(self._tensor.data)[np.asarray(missing, dtype=np.int64)]
            values = np.asarray(dequantize(data, self._tensor.tensor_type), dtype=np.float32)
            for token, row in zip(missing, values.reshape(len(missing), -1), strict=True):
                self._cache[token] = row
        return np.ascontiguousarray(np.stack([self._cache[t] for t in ids]), dtype=np.float32)
