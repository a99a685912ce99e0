"""What several test modules share: wrong acceptance rules that the exactness tests must
catch (each swaps a wrong rule into app.engine.acceptance, which the chain and the tree
verifier both call), and small builders.

A test module imports from here, never from another test module."""

from __future__ import annotations

import app.engine.acceptance as acceptance
import app.engine.speculative as speculative


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
