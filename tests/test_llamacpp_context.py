"""A llama.cpp model decodes on a one-sequence context until a tree pass needs more; the
context is then remade tree-ready and refilled with what the cache held, so the next passes
read the same cache they would have read on a context made tree-ready from the start."""

from __future__ import annotations

import numpy as np

from backends.llamacpp import LlamaCppModel

PROMPT = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n"
# the same tolerance as tests/test_kv_rollback.py: passes of other sizes sum in another order,
# while a stale or missing cache entry moves the logits by 0.5 or more
TOLERANCE = 1e-3


def load(path, **kwargs) -> LlamaCppModel:
    return LlamaCppModel(path, n_gpu_layers=0, n_ctx=512, **kwargs)


def close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=TOLERANCE, atol=TOLERANCE)


def test_a_tree_pass_on_a_chain_context_reads_the_cache_it_had(gguf_files):
    chain, ready = load(gguf_files[0]), load(gguf_files[0])
    try:
        ready.prepare_tree_passes()
        ids = chain.tokenize(PROMPT)
        tree, parents = [ids[-1], 5, 9, 7, 11], [-1, 0, 0, 1, 2]
        for model in (chain, ready):
            model.extend(ids[:-6], 0)
            model.extend(ids[-6:-1], 1)
            model.truncate(len(ids) - 3)  # a rollback the refill must respect
            model.extend(ids[-3:-1], 0)
        got, got_exact = chain.extend_tree(tree, parents, 0)
        want, want_exact = ready.extend_tree(tree, parents, 0)
        close(got, want)
        assert got_exact == want_exact
        for model in (chain, ready):
            model.keep_path([0, 1, 3])
        assert chain.n_cached == ready.n_cached
        close(chain.extend([13], 1), ready.extend([13], 1))
    finally:
        chain.close()
        ready.close()


def test_a_remade_context_keeps_its_threadpool_and_its_logits(gguf_files):
    model = load(gguf_files[0], threadpool=True)
    try:
        ids = model.tokenize(PROMPT)
        model.extend(ids[:-1], 0)
        before = model.extend(ids[-1:], 1)
        model.truncate(len(ids) - 1)
        model.prepare_tree_passes()
        assert model.n_cached == len(ids) - 1
        close(model.extend(ids[-1:], 1), before)
        model.prepare_tree_passes()  # once made, kept
        assert model.n_cached == len(ids)
    finally:
        model.close()
