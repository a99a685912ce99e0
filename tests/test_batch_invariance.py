"""A verify pass must score each position exactly as plain one-token decoding would: then
greedy speculative output equals plain output even at near-ties. llama.cpp picks CPU kernels
by batch size; the backend switches the batch-dependent ones off.

The model is quantised (Q4_0, every matrix's rows a multiple of 8, dimensions multiples of
256), so the fast kernels take the repacked gemm/gemv paths (ggml-cpu/repack.cpp: q4_0_8x8
on AVX2), which F32 weights never take. The negative control shows the same passes without
batch_invariant differ from single steps, so the positive test is one that can fail.
Measured on this build (llama-cpp-python 0.3.36, AVX2, 2026-11-26): with 20 cached tokens the
fast kernels agree bit for bit too (Q4_0 and Q8_0 repacked gemm and gemv sum whole blocks as
integers, in the same order across blocks); with 700 cached tokens, past the 512 cells where
flash attention splits the cache across threads, every pass size differs: by up to 0.15
logits with Q4_0 weights, 0.01 with F32. So the difference the exact kernels remove here is
flash attention's, and the test keeps a context past 512 to see it.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.tiny_gguf import write_tiny_gguf

BATCHES = [2, 5, 9, 17, 33, 65]
CONTEXTS = [20, 700]


@pytest.fixture(scope="module")
def quantised_file(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("inv") / "q4.gguf", n_ctx=2048, hidden=256,
                           n_head=4, weight_type="Q4_0")


def _load(path, batch_invariant):
    from backends.llamacpp import LlamaCppModel

    return LlamaCppModel(path, n_gpu_layers=0, n_ctx=2048, batch_invariant=batch_invariant)


@pytest.fixture(scope="module")
def exact_model(quantised_file):
    model = _load(quantised_file, True)
    yield model
    model.close()


def _single_steps(model, context, tokens):
    model.truncate(0)
    model.extend(context, 0)
    return np.stack([model.extend([t], 1)[0] for t in tokens])


def _pass_and_steps(model, context_len, batch):
    rng = np.random.default_rng(batch)
    ids = [int(t) for t in rng.integers(3, model.n_vocab, context_len + batch)]
    context, tokens = ids[:context_len], ids[context_len:]
    expected = _single_steps(model, context, tokens)
    model.truncate(context_len)
    return model.extend(tokens, batch), expected


@pytest.mark.parametrize("context_len", CONTEXTS)
@pytest.mark.parametrize("batch", BATCHES)
def test_batched_logits_are_bit_identical_to_single_steps(exact_model, context_len, batch):
    got, expected = _pass_and_steps(exact_model, context_len, batch)
    assert np.array_equal(got, expected)


def test_without_batch_invariance_the_same_passes_differ(quantised_file):
    """The negative control: the fast kernels give other bits past 512 cached cells for every
    pass size, so the test above is not passing for want of a difference."""
    model = _load(quantised_file, False)
    try:
        differing = {(c, b): float(np.abs(got - expected).max())
                     for c in CONTEXTS for b in BATCHES
                     for got, expected in [_pass_and_steps(model, c, b)]}
    finally:
        model.close()
    deep = [differing[(CONTEXTS[-1], b)] for b in BATCHES]
    assert all(d > 0 for d in deep), differing
    assert max(differing.values()) < 1.0  # rounding, not another computation


def test_this_build_has_no_batch_dependent_kernels_left(exact_model):
    assert exact_model.caveats == []


def test_the_sampled_tests_exact_distribution_is_plain_decodings(quantised_file):
    """check-exact's sampled test compares emitted tokens with the first token's exact
    distribution; it must be computed as plain decoding computes it (the prompt but its last
    token, then that token alone), not in one pass over the prompt, whose last row has other
    bits with the fast kernels past 512 cells (and at a top-k boundary other tokens: a
    correct sampler failed the test with p = 0 on the demo target)."""
    from types import SimpleNamespace

    from app.analysis.exact_sampled import exact_first_two
    from app.engine.sampling import SamplingParams, process

    model = _load(quantised_file, False)
    try:
        rng = np.random.default_rng(7)
        ids = [int(t) for t in rng.integers(3, model.n_vocab, 700)]
        params = SamplingParams(temperature=1.0, top_k=20)
        first, _ = exact_first_two(SimpleNamespace(target=model), ids, params)
        model.truncate(0)
        one_pass = process(model.extend(ids, 1)[0], params)
        model.truncate(0)
        model.extend(ids[:-1], 0)
        plain = process(model.extend(ids[-1:], 1)[0], params)
    finally:
        model.close()
    assert not np.array_equal(one_pass, plain)  # the fast kernels do tell the two apart here
    assert np.array_equal(first, plain)
