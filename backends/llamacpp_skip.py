"""The loaded llama.cpp model with a set of its layers left out, scored for the self-draft's
search (the draft itself is a file of the kept blocks: app.models.early_exit).

llama.cpp cannot leave a layer out of its graph, but its scheduler hands each computed
tensor to an evaluation callback before the next one runs (what its eval-callback and imatrix
tools read activations with). On a context of its own over the same weights, the callback
copies each skipped layer's input over its output (`l_out-N`, the residual stream after
layer N): the layer then adds nothing, and every later layer reads what it would read in a
model without it. The skipped layer's keys and values are still computed, read by nothing
but that layer. The pass costs a whole model's compute; it measures, it does not draft.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from backends.base import BackendError
from backends.llamacpp_threads import follow_limit, threads_for

_LAYER_OUT = b"l_out-"
_EMBEDDINGS = b"embd"  # the input of layer 0


def _ggml() -> Any:
    from llama_cpp._ggml import libggml

    lib = libggml
    lib.ggml_get_name.argtypes = [ctypes.c_void_p]
    lib.ggml_get_name.restype = ctypes.c_char_p
    lib.ggml_nbytes.argtypes = [ctypes.c_void_p]
    lib.ggml_nbytes.restype = ctypes.c_size_t
    for name in ("ggml_backend_tensor_get", "ggml_backend_tensor_set"):
        function = getattr(lib, name)
        function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
        function.restype = None
    return lib


class SkipScorer:
    """Teacher-forced argmax of the model without a set of layers (see the module doc).
    `model`: the llama_model pointer of a loaded LlamaCppModel, which must outlive this."""

    def __init__(self, ll: Any, model: Any, n_layers: int, n_vocab: int, n_threads: int,
                 path: str, max_tokens: int = 256) -> None:
        self._ll = ll
        self._path = path
        self._lib = _ggml()
        self.n_layers = n_layers
        self.n_vocab = n_vocab
        self.max_tokens = max_tokens
        self._n_threads = n_threads
        self._skip: frozenset[int] = frozenset()
        self._asked: set[bytes] = set()  # the tensors the callback stops at
        self._saved: Any = None  # the last skipped layer's input, as bytes
        self._callback = ll.ggml_backend_sched_eval_callback(self._on_tensor)
        params = ll.llama_context_default_params()
        params.n_ctx = max_tokens
        params.n_batch = max_tokens
        params.n_ubatch = max_tokens
        # on as many threads as the engine's other contexts decode on now (busy cores)
        self._threads_now = params.n_threads = params.n_threads_batch = threads_for(n_threads)
        params.no_perf = True
        params.cb_eval = self._callback
        self._ctx = ll.llama_init_from_model(model, params)
        if not self._ctx:
            raise BackendError("llama.cpp could not make a context to score skip sets in "
                               "(out of memory?) — give the layers by hand with --self-skip")
        self._memory = ll.llama_get_memory(self._ctx)
        self._batch = ll.llama_batch_init(max_tokens, 0, 1)

    def _on_tensor(self, tensor: int, ask: bool, user_data: int) -> bool:
        name = self._lib.ggml_get_name(tensor)
        if ask:
            return name in self._asked
        if name.startswith(_LAYER_OUT):
            layer = int(name[len(_LAYER_OUT):])
            if layer in self._skip:  # its output becomes its input
                self._lib.ggml_backend_tensor_set(tensor, self._saved, 0, len(self._saved))
            if layer + 1 in self._skip:
                self._save(tensor)
        elif name == _EMBEDDINGS and 0 in self._skip:
            self._save(tensor)
        return True  # False would stop the computation

    def _save(self, tensor: int) -> None:
        size = self._lib.ggml_nbytes(tensor)
        buffer = ctypes.create_string_buffer(size)
        self._lib.ggml_backend_tensor_get(tensor, buffer, 0, size)
        self._saved = buffer

    def skipped_argmax(self, ids: Sequence[int], skip: frozenset[int],
                       head: np.ndarray | None = None) -> np.ndarray:
        ll = self._ll
        n = len(ids)
        if not 0 < n <= self.max_tokens:
            raise BackendError(f"cannot score {n} tokens at once (at most {self.max_tokens})")
        self._skip = frozenset(skip)
        self._asked = set()
        for layer in skip:
            before = _EMBEDDINGS if layer == 0 else _LAYER_OUT + str(layer - 1).encode()
            self._asked.update((before, _LAYER_OUT + str(layer).encode()))
        ll.llama_memory_clear(self._memory, True)
        batch = self._batch
        for i, token in enumerate(ids):
            batch.token[i] = token
            batch.pos[i] = i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = True  # every row: the last layer's rows are then all its rows
        batch.n_tokens = n
        self._threads_now = follow_limit(ll, self._ctx, self._n_threads, self._threads_now)
        status = ll.llama_decode(self._ctx, batch)
        self._saved = None
        if status != 0:
            raise BackendError(f"llama_decode failed (status {status}) scoring a skip set")
        logits = np.ctypeslib.as_array(ll.llama_get_logits(self._ctx), shape=(n, self.n_vocab))
        if head is None:
            return np.asarray(logits.argmax(axis=1))
        return np.asarray(np.asarray(head)[logits[:, head].argmax(axis=1)])

    def layer_bytes(self) -> tuple[int, list[int]]:
        return gguf_layer_bytes(self._path)

    def close(self) -> None:
        if self._ctx:
            self._ll.llama_batch_free(self._batch)
            self._ll.llama_free(self._ctx)
            self._ctx = None


def gguf_layer_bytes(path: str) -> tuple[int, list[int]]:
    """From the file: the bytes a step reads besides the blocks (the output head, or the
    token embeddings where the head is tied to them; the final norm), and each block's."""
    import re

    import gguf

    block = re.compile(r"^blk\.(\d+)\.")
    blocks: dict[int, int] = {}
    head: dict[str, int] = {}
    for tensor in gguf.GGUFReader(path).tensors:
        match = block.match(tensor.name)
        if match:
            index = int(match.group(1))
            blocks[index] = blocks.get(index, 0) + int(tensor.n_bytes)
        else:
            head[tensor.name] = int(tensor.n_bytes)
    output = head.get("output.weight", head.get("token_embd.weight", 0))
    return output + head.get("output_norm.weight", 0), [blocks[i] for i in sorted(blocks)]
