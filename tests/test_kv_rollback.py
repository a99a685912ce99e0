"""After speculation with rejections, the models' caches hold exactly the accepted context:
the next-token logits equal a fresh model's on the same tokens, for both backends."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.decode_config import DecodeConfig
from app.engine.drafters import Budget
from app.engine.drafters.draft_model import ModelDrafter
from app.engine.sampling import SamplingParams, softmax
from app.engine.session import Session

PROMPT = "def add(a, b):\n    return a + b\n"
# Logits tolerance. The fresh model reads the context in passes of at most FRESH_CHUNK
# tokens, the sizes speculation itself uses: llama.cpp scores passes of 64+ tokens with
# other kernels (about 7e-3 off on the tiny GGUF), while a single stale or missing cache
# entry moves the logits by 0.5 or more. A one-pass reference is also checked, loosely.
TOLERANCE = {"torch": 1e-4, "llamacpp": 1e-3}
FRESH_CHUNK = 16
ONE_PASS_TOLERANCE = 2e-2


@pytest.fixture(params=["torch", "llamacpp"])
def pair(request):
    return request.getfixturevalue("hf_pair" if request.param == "torch" else "gguf_pair")


def fresh_instance(model):
    """A new instance of the same class on the same file: its cache has never been touched."""
    if model.backend == "torch":
        from backends.torch_hf import TorchModel

        return TorchModel(model.path, device="cpu")
    from backends.llamacpp import LlamaCppModel

    return LlamaCppModel(model.path, n_gpu_layers=0, n_ctx=512)


def fresh_logits(fresh, context: list[int], chunk: int = FRESH_CHUNK) -> np.ndarray:
    """Next-token logits of `context` from an emptied cache, read in passes of `chunk`."""
    fresh.truncate(0)
    for start in range(0, len(context) - 1, chunk):
        fresh.extend(context[start : min(start + chunk, len(context) - 1)], 0)
    logits = fresh.extend(context[-1:], 1)[0]
    fresh.truncate(0)
    return logits


def assert_logits_close(got: np.ndarray, want: np.ndarray, backend: str) -> None:
    tol = TOLERANCE[backend]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def next_logits_and_restore(model, context: list[int]) -> np.ndarray:
    """Logits after `context` from a model whose cache holds context[:-1]; cache restored."""
    assert model.n_cached == len(context) - 1
    logits = model.extend([context[-1]], 1)[0]
    model.truncate(len(context) - 1)
    return logits


def sampling_session(target, draft, seed: int, n_predict: int = 60, k: int = 4) -> Session:
    config = DecodeConfig(
        n_predict=n_predict, draft_max=k, stop_at_eos=False,
        sampling=SamplingParams(temperature=1.0, seed=seed),
    )
    return Session(target, ModelDrafter(draft), config)


def test_target_cache_after_sampling_with_rejections_matches_fresh_model(pair):
    target, draft = pair
    backend = target.backend
    fresh = fresh_instance(target)
    try:
        prompt = target.tokenize(PROMPT)
        session = sampling_session(target, draft, seed=4)
        steps = []
        for step in session.steps(prompt):
            steps.append(step)
            if step.index % 5 == 4:  # check mid-run too, then carry on from the same cache
                context = prompt + session.output_ids
                got = next_logits_and_restore(target, context)
                assert_logits_close(got, fresh_logits(fresh, context), backend)
        rejected_at = [i for s in steps for i, t in enumerate(s.tokens) if not t.accepted]
        assert len(rejected_at) >= 5, "the run must roll the cache back several times"
        # a rejection with draft tokens after it: a rollback of more than one position
        assert any(not t.accepted and i < s.k - 1 for s in steps for i, t in enumerate(s.tokens))
        context = prompt + session.output_ids
        got = next_logits_and_restore(target, context)
    finally:
        fresh.close()
    brand_new = fresh_instance(target)
    try:
        one_pass = brand_new.extend(context, 1)[0]
        want = fresh_logits(brand_new, context)
    finally:
        brand_new.close()
    assert_logits_close(got, want, backend)
    np.testing.assert_allclose(got, one_pass, rtol=0, atol=ONE_PASS_TOLERANCE)


def test_draft_cache_inside_model_drafter_matches_fresh_model(pair):
    target, draft = pair
    backend = draft.backend
    fresh = fresh_instance(draft)
    try:
        prompt = target.tokenize(PROMPT)
        session = sampling_session(target, draft, seed=5)
        drafter = session.drafter
        greedy = SamplingParams(temperature=0.0)
        rng = np.random.default_rng(0)
        checks = 0
        rejections = 0
        for step in session.steps(prompt):
            rejections += sum(not t.accepted for t in step.tokens)
            if step.index % 4 != 3:
                continue
            # the drafter's cache still holds the rejected draft tokens of this step; its
            # next proposal must first roll them back
            context = prompt + session.output_ids
            proposal = drafter.propose(context, Budget(1), greedy, rng)
            want = softmax(fresh_logits(fresh, context))
            np.testing.assert_allclose(proposal.q_rows[0], want, rtol=10 * TOLERANCE[backend],
                                       atol=TOLERANCE[backend] / 10)
            assert proposal.tokens[0] == int(np.argmax(want))
            checks += 1
        assert checks >= 3
        assert rejections >= 3
    finally:
        fresh.close()


def test_truncate_then_extend_matches_fresh_model(pair):
    """The backend contract the engine relies on: roll back to any length and go on."""
    target, _ = pair
    backend = target.backend
    fresh = fresh_instance(target)
    try:
        rng = np.random.default_rng(1)
        base = target.tokenize(PROMPT)
        vocab = target.n_vocab
        target.truncate(0)
        context: list[int] = []
        for extra, keep in [(base, 9), (None, 12), (None, 3), (None, 3), (None, 0), (base, 20)]:
            tokens = list(extra) if extra is not None else rng.integers(3, vocab, 6).tolist()
            target.extend(tokens, 0)
            context += tokens
            assert target.n_cached == len(context)
            keep = min(keep, len(context) - 1)
            target.truncate(keep)
            context = context[:keep]
            assert target.n_cached == keep
            last = int(rng.integers(3, vocab))
            got = target.extend([last], 1)[0]
            assert_logits_close(got, fresh_logits(fresh, context + [last]), backend)
            target.truncate(keep)
    finally:
        fresh.close()
        target.truncate(0)


def test_rows_of_a_verify_batch_match_one_token_at_a_time(pair):
    """The k+1 rows of one verify pass equal the logits of scoring each prefix separately."""
    target, _ = pair
    backend = target.backend
    prompt = target.tokenize(PROMPT)
    target.truncate(0)
    target.extend(prompt[:-4], 0)
    batch = target.extend(prompt[-4:], 4)
    target.truncate(len(prompt) - 4)
    single = []
    for token in prompt[-4:]:
        single.append(target.extend([token], 1)[0])
    target.truncate(0)
    assert_logits_close(batch, np.stack(single), backend)
