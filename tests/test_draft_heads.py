"""Draft heads: trained on the target's own text and hidden states, they lower their loss, the
file round-trips and is refused for another model, and drafting with them leaves greedy
output equal to plain decoding (both backends) and sampling exact."""

from __future__ import annotations

import numpy as np
import pytest

from app.analysis.stats import g_test
from app.cli.main import main
from app.engine.decode_config import DecodeConfig
from app.engine.drafters.heads import HeadsDrafter, HeadsWeights
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from app.errors import ModelFileError
from app.models.draft_heads import BUILTIN_PROMPTS, collect, load_heads, save_heads
from backends.heads_train import train_heads
from tests.helpers import (
    EXACT_P,
    PROMPT,
    assert_drafted,
    exact_distributions,
    first_two_tokens,
)

PROMPTS = ["def add(a, b):\n    return", "the cat sat on the mat. the cat", "import os\n"]


@pytest.fixture(scope="module")
def gguf_target(tmp_path_factory):
    from backends.llamacpp import LlamaCppModel
    from tests.tiny_gguf import write_tiny_gguf

    path = write_tiny_gguf(tmp_path_factory.mktemp("heads-gguf") / "t.gguf", seed=7)
    model = LlamaCppModel(path, n_gpu_layers=0, n_ctx=256)
    yield model
    model.close()


@pytest.fixture(scope="module")
def hf_target(tmp_path_factory):
    from backends.torch_hf import TorchModel
    from tests.tiny_hf import write_tiny_hf

    model = TorchModel(write_tiny_hf(tmp_path_factory.mktemp("heads-hf") / "t", seed=3),
                       device="cpu", batch_invariant=True)  # the exact mode
    yield model
    model.close()


def trained(target, seconds=3.0, n_heads=3):
    data = collect(target, BUILTIN_PROMPTS, n_heads, seconds=60.0, tokens_per_prompt=40)
    result = train_heads(data.hidden, data.labels, data.output_rows, rank=16, seconds=seconds)
    weights = HeadsWeights(result.w1, result.w2, data.vocab_ids, data.output_rows,
                           target.n_vocab, target.name)
    return weights, result


@pytest.fixture(scope="module")
def gguf_heads(gguf_target):
    return trained(gguf_target)


@pytest.fixture(scope="module")
def hf_heads(hf_target):
    return trained(hf_target)


def test_output_rows_give_the_targets_logits(gguf_target, hf_target):
    for target in (gguf_target, hf_target):
        target.truncate(0)
        logits, hidden = target.extend_hidden(target.tokenize(PROMPTS[0]), 2)
        rows = target.output_rows(list(range(target.n_vocab)))
        np.testing.assert_allclose(hidden @ rows.T, logits, atol=1e-3, rtol=1e-3)
        target.truncate(0)


@pytest.mark.parametrize("which", ["gguf", "hf"])
def test_training_lowers_held_out_loss(which, gguf_heads, hf_heads):
    _, result = gguf_heads if which == "gguf" else hf_heads
    first, last = result.history[0], result.history[-1]
    assert last.step > 10
    assert last.train_loss < 0.8 * first.train_loss
    assert len(last.heldout_top1) == 3


def test_heads_file_round_trips_and_is_refused_for_another_model(
    tmp_path, gguf_target, hf_target, gguf_heads
):
    weights, _ = gguf_heads
    path = tmp_path / "h.safetensors"
    save_heads(path, weights)
    back = load_heads(path, gguf_target)
    for name in ("w1", "w2", "vocab_ids", "output_rows"):
        np.testing.assert_array_equal(getattr(back, name), getattr(weights, name))
    assert (back.n_vocab, back.target) == (weights.n_vocab, weights.target)
    with pytest.raises(ModelFileError, match="hidden size.*heads train --target"):
        load_heads(path, hf_target)
    (tmp_path / "junk.safetensors").write_bytes(b"not a heads file")
    with pytest.raises(ModelFileError, match="not a draft-heads file.*heads train"):
        load_heads(tmp_path / "junk.safetensors", gguf_target)


def greedy(target, drafter, prompt, n=40, k=3):
    config = DecodeConfig(n_predict=n, draft_max=k, sampling=SamplingParams(temperature=0.0))
    session = Session(target, drafter, config)
    steps = list(session.steps(target.tokenize(prompt)))
    return session.output_ids, steps


@pytest.mark.parametrize("which", ["gguf", "hf"])
def test_greedy_with_heads_equals_plain(which, gguf_target, hf_target, gguf_heads, hf_heads):
    target, (weights, _) = (gguf_target, gguf_heads) if which == "gguf" else (hf_target, hf_heads)
    runs = []
    for prompt in [*PROMPTS, "x = [1, 2, 3]\nfor"]:
        plain, _ = greedy(target, None, prompt)
        got, steps = greedy(target, HeadsDrafter(weights), prompt)
        assert got == plain, prompt
        runs.extend(steps)
    assert_drafted(runs)  # over the prompts: heads trained briefly may miss on one


def test_sampling_with_heads_is_exact(hf_target, hf_heads):
    """The second token is the first one the heads draft (the first pass has no hidden state
    yet): its marginal over many sessions must be the target's."""
    weights, _ = hf_heads
    params = SamplingParams(temperature=1.0)
    prompt_ids = hf_target.tokenize(PROMPT)
    exact = exact_distributions(hf_target, prompt_ids, params)
    tokens = first_two_tokens(hf_target, HeadsDrafter(weights), prompt_ids, params, 600, 40_000)
    assert g_test(tokens[:, 0], exact.first).p_value > EXACT_P
    assert g_test(tokens[:, 1], exact.second).p_value > EXACT_P


def test_cli_trains_and_drafts(tmp_path, capsys):
    from tests.tiny_gguf import write_tiny_gguf

    model = write_tiny_gguf(tmp_path / "m.gguf", seed=7)
    out = tmp_path / "heads.safetensors"
    assert main(["heads", "train", "-m", str(model), "--out", str(out), "--minutes", "0.15",
                 "--heads", "2", "--rank", "8", "--tokens-per-prompt", "24"]) == 0
    captured = capsys.readouterr()
    assert "held-out loss" in captured.out and "step" in captured.err
    assert main(["run", "-m", str(model), "--draft-heads", str(out), "-p", "the cat",
                 "-n", "12", "-c", "256"]) == 0
    assert main(["run", "-m", str(model), "--draft-heads", str(tmp_path / "none"),
                 "-p", "the cat", "-n", "4", "-c", "256"]) == 1
    assert "heads train" in capsys.readouterr().err
