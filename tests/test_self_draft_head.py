"""The llama.cpp self-draft with an output head over some of the target's tokens
(app.models.early_exit writes it, backends.llamacpp_head_subset runs it).

Its logits must be the full-head draft's at the tokens kept and -inf (q = 0) elsewhere; runs
with it must stay greedy-identical to plain decoding in the exact mode and exact when
sampled (and a broken acceptance rule must fail the same sampled test); the search must
measure the draft as it drafts (argmax among the kept tokens, the head's bytes in proportion).
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from app.analysis.stats import g_test
from app.engine.decode_config import DecodeConfig, DrafterChoice, DrafterOptions, StopRule
from app.engine.drafters.self_draft import SelfDrafter
from app.engine.drafters.self_skip import DraftHead, given_skip
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from app.models.early_exit import head_subset_ids, kept_blocks_gguf
from app.models.loading import ModelSpec, load_pair
from app.runs import new_drafter
from backends.llamacpp_head_subset import HEAD_IDS_KEY, LlamaCppHeadSubsetModel
from tests.helpers import (
    BROKEN_P,
    EXACT_P,
    PROMPT,
    always_accept,
    assert_drafted,
    exact_distributions,
    first_two_tokens,
    run_cli,
)
from tests.tiny_gguf import BOS_ID, EOS_ID

PROMPTS = ["def add(a, b):\n    return", "the cat sat on the mat. the cat"]
HEAD = 259 + 12  # the control and byte tokens come first in the tiny vocabulary: 12 words


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    from tests.tiny_gguf import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("head") / "deep.gguf", seed=5, n_layer=4)


def load(path, **options):
    from backends.llamacpp import LlamaCppModel

    return LlamaCppModel(path, n_gpu_layers=0, n_ctx=256, **options)


def test_the_file_keeps_the_first_ids_and_every_token_that_is_not_plain(deep):
    reader = gguf.GGUFReader(deep)
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].contents())
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    ids = head_subset_ids(deep, HEAD)
    assert ids == sorted(set(range(HEAD)) | {i for i in range(n_vocab) if types[i] != 1})
    assert len(ids) < n_vocab
    path = kept_blocks_gguf(deep, {2}, HEAD)
    assert path.name.endswith(f".head{HEAD}.gguf")
    small = gguf.GGUFReader(path)
    assert list(small.fields[HEAD_IDS_KEY].contents()) == ids
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    assert small.fields["tokenizer.ggml.tokens"].contents() == [tokens[i] for i in ids]
    assert small.fields["tokenizer.ggml.bos_token_id"].contents() == ids.index(BOS_ID)
    assert small.fields["tokenizer.ggml.eos_token_id"].contents() == ids.index(EOS_ID)
    rows = {t.name: np.asarray(t.data) for t in reader.tensors}
    for tensor in small.tensors:
        if tensor.name in ("token_embd.weight", "output.weight"):
            np.testing.assert_array_equal(np.asarray(tensor.data), rows[tensor.name][ids])


@pytest.mark.parametrize("skip", [{1}, {2, 3}])
def test_its_logits_are_the_full_heads_at_the_tokens_kept_and_minus_infinity_elsewhere(
        deep, skip):
    full = load(kept_blocks_gguf(deep, skip))
    target = load(deep)
    subset = LlamaCppHeadSubsetModel(kept_blocks_gguf(deep, skip, HEAD), target,
                                     n_gpu_layers=0, n_ctx=256)
    try:
        assert subset.n_vocab == full.n_vocab and subset.head_tokens < full.n_vocab
        assert subset.eos_ids == target.eos_ids
        ids = target.tokenize(PROMPTS[0] + " " + PROMPTS[1])
        want, got = full.extend(ids, 3), subset.extend(ids, 3)
        kept = np.asarray(head_subset_ids(deep, HEAD))
        # the inputs go in as embedding rows, the same float32 rows llama.cpp looks up
        np.testing.assert_allclose(got[:, kept], want[:, kept], rtol=1e-5, atol=1e-5)
        outside = np.setdiff1d(np.arange(full.n_vocab), kept)
        assert np.all(np.isneginf(got[:, outside]))
        # and it goes on from its cache, rolled back as any model's
        subset.truncate(len(ids) - 2)
        full.truncate(len(ids) - 2)
        np.testing.assert_allclose(subset.extend(ids[-2:], 1)[:, kept],
                                   full.extend(ids[-2:], 1)[:, kept], rtol=1e-5, atol=1e-5)
        # its text is the target's: it reads and writes the target's ids
        assert subset.tokenize(PROMPTS[0]) == target.tokenize(PROMPTS[0])
        assert subset.token_text(ids[1]) == target.token_text(ids[1])
    finally:
        for model in (full, target, subset):
            model.close()


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("skip", ["1", "2-3"])
def test_greedy_with_a_head_subset_equals_plain(deep, prompt, skip):
    pair = load_pair(ModelSpec(target=str(deep), n_gpu_layers=0, n_ctx=256,
                               batch_invariant=True, self_skips=(skip,), self_head=HEAD))
    try:
        drafter = new_drafter(pair, DecodeConfig(
            drafter=DrafterChoice(("self",), DrafterOptions(skip=skip))))
        assert isinstance(drafter.model, LlamaCppHeadSubsetModel)
        assert f"head {drafter.model.head_tokens:,} of {pair.target.n_vocab:,}" in (
            drafter.model.name)
        config = DecodeConfig(n_predict=40, draft_max=4,
                              sampling=SamplingParams(temperature=0.0))
        expected = Session(pair.target, None, config)
        list(expected.steps(pair.target.tokenize(prompt)))
        session = Session(pair.target, drafter, config)
        steps = list(session.steps(pair.target.tokenize(prompt)))
        assert session.output_ids == expected.output_ids
        assert_drafted(steps)
    finally:
        pair.close()


def test_sampling_with_a_head_subset_is_exact_and_a_broken_rule_is_seen(deep, monkeypatch):
    """q is 0 outside the head: the target's own tokens there come only from the residual
    draw, which the sampled test checks; with the acceptance rule broken it fails."""
    pair = load_pair(ModelSpec(target=str(deep), n_gpu_layers=0, n_ctx=256, self_head=HEAD))
    try:
        params = SamplingParams(temperature=1.0)
        prompt_ids = pair.target.tokenize(PROMPT)
        exact = exact_distributions(pair.target, prompt_ids, params)
        outside = np.setdiff1d(np.arange(pair.target.n_vocab), head_subset_ids(deep, HEAD))
        assert exact.second[outside].sum() > 0.2  # the residual carries real mass
        draft = pair.load_self_draft("1-2")
        assert isinstance(draft, LlamaCppHeadSubsetModel)
        drafter = SelfDrafter(draft, StopRule(), pair.target.n_vocab)
        tokens = first_two_tokens(pair.target, drafter, prompt_ids, params, 1000, 20_000)
        assert g_test(tokens[:, 0], exact.first).p_value > EXACT_P
        assert g_test(tokens[:, 1], exact.second).p_value > EXACT_P
        always_accept(monkeypatch)
        broken = first_two_tokens(pair.target, drafter, prompt_ids, params, 1000, 20_000)
        assert min(g_test(broken[:, 0], exact.first).p_value,
                   g_test(broken[:, 1], exact.second).p_value) < BROKEN_P
    finally:
        pair.close()


def test_the_search_measures_the_draft_as_it_drafts(deep):
    """Agreement is the subset draft's own argmax against the target's; the estimated cost
    counts the head's kept rows only; coverage is the share of the target's tokens kept."""
    target = load(deep)
    scorer = target.skip_scorer()
    try:
        texts = [target.tokenize(p) for p in PROMPTS]
        kept = np.asarray(head_subset_ids(deep, HEAD))
        head = DraftHead(kept, target.n_vocab)
        whole = given_skip(scorer, texts, frozenset({2}))
        cut = given_skip(scorer, texts, frozenset({2}), head)
        assert cut.cost < whole.cost and whole.head_tokens == 0
        assert (cut.head_tokens, cut.n_vocab) == (len(kept), target.n_vocab)
        draft = LlamaCppHeadSubsetModel(kept_blocks_gguf(deep, {2}, HEAD), target,
                                        n_gpu_layers=0, n_ctx=256)
        hits = covered = positions = 0
        for ids in texts:
            wanted = target.extend(ids, len(ids)).argmax(axis=1)[1:]
            target.truncate(0)
            got = draft.extend(ids, len(ids)).argmax(axis=1)[1:]
            draft.truncate(0)
            hits += int((got == wanted).sum())
            covered += int(np.isin(wanted, kept).sum())
            positions += len(wanted)
        draft.close()
        assert cut.agreement == pytest.approx(hits / positions)
        assert cut.head_coverage == pytest.approx(covered / positions) and cut.head_coverage < 1
        assert "head" in cut.label() and f"{cut.head_coverage:.1%}" in cut.describe()
    finally:
        scorer.close()
        target.close()


def test_a_negative_head_is_refused_with_what_it_means(deep, capsys):
    code, _, err = run_cli(capsys, "run", "-m", str(deep), "--spec-type", "self",
                           "--self-skip", "1", "--self-head", "-1", "-p", "hi")
    assert code != 0 and "--self-head" in err and "0 keeps them all" in err
