"""Pairs whose vocabularies differ by padding, as Qwen2.5 7B+ (152,064 tokens) and its 0.5B
draft (151,936) do: the pair check accepts up to 128 extra tokens as llama.cpp does and says
in one line what differs when it refuses; the engine compares p and q over the target's width,
so greedy output equals plain decoding and sampling stays exact."""

from __future__ import annotations

import json

import numpy as np
import pytest

import app.engine.speculative as speculative_module
from app.analysis.stats import g_test
from app.cli.main import main
from app.engine.decode_config import DecodeConfig
from app.engine.drafters.draft_model import ModelDrafter
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from app.models.pair_check import MAX_VOCAB_SIZE_DIFFERENCE, check_pair_files
from tests.helpers import (
    BROKEN_P,
    EXACT_P,
    assert_drafted,
    exact_distributions,
    first_two_tokens,
)
from tests.tiny_gguf import write_tiny_gguf
from tests.tiny_hf import write_tiny_hf

PROMPT = "def add(a, b):\n    return"
PAD = MAX_VOCAB_SIZE_DIFFERENCE


@pytest.fixture(scope="module")
def padded_ggufs(tmp_path_factory):
    """target padded by 128 (padding never greedy), target whose padding carries mass, draft
    without padding, draft padded by 128 with mass, and a target padded by 200."""
    root = tmp_path_factory.mktemp("padded")
    target = write_tiny_gguf(root / "target.gguf", seed=0, pad_vocab=PAD)
    return {
        "target": target,
        "target_pad_mass": write_tiny_gguf(root / "target_mass.gguf", seed=0, pad_vocab=PAD,
                                           pad_logit_scale=6.0),
        "draft": write_tiny_gguf(root / "draft.gguf", seed=1, noise_from=target, noise=0.15),
        "draft_padded": write_tiny_gguf(root / "draft_padded.gguf", seed=1, noise_from=target,
                                        noise=0.15, pad_vocab=PAD, pad_logit_scale=6.0),
        "plain_target": write_tiny_gguf(root / "plain_target.gguf", seed=0),
        "target_200": write_tiny_gguf(root / "target_200.gguf", seed=0, pad_vocab=200),
    }


@pytest.fixture(scope="module")
def gguf_models(padded_ggufs):
    from backends.llamacpp import LlamaCppModel

    models = {name: LlamaCppModel(path, n_gpu_layers=0, n_ctx=512)
              for name, path in padded_ggufs.items() if name != "target_200"}
    yield models
    for model in models.values():
        model.close()


def run(target, drafter, n_predict=40, params=None):
    config = DecodeConfig(n_predict=n_predict, draft_max=4,
                          sampling=params or SamplingParams(temperature=0.0))
    session = Session(target, drafter, config)
    steps = list(session.steps(target.tokenize(PROMPT)))
    return session.output_ids, steps


# --- the pair check ------------------------------------------------------------------------


def test_padding_up_to_128_tokens_is_compatible_either_way(padded_ggufs):
    for target, draft in (("target", "draft"), ("plain_target", "draft_padded")):
        check = check_pair_files(padded_ggufs[target], padded_ggufs[draft])
        assert check.compatible, check.message
        assert "128 extra tokens" in check.message


def test_200_extra_tokens_are_beyond_padding_so_the_pair_drafts_across_vocabularies(
        padded_ggufs, capsys):
    code = main(["models", "check", str(padded_ggufs["target_200"]),
                 str(padded_ggufs["draft"])])
    out = capsys.readouterr().out
    assert code == 0
    assert "sizes differ by 200 tokens" in out and "at most 128" in out
    assert "different vocabularies" in out


def test_a_differing_special_token_is_named(tmp_path, padded_ggufs):
    import gguf

    other = tmp_path / "other_eos.gguf"
    reader = gguf.GGUFReader(padded_ggufs["plain_target"])
    writer = gguf.GGUFWriter(str(other), "llama")
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        value = field.contents()
        if field.name == "tokenizer.ggml.add_eos_token":
            value = True  # the draft appends EOS to a prompt, the target does not
        writer.add_key_value(field.name, value, field.types[0],
                             field.types[-1] if len(field.types) > 1 else None)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, np.array(tensor.data),
                          raw_shape=list(reversed(tensor.shape.tolist())))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    check = check_pair_files(padded_ggufs["plain_target"], other)
    assert not check.compatible
    assert check.message.startswith("EOS handling differs (only the draft adds EOS")


# --- greedy identity -------------------------------------------------------------------------


