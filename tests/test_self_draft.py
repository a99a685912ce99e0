"""Self-speculative drafts: the target's first N layers draft, the target verifies.

torch: a view of the loaded target (shared weights, its own cache); llama.cpp: a GGUF of the
first N blocks written once. Both must leave greedy output equal to plain decoding and keep
sampling exact; the early-exit logits must be those of the first N layers.
"""

from __future__ import annotations

import json

import gguf
import numpy as np
import pytest

from app.analysis.stats import g_test
from app.cli.main import build_parser, main
from app.cli.options import plan
from app.engine.decode_config import DecodeConfig, DrafterChoice, DrafterOptions
from app.engine.drafters.draft_model import ModelDrafter
from app.engine.protocol import EarlyExitModel
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from app.errors import ModelFileError, SettingsError
from app.models.early_exit import truncated_gguf
from app.models.loading import ModelSpec, load_pair
from app.runs import build_session, new_drafter
from tests.helpers import (
    EXACT_P,
    PROMPT,
    assert_drafted,
    exact_distributions,
    first_two_tokens,
)

PROMPTS = ["def add(a, b):\n    return", "the cat sat on the mat. the cat"]


@pytest.fixture(scope="module")
def deep_hf(tmp_path_factory):
    from backends.torch_hf import TorchModel
    from tests.tiny_hf import write_tiny_hf

    folder = write_tiny_hf(tmp_path_factory.mktemp("deep-hf") / "t", seed=3, n_layer=4)
    model = TorchModel(folder, device="cpu", batch_invariant=True)  # the exact mode
    yield model
    model.close()


@pytest.fixture(scope="module")
def deep_gguf(tmp_path_factory):
    """A 4-block GGUF, and a 2-block one drawn from the same seed: write_tiny_gguf draws the
    embeddings, head and blocks in order, so its blocks 0-1 equal the 4-block file's."""
    from tests.tiny_gguf import write_tiny_gguf

    root = tmp_path_factory.mktemp("deep-gguf")
    return (write_tiny_gguf(root / "deep.gguf", seed=5, n_layer=4),
            write_tiny_gguf(root / "shallow.gguf", seed=5, n_layer=2))


def greedy(target, drafter, prompt, n=40, k=4):
    config = DecodeConfig(n_predict=n, draft_max=k, sampling=SamplingParams(temperature=0.0))
    session = Session(target, drafter, config)
    steps = list(session.steps(target.tokenize(prompt)))
    return session.output_ids, steps


def test_torch_view_shares_weights_and_runs_first_layers(deep_hf):
    import torch

    assert isinstance(deep_hf, EarlyExitModel) and deep_hf.n_layers == 4
    view = deep_hf.early_exit(2)
    first = deep_hf.model.model.layers[0].mlp.up_proj.weight
    assert view.model.model.layers[0].mlp.up_proj.weight.data_ptr() == first.data_ptr()
    assert view.model.lm_head.weight.data_ptr() == deep_hf.model.lm_head.weight.data_ptr()
    assert len(deep_hf.model.model.layers) == 4  # the target itself is untouched
    ids = deep_hf.tokenize(PROMPTS[0])
    got = view.extend(ids, 3)
    with torch.no_grad():
        hidden = deep_hf.model(torch.tensor([ids]), output_hidden_states=True).hidden_states[2]
        want = deep_hf.model.lm_head(deep_hf.model.model.norm(hidden))[0, -3:].numpy()
    np.testing.assert_allclose(got, want, atol=1e-4)
    view.truncate(2)  # its own cache rolls back without touching the target's
    np.testing.assert_allclose(view.extend(ids[2:], 1)[0], want[-1], atol=1e-4)
    assert deep_hf.n_cached == 0


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("n_layers", [1, 2, 3])
def test_torch_self_draft_greedy_equals_plain(deep_hf, prompt, n_layers):
    expected, _ = greedy(deep_hf, None, prompt)
    got, steps = greedy(deep_hf, ModelDrafter(deep_hf.early_exit(n_layers)), prompt)
    assert got == expected
    assert_drafted(steps)


def test_torch_layer_count_out_of_range(deep_hf):
    with pytest.raises(Exception, match="1 to 3"):
        deep_hf.early_exit(4)


def test_gguf_first_blocks_equal_a_model_of_those_blocks(deep_gguf):
    from backends.llamacpp import LlamaCppModel

    deep, shallow = deep_gguf
    path = truncated_gguf(deep, 2)
    reader = gguf.GGUFReader(path)
    assert int(reader.fields["llama.block_count"].contents()) == 2
    assert not [t.name for t in reader.tensors if t.name.startswith(("blk.2.", "blk.3."))]
    del reader
    a = LlamaCppModel(path, n_gpu_layers=0, n_ctx=256)
    b = LlamaCppModel(shallow, n_gpu_layers=0, n_ctx=256)
    ids = a.tokenize(PROMPTS[0])
    np.testing.assert_array_equal(a.extend(ids, 2), b.extend(ids, 2))
    a.close()
    b.close()
    written = path.stat().st_mtime_ns
    assert truncated_gguf(deep, 2) == path and path.stat().st_mtime_ns == written  # cached


