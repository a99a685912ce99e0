"""Drafting across vocabularies (TLI): a draft with another tokenizer than the target's.

Tiny models with two different vocabularies that overlap partly (tiny GGUFs with other word
pieces; tiny transformers models with other characters), the draft built from the target's
rows by token text plus noise, so it agrees now and then. Greedy output must equal plain
decoding on both backends, chains and trees; under sampling the first two tokens must follow
the target's exact distribution (G-test), and a draft whose q is not renormalised over the
shared tokens must fail the same test.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.engine.decode_config import DecodeConfig
from app.engine.drafters import Budget
from app.engine.drafters.draft_model.cross_vocab import StringDrafter, TLIDrafter
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from app.engine.trace import step_from_dict, step_to_dict
from app.models.pair_check import check_pair_files, read_model_vocab
from app.models.token_bytes import byte_level_bytes, sentencepiece_bytes
from tests.helpers import (
    BROKEN_P,
    EXACT_P,
    assert_drafted,
    first_two_pvalues,
    unrenormalised_tli,
)
from tests.tiny_gguf import DEFAULT_WORDS
from tests.tiny_hf import CHARS

PROMPTS = ["def add(a, b):\n    return", "the cat sat on the mat. the cat"]
# the draft's word pieces: some of the target's left out, some of its own, in another order
OTHER_WORDS = tuple(reversed([w for w in DEFAULT_WORDS if w not in ("return", "print", "self")]
                             + ["python", "lambda", "yield", "async"]))
# the draft's characters: some of the target's left out, some of its own, in another order
OTHER_CHARS = [c for c in CHARS if c not in "qxz,"][::-1] + list("QXZ!?@#")


@pytest.fixture(scope="module")
def xv_gguf(gguf_files, tmp_path_factory):
    from backends.llamacpp import LlamaCppModel
    from tests.tiny_gguf import write_tiny_gguf

    target_path = gguf_files[0]
    draft_path = write_tiny_gguf(tmp_path_factory.mktemp("xv") / "other.gguf", seed=5,
                                 words=OTHER_WORDS, rows_from=target_path, noise=0.15)
    check = check_pair_files(target_path, draft_path)
    target, draft = (LlamaCppModel(p, n_gpu_layers=0, n_ctx=512)
                     for p in (target_path, draft_path))
    yield target, draft, check
    target.close()
    draft.close()


@pytest.fixture(scope="module")
def xv_hf(hf_dirs, tmp_path_factory):
    from backends.torch_hf import TorchModel
    from tests.tiny_hf import write_tiny_hf

    target_dir = hf_dirs[0]
    draft_dir = write_tiny_hf(tmp_path_factory.mktemp("xv") / "other", seed=3,
                              chars=OTHER_CHARS, rows_from=target_dir, noise=0.3)
    check = check_pair_files(target_dir, draft_dir)
    # the target in the exact mode (one token per pass), where greedy identity is guaranteed
    target = TorchModel(target_dir, device="cpu", batch_invariant=True)
    draft = TorchModel(draft_dir, device="cpu")
    yield target, draft, check
    target.close()
    draft.close()


@pytest.fixture(params=["torch", "llamacpp"])
def xv_pair(request):
    return request.getfixturevalue("xv_hf" if request.param == "torch" else "xv_gguf")


def generate(target, drafter, k, prompt, n_predict=40, **config):
    session = Session(target, drafter, DecodeConfig(
        n_predict=n_predict, draft_max=k, sampling=SamplingParams(temperature=0.0), **config))
    steps = list(session.steps(target.tokenize(prompt)))
    return session.output_ids, steps


# --- token texts and the pair check ----------------------------------------------------


def test_token_texts_compare_as_bytes_across_notations():
    assert byte_level_bytes("Ġthe") == sentencepiece_bytes("▁the") == b" the"
    assert byte_level_bytes("Ċ") == sentencepiece_bytes("<0x0A>") == b"\n"
    assert byte_level_bytes("Ã©") == "é".encode()


def test_different_vocabularies_are_the_third_answer(xv_pair):
    _, _, check = xv_pair
    assert not check.compatible and check.usable and check.cross is not None
    assert ": different vocabularies — " in check.message
    bridge = check.cross.bridge
    assert 0 < bridge.n_shared < bridge.draft_vocab
    assert f"{bridge.n_shared:,} of the draft's {bridge.draft_vocab:,} tokens" in check.message


@pytest.mark.parametrize("which", ["xv_hf", "xv_gguf"])
def test_shared_tokens_are_exactly_the_texts_both_have(which, request, hf_dirs, gguf_files):
    _, draft, check = request.getfixturevalue(which)
    target_path = hf_dirs[0] if which == "xv_hf" else gguf_files[0]
    target_bytes = read_model_vocab(target_path).as_bytes()
    draft_bytes = read_model_vocab(draft.path).as_bytes()
    bridge = check.cross.bridge
    for d, t in zip(bridge.draft_ids, bridge.target_ids, strict=True):
        assert draft_bytes[d] == target_bytes[t] is not None
    expected = {d for d, text in enumerate(draft_bytes) if text and text in set(target_bytes)}
    assert set(bridge.draft_ids.tolist()) == expected


def test_a_vocabulary_with_nothing_in_common_is_refused(hf_dirs, tmp_path):
    from tests.tiny_hf import write_tiny_hf

    foreign = write_tiny_hf(tmp_path / "foreign", chars=list("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
    check = check_pair_files(hf_dirs[0], foreign)
    assert not check.usable and check.cross is None
    assert "same model family" in check.message


# --- greedy: identical to plain ---------------------------------------------------------


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_tli_greedy_equals_plain(xv_pair, k, prompt):
    target, draft, check = xv_pair
    expected, _ = generate(target, None, 1, prompt)
    got, steps = generate(target, TLIDrafter(target, draft, check.cross.bridge), k, prompt)
    assert got == expected
    assert_drafted(steps)


def test_tli_tree_greedy_equals_plain(xv_pair):
    target, draft, check = xv_pair
    expected, _ = generate(target, None, 1, PROMPTS[0])
    got, steps = generate(target, TLIDrafter(target, draft, check.cross.bridge), 4, PROMPTS[0],
                          tree_width=2, tree_nodes=8, draft_p_split=0.05)
    assert got == expected
    assert_drafted(steps)
    assert any(s.is_tree and len(s.tokens) > s.draft_depth for s in steps), "never branched"
    assert all(t.translated is not None for s in steps for t in s.tokens)


def test_tli_adaptive_greedy_equals_plain(xv_pair):
    target, draft, check = xv_pair
    expected, _ = generate(target, None, 1, PROMPTS[1])
    got, _ = generate(target, TLIDrafter(target, draft, check.cross.bridge), 6, PROMPTS[1],
                      adaptive=True)
    assert got == expected


@pytest.mark.parametrize("k", [2, 5])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_string_level_greedy_equals_plain(xv_pair, k, prompt):
    target, draft, _ = xv_pair
    expected, _ = generate(target, None, 1, prompt)
    got, steps = generate(target, StringDrafter(target, draft), k, prompt)
    assert got == expected
    assert_drafted(steps)
    tokens = [t for s in steps for t in s.tokens]
    assert all(t.translated is not None and t.translated.outside_mass is None for t in tokens)
    assert all(t.q == 1.0 for t in tokens)  # a guess: one-hot


def test_records_show_the_translation_and_survive_the_trace(xv_pair):
    target, draft, check = xv_pair
    _, steps = generate(target, TLIDrafter(target, draft, check.cross.bridge), 4, PROMPTS[0])
    tokens = [t for s in steps for t in s.tokens]
    assert tokens and all(t.translated is not None for t in tokens)
    # a shared token has the same text in both vocabularies
    assert all(t.translated.draft_text == t.text for t in tokens)
    outside = [t.translated.outside_mass for t in tokens]
    assert all(0.0 <= m < 1.0 for m in outside) and max(outside) > 0.0
    again = step_from_dict(step_to_dict(steps[0]))
    assert again.tokens[0].translated == steps[0].tokens[0].translated


def test_the_inspector_shows_each_draft_token_with_the_target_token_it_became(xv_gguf):
    from ui.step_table import StepTableModel, rows_of

    target, draft, check = xv_gguf
    _, steps = generate(target, StringDrafter(target, draft), 4, PROMPTS[1])
    _, tli_steps = generate(target, TLIDrafter(target, draft, check.cross.bridge), 4,
                            PROMPTS[1])
    table = StepTableModel()
    for step in (steps[1], tli_steps[1]):
        row = rows_of(step)[0]
        shown = table.cell(row, 1)[0]
        assert " → " in shown and shown.split(" → ")[0]
        assert ("outside)" in shown) == (row.record.translated.outside_mass is not None)


def test_q_is_the_renormalised_shared_distribution(xv_hf):
    target, draft, check = xv_hf
    drafter = TLIDrafter(target, draft, check.cross.bridge)
    params = SamplingParams(temperature=1.0)
    context = target.tokenize(PROMPTS[0])
    drafter.begin(context)
    result = drafter.propose(context, Budget(1), params, np.random.default_rng(0))
    row = result.q_rows[0]
    assert row.shape == (target.n_vocab,) and abs(row.sum() - 1.0) < 1e-9
    shared_targets = set(check.cross.bridge.target_ids.tolist())
    assert all(row[t] == 0 for t in range(target.n_vocab) if t not in shared_targets)
    assert result.translated[0].outside_mass > 0.05


# --- sampling: the target's distribution, exactly -------------------------------------

N_SESSIONS = 1500


def test_tli_sampling_follows_target_distribution(xv_hf):
    target, draft, check = xv_hf
    drafter = TLIDrafter(target, draft, check.cross.bridge)
    first, second = first_two_pvalues(target, drafter, SamplingParams(temperature=1.0),
                                      N_SESSIONS, seed0=10_000)
    assert first > EXACT_P and second > EXACT_P


def test_a_draft_not_renormalised_over_the_shared_tokens_is_detected(xv_hf, monkeypatch):
    unrenormalised_tli(monkeypatch)
    target, draft, check = xv_hf
    drafter = TLIDrafter(target, draft, check.cross.bridge)
    first, second = first_two_pvalues(target, drafter, SamplingParams(temperature=1.0),
                                      N_SESSIONS, seed0=20_000)
    assert min(first, second) < BROKEN_P


# --- the commands ------------------------------------------------------------------------


def run_cli(capsys, *argv):
    from app.cli.main import main

    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_check_exact_passes_on_a_cross_vocabulary_pair(xv_gguf, capsys):
    target, draft, _ = xv_gguf
    code, out, err = run_cli(capsys, "check-exact", "-m", target.path, "-md", draft.path,
                             "--samples", 100, "-n", 16, "--json")
    report = json.loads(out.strip().splitlines()[-1])
    assert report["exact_kernels_identical"] is True
    assert report["passed"] is True and code == 0, err


@pytest.mark.parametrize("method", ["tli", "string"])
def test_run_drafts_across_vocabularies_as_asked(xv_gguf, capsys, tmp_path, method):
    target, draft, _ = xv_gguf
    trace = tmp_path / "t.jsonl"
    code, _, err = run_cli(capsys, "run", "-m", target.path, "-md", draft.path, "-n", 16,
                           "-p", PROMPTS[1], "--cross-vocab", method, "--trace", trace)
    assert code == 0, err
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    label = "TLI" if method == "tli" else "string-level"
    steps = [line for line in lines if line["type"] == "step" and line["tokens"]]
    assert steps and all(label in s["drafter"] for s in steps)
    assert all(t["translated"]["draft_text"] for s in steps for t in s["tokens"])


def test_cross_vocab_flag_on_a_same_vocabulary_pair_is_refused(gguf_files, capsys):
    code, _, err = run_cli(capsys, "run", "-m", gguf_files[0], "-md", gguf_files[1], "-p", "x",
                           "--cross-vocab", "string")
    assert code != 0 and "drop the flag" in err


def test_rank_measures_each_way_of_drafting_across_vocabularies(xv_gguf, capsys):
    target, draft, _ = xv_gguf
    code, out, err = run_cli(capsys, "rank", "-m", target.path, "--candidates", draft.path,
                             "--draft-max", 3, "-n", 12, "-p", PROMPTS[1], "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    labels = sorted(r["label"] for r in rows)
    assert labels == sorted([f"{Path(draft.path).name} (TLI)",
                             f"{Path(draft.path).name} (string-level)"])
    assert all(not r["error"] and r["acceptance"] > 0 for r in rows)


def test_bench_beside_transformers_universal_assisted_generation(xv_hf, capsys):
    target, draft, _ = xv_hf
    code, out, err = run_cli(capsys, "bench", "-m", target.path, "-md", draft.path, "-n", 16,
                             "-p", "the cat", "--backend", "torch", "--compare-hf", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["identical"] is True and report["hf_identical"] is True
    assert report["acceptance"] > 0 and report["hf_assisted_tokens_per_pass"] > 1.0


def test_models_check_measures_the_mass_the_shared_tokens_hold(xv_gguf, capsys):
    target, draft, _ = xv_gguf
    code, out, err = run_cli(capsys, "models", "check", target.path, draft.path, "--mass")
    assert code == 0, err
    share = float(out.split("the shared tokens hold ")[1].split("%")[0])
    assert 0.0 < share < 100.0
