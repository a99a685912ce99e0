"""llama.cpp backend through llama-cpp-python's low-level API.

One llama_batch per call; logits are requested only for the rows the caller needs, and
rollback removes the tail of sequence 0 from the KV cache (llama_memory_seq_rm).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from backends.base import BackendError
from backends.llamacpp_load import load_weights
from backends.llamacpp_runtime import llamacpp_available, silence_logs
from backends.llamacpp_skip import SkipScorer
from backends.llamacpp_text import LlamaCppText
from backends.llamacpp_threadpool import DEFAULT_POLL, Threadpool
from backends.llamacpp_threads import follow_limit, limit_threads, threads_for

# sequences a tree pass may use: one per root-to-leaf path
MAX_TREE_LEAVES = 32


class LlamaCppModel(LlamaCppText):
    backend = "llamacpp"
    sampler_order = "llama.cpp"  # common_sampler's chain: top-k, top-p, min-p, temperature last

    def __init__(
        self,
        path: str | os.PathLike[str],
        n_gpu_layers: int | str = "auto",
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_batch: int = 512,
        batch_invariant: bool = True,
        rpc: str = "",
        load_mtp: bool = False,
        threadpool: bool = False,
        mmap: bool | None = None,
        memory_available: int | None = None,
    ) -> None:
        """load_mtp: also load the file's multi-token-prediction (NextN) layers, which
        llama.cpp skips otherwise (backends.llamacpp_mtp drafts with them). threadpool:
        decode on a polling threadpool kept for the context, as llama-bench does
        (backends.llamacpp_threadpool; docs/benchmarks.md has the measurement). mmap: map the
        file (True) or read the weights into memory (False); None decides by
        backends.llamacpp_load.weights_read_into_memory, with `memory_available` the bytes
        free before loading."""
        ok, why = llamacpp_available()
        if not ok:
            raise BackendError(why)
        import llama_cpp

        self._ll = llama_cpp
        silence_logs()
        llama_cpp.llama_backend_init()
        path = Path(path)
        if not path.is_file():
            raise BackendError(f"model file not found: {path} — check the path")
        self.path = str(path)
        self.name = path.name
        self.rpc = rpc
        self.batch_invariant = batch_invariant
        weights = load_weights(llama_cpp, path, n_gpu_layers, rpc, load_mtp, mmap,
                               memory_available, batch_invariant)
        self._model = weights.model
        self.device, self.n_gpu_layers = weights.device, weights.n_gpu_layers
        self.mmap, self.caveats = weights.mmap, weights.caveats
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        self._head_rows = self.n_vocab  # llama.cpp's logits per row (a subset's head: fewer)
        train_ctx = int(llama_cpp.llama_model_n_ctx_train(self._model))
        self.n_ctx = min(n_ctx, train_ctx) if train_ctx > 0 else n_ctx
        self.n_batch = min(n_batch, self.n_ctx)
        # threads_auto: no count was asked for, so the engine may decode on fewer while the
        # machine is busy (app.engine.cores)
        self.n_threads, self.threads_auto = n_threads or max(1, os.cpu_count() or 1), not n_threads
        self.threads_now = self.n_threads

        self._ctx = None
        self._memory: Any = None
        self._tree_ready = False
        # an MTP drafter's context shares this one's, so it cannot be remade later
        self._make_context(tree_ready=load_mtp)
        self._threadpool: Threadpool | None = None
        self.use_threadpool(threadpool)
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, MAX_TREE_LEAVES)
        self._n_cached = 0
        # what the cache holds while the context is not tree-ready: a remade one is filled
        # from it (tree passes and keep_path happen only once the context is tree-ready)
        self._cached_ids: list[int] = []
        self._tree: tuple[int, int, int] | None = None  # (cached before, first path, leaves)
        self._text_cache: dict[int, str] = {}
        self.eos_ids = frozenset(
            t for t in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self._vocab, t)
        )

    def _make_context(self, tree_ready: bool) -> None:
        """A context with one sequence, as llama-bench makes: plain decoding and chains run
        faster there (docs/benchmarks.md). A tree-ready one holds a sequence per root-to-leaf
        path in a unified KV cache, which llama.cpp needs for tokens shared by several paths."""
        ll = self._ll
        params = ll.llama_context_default_params()
        params.n_ctx = self.n_ctx
        params.n_batch = self.n_batch
        params.n_ubatch = self.n_batch
        self.threads_now = params.n_threads = params.n_threads_batch = threads_for(self.n_threads)
        params.no_perf = True
        if tree_ready:
            params.n_seq_max = MAX_TREE_LEAVES
            params.kv_unified = True
        if self.batch_invariant:
            params.flash_attn_type = ll.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self._ctx = ll.llama_init_from_model(self._model, params)
        if not self._ctx:
            ll.llama_model_free(self._model)
            self._model = None
            raise BackendError(
                f"llama.cpp could not create a context of {self.n_ctx} tokens for {self.name} "
                "— lower the context size or GPU layers (out of memory?)"
            )
        self._memory = ll.llama_get_memory(self._ctx)
        self._tree_ready = tree_ready

    def prepare_tree_passes(self) -> None:
        """Remakes the context tree-ready, once; what the cache held is decoded again (a
        session calls this with an empty cache, before its prefill)."""
        if self._tree_ready:
            return
        ids, self._cached_ids = self._cached_ids, []  # no longer kept once tree-ready
        pool = self._threadpool is not None
        self.use_threadpool(False)
        self._ll.llama_free(self._ctx)
        self._ctx = None
        self._make_context(tree_ready=True)
        self.use_threadpool(pool)
        self._n_cached = 0
        if ids:
            self.extend(ids, 0)

    @property
    def n_cached(self) -> int:
        return self._n_cached

    @property
    def speed_key(self) -> str:
        rpc = f"|rpc={self.rpc}" if self.rpc else ""
        return f"gpu-layers={self.n_gpu_layers}|batch-invariant={self.batch_invariant}{rpc}"

    # --- the KV cache -----------------------------------------------------------------
    def extend(self, ids: Sequence[int], n_logits: int) -> np.ndarray:
        if self._n_cached + len(ids) > self.n_ctx:
            raise BackendError(
                f"context full ({self.n_ctx} tokens) — shorten the prompt or lower n-predict"
            )
        if n_logits > self.n_batch:
            raise BackendError(f"cannot score {n_logits} rows in one pass (n_batch {self.n_batch})")
        ids = list(ids)
        # chunks before the last one only fill the cache
        while len(ids) > self.n_batch:
            self._decode(ids[: self.n_batch], 0)
            ids = ids[self.n_batch :]
        return self._decode(ids, n_logits)

    @property
    def n_embd(self) -> int:
        return int(self._ll.llama_model_n_embd(self._model))

    @property
    def n_layers(self) -> int:
        return int(self._ll.llama_model_n_layer(self._model))

    def skip_scorer(self) -> SkipScorer:
        """This model with layers left out, for a self-draft's search (backends.llamacpp_skip):
        a context of its own on these weights, freed by its close()."""
        return SkipScorer(self._ll, self._model, self.n_layers, self.n_vocab, self.n_threads,
                          self.path)

    def output_rows(self, ids: Sequence[int]) -> np.ndarray:
        """Read from the file with the gguf package: output.weight, or the token embeddings
        where the head is tied to them; only the asked rows are dequantized."""
        import gguf
        from gguf.quants import dequantize

        tensors = {t.name: t for t in gguf.GGUFReader(self.path).tensors}
        tensor = tensors.get("output.weight") or tensors.get("token_embd.weight")
        if tensor is None:
            raise BackendError(f"{self.name} has neither output.weight nor token_embd.weight")
        rows = np.asarray(tensor.data)[np.asarray(list(ids), dtype=np.int64)]
        return np.asarray(dequantize(rows, tensor.tensor_type), dtype=np.float32).reshape(
            len(ids), -1)

    def extend_hidden(self, ids: Sequence[int], n_logits: int) -> tuple[np.ndarray, np.ndarray]:
        """extend() with the context's embeddings switched on for the last chunk (pooling
        none: one vector per token, the output of the final norm). llama.cpp then outputs
        every token of the batch, so rows are read by batch index."""
        ids = list(ids)
        if self._n_cached + len(ids) > self.n_ctx:
            raise BackendError(
                f"context full ({self.n_ctx} tokens) — shorten the prompt or lower n-predict"
            )
        if len(ids) > self.n_batch:
            self.extend(ids[: -self.n_batch], 0)
            ids = ids[-self.n_batch :]
        ll = self._ll
        ll.llama_set_embeddings(self._ctx, True)
        try:
            self._decode(ids, n_logits, read=False)
        finally:
            ll.llama_set_embeddings(self._ctx, False)
        n_embd = self.n_embd
        logits = np.empty((n_logits, self._head_rows), dtype=np.float32)
        hidden = np.empty((n_logits, n_embd), dtype=np.float32)
        for row, index in enumerate(range(len(ids) - n_logits, len(ids))):
            logits[row] = np.ctypeslib.as_array(ll.llama_get_logits_ith(self._ctx, index),
                                                shape=(self._head_rows,))
            hidden[row] = np.ctypeslib.as_array(ll.llama_get_embeddings_ith(self._ctx, index),
                                                shape=(n_embd,))
        return self._widened(logits), hidden

    def _put_inputs(self, ids: list[int]) -> None:
        """The batch's inputs: the tokens (a head-subset draft puts embedding rows)."""
        for i, token in enumerate(ids):
            self._batch.token[i] = token

    def _widened(self, rows: np.ndarray) -> np.ndarray:
        """llama.cpp's logit rows as this model's n_vocab columns (a subset's head widens)."""
        return rows

    def _decode(self, ids: list[int], n_logits: int, read: bool = True) -> np.ndarray:
        self.threads_now = follow_limit(self._ll, self._ctx, self.n_threads, self.threads_now)
        batch = self._batch
        n = len(ids)
        first_output = n - n_logits
        self._put_inputs(ids)
        for i in range(n):
            batch.pos[i] = self._n_cached + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i >= first_output
        batch.n_tokens = n
        status = self._ll.llama_decode(self._ctx, batch)
        if status != 0:
            raise BackendError(
                f"llama_decode failed (status {status}) — the context may be full or out of memory"
            )
        self._n_cached += n
        if not self._tree_ready:
            self._cached_ids.extend(ids)
        if n_logits == 0 or not read:
            return np.zeros((0, self.n_vocab), dtype=np.float32)
        pointer = self._ll.llama_get_logits(self._ctx)
        return self._widened(
            np.array(np.ctypeslib.as_array(pointer, shape=(n_logits, self._head_rows))))

    def truncate(self, n: int) -> None:
        if self._tree is not None:  # a tree pass not followed by keep_path: drop the tree
            n_before, _first_path, n_leaves = self._tree
            self._drop_other_paths(n_leaves)
            self._ll.llama_memory_seq_rm(self._memory, 0, n_before, -1)
            self._n_cached = n_before
            self._tree = None
        if n >= self._n_cached:
            return
        if not self._ll.llama_memory_seq_rm(self._memory, 0, n, -1):
            raise BackendError(
                f"{self.name}: this model's cache cannot be rolled back "
                "(recurrent architecture) — speculative decoding needs a transformer model"
            )
        self._n_cached = n
        del self._cached_ids[n:]

    def extend_tree(
        self, ids: Sequence[int], parents: Sequence[int], n_skip: int
    ) -> tuple[np.ndarray, list[bool]]:
        """One batch; sequence s holds the s-th root-to-leaf path (0: the first path), and a
        node belongs to the sequences of every leaf below it, so it attends to its ancestors
        only. Rows on the first path see the cache laid out exactly as plain decoding does."""
        n = len(ids)
        if self._n_cached + n > self.n_ctx:
            raise BackendError(
                f"context full ({self.n_ctx} tokens) — shorten the prompt or lower n-predict"
            )
        if n > self.n_batch:
            raise BackendError(f"a tree of {n} tokens does not fit one batch ({self.n_batch})")
        self.prepare_tree_passes()
        seqs, depths = _path_sequences(parents)
        n_leaves = 1 + max(max(s) for s in seqs)
        if n_leaves > MAX_TREE_LEAVES:
            raise BackendError(f"a tree with {n_leaves} leaves exceeds {MAX_TREE_LEAVES}")
        for s in range(1, n_leaves):
            self._ll.llama_memory_seq_cp(self._memory, 0, s, -1, -1)
        self.threads_now = follow_limit(self._ll, self._ctx, self.n_threads, self.threads_now)
        batch = self._batch
        for i, token in enumerate(ids):
            batch.token[i] = token
            batch.pos[i] = self._n_cached + depths[i]
            batch.n_seq_id[i] = len(seqs[i])
            for j, s in enumerate(seqs[i]):
                batch.seq_id[i][j] = s
            batch.logits[i] = i >= n_skip
        batch.n_tokens = n
        status = self._ll.llama_decode(self._ctx, batch)
        if status != 0:
            self._drop_other_paths(n_leaves)
            raise BackendError(
                f"llama_decode failed on a tree (status {status}) — out of memory?"
            )
        first_path = 1
        while first_path < n and parents[first_path] == first_path - 1:
            first_path += 1
        self._tree = (self._n_cached, first_path, n_leaves)
        self._n_cached += first_path  # what keep_path can keep at most
        pointer = self._ll.llama_get_logits(self._ctx)
        rows = np.array(np.ctypeslib.as_array(pointer, shape=(n - n_skip, self.n_vocab)))
        # fast kernels sum a batch in another order than one token: no row is bit-exact then
        exact = [self.batch_invariant and n_skip + r < first_path for r in range(n - n_skip)]
        return rows, exact

    def _drop_other_paths(self, n_leaves: int) -> None:
        """Remove sequences 1.. of a tree pass; cells only they held are freed, and the
        prefix they shared goes back to sequence 0 alone."""
        for s in range(1, n_leaves):
            self._ll.llama_memory_seq_rm(self._memory, s, -1, -1)

    def keep_path(self, path: Sequence[int]) -> None:
        """Keeps the leading part of the path that lies on the first path: those cells follow
        the cache without gaps, so later passes sum over the cache as plain decoding does."""
        if self._tree is None:
            raise BackendError("keep_path needs a tree pass first")
        n_before, first_path, n_leaves = self._tree
        kept = 0
        while kept < len(path) and kept < first_path and path[kept] == kept:
            kept += 1
        self._drop_other_paths(n_leaves)
        self._ll.llama_memory_seq_rm(self._memory, 0, n_before + kept, -1)
        self._n_cached = n_before + kept
        self._tree = None

    def use_threadpool(self, on: bool, poll: int = DEFAULT_POLL) -> None:
        """Decode on a threadpool of n_threads attached to the context, or on ggml's own."""
        if self._threadpool is not None:
            self._threadpool.detach()
            self._threadpool.close()
            self._threadpool = None
        if on:
            self._threadpool = Threadpool(self.n_threads, poll)
            self._threadpool.attach(self._ctx)

    def limit_threads(self, n: int | None) -> None:
        """Decode the next passes on at most n threads (None: on n_threads), and so does
        every other llama.cpp model of this process (backends.llamacpp_threads)."""
        limit_threads(n)

    def close(self) -> None:
        ll = self._ll
        if getattr(self, "_ctx", None):
            ll.llama_batch_free(self._batch)
            ll.llama_free(self._ctx)
            ll.llama_model_free(self._model)
            self._ctx = None
            self._model = None
        pool = getattr(self, "_threadpool", None)
        if pool is not None:
            pool.close()  # after the context that used it
            self._threadpool = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _path_sequences(parents: Sequence[int]) -> tuple[list[list[int]], list[int]]:
    """For each node, the sequences (root-to-leaf paths) through it, and its depth. The path
    that follows each node's first child is sequence 0."""
    n = len(parents)
    children: list[list[int]] = [[] for _ in range(n)]
    depths = [0] * n
    for i in range(1, n):
        children[parents[i]].append(i)
        depths[i] = depths[parents[i]] + 1
    leaves = [i for i in range(n) if not children[i]]
    first_leaf = 0
    while children[first_leaf]:
        first_leaf = children[first_leaf][0]
    order = [first_leaf] + [leaf for leaf in leaves if leaf != first_leaf]
    seqs: list[list[int]] = [[] for _ in range(n)]
    for s, leaf in enumerate(order):
        node = leaf
        while node >= 0:
            seqs[node].append(s)
            node = parents[node] if node > 0 else -1
    return seqs, depths
