"""One verify step of speculative decoding (Leviathan et al. 2023; Chen et al. 2023).

Notation as in the papers: p is the target's processed distribution, q the draft's.
For draft token x_i drawn from q_i:
  - sampling: accept with probability min(1, p_i(x_i) / q_i(x_i)), using a uniform draw u;
    on the first rejection emit a token drawn from norm(max(0, p_i - q_i)) and stop;
    when all k pass, emit a bonus token drawn from p_{k+1}.
  - greedy: accept while x_i == argmax p_i; on the first mismatch emit argmax p_i;
    when all k pass, emit argmax p_{k+1} as the bonus.
Either way the emitted tokens are distributed exactly as the target alone would produce them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from app.engine.records import (
    ORIGIN_ACCEPTED,
    ORIGIN_BONUS,
    ORIGIN_PLAIN,
    ORIGIN_REPLACEMENT,
    Alternative,
    TokenRecord,
)
from app.engine.sampling import SamplingParams, choose, draw
from app.engine.similarity import dot

TokenText = Callable[[int], str]
_SAMPLE_STRIDE = 64


class Rows(Protocol):
    """Row i of a (k+1, V) table of distributions; the session computes rows on demand."""

    def __getitem__(self, i: int, /) -> np.ndarray: ...


@dataclass
class Verdict:
    records: list[TokenRecord]
    emitted: list[int]
    origins: list[str]


def residual_distribution(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """norm(max(0, p - q)); if p == q everywhere the residual is empty and p itself is used."""
    residual = np.maximum(p - q, 0.0)
    total = residual.sum()
    if total <= 0.0:
        return p
    return np.asarray(residual / total)


def verify(
    draft: list[int],
    q_rows: Rows,
    p_rows: Rows,
    params: SamplingParams,
    rng: np.random.Generator,
    text_of: TokenText,
    start_pos: int = 0,
    top_n: int = 5,
) -> Verdict:
    """Judge k draft tokens against k+1 target rows; returns the records and emitted tokens.

    q_rows[i] is the distribution draft[i] was drawn from; p_rows[i] the target's
    distribution at the same position; p_rows[k] gives the bonus token.
    """
    k = len(draft)
    if k == 0:
        token = choose(p_rows[0], params, rng)
        return Verdict([], [token], [ORIGIN_PLAIN])
    records: list[TokenRecord] = []
    emitted: list[int] = []
    origins: list[str] = []
    for i, token in enumerate(draft):
        p, q = p_rows[i], q_rows[i]
        record = make_record(start_pos + i, token, p, q, text_of, top_n)
        if params.greedy:
            target_choice = int(np.argmax(p))
            record.accepted = token == target_choice
        else:
            record.u = float(rng.random())
            record.accepted = record.u * record.q < record.p
        records.append(record)
        if record.accepted:
            emitted.append(token)
            origins.append(ORIGIN_ACCEPTED)
            continue
        if params.greedy:
            replacement = target_choice
        else:
            replacement = draw(residual_distribution(p, q), rng)
            record.residual_used = True
        record.replacement = replacement
        record.replacement_text = text_of(replacement)
        emitted.append(replacement)
        origins.append(ORIGIN_REPLACEMENT)
        return Verdict(records, emitted, origins)
    emitted.append(choose(p_rows[k], params, rng))
    origins.append(ORIGIN_BONUS)
    return Verdict(records, emitted, origins)


def make_record(
    pos: int, token: int, p: np.ndarray, q: np.ndarray, text_of: TokenText, top_n: int
) -> TokenRecord:
    best = top_indices(p, top_n)
    top = [Alternative(int(t), text_of(int(t)), float(p[t]), float(q[t])) for t in best]
    return TokenRecord(
        pos=pos,
        token=token,
        text=text_of(token),
        q=float(q[token]),
        p=float(p[token]),
        u=None,
        accepted=False,
        top=top,
        p_entropy=entropy(p),
        q_entropy=entropy(q),
    )


def top_indices(probs: np.ndarray, n: int) -> np.ndarray:
    """The n most likely tokens, best first, without partitioning the whole vocabulary: the
    top n are among the tokens that reach a thousandth of the maximum when at least n do,
    and always among those that reach the n-th best of every 64th token (n of which do)."""
    n = min(n, probs.shape[0])
    candidates = np.flatnonzero(probs >= probs.max() * 1e-3)
    if candidates.size < n:
        sample = probs[::_SAMPLE_STRIDE]
        if sample.size >= n:
            nth_best = np.partition(sample, sample.size - n)[sample.size - n]
            candidates = np.flatnonzero(probs >= nth_best)
        else:
            candidates = np.arange(probs.shape[0])
    if candidates.size > n:
        candidates = candidates[np.argpartition(-probs[candidates], n - 1)[:n]]
    return candidates[np.argsort(-probs[candidates], kind="stable")]


def entropy(probs: np.ndarray) -> float:
    """Shannon entropy in nats of one row (float32 is plenty for a display figure)."""
    if probs.max() == 1.0:
        return 0.0  # one-hot (an n-gram draft's q): no need to take the log of every zero
    p = probs.astype(np.float32, copy=False)
    log_p = np.log(p, where=p > 0, out=np.zeros_like(p))
    return -dot(p, log_p)