@pytest.mark.parametrize("target_name, draft_name", [
    ("target", "draft"),  # the target's padding is never picked
    ("target_pad_mass", "draft"),  # the target emits padding the draft cannot read
    ("plain_target", "draft_padded"),  # the draft is the wider one
])
def test_llamacpp_padded_pair_greedy_equals_plain(gguf_models, target_name, draft_name):
    target, draft = gguf_models[target_name], gguf_models[draft_name]
    assert target.n_vocab != draft.n_vocab
    expected, _ = run(target, None)
    got, steps = run(target, ModelDrafter(draft, target_vocab=target.n_vocab))
    assert got == expected
    # the padded target drafts for a noisy draft: its tokens may all be rejected here
    assert_drafted(steps, accepted=False)
    if target_name == "target_pad_mass":  # this case must exercise the draft falling silent
        assert max(expected) >= draft.n_vocab


def test_cli_bench_of_a_padded_pair_is_identical_to_plain(padded_ggufs, capsys):
    """The whole path: the check passes, the loader takes both widths, the drafter is told
    the target's width, and the text equals the plain run's."""
    code = main(["bench", "-m", str(padded_ggufs["target"]), "-md", str(padded_ggufs["draft"]),
                 "-p", PROMPT, "-n", "24", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["identical"] is True


@pytest.fixture(scope="module")
def hf_padded(tmp_path_factory):
    """A torch target with 128 padded logit rows (tokenizer unchanged, as Qwen2.5 7B), whose
    padding carries mass, and its unpadded draft."""
    from backends.torch_hf import TorchModel

    root = tmp_path_factory.mktemp("hf_padded")
    target = TorchModel(write_tiny_hf(root / "target", seed=0, pad_vocab=PAD,
                                      pad_logit_scale=3.0), device="cpu")
    draft = TorchModel(write_tiny_hf(root / "draft", seed=0, noise=0.3), device="cpu")
    yield target, draft
    target.close()
    draft.close()


def test_torch_padded_pair_greedy_equals_plain(hf_padded):
    target, draft = hf_padded
    assert target.n_vocab == draft.n_vocab + PAD
    expected, _ = run(target, None)
    got, steps = run(target, ModelDrafter(draft, target_vocab=target.n_vocab))
    assert got == expected
    assert_drafted(steps, accepted=False)  # a draft with noise 0.3: often every token fails


# --- sampling stays exact when the widths differ ----------------------------------------------

N_RUNS = 1200
PARAMS = SamplingParams(temperature=1.0)


@pytest.fixture(scope="module")
def exact_and_sampled(hf_padded):
    target, draft = hf_padded
    prompt_ids = target.tokenize(PROMPT)
    exact = exact_distributions(target, prompt_ids, PARAMS)
    drafter = ModelDrafter(draft, target_vocab=target.n_vocab)
    tokens = first_two_tokens(target, drafter, prompt_ids, PARAMS, N_RUNS, 20_000)
    return exact, tokens


def test_padding_carries_mass_in_this_test(hf_padded, exact_and_sampled):
    _, draft = hf_padded
    exact, tokens = exact_and_sampled
    assert exact.first[draft.n_vocab:].sum() > 0.05  # the residual must reach the padding
    assert (tokens[:, 0] >= draft.n_vocab).sum() > 30


def test_first_two_tokens_follow_the_target_when_widths_differ(exact_and_sampled):
    exact, tokens = exact_and_sampled
    assert g_test(tokens[:, 0], exact.first).p_value > EXACT_P
    assert g_test(tokens[:, 1], exact.second).p_value > EXACT_P


def test_dropping_the_targets_extra_ids_is_detected(hf_padded, monkeypatch):
    """Power: comparing over the draft's width (the target's padding cut off) must fail."""
    target, draft = hf_padded
    prompt_ids = target.tokenize(PROMPT)
    exact = exact_distributions(target, prompt_ids, PARAMS)
    real_process = speculative_module.process  # where verify turns logits into p

    def narrow(logits, params):
        probs = real_process(logits, params).copy()
        probs[..., draft.n_vocab:] = 0.0
        return probs / probs.sum(axis=-1, keepdims=True)

    monkeypatch.setattr(speculative_module, "process", narrow)
    drafter = ModelDrafter(draft, target_vocab=target.n_vocab)
    tokens = first_two_tokens(target, drafter, prompt_ids, PARAMS, 400, 30_000)
    assert g_test(tokens[:, 0], exact.first).p_value < BROKEN_P