def test_gguf_layer_count_out_of_range(deep_gguf):
    with pytest.raises(ModelFileError, match="1 to 3"):
        truncated_gguf(deep_gguf[0], 4)


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("n_layers", [1, 3])
def test_llamacpp_self_draft_greedy_equals_plain(deep_gguf, prompt, n_layers):
    pair = load_pair(ModelSpec(target=str(deep_gguf[0]), n_gpu_layers=0, n_ctx=256,
                               first_layers=(n_layers,)))
    try:
        config = DecodeConfig(drafter=DrafterChoice(("self",), DrafterOptions(layers=n_layers)))
        drafter = new_drafter(pair, config)
        assert isinstance(drafter, ModelDrafter)
        assert f"first {n_layers} of 4" in drafter.model.name
        assert drafter.name == f"self-draft (first {n_layers} layers)"
        expected, _ = greedy(pair.target, None, prompt)
        got, steps = greedy(pair.target, drafter, prompt)
        assert got == expected
        assert_drafted(steps)
    finally:
        pair.close()


def test_torch_self_draft_sampling_is_exact(deep_hf):
    params = SamplingParams(temperature=1.0)
    prompt_ids = deep_hf.tokenize(PROMPT)
    exact = exact_distributions(deep_hf, prompt_ids, params)
    drafter = ModelDrafter(deep_hf.early_exit(2))
    tokens = first_two_tokens(deep_hf, drafter, prompt_ids, params, 1000, 20_000)
    assert g_test(tokens[:, 0], exact.first).p_value > EXACT_P
    assert g_test(tokens[:, 1], exact.second).p_value > EXACT_P


def test_a_draft_file_and_self_draft_together_are_refused(deep_gguf, capsys):
    code = main(["run", "-m", str(deep_gguf[0]), "-md", str(deep_gguf[1]),
                 "--self-draft-layers", "1", "-p", "the cat", "-n", "4"])
    assert code == 1 and "pick one draft" in capsys.readouterr().err
    code = main(["run", "-m", str(deep_gguf[0]), "-md", str(deep_gguf[1]),
                 "--spec-type", "self,draft", "--self-draft-layers", "1", "-p", "the cat"])
    assert code == 1 and "put self last" in capsys.readouterr().err


def test_bench_layer_sweep_json(deep_gguf, capsys):
    code = main(["bench", "-m", str(deep_gguf[0]), "--self-draft-layers", "1,3", "-n", "12",
                 "-p", "the cat", "--json"])
    out, _ = capsys.readouterr()
    assert code == 0
    rows = json.loads(out)["rows"]
    assert [r["self_draft_layers"] for r in rows] == [1, 3]
    for row in rows:
        assert row["target_layers"] == 4 and row["identical"] is True
        assert {"acceptance", "tokens_per_pass", "speedup"} <= set(row)
        assert row["drafter"] == f"self-draft (first {row['self_draft_layers']} layers)"
        auc = row["hidden_cos_auc"]
        assert auc is None or 0.0 <= auc <= 1.0


def test_run_refuses_a_list_of_layer_counts(deep_gguf, capsys):
    code = main(["run", "-m", str(deep_gguf[0]), "--self-draft-layers", "1,3", "-p", "x"])
    _, err = capsys.readouterr()
    assert code == 1 and "bench --self-draft-layers" in err


def test_the_bench_plan_loads_every_layer_count_with_the_pair_and_a_run_loads_none(deep_gguf):
    """--self-draft-layers is parsed once into one run per layer count and one spec that
    loads each count's model with the pair; a run asking for a count not loaded is refused
    with a message, instead of loading a model while its session is built."""
    args = build_parser().parse_args(["bench", "-m", str(deep_gguf[0]),
                                      "--self-draft-layers", "1,3", "-p", "the cat"])
    bench = plan(args)
    assert [c.drafter.options.layers for c in bench.runs] == [1, 3]
    assert all(c.drafter.names == ("self",) for c in bench.runs)
    assert bench.spec.first_layers == (1, 3) and bench.prompts == ("the cat",)
    pair = load_pair(bench.spec)
    try:
        assert sorted(pair.self_drafts) == [1, 3]
        loaded = dict(pair.self_drafts)
        for config in bench.runs:
            build_session(pair, config)
        assert pair.self_drafts == loaded  # nothing more was loaded
        two = DecodeConfig(drafter=DrafterChoice(("self",), DrafterOptions(layers=2)))
        with pytest.raises(SettingsError, match="first 2 layers were not loaded"):
            build_session(pair, two)
        assert pair.self_drafts == loaded
    finally:
        pair.close()
