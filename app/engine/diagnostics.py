"""What the views show beside each decision, added to a verdict's records after it was made:
the target's top alternatives (with q beside p) and both rows' entropies.

Never part of the decision, and computed only where something shows them (the window, a
trace): a session with diagnostics off (bench timing runs) never calls describe(). Each
judged row costs a few vectorised O(V) passes; no Python loop touches the vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from app.engine.records import Alternative, TokenRecord

TokenText = Callable[[int], str]
TOP_N = 5
_SAMPLE_STRIDE = 64

# a judged draft token with the target row (p) and the draft row (q) it was judged against,
# both (V,); a tree sibling's p is what earlier siblings' rejections left of the target's row
Judged = tuple[TokenRecord, np.ndarray, np.ndarray]


def describe(judged: list[Judged], text_of: TokenText, top_n: int = TOP_N) -> None:
    """Fill `top`, `p_entropy` and `q_entropy` of each judged record."""
    for record, p, q in judged:
        record.top = [Alternative(int(t), text_of(int(t)), float(p[t]), float(q[t]))
                      for t in top_indices(p, top_n)]
        record.p_entropy = entropy(p)
        record.q_entropy = entropy(q)


def entropy(probs: np.ndarray) -> float:
    """Shannon entropy in nats of one row (float32 is plenty for a display figure). Row by
    row rather than over the pass's (j, V) block: a fresh block of several MB is faulted in
    page by page, measured at 18 ms for four rows of 151,936 ids where these take 2 ms.
    einsum, not a BLAS call: numpy's OpenBLAS wakes its own threads for a vocabulary-sized
    product, and beside a model runtime's busy threads that costs far more than it saves."""
    if probs.max() == 1.0:
        return 0.0  # one-hot (a lookup's q): no need to take the log of every zero
    p = probs.astype(np.float32, copy=False)
    log_p = np.log(p, where=p > 0, out=np.zeros_like(p))
    return -float(np.einsum("i,i->", p, log_p))


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
