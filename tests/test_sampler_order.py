"""Each backend's processed distribution equals its runtime's own sampler on the same logits:
llama.cpp's sampler chain (top-k, top-p, min-p, temperature last) through llama-cpp-python's
low-level API, and transformers' warpers in generate()'s order (temperature first). The two
orders give different distributions for the same flags, so each must match only its own."""

from __future__ import annotations

import ctypes
import json

import numpy as np
import pytest

from app.analysis.stats import g_test
from app.cli.main import main
from app.engine.decode_config import DecodeConfig
from app.engine.drafters.draft_model import ModelDrafter
from app.engine.sampling import ORDER_LLAMACPP, ORDER_TRANSFORMERS, SamplingParams, process
from app.engine.session import Session
from tests.helpers import (
    EXACT_P,
    exact_distributions,
    first_two_tokens,
)


def llamacpp_sampler(logits: np.ndarray, p: SamplingParams) -> np.ndarray:
    """llama.cpp's chain as common_sampler builds it (min_keep 1, as llama-cpp-python passes);
    the probabilities are the softmax of the logits that survive, as its dist sampler draws."""
    import llama_cpp as ll

    chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
    stages = (ll.llama_sampler_init_top_k(p.top_k), ll.llama_sampler_init_top_p(p.top_p, 1),
              ll.llama_sampler_init_min_p(p.min_p, 1), ll.llama_sampler_init_temp(p.temperature))
    for stage in stages:
        ll.llama_sampler_chain_add(chain, stage)
    n = logits.shape[0]
    data = (ll.llama_token_data * n)(*(ll.llama_token_data(i, float(x), 0.0)
                                       for i, x in enumerate(logits)))
    candidates = ll.llama_token_data_array(data, n, -1, False)
    ll.llama_sampler_apply(chain, ctypes.byref(candidates))
    ids = np.array([candidates.data[i].id for i in range(candidates.size)])
    kept = np.array([candidates.data[i].logit for i in range(candidates.size)], dtype=np.float64)
    ll.llama_sampler_free(chain)
    probs = np.zeros(n)
    weights = np.exp(kept - kept.max())
    probs[ids] = weights / weights.sum()
    return probs


def transformers_sampler(logits: np.ndarray, p: SamplingParams) -> np.ndarray:
    """generate()'s warpers, added and ordered as _get_logits_processor does."""
    import torch
    from transformers import (
        LogitsProcessorList,
        MinPLogitsWarper,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    warpers = LogitsProcessorList()
    if p.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(p.temperature))
    if p.top_k:
        warpers.append(TopKLogitsWarper(top_k=p.top_k))
    if p.top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=p.top_p))
    if p.min_p:
        warpers.append(MinPLogitsWarper(min_p=p.min_p))
    scores = torch.tensor(logits, dtype=torch.float32)[None]
    out = warpers(torch.zeros((1, 1), dtype=torch.long), scores)
    return torch.softmax(out.double(), dim=-1)[0].numpy()


RUNTIMES = {ORDER_LLAMACPP: llamacpp_sampler, ORDER_TRANSFORMERS: transformers_sampler}

_rng = np.random.default_rng(11)
LOGITS = {
    "random": _rng.normal(size=40) * 2.5,
    "peaked": np.concatenate([[6.0, 5.0, 4.5], _rng.normal(size=60)]),
    # ties: at top-p cuts, inside the kept set and in the discarded tail
    "ties": np.array([3.0, 3.0, 2.0, 2.0, 2.0, 1.0, 0.5, -1.0, -1.0, -1.0, -4.0, -4.0]),
}
PARAMS = [
    SamplingParams(temperature=0.7, top_p=0.8),
    SamplingParams(temperature=1.6, top_p=0.6),
    SamplingParams(temperature=0.5, min_p=0.2),
    SamplingParams(temperature=2.0, min_p=0.1),
    SamplingParams(temperature=0.8, top_k=5),
    SamplingParams(temperature=1.3, top_k=8, top_p=0.9, min_p=0.05),
    SamplingParams(temperature=0.6, top_k=20, top_p=0.7),
    SamplingParams(temperature=1.0, top_p=0.95, min_p=0.02),
]


def with_order(params: SamplingParams, order: str) -> SamplingParams:
    return SamplingParams(params.temperature, params.top_k, params.top_p, params.min_p,
                          order=order)


