"""Self-speculative drafts: the target with a set of its layers skipped drafts, the target
verifies.

torch: the target's own modules without the skipped layers, inside the target's forward and
(borrowing) its KV cache; llama.cpp: a GGUF of the kept blocks, written once. Both must leave
greedy output equal to plain decoding in the exact mode and keep sampling exact; the skipped
model's logits must be those of a model of the kept layers.
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from app.analysis.stats import g_test
from app.engine.decode_config import DecodeConfig, DrafterChoice, DrafterOptions, StopRule
from app.engine.drafters.self_draft import SelfDrafter
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from app.errors import ModelFileError, SettingsError
from app.models.early_exit import kept_blocks_gguf
from app.models.loading import ModelSpec, load_pair
from app.runs import new_drafter
from tests.helpers import (
    BROKEN_P,
    EXACT_P,
    PROMPT,
    always_accept,
    assert_drafted,
    exact_distributions,
    first_two_tokens,
)

PROMPTS = ["def add(a, b):\n    return", "the cat sat on the mat. the cat"]
SKIPS = [{1}, {2}, {3}, {1, 2}, {2, 3}]


@pytest.fixture(scope="module")
def deep_hf_folder(tmp_path_factory):
    from tests.tiny_hf import write_tiny_hf

    return write_tiny_hf(tmp_path_factory.mktemp("deep-hf") / "t", seed=3, n_layer=4)


@pytest.fixture(scope="module")
def deep_hf(deep_hf_folder):
    from backends.torch_hf import TorchModel

    model = TorchModel(deep_hf_folder, device="cpu", batch_invariant=True)  # the exact mode
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


def model_of_layers(target, kept):
    """A transformers model of only the `kept` layers of the target, renumbered, its weights
    copied: what the skipped model must compute, built without backends.torch_skip."""
    import copy

    from transformers import LlamaForCausalLM

    config = copy.deepcopy(target.model.config)
    config.num_hidden_layers = len(kept)
    if getattr(config, "layer_types", None):
        config.layer_types = [config.layer_types[i] for i in kept]
    model = LlamaForCausalLM(config).eval()
    state = {}
    for name, value in target.model.state_dict().items():
        if name.startswith("model.layers."):
            index, rest = name.split(".", 3)[2:]
            if int(index) in kept:
                state[f"model.layers.{kept.index(int(index))}.{rest}"] = value
        else:
            state[name] = value
    model.load_state_dict(state)
    return model


def test_torch_skipped_model_shares_weights_and_is_a_model_of_the_kept_layers(deep_hf):
    import torch

    draft = deep_hf.skip_draft(frozenset({1, 2}), borrow=False)
    kept_layer = deep_hf.model.model.layers[3].mlp.up_proj.weight
    assert draft.model.model.layers[1].mlp.up_proj.weight.data_ptr() == kept_layer.data_ptr()
    assert draft.model.lm_head.weight.data_ptr() == deep_hf.model.lm_head.weight.data_ptr()
    assert len(deep_hf.model.model.layers) == 4  # the target itself is untouched
    ids = deep_hf.tokenize(PROMPTS[0])
    with torch.no_grad():
        want = model_of_layers(deep_hf, [0, 3])(torch.tensor([ids])).logits[0].numpy()
    np.testing.assert_allclose(draft.extend(ids, len(ids)), want, atol=1e-5)
    draft.truncate(3)  # its own cache rolls back without touching the target's
    np.testing.assert_allclose(draft.extend(ids[3:], 1)[0], want[-1], atol=1e-5)
    assert deep_hf.n_cached == 0


def test_torch_borrowing_draft_reads_the_targets_cache_and_gives_it_back(deep_hf):
    """Its kept layers attend to the keys and values the target wrote for the text (not to
    its own), and what it appends is gone before the target's next pass."""
    import torch
    from transformers import DynamicCache

    ids = deep_hf.tokenize(PROMPTS[1])
    deep_hf.truncate(0)
    deep_hf.extend(ids[:-3], 0)
    draft = deep_hf.skip_draft(frozenset({1, 2}))
    got = draft.extend(ids[-3:], 2)
    assert draft.n_cached == len(ids) and deep_hf.n_cached == len(ids) - 3
    # the reference: a model of layers 0 and 3 over a cache holding the target's own keys
    # and values of those layers for the text
    target_cache = deep_hf._cache
    cache = DynamicCache()
    for new, old in enumerate([0, 3]):
        layer = target_cache.layers[old]
        cache.update(layer.keys[..., : len(ids) - 3, :].clone(),
                     layer.values[..., : len(ids) - 3, :].clone(), new)
    with torch.no_grad():
        want = model_of_layers(deep_hf, [0, 3])(
            torch.tensor([ids[-3:]]), past_key_values=cache, use_cache=True).logits[0, 1:]
    np.testing.assert_allclose(got, want.numpy(), atol=1e-5)
    alone = deep_hf.skip_draft(frozenset({1, 2}), borrow=False)
    assert not np.allclose(alone.extend(ids, 1)[0], got[-1], atol=1e-3)  # the cache mattered
    draft.release()
    assert draft.n_cached == deep_hf.n_cached == len(ids) - 3
    after = deep_hf.extend(ids[-3:], 1)[0]
    deep_hf.truncate(0)
    np.testing.assert_array_equal(after, deep_hf.extend(ids, 1)[0])
    with pytest.raises(Exception, match="cannot roll back the target's tokens"):
        draft.truncate(2)
    deep_hf.truncate(0)


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("skip", SKIPS)
def test_torch_self_draft_greedy_equals_plain(deep_hf, prompt, skip):
    expected, _ = greedy(deep_hf, None, prompt)
    drafter = SelfDrafter(deep_hf.skip_draft(frozenset(skip)), StopRule(), deep_hf.n_vocab)
    got, steps = greedy(deep_hf, drafter, prompt)
    assert got == expected
    assert_drafted(steps)


