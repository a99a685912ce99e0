"""A GGUF's own MTP (NextN) layers drafting for it on llama.cpp (issue #28).

Tiny glm4moe files with one trained-style NextN block (tests/tiny_mtp_gguf.py), loaded by
the real llama.cpp: detection, greedy identity with exact kernels, the MTP cache kept in step
with the target through rejections, the sampled distribution (with a power check), the trace.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.engine.cost_curve import VerifyCostCurve
from app.engine.decode_config import DecodeConfig, DrafterChoice
from app.engine.drafters.mtp import DRAFT_MTP, MtpDrafter
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from app.engine.trace import TraceHeader, TraceWriter, iter_token_rows, read_trace
from app.errors import SettingsError
from app.models.found import describe_gguf
from app.models.loading import ModelSpec, load_pair
from app.models.mtp import mtp_layers, mtp_offer
from app.runs import build_session
from backends.base import BackendError
from backends.llamacpp_mtp import LlamaCppMtpModel
from tests.helpers import (
    BROKEN_P,
    EXACT_P,
    assert_drafted,
    first_two_pvalues,
    pass_outcome,
    resample_from_p,
)
from tests.tiny_mtp_gguf import write_tiny_mtp_gguf

PROMPT_TEXT = "the cat sat on the mat and the dog"


@pytest.fixture(scope="module")
def plain_file(tmp_path_factory):
    return write_tiny_mtp_gguf(tmp_path_factory.mktemp("mtp") / "tiny-no-mtp.gguf", nextn=0)


@pytest.fixture(scope="module")
def exact_target(mtp_file):
    model = LlamaCppMtpModel(mtp_file, n_ctx=256, n_threads=1, batch_invariant=True)
    yield model
    model.close()


# --- detection ----------------------------------------------------------------------------


def test_a_gguf_with_nextn_layers_is_offered_its_own_mtp_draft(mtp_file):
    assert mtp_layers(mtp_file) == 1
    assert describe_gguf(mtp_file, "tiny", "test").mtp_layers == 1
    assert "its own MTP layers" in mtp_offer(mtp_file)


def test_a_gguf_without_nextn_layers_is_never_offered_it(plain_file, tmp_path):
    assert mtp_layers(plain_file) == 0
    assert describe_gguf(plain_file, "tiny", "test").mtp_layers == 0
    assert mtp_offer(plain_file) == ""
    assert mtp_layers(tmp_path) == 0  # a folder
    with pytest.raises(SettingsError, match="no MTP layers"):
        load_pair(ModelSpec(str(plain_file), with_mtp=True, n_ctx=256))


def test_llamacpp_refuses_mtp_on_a_model_without_it(plain_file):
    with pytest.raises(BackendError, match="no MTP"):
        LlamaCppMtpModel(plain_file, n_ctx=256, n_threads=1)


def test_llamacpp_loads_the_nextn_block(exact_target):
    assert exact_target.n_mtp_heads == 1
    assert exact_target.mtp_heads().n_heads == 1


# --- greedy: identical to plain decoding ---------------------------------------------------


@pytest.mark.parametrize("draft_max", [1, 3, 6])
def test_greedy_with_mtp_draft_matches_plain_decoding(exact_target, draft_max):
    prompt = exact_target.tokenize(PROMPT_TEXT)
    config = DecodeConfig(n_predict=48, draft_max=draft_max, stop_at_eos=False)
    plain = Session(exact_target, None, config)
    list(plain.steps(prompt))
    drafter = MtpDrafter(exact_target.mtp_heads(), eos_ids=exact_target.eos_ids)
    session = Session(exact_target, drafter, config)
    steps = list(session.steps(prompt))
    assert session.output_ids == plain.output_ids
    assert_drafted(steps)
    assert any(t.accepted is False for s in steps for t in s.tokens), "nothing was rejected"
    assert {s.source for s in steps} == {DRAFT_MTP.name}


def test_built_through_the_run_wiring_mtp_drafts_and_matches_plain(mtp_file):
    spec = ModelSpec(str(mtp_file), with_mtp=True, n_ctx=256, n_threads=1,
                     batch_invariant=True)
    pair = load_pair(spec)
    try:
        config = DecodeConfig(n_predict=32, draft_max=4, adaptive=True, stop_at_eos=False,
                              drafter=DrafterChoice(("mtp",)))
        prompt = pair.target.tokenize(PROMPT_TEXT)
        plain = build_session(pair, config, plain=True)
        list(plain.steps(prompt))
        session = build_session(pair, config)
        assert isinstance(session.drafter, MtpDrafter)
        steps = list(session.steps(prompt))
        assert session.output_ids == plain.output_ids
        assert_drafted(steps)
        # the controller prices MTP drafting as a paid draft: it registered the kind, and a
        # pass it chose to draft (not a probe, whose time includes catching up) sets its cost
        controller = session.controller
        assert DRAFT_MTP.name in controller.costs and not controller.shadows(DRAFT_MTP)
        for _ in range(10):  # so that drafting pays
            controller.estimates[DRAFT_MTP.name].observe([True] * 4)
        controller.curve = VerifyCostCurve({n: 1.0 for n in range(1, 6)})
        k = controller.decide(10, DRAFT_MTP).k
        assert k > 0
        controller.observe(pass_outcome(DRAFT_MTP, k, [True] * k, t_draft=0.5 * k,
                                        t_verify=1.0))
        assert controller.pass_cost(DRAFT_MTP).draft_cost > 0
    finally:
        pair.close()


def test_mtp_cache_after_rejections_equals_a_fresh_catch_up(exact_target):
    """After a run with rejections, the MTP block's guess from its incrementally kept cache
    is what a cache rebuilt from scratch over the committed tokens gives."""
    prompt = exact_target.tokenize(PROMPT_TEXT)
    heads = exact_target.mtp_heads()
    session = Session(exact_target, MtpDrafter(heads, eos_ids=exact_target.eos_ids),
                      DecodeConfig(n_predict=40, draft_max=4, stop_at_eos=False))
    steps = list(session.steps(prompt))
    assert any(t.accepted is False for s in steps for t in s.tokens)
    context = prompt + session.output_ids
    assert exact_target.n_cached == len(context) - 1
    kept = heads.start(context)
    heads.reset()
    fresh = heads.start(context)
    assert kept is not None and fresh is not None
    np.testing.assert_allclose(kept, fresh, rtol=0, atol=1e-4)
    assert int(np.argmax(kept)) == int(np.argmax(fresh))


# --- sampling: the target's exact distribution ---------------------------------------------

SAMPLED = SamplingParams(temperature=1.0, top_k=5)
N_SAMPLED = 600


@pytest.fixture(scope="module")
def sampled_target(tmp_path_factory):
    # on PROMPT its first draft is accepted with chance sum(min(p, q)) = 0.46 under top-k 5,
    # and resampling from p instead of the residual shifts the first token by a
    # noncentrality of 0.20 per run (about 120 over N_SAMPLED runs: far past BROKEN_P)
    path = write_tiny_mtp_gguf(tmp_path_factory.mktemp("mtp") / "tiny-mtp-s.gguf", mix=0.15,
                               seed=0)
    model = LlamaCppMtpModel(path, n_ctx=64, n_threads=1, batch_invariant=True)
    yield model
    model.close()


def test_sampled_mtp_drafts_emit_the_target_distribution(sampled_target):
    drafter = MtpDrafter(sampled_target.mtp_heads(), eos_ids=sampled_target.eos_ids)
    first, second = first_two_pvalues(sampled_target, drafter, SAMPLED, N_SAMPLED, 1000)
    assert first > EXACT_P and second > EXACT_P


def test_the_sampled_test_catches_resampling_from_p(sampled_target, monkeypatch):
    resample_from_p(monkeypatch)
    drafter = MtpDrafter(sampled_target.mtp_heads(), eos_ids=sampled_target.eos_ids)
    first, _ = first_two_pvalues(sampled_target, drafter, SAMPLED, N_SAMPLED, 1000)
    assert first < BROKEN_P


# --- the trace: which head proposed each token ----------------------------------------------


def test_trace_names_the_mtp_head_of_each_draft_token(exact_target, tmp_path):
    prompt = exact_target.tokenize(PROMPT_TEXT)
    drafter = MtpDrafter(exact_target.mtp_heads(), eos_ids=exact_target.eos_ids)
    session = Session(exact_target, drafter, DecodeConfig(n_predict=12, draft_max=3))
    path = tmp_path / "mtp.jsonl"
    with TraceWriter(path) as writer:
        writer.header(TraceHeader("t", drafter.name, "llamacpp", "cpu", {}, {}))
        for step in session.steps(prompt):
            writer.step(step)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    tokens = [t for line in lines if line["type"] == "step" for t in line["tokens"]]
    assert tokens and all(t["head"] == 0 for t in tokens)
    steps = read_trace(path).steps
    assert all(t.head == 0 for s in steps for t in s.tokens)
    assert all(row["head"] == 0 for row in iter_token_rows(steps))


# --- models list ------------------------------------------------------------------------------


def test_models_list_offers_a_targets_own_mtp_layers_as_its_draft(mtp_file, plain_file,
                                                                   capsys, tmp_path,
                                                                   monkeypatch):
    from app.cli.main import main
    from app.models import stores

    monkeypatch.setenv("HOME", str(tmp_path))  # no stores: only the files given
    for name in ("OLLAMA_MODELS", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME",
                 "XDG_CACHE_HOME", "LLAMA_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(stores, "OLLAMA_SERVICE_STORE", tmp_path / "no-ollama-service")

    assert main(["models", "list", "--json", "--drafts-for", str(mtp_file)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["path"] == str(mtp_file) and rows[0]["mtp_layers"] == 1
    assert "its own MTP layers" in rows[0]["verdict"]
    assert main(["models", "list", "--json", "--drafts-for", str(plain_file)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert all(row["path"] != str(plain_file) for row in rows)
    assert all("MTP" not in row["verdict"] for row in rows)


# --- check-exact ------------------------------------------------------------------------------


def test_check_exact_passes_with_mtp_drafts_and_its_exact_kernels_child_drafts_too(
        mtp_file, capsys):
    """The app's own check on an MTP target: the exact-kernels child is started with
    --draft-mtp (it once was started without a draft and refused to run)."""
    from app.cli.main import main

    code = main(["check-exact", "-m", str(mtp_file), "--draft-mtp", "--draft-max", "3",
                 "--samples", "60", "-n", "16", "--json"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["exact_mode"] == "exact kernels on the CPU"
    assert report["exact_kernels_identical"] is True and report["drafted"] > 0
    assert report["exact_drafted"] > 0 and report["sampled_drafted"] > 0  # the child drafted
    assert report["passed"] is True and code == 0


def test_mtp_heads_refuse_a_cache_they_would_share_with_the_target(mtp_file, monkeypatch):
    """llama.cpp never trims an MTP cache shared with the target (Gemma 4 assistants); the
    MTP context trims after each rejection, so a shared one is refused, not corrupted."""
    model = LlamaCppMtpModel(mtp_file, n_ctx=256, n_threads=1)
    try:
        monkeypatch.setattr(model._ext, "llama_get_ctx_other", lambda ctx: model._ctx)
        with pytest.raises(BackendError, match="share the target's KV cache"):
            model.mtp_heads()
        monkeypatch.undo()  # this file's own MTP block has a cache of its own
        assert model.mtp_heads().n_heads == 1
    finally:
        model.close()
