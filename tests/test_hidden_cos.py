"""hidden_cos: the similarity diagnostic per draft token, its AUC, and the hidden states the
backends return with the logits of a pass."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.engine.drafters import ModelDrafter
from app.engine.lookup import NgramDrafter
from app.engine.protocol import HiddenStateModel
from app.engine.records import StepRecord
from app.engine.sampling import SamplingParams
from app.engine.session import DecodeConfig, Session
from app.engine.similarity import centred_logprobs, logprob_cosine, roc_auc
from app.engine.trace import TraceWriter, read_trace, step_to_dict

PROMPT = "def add(a, b):\n    return"


@pytest.fixture(params=["torch", "llamacpp"])
def pair(request):
    return request.getfixturevalue("hf_pair" if request.param == "torch" else "gguf_pair")


def run(target, drafter, n=24, k=4, temperature=0.0, prompt=PROMPT):
    config = DecodeConfig(n_predict=n, draft_max=k,
                          sampling=SamplingParams(temperature=temperature, seed=3))
    session = Session(target, drafter, config)
    steps = list(session.steps(target.tokenize(prompt)))
    return session, steps


def test_roc_auc_known_values():
    assert roc_auc([0.9, 0.8, 0.1, 0.2], [True, True, False, False]) == 1.0
    assert roc_auc([0.1, 0.2, 0.9, 0.8], [True, True, False, False]) == 0.0
    assert roc_auc([0.5, 0.5, 0.5], [True, False, True]) == 0.5
    assert roc_auc([0.3, 0.4], [True, True]) is None
    rng = np.random.default_rng(0)
    scores, labels = rng.random(200), rng.random(200) < 0.4
    pos, neg = scores[labels], scores[~labels]
    brute = np.mean([(a > b) + 0.5 * (a == b) for a in pos for b in neg])
    assert roc_auc(scores, labels) == pytest.approx(brute)


def test_logprob_stand_in_is_shift_invariant_and_bounded():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(50), rng.standard_normal(50)
    assert logprob_cosine(a, a + 7.0) == pytest.approx(1.0)
    assert -1.0 <= logprob_cosine(a, b) <= 1.0
    assert abs(centred_logprobs(a).mean()) < 1e-12
    # over the shared vocabulary only: a padded draft row compares its first 50 entries
    assert logprob_cosine(np.append(a, [9.0, 9.0]), a) == pytest.approx(
        logprob_cosine(a, a), abs=0.2)


def test_hidden_states_are_what_the_head_reads_and_logits_unchanged(pair):
    target, _ = pair
    assert isinstance(target, HiddenStateModel)
    ids = target.tokenize(PROMPT)
    target.truncate(0)
    plain = target.extend(ids, 3)
    target.truncate(0)
    logits, hidden = target.extend_hidden(ids, 3)
    target.truncate(0)
    assert hidden.shape == (3, target.n_embd)
    np.testing.assert_allclose(logits, plain, rtol=1e-5, atol=1e-5)
    if target.backend == "torch":
        head = target.model.lm_head.weight.detach().numpy()
    else:
        import gguf

        reader = gguf.GGUFReader(target.path)
        head = next(np.array(t.data) for t in reader.tensors if t.name == "output.weight")
    np.testing.assert_allclose(hidden @ head.T, logits, rtol=1e-3, atol=1e-3)


def test_draft_model_gets_the_logprob_stand_in(pair):
    target, draft = pair
    session, steps = run(target, ModelDrafter(draft))
    judged = [t for s in steps for t in s.tokens]
    assert judged and all(t.hidden_cos is not None and -1 <= t.hidden_cos <= 1 for t in judged)
    # recompute the first step's first token by hand
    ids = target.tokenize(PROMPT)
    target.truncate(0)
    draft.truncate(0)
    want = logprob_cosine(draft.extend(ids, 1)[0], target.extend(ids, 1)[0])
    assert steps[0].tokens[0].hidden_cos == pytest.approx(want, abs=1e-5)
    summary = session.summary()
    outcomes = {t.accepted for t in judged}
    assert ("hidden_cos_auc" in summary) == (outcomes == {True, False})


def test_ngram_drafts_have_no_hidden_cos(pair):
    target, _ = pair
    _, steps = run(target, NgramDrafter(), prompt="the cat sat on the mat. the cat")
    judged = [t for s in steps for t in s.tokens]
    assert judged and all(t.hidden_cos is None for t in judged)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_self_draft_compares_hidden_states(hf_dirs, temperature):
    from backends.torch_hf import TorchModel
    from tests.tiny_hf import write_tiny_hf

    folder = write_tiny_hf(hf_dirs[0].parent / "deep", seed=3, n_layer=4)
    target = TorchModel(folder, device="cpu")
    view = target.early_exit(2)
    drafter = ModelDrafter(view, with_hidden=True)
    session, steps = run(target, drafter, temperature=temperature)
    judged = [t for s in steps for t in s.tokens]
    assert judged and all(-1 <= t.hidden_cos <= 1 for t in judged)
    # the first token's value is the cosine of the two final-norm outputs, by hand
    ids = target.tokenize(PROMPT)
    target.truncate(0)
    view.truncate(0)
    a = target.extend_hidden(ids, 1)[1][0]
    b = view.extend_hidden(ids, 1)[1][0]
    want = float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    assert steps[0].tokens[0].hidden_cos == pytest.approx(want, abs=1e-4)
    if temperature == 0.0:
        plain_session, _ = run(target, None, temperature=0.0)
        assert session.output_ids == plain_session.output_ids
    target.close()


def test_traces_without_hidden_cos_still_open(pair, tmp_path):
    target, draft = pair
    _, steps = run(target, ModelDrafter(draft), n=8)
    path = tmp_path / "old.jsonl"
    with path.open("w") as f:
        f.write(json.dumps({"type": "header", "target": "t", "draft": "d", "backend": "x",
                            "device": "cpu", "settings": {}, "versions": {}}) + "\n")
        for step in steps:
            row = step_to_dict(step)
            for token in row["tokens"]:
                del token["hidden_cos"]  # as written before the field existed
            f.write(json.dumps(row) + "\n")
    trace = read_trace(path)
    assert len(trace.steps) == len(steps)
    assert all(isinstance(s, StepRecord) for s in trace.steps)
    assert all(t.hidden_cos is None for s in trace.steps for t in s.tokens)
    new = tmp_path / "new.jsonl"
    with TraceWriter(new) as writer:
        for step in steps:
            writer.step(step)
    again = read_trace(new)
    assert [t.hidden_cos for s in again.steps for t in s.tokens] == [
        t.hidden_cos for s in steps for t in s.tokens]