@pytest.mark.parametrize("skip", [{0, 1}, {4}, set()])
def test_torch_refuses_a_skip_set_it_cannot_run(deep_hf, skip):
    with pytest.raises(Exception, match="skips some of layers 1 to 3"):
        deep_hf.skip_draft(frozenset(skip))


def test_torch_self_draft_sampling_is_exact(deep_hf, monkeypatch):
    """The first two tokens follow the target's exact distributions; with the acceptance
    rule broken the same test fails, so it can see a wrong self-draft."""
    params = SamplingParams(temperature=1.0)
    prompt_ids = deep_hf.tokenize(PROMPT)
    exact = exact_distributions(deep_hf, prompt_ids, params)
    drafter = SelfDrafter(deep_hf.skip_draft(frozenset({1, 2})), StopRule(), deep_hf.n_vocab)
    tokens = first_two_tokens(deep_hf, drafter, prompt_ids, params, 1000, 20_000)
    assert g_test(tokens[:, 0], exact.first).p_value > EXACT_P
    assert g_test(tokens[:, 1], exact.second).p_value > EXACT_P
    always_accept(monkeypatch)
    broken = first_two_tokens(deep_hf, drafter, prompt_ids, params, 1000, 20_000)
    assert min(g_test(broken[:, 0], exact.first).p_value,
               g_test(broken[:, 1], exact.second).p_value) < BROKEN_P


def test_gguf_of_kept_blocks_is_a_model_of_those_blocks(deep_gguf):
    from backends.llamacpp import LlamaCppModel

    deep, shallow = deep_gguf
    path = kept_blocks_gguf(deep, {2, 3})
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
    assert kept_blocks_gguf(deep, [3, 2]) == path and path.stat().st_mtime_ns == written


@pytest.mark.parametrize("skip", [{1}, {1, 2}, {2, 3}])
def test_gguf_of_kept_blocks_agrees_with_the_target_scored_without_them(deep_gguf, skip):
    """Two mechanisms, one answer: the renumbered file, and the target itself with the
    layers' outputs overwritten by their inputs (backends.llamacpp_skip)."""
    from backends.llamacpp import LlamaCppModel

    target = LlamaCppModel(deep_gguf[0], n_gpu_layers=0, n_ctx=256)
    draft = LlamaCppModel(kept_blocks_gguf(deep_gguf[0], skip), n_gpu_layers=0, n_ctx=256)
    ids = target.tokenize(PROMPTS[0] + " " + PROMPTS[1])
    scorer = target.skip_scorer()
    try:
        skipped = scorer.skipped_argmax(ids, frozenset(skip))
        assert list(skipped) == list(draft.extend(ids, len(ids)).argmax(axis=1))
        assert list(scorer.skipped_argmax(ids, frozenset())) == list(
            target.extend(ids, len(ids)).argmax(axis=1))
        assert list(skipped) != list(scorer.skipped_argmax(ids, frozenset()))
    finally:
        scorer.close()
        target.close()
        draft.close()


def test_gguf_skip_set_out_of_range(deep_gguf):
    with pytest.raises(ModelFileError, match="blocks 0 to 3"):
        kept_blocks_gguf(deep_gguf[0], {4})


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("skip", ["1", "1-2", "2-3"])
def test_llamacpp_self_draft_greedy_equals_plain(deep_gguf, prompt, skip):
    pair = load_pair(ModelSpec(target=str(deep_gguf[0]), n_gpu_layers=0, n_ctx=256,
                               batch_invariant=True, self_skips=(skip,)))
    try:
        config = DecodeConfig(drafter=DrafterChoice(("self",), DrafterOptions(skip=skip)))
        drafter = new_drafter(pair, config)
        assert isinstance(drafter, SelfDrafter) and not drafter.borrows
        assert f"(skips {skip})" in drafter.model.name
        assert drafter.name == f"self-draft (skips layers {skip})"  # no figures settled
        expected, _ = greedy(pair.target, None, prompt)
        got, steps = greedy(pair.target, drafter, prompt)
        assert got == expected
        assert_drafted(steps)
    finally:
        pair.close()


def test_llamacpp_self_draft_sampling_is_exact(deep_gguf):
    pair = load_pair(ModelSpec(target=str(deep_gguf[0]), n_gpu_layers=0, n_ctx=256))
    try:
        params = SamplingParams(temperature=1.0)
        prompt_ids = pair.target.tokenize(PROMPT)
        exact = exact_distributions(pair.target, prompt_ids, params)
        drafter = SelfDrafter(pair.load_self_draft("1-2"), StopRule(), pair.target.n_vocab)
        tokens = first_two_tokens(pair.target, drafter, prompt_ids, params, 1000, 20_000)
        assert g_test(tokens[:, 0], exact.first).p_value > EXACT_P
        assert g_test(tokens[:, 1], exact.second).p_value > EXACT_P
    finally:
        pair.close()


def test_an_unsettled_auto_set_is_refused_with_the_way_out(deep_gguf):
    pair = load_pair(ModelSpec(target=str(deep_gguf[0]), n_gpu_layers=0, n_ctx=256))
    try:
        with pytest.raises(SettingsError, match="--self-skip 6-11,15-20"):
            new_drafter(pair, DecodeConfig(drafter=DrafterChoice(("self",))))
        with pytest.raises(SettingsError, match="cannot skip layer 0"):
            pair.self_draft("0-1")
    finally:
        pair.close()
