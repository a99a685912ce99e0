"""What the views show beside each decision, added to a verdict's records after it was made:
the target's top alternatives (with q beside p) and both rows' entropies.

Never part of the decision, and computed only where something shows them (the window, a
trace): a session with diagnostics off (bench timing runs) never calls describe(). The
entropies are computed over the pass's judged rows at once, a (j, V) block; the alternatives
cost one vectorised O(V) selection per judged row.
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
    if not judged:
        return
    p_block = np.stack([p for _, p, _ in judged])  # (j, V)
    p_entropy = entropies(p_block)
    # a one-hot q (a lookup's draft) has entropy 0: no need to take the log of every zero
    sure = [q.max() == 1.0 for _, _, q in judged]
    q_entropy = np.zeros(len(judged))
    unsure = [i for i, one_hot in enumerate(sure) if not one_hot]
    if unsure:
        q_entropy[unsure] = entropies(np.stack([judged[i][2] for i in unsure]))
    for i, (record, p, q) in enumerate(judged):
        record.top = [Alternative(int(t), text_of(int(t)), float(p[t]), float(q[t]))
                      for t in top_indices(p, top_n)]
        record.p_entropy = float(p_entropy[i])
        record.q_entropy = float(q_entropy[i])


def entropies(block: np.ndarray) -> np.ndarray:
    """Shannon entropy in nats of each row of a (j, V) block (float32 is plenty for a display
    figure). einsum, not a BLAS call: numpy's OpenBLAS wakes its own threads for a
    vocabulary-sized product, and beside a model runtime's busy threads that costs far more
    than one core needs."""
    p = block.astype(np.float32, copy=False)
    log_p = np.log(p, where=p > 0, out=np.zeros_like(p))
    return np.asarray(-np.einsum("ij,ij->i", p, log_p), dtype=np.float64)


def entropy(probs: np.ndarray) -> float:
    """Shannon entropy in nats of one row."""
    if probs.max() == 1.0:
        return 0.0
    return float(entropies(probs[None, :])[0])


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
