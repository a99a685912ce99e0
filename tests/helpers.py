"""What several test modules share: wrong acceptance rules that the exactness tests must
catch (each swaps a wrong rule into app.engine.acceptance, which the chain and the tree
verifier both call), and small builders.

A test module imports from here, never from another test module."""

from __future__ import annotations

import app.engine.acceptance as acceptance
import app.engine.speculative as speculative
from app.engine.draft_model import DRAFT_MODEL
from app.engine.records import (
    ORIGIN_ACCEPTED,
    ORIGIN_BONUS,
    ORIGIN_PLAIN,
    ORIGIN_REPLACEMENT,
    StepRecord,
    TokenRecord,
)


def resample_from_p(monkeypatch):
    """Bug: after a rejection, draw from p instead of the residual norm(max(0, p - q))."""
    monkeypatch.setattr(acceptance, "residual_distribution", lambda p, q: p)
    return speculative.verify


def always_accept(monkeypatch):
    """Bug: a sampled draft token is always accepted (the u draw is made, then ignored);
    greedy decisions stay right, so only the sampled tests can see it."""
    right = acceptance.judge

    def wrong(token, p, q, params, rng):
        if params.greedy:
            return right(token, p, q, params, rng)
        return acceptance.Judgement(True, float(rng.random()))

    monkeypatch.setattr(acceptance, "judge", wrong)
    return speculative.verify


def greedy_accepts_everything(monkeypatch):
    """Bug: a greedy draft token is accepted whatever the target's argmax."""
    right = acceptance.judge

    def wrong(token, p, q, params, rng):
        if params.greedy:
            return acceptance.Judgement(True, None)
        return right(token, p, q, params, rng)

    monkeypatch.setattr(acceptance, "judge", wrong)
    return speculative.verify


def token(pos: int, accepted: bool) -> TokenRecord:
    return TokenRecord(pos=pos, token=5, text="x", q=0.5, p=0.4, u=0.3, accepted=accepted,
                       replacement=None if accepted else 6)


def step(index: int, k: int, verdicts: list[bool], t_draft=0.0, t_verify=0.1,
         source: str = DRAFT_MODEL.name) -> StepRecord:
    """A hand-made chain step: the judged prefix of `verdicts` (up to the first rejection),
    consulting the `source` kind of draft."""
    judged = verdicts[: verdicts.index(False) + 1] if False in verdicts else verdicts
    tokens = [token(i, ok) for i, ok in enumerate(judged)]
    n_acc = sum(judged)
    if k == 0:
        origins = [ORIGIN_PLAIN]
    elif n_acc == len(judged) == k:
        origins = [ORIGIN_ACCEPTED] * n_acc + [ORIGIN_BONUS]
    else:
        origins = [ORIGIN_ACCEPTED] * n_acc + [ORIGIN_REPLACEMENT]
    return StepRecord(index=index, k=k, tokens=tokens, emitted=[7] * len(origins),
                      emitted_text=["y"] * len(origins), origins=origins, t_draft=t_draft,
                      t_verify=t_verify, t_overhead=0.01, source=source)
