"""A polling threadpool attached to a llama.cpp context (as llama-bench attaches one): the
bound functions run against the installed libraries, decoding on it gives the same logits
as decoding without it, and it can be attached and detached on a live context."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

from backends.llamacpp import LlamaCppModel  # noqa: E402
from backends.llamacpp_threadpool import Threadpool, bindings  # noqa: E402


def logits_of(model: LlamaCppModel, ids: list[int]) -> np.ndarray:
    model.truncate(0)
    return np.array(model.extend(ids, len(ids)))


def test_the_threadpool_functions_are_found_in_the_installed_libraries():
    api = bindings()
    params = api.params_default(3)
    assert params.n_threads == 3 and params.poll == 50  # ggml's own defaults, read back
    pool = Threadpool(2, poll=0)
    pool.close()
    pool.close()  # a second close is harmless


def test_decoding_on_the_threadpool_gives_the_logits_decoding_without_it_gives(gguf_files):
    ids = [1, 5, 9, 13, 2, 7]
    plain = LlamaCppModel(gguf_files[0], n_gpu_layers=0, n_ctx=128, n_threads=2)
    pooled = LlamaCppModel(gguf_files[0], n_gpu_layers=0, n_ctx=128, n_threads=2,
                           threadpool=True)
    try:
        expected = logits_of(plain, ids)
        assert np.array_equal(logits_of(pooled, ids), expected)
        pooled.use_threadpool(False)  # detached: ggml's own threads again
        assert np.array_equal(logits_of(pooled, ids), expected)
        pooled.use_threadpool(True)
        assert np.array_equal(logits_of(pooled, ids), expected)
    finally:
        plain.close()
        pooled.close()
