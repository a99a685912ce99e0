"""A GGUF's own multi-token-prediction (MTP / NextN) layers as its draft, on llama.cpp.

Follows llama.cpp's driver (common/speculative.cpp, common_speculative_impl_draft_mtp):
  - the target is loaded with load_mtp and its context outputs the "next-n embeddings"
    (h_nextn: the final-norm hidden state) of EVERY token of each pass (unmasked);
  - a second context over the same weights, of type LLAMA_CONTEXT_TYPE_MTP, runs only the
    NextN block(s) with their own KV cache. Its entry at position p pairs token x_p with the
    target's h_{p-1} (the state that predicted x_p; zeros at p = 0) and predicts x_{p+1};
  - drafting feeds the last emitted token with the target's h of the row that produced it,
    then each drafted token with the MTP block's own h_nextn output (one trained head used
    recursively, as llama.cpp does for qwen35 / glm4moe).
Entries the MTP context holds for positions the target later rejected are removed (seq_rm)
before the next catch-up, so its cache always pairs committed tokens with committed states.

Models with several NextN blocks (step35) chain a different head per draft step in llama.cpp;
here they draft with head 0 recursively (exact all the same: q is what each token was drawn
from), because no tiny multi-head file can be built and tested (see docs/user-guide.md).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from backends.base import BackendError
from backends.llamacpp import LlamaCppModel
from backends.llamacpp_threads import follow_limit, threads_for


class LlamaCppMtpModel(LlamaCppModel):
    """A llama.cpp target that also loads its MTP layers and keeps, per cached position, the
    hidden state they read. Everything else is LlamaCppModel's."""

    def __init__(self, path: str | Path, **kwargs: Any) -> None:
        super().__init__(path, load_mtp=True, **kwargs)
        from llama_cpp import llama_cpp_ext

        self._ext = llama_cpp_ext
        self.n_mtp_layers = int(self._ll.llama_model_n_layer_nextn(self._model))
        if self.n_mtp_layers <= 0:
            name = self.name
            self.close()
            raise BackendError(
                f"{name} has no MTP (NextN) layers — pick a draft model or --ngram instead "
                "of --draft-mtp"
            )
        self._ext.llama_set_embeddings_nextn(self._ctx, True, False)
        n_embd = int(self._ll.llama_model_n_embd_out(self._model))
        self._nextn = np.zeros((self.n_ctx, n_embd), dtype=np.float32)  # row p: h_p
        # the lowest position whose state changed since the MTP context last caught up
        self.nextn_low_water = 0
        self._tree_start = 0
        self._heads: LlamaCppMtpHeads | None = None

    @property
    def n_mtp_heads(self) -> int:
        return self.n_mtp_layers

    def _decode(self, ids: list[int], n_logits: int, read: bool = True) -> np.ndarray:
        first = self._n_cached
        out = super()._decode(ids, n_logits, read)
        rows = self._ext.llama_get_embeddings_nextn(self._ctx)
        width = self._nextn.shape[1]
        self._nextn[first : first + len(ids)] = np.ctypeslib.as_array(
            rows, shape=(len(ids), width))
        return out

    def truncate(self, n: int) -> None:
        super().truncate(n)
        self.nextn_low_water = min(self.nextn_low_water, self._n_cached)

    def keep_path(self, path: Sequence[int]) -> None:
        super().keep_path(path)
        # a tree pass records no states: the MTP context must not trust any after it
        self.nextn_low_water = min(self.nextn_low_water, self._tree_start)

    def extend_tree(
        self, ids: Sequence[int], parents: Sequence[int], n_skip: int
    ) -> tuple[np.ndarray, list[bool]]:
        self._tree_start = self._n_cached
        return super().extend_tree(ids, parents, n_skip)

    def nextn_rows(self, start: int, stop: int) -> np.ndarray:
        """The target's h_p for cached positions start <= p < stop (zeros for p < 0)."""
        out = np.zeros((stop - start, self._nextn.shape[1]), dtype=np.float32)
        lo = max(start, 0)
        out[lo - start :] = self._nextn[lo:stop]
        return out

    def mtp_heads(self) -> LlamaCppMtpHeads:
        """The MTP context over this model's NextN layers (created once)."""
        if self._heads is None:
            self._heads = LlamaCppMtpHeads(self)
        return self._heads

    def close(self) -> None:
        if getattr(self, "_heads", None) is not None:
            self._heads.close()  # type: ignore[union-attr]
            self._heads = None
        super().close()


