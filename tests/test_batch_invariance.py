"""A verify pass must score each position exactly as plain one-token decoding would: then
greedy speculative output equals plain output even at near-ties. llama.cpp picks CPU kernels
by batch size; the backend switches the batch-dependent ones off."""

from __future__ import annotations

import numpy as np
import pytest

from tests.tiny_gguf import write_tiny_gguf


@pytest.fixture(scope="module")
def long_context_model(tmp_path_factory):
    from backends.llamacpp import LlamaCppModel

    path = write_tiny_gguf(tmp_path_factory.mktemp("inv") / "long.gguf", n_ctx=2048,
                           hidden=64, n_head=4)
    model = LlamaCppModel(path, n_gpu_layers=0, n_ctx=2048)
    yield model
    model.close()


def _single_steps(model, context, tokens):
    model.truncate(0)
    model.extend(context, 0)
    return np.stack([model.extend([t], 1)[0] for t in tokens])


@pytest.mark.parametrize("context_len", [20, 700])
@pytest.mark.parametrize("batch", [2, 5, 9, 17, 33, 65])
def test_batched_logits_are_bit_identical_to_single_steps(long_context_model, context_len,
                                                           batch):
    model = long_context_model
    rng = np.random.default_rng(batch)
    ids = [int(t) for t in rng.integers(3, model.n_vocab, context_len + batch)]
    context, tokens = ids[:context_len], ids[context_len:]
    expected = _single_steps(model, context, tokens)
    model.truncate(context_len)
    got = model.extend(tokens, batch)
    assert np.array_equal(got, expected)


def test_this_build_has_no_batch_dependent_kernels_left(long_context_model):
    assert long_context_model.caveats == []
