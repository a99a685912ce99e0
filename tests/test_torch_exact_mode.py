"""torch has no batch-invariant kernels: a pass's rows differ from single steps in the last
bits (float32 on a CPU as on CUDA). Its exact mode runs every pass one token at a time, so a
verify pass, a tree pass and a cache written by passes are bit-identical to plain decoding."""

from __future__ import annotations

import numpy as np
import pytest

from backends.torch_hf import TorchModel

TEXT = "the cat sat on the mat and the dog ran to the barn"


@pytest.fixture(scope="module")
def exact(hf_dirs):
    model = TorchModel(hf_dirs[0], device="cpu", batch_invariant=True)
    yield model
    model.close()


def single_steps(model: TorchModel, prefix: list[int], tokens: list[int]) -> list[np.ndarray]:
    model.truncate(0)
    for token in prefix:
        model.extend([token], 1)
    return [model.extend([token], 1)[0] for token in tokens]


def test_every_row_of_a_pass_and_the_cache_it_writes_equal_single_steps(exact):
    ids = exact.tokenize(TEXT)
    prefix, rest = ids[:6], ids[6:18]
    expected = single_steps(exact, prefix, rest)
    for n in (2, 3, 5, 12):
        exact.truncate(0)
        exact.extend(prefix, 1)  # a prefill of several tokens, as a run's prompt
        rows: list[np.ndarray] = []
        for i in range(0, len(rest), n):
            chunk = rest[i:i + n]
            logits, hidden = exact.extend_hidden(chunk, len(chunk))
            assert hidden.shape == (len(chunk), exact.n_embd)
            rows.extend(logits)
        assert all(np.array_equal(a, b) for a, b in zip(expected, rows, strict=True)), n


def test_a_tree_pass_gives_each_node_the_row_of_its_own_path_and_keeps_one(exact):
    ids = exact.tokenize(TEXT)
    prefix = ids[:6]
    a, b, c, d = ids[6], ids[7], ids[8], ids[9]
    # a, then b or c after a, then d after b
    tree, parents = [a, b, c, d], [-1, 0, 0, 1]
    exact.truncate(0)
    exact.extend(prefix, 1)
    rows, identical = exact.extend_tree(tree, parents, 0)
    assert identical == [True] * 4
    for node, path in ((0, [a]), (1, [a, b]), (2, [a, c]), (3, [a, b, d])):
        assert np.array_equal(rows[node], single_steps(exact, prefix, path)[-1]), node
    exact.truncate(0)
    exact.extend(prefix, 1)
    exact.extend_tree(tree, parents, 1)
    exact.keep_path([0, 2])  # a, c: not the path the pass ended on
    assert exact.n_cached == len(prefix) + 2
    after = exact.extend([d], 1)[0]
    assert np.array_equal(after, single_steps(exact, prefix, [a, c, d])[-1])