class LlamaCppMtpHeads:
    """The MTP context: catches up with the target's committed tokens, then drafts."""

    def __init__(self, target: LlamaCppMtpModel) -> None:
        ll = target._ll
        self._ll, self._ext, self.target = ll, target._ext, target
        self.n_heads = target.n_mtp_layers
        self.n_vocab = target.n_vocab
        params = ll.llama_context_default_params()
        params.n_ctx = target.n_ctx
        params.n_batch = params.n_ubatch = target.n_batch
        self._threads = params.n_threads = params.n_threads_batch = threads_for(target.n_threads)
        params.no_perf = True
        params.ctx_type = ll.LLAMA_CONTEXT_TYPE_MTP
        params.ctx_other = target._ctx
        if target.batch_invariant:
            params.flash_attn_type = ll.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self._ctx = ll.llama_init_from_model(target._model, params)
        if not self._ctx:
            raise BackendError(
                f"llama.cpp could not create the MTP context for {target.name} — this "
                "llama.cpp has no MTP graph for its architecture, or memory ran out"
            )
        if _address(self._ext.llama_get_ctx_other(self._ctx)) == _address(target._ctx):
            # llama.cpp's own driver then never trims (common/speculative.cpp, is_mem_shared):
            # this class removes rejected entries from the MTP cache, which would be the
            # target's own cache here
            ll.llama_free(self._ctx)
            self._ctx = None
            raise BackendError(
                f"the MTP layers of {target.name} share the target's KV cache (a Gemma 4 "
                "style assistant); DraftLens's MTP drafting trims its own cache after each "
                "rejection and cannot run on a shared one — draft with a draft model "
                "(-md) or --spec-type ngram instead"
            )
        self._ext.llama_set_embeddings_nextn(self._ctx, True, True)
        self._memory = ll.llama_get_memory(self._ctx)
        self._batch = ll.llama_batch_ext_init(self._ctx)
        self._width = target._nextn.shape[1]
        self.reset()

    def reset(self) -> None:
        """Forget every entry (a new generation)."""
        self._ll.llama_memory_seq_rm(self._memory, 0, -1, -1)
        self._n_synced = 0  # entries 0.._n_synced-1 pair committed tokens with their states
        self._pos = -1  # the position of the last entry decoded
        self._h = np.zeros(self._width, dtype=np.float32)

    def start(self, context: Sequence[int]) -> np.ndarray | None:
        """Bring the MTP cache up to the target's (which holds context[:-1]) and run the
        head on context[-1]: logits for the token after it. None where the target's cache
        is not context[:-1] (nothing to draft from)."""
        target = self.target
        n = target.n_cached
        if n != len(context) - 1 or n < 0:
            return None
        # entries from where the target was rolled back (or re-filled) on are stale
        synced = min(self._n_synced, target.nextn_low_water, n)
        target.nextn_low_water = n + 1
        self._ll.llama_memory_seq_rm(self._memory, 0, synced, -1)
        states = target.nextn_rows(synced - 1, n)  # h_{p-1} for p = synced..n
        tokens = list(context[synced : n + 1])
        step = target.n_batch
        for begin in range(0, len(tokens), step):
            logits = self._process(tokens[begin : begin + step], synced + begin,
                                   states[begin : begin + step])
        self._n_synced = n + 1
        return logits

    def step(self, token: int) -> np.ndarray:
        """Feed a drafted token (at the next position, with the head's own last state):
        logits for the token after it."""
        return self._process([token], self._pos + 1, self._h[None, :])

    def _process(self, tokens: list[int], pos0: int, states: np.ndarray) -> np.ndarray:
        """One MTP pass over tokens at pos0.., paired with states; logits of the last."""
        ll = self._ll
        batch = self._batch
        ll.llama_batch_ext_clear(batch)
        states = np.ascontiguousarray(states, dtype=np.float32)
        pointer = ctypes.POINTER(ctypes.c_float)
        last = len(tokens) - 1
        for i, token in enumerate(tokens):
            idx = ll.llama_batch_ext_add_token(batch, 0, token)
            pos = ll.llama_pos(pos0 + i)
            embd = ll.llama_embd(states[i].ctypes.data_as(pointer), 1, self._width)
            if (idx != i or not ll.llama_batch_ext_set_pos(batch, idx, ctypes.byref(pos))
                    or not ll.llama_batch_ext_set_embd_token(batch, idx, embd)):
                raise BackendError(f"cannot build an MTP batch (token {token} at {pos0 + i})")
            if i == last:
                ll.llama_batch_ext_set_output_logits(batch, idx, True)
        self._threads = follow_limit(ll, self._ctx, self.target.n_threads, self._threads)
        status = ll.llama_process(self._ctx, ll.LLAMA_PROCESS_TYPE_DECODE, batch)
        if status != 0:
            raise BackendError(
                f"the MTP pass failed (status {status}) — the context may be full or out "
                "of memory"
            )
        self._pos = pos0 + last
        self._h = np.array(np.ctypeslib.as_array(
            self._ext.llama_get_embeddings_nextn_ith(self._ctx, last), shape=(self._width,)))
        return np.array(np.ctypeslib.as_array(ll.llama_get_logits_ith(self._ctx, last),
                                              shape=(self.n_vocab,)))

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            self._ll.llama_batch_ext_free(self._batch)
            self._ll.llama_free(self._ctx)
            self._ctx = None


def _address(pointer: Any) -> int | None:
    """A ctypes context pointer as a number (None for a null one), to compare two."""
    return ctypes.cast(pointer, ctypes.c_void_p).value if pointer else None
