"""hidden_cos: the cosine of the draft's and the target's final hidden states, only for
self-drafts (the one kind whose hidden states are comparable with the target's and whose
cosine measured better than chance); its AUC with an interval; and the hidden states the
backends return with the logits of a pass."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.engine.decode_config import DecodeConfig, StopRule
from app.engine.drafters.draft_model import ModelDrafter
from app.engine.drafters.heads import HeadsDrafter
from app.engine.drafters.lookup.edits import EditAwareLookup
from app.engine.drafters.self_draft import SelfDrafter
from app.engine.protocol import HiddenStateModel
from app.engine.records import StepRecord
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from app.engine.similarity import auc_interval, roc_auc
from app.engine.trace import TraceWriter, read_trace, step_to_dict
from tests.helpers import assert_drafted, random_heads

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


def test_auc_interval_matches_delong_by_brute_force():
    rng = np.random.default_rng(2)
    labels = rng.random(120) < 0.6
    scores = np.round(rng.standard_normal(120) + 0.8 * labels, 1)  # rounded: ties occur
    pos, neg = scores[labels], scores[~labels]
    psi = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
    v_pos, v_neg = psi.mean(axis=1), psi.mean(axis=0)
    se = np.sqrt(v_pos.var(ddof=1) / pos.size + v_neg.var(ddof=1) / neg.size)
    auc, low, high = auc_interval(scores, labels)
    assert auc == pytest.approx(psi.mean()) == pytest.approx(roc_auc(scores, labels))
    assert (low, high) == pytest.approx((auc - 1.959964 * se, auc + 1.959964 * se))


def test_auc_interval_tells_signal_from_chance():
    """A score unrelated to the outcome: the 95% interval holds 0.5 about 95% of the time;
    a score that carries signal: the interval leaves 0.5 out."""
    rng = np.random.default_rng(4)
    held = []
    for _ in range(300):
        labels = rng.random(200) < 0.7
        _, low, high = auc_interval(rng.random(200), labels)
        held.append(low <= 0.5 <= high)
    assert 0.91 <= np.mean(held) <= 0.99
    labels = rng.random(200) < 0.7
    _, low, high = auc_interval(rng.random(200) + 0.5 * labels, labels)
    assert low > 0.5
    assert auc_interval([0.1, 0.2, 0.3], [True, False, False]) is None  # one accepted token


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


def test_a_separate_draft_model_gets_no_hidden_cos(pair):
    """Its hidden states live in another model's space; the full-vocabulary log-probability
    stand-in measured no better than chance on the demo pair, so nothing is computed."""
    target, draft = pair
    session, steps = run(target, ModelDrafter(draft))
    judged = [t for s in steps for t in s.tokens]
    assert judged and all(t.hidden_cos is None for t in judged)
    summary = session.summary()
    assert "hidden_cos_auc" not in summary
    # the draft's own q(x) is what the summary judges instead
    fit = auc_interval([t.q for t in judged], [t.accepted for t in judged])
    assert fit is not None  # the run judged at least two tokens each way
    assert summary["draft_q_auc"] == pytest.approx(fit[0])
    assert summary["draft_q_auc_interval"] == pytest.approx(list(fit[1:]))


def test_ngram_drafts_have_no_hidden_cos(pair):
    target, _ = pair
    session, steps = run(target, EditAwareLookup(), prompt="the cat sat on the mat. the cat")
    judged = [t for s in steps for t in s.tokens]
    assert judged and all(t.hidden_cos is None for t in judged)
    assert not {"hidden_cos_auc", "draft_q_auc"} & set(session.summary())


@pytest.fixture(scope="module")
def deep_torch(hf_dirs):
    """A 4-layer tiny target: it drafts without layers 1 and 2 (a self-draft)."""
    from backends.torch_hf import TorchModel
    from tests.tiny_hf import write_tiny_hf

    target = TorchModel(write_tiny_hf(hf_dirs[0].parent / "deep", seed=3, n_layer=4),
                        device="cpu")
    yield target
    target.close()


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_self_draft_compares_hidden_states(deep_torch, temperature):
    target = deep_torch
    view = target.skip_draft(frozenset({1, 2}))
    drafter = SelfDrafter(view, StopRule(), target.n_vocab)
    session, steps = run(target, drafter, temperature=temperature)
    judged = [t for s in steps for t in s.tokens]
    assert judged and all(-1 <= t.hidden_cos <= 1 for t in judged)
    # the first token's value is the cosine of the two final-norm outputs, by hand
    ids = target.tokenize(PROMPT)
    target.truncate(0)
    target.extend(ids[:-1], 0)  # as the run's prefill left it
    b = view.extend_hidden(ids[-1:], 1)[1][0]
    view.release()
    a = target.extend_hidden(ids[-1:], 1)[1][0]
    want = float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    assert steps[0].tokens[0].hidden_cos == pytest.approx(want, abs=1e-4)
    if temperature == 0.0:
        plain_session, _ = run(target, None, temperature=0.0)
        assert session.output_ids == plain_session.output_ids
        assert_drafted(steps)
    fit = auc_interval([t.hidden_cos for t in judged], [t.accepted for t in judged])
    assert session.summary().get("hidden_cos_auc") == (None if fit is None
                                                       else pytest.approx(fit[0]))


def test_draft_heads_get_no_hidden_cos(pair):
    """Their z is comparable with the target's hidden state, but that cosine measured no
    better than chance on the demo pair: not computed; the summary judges q(x) instead."""
    target, _ = pair
    session, steps = run(target, HeadsDrafter(random_heads(target)), n=16, k=3)
    judged = [t for s in steps for t in s.tokens]
    assert judged and all(t.hidden_cos is None for t in judged)
    assert "hidden_cos_auc" not in session.summary()


def test_traces_without_hidden_cos_still_open(deep_torch, tmp_path):
    target = deep_torch
    _, steps = run(target, SelfDrafter(target.skip_draft(frozenset({1, 2})), StopRule(),
                                       target.n_vocab), n=12)
    assert any(t.hidden_cos is not None for s in steps for t in s.tokens)
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
