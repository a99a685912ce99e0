"""The accept decision for one draft token, and the residual a rejection draws from.

Terms, once (p is always the target's probability, q the draft's):
  - judge: decide one draft token x drawn from q against the target's p at its position.
    Greedy: accept iff x == argmax p. Sampling: draw u ~ U[0, 1), accept iff u < p(x)/q(x)
    (written u * q(x) < p(x), which needs no division and accepts whenever q(x) <= p(x)).
  - residual: after a rejection the target side becomes norm(max(0, p - q)).
The chain verifier (app.engine.speculative) and the tree verifier (app.engine.tree) both call
these two functions through this module, so a test can swap in a wrong rule for both at once.
Nothing here builds a display record: records are made from a Judgement afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.engine.sampling import SamplingParams


@dataclass(frozen=True)
class Judgement:
    accepted: bool
    u: float | None  # the uniform draw of a sampled decision; None under greedy


def judge(
    token: int, p: np.ndarray, q: np.ndarray, params: SamplingParams, rng: np.random.Generator
) -> Judgement:
    """Accept or reject `token`, drawn from q (V,), against the target's p (V,)."""
    if params.greedy:
        return Judgement(token == int(np.argmax(p)), None)
    u = float(rng.random())
    return Judgement(u * float(q[token]) < float(p[token]), u)


def residual_distribution(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """norm(max(0, p - q)); if p == q everywhere the residual is empty and p itself is used."""
    residual = np.maximum(p - q, 0.0)
    total = residual.sum()
    if total <= 0.0:
        return p
    return np.asarray(residual / total)