@pytest.mark.parametrize("order", list(RUNTIMES))
@pytest.mark.parametrize("params", PARAMS, ids=repr)
@pytest.mark.parametrize("case", list(LOGITS))
def test_processed_distribution_equals_the_runtimes_own_sampler(order, params, case):
    logits = LOGITS[case]
    want = RUNTIMES[order](logits, params)
    got = process(logits, with_order(params, order))
    assert np.count_nonzero(got) == np.count_nonzero(want)
    if order == ORDER_LLAMACPP and case == "ties":
        # a top-p cut inside a group of tied tokens: llama.cpp leaves which of them stay
        # unspecified (std::partial_sort), so compare the kept probabilities as a multiset
        np.testing.assert_allclose(np.sort(got), np.sort(want), atol=2e-6)
        return
    assert np.flatnonzero(got).tolist() == np.flatnonzero(want).tolist()
    np.testing.assert_allclose(got, want, atol=2e-6)


def test_the_two_orders_differ_so_the_comparison_has_power():
    """With top-p, min-p and a temperature other than 1, the orders keep other tokens; each
    runtime's sampler must disagree with DraftLens set to the other runtime's order."""
    differing = 0
    for case in ("random", "peaked"):
        logits = LOGITS[case]
        for params in PARAMS:
            llama = process(logits, with_order(params, ORDER_LLAMACPP))
            hf = process(logits, with_order(params, ORDER_TRANSFORMERS))
            if not np.allclose(llama, hf, atol=1e-4):
                differing += 1
                assert not np.allclose(llama, transformers_sampler(logits, params), atol=1e-4)
                assert not np.allclose(hf, llamacpp_sampler(logits, params), atol=1e-4), case
    assert differing >= 8


def test_top_k_ties_at_the_cut_follow_each_runtime():
    logits = np.array([2.0, 1.0, 1.0, 1.0, 1.0, 0.0])
    params = SamplingParams(temperature=0.9, top_k=3)
    hf = process(logits, with_order(params, ORDER_TRANSFORMERS))
    np.testing.assert_allclose(hf, transformers_sampler(logits, params), atol=2e-6)
    assert np.count_nonzero(hf) == 5  # transformers keeps every token tied with the k-th
    llama = process(logits, with_order(params, ORDER_LLAMACPP))
    reference = llamacpp_sampler(logits, params)
    # llama.cpp keeps exactly k; which of the tied tokens is unspecified (std::partial_sort),
    # so compare the kept probabilities as a multiset
    assert np.count_nonzero(llama) == np.count_nonzero(reference) == 3
    np.testing.assert_allclose(np.sort(llama), np.sort(reference), atol=2e-6)


def test_each_backend_names_its_order_and_the_session_uses_the_targets(gguf_pair, hf_pair):
    for (target, _), order in ((gguf_pair, ORDER_LLAMACPP), (hf_pair, ORDER_TRANSFORMERS)):
        assert target.sampler_order == order
        session = Session(target, None, DecodeConfig(sampling=SamplingParams(temperature=0.8)))
        assert session.config.sampling.order == order


def test_the_trace_header_records_the_sampler_order(gguf_files, capsys, tmp_path):
    trace = tmp_path / "t.jsonl"
    code = main(["run", "-m", str(gguf_files[0]), "-md", str(gguf_files[1]), "-p", "the cat",
                 "-n", "6", "--temp", "0.8", "--top-p", "0.9", "--trace", str(trace)])
    assert code == 0, capsys.readouterr().err
    header = json.loads(trace.read_text().splitlines()[0])
    assert header["settings"]["sampling"]["order"] == ORDER_LLAMACPP


def test_llamacpp_order_session_samples_exactly_from_the_target(gguf_pair):
    """End to end on the tiny GGUF pair with llama.cpp's order: the first two tokens follow
    the target's processed distributions (G-test, as tests/test_sampling_distribution.py)."""
    target, draft = gguf_pair
    # first_two_tokens passes temperature, top-k and top-p on; the session adds the order
    params = SamplingParams(temperature=1.4, top_p=0.7, order=ORDER_LLAMACPP)
    prompt_ids = target.tokenize("the cat")
    exact = exact_distributions(target, prompt_ids, params)
    tokens = first_two_tokens(target, ModelDrafter(draft), prompt_ids, params, 800, 70_000)
    assert g_test(tokens[:, 0], exact.first).p_value > EXACT_P
    assert g_test(tokens[:, 1], exact.second).p_value > EXACT_P
