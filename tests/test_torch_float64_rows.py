"""check-exact's float64 check of torch's batched path compares in float64 from the model's
last hidden state on: a float64 model's logits come back as float64. Cast to float32 first,
a logit of 16 or more is rounded in steps of 1.9e-6, above the check's 1e-6 limit, and a
correct batched path could fail it; the tiny test models' logits (below 2) never showed it."""

from __future__ import annotations

import numpy as np
import pytest

from app.analysis.exact_mode import CHECK_POSITIONS, CHECK_SIZES
from app.analysis.kernel_noise import CEILINGS, measure_kernel_noise

torch = pytest.importorskip("torch")
SHARP = 60.0  # the output head scaled so that every row's largest logit is 16 or more


@pytest.fixture(scope="module")
def wide_logits(tmp_path_factory):
    from backends.torch_hf import TorchModel
    from tests.tiny_hf import write_tiny_hf

    folder = write_tiny_hf(tmp_path_factory.mktemp("hf64") / "target", seed=0, sharpness=SHARP)
    model = TorchModel(folder, device="cpu", dtype="float64")
    yield model
    model.close()


def test_a_float64_models_rows_are_its_float64_logits_at_magnitudes_of_16_and_more(
        wide_logits):
    model = wide_logits
    ids = model.tokenize("def fibonacci(n):\n    return n")
    model.truncate(0)
    rows = model.extend(ids, len(ids))
    model.truncate(len(ids) - 1)
    tree_rows, _ = model.extend_tree([ids[-1], ids[0], ids[1]], [-1, 0, 0], 0)
    model.truncate(0)
    with torch.no_grad():
        exact = model.model(input_ids=torch.tensor([ids])).logits[0].numpy()
    assert rows.dtype == tree_rows.dtype == np.float64
    assert np.abs(rows).max(axis=1).min() >= 16.0
    # one float64 forward against another, with and without a cache: ~1e-13 apart; a float32
    # cast alone moves a logit of 16 by up to 9.5e-7
    assert np.abs(rows - exact).max() < 1e-9
    assert np.abs(tree_rows[0] - rows[-1]).max() < 1e-9  # the root: the same context


def test_the_batched_path_holds_the_float64_limit_at_large_logits(wide_logits):
    noise = measure_kernel_noise(wide_logits, CHECK_POSITIONS, CHECK_SIZES)
    assert noise.tree is not None and noise.positions > 0
    assert noise.chain_bound <= CEILINGS["float64"] and noise.tree_bound <= CEILINGS["float64"]
