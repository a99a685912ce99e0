"""hidden_cos: how alike the draft's and the target's view of a position were — a diagnostic
shown beside the decisions, never the acceptance rule.

For each judged draft token, in [-1, 1]:
  - where the two hidden states are comparable (the same width, read at the same point:
    the output of the final norm, which the output head reads — self-speculative drafts,
    draft heads), their cosine;
  - otherwise a stand-in computed the same way every time: the cosine of the two models'
    centred log-probability vectors (log-softmax of the raw logits, before temperature or
    truncation, each minus its mean) over the vocabulary both score;
  - None where the draft has no distribution of its own (n-gram lookup).
hidden_cos_auc is the ROC AUC of hidden_cos as a predictor of acceptance (0.5 = no signal).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.engine.protocol import HiddenStateModel, LanguageModel
from app.engine.records import TokenRecord


def judged_similarity(tokens: Sequence[TokenRecord]) -> list[tuple[float, bool]]:
    """(hidden_cos, accepted) of every judged draft token that carries a hidden_cos."""
    return [(t.hidden_cos, bool(t.accepted)) for t in tokens
            if t.hidden_cos is not None and t.accepted is not None]


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """The dot product of two vectors, without BLAS: numpy's OpenBLAS wakes its own threads
    for a vocabulary-sized dot, and beside a model runtime's busy threads that costs tens of
    milliseconds where one core needs a fraction of one."""
    return float(np.einsum("i,i->", a, b))


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    norm = float(np.sqrt(dot(a, a) * dot(b, b)))
    if norm == 0.0:
        return 0.0
    return float(np.clip(dot(a, b) / norm, -1.0, 1.0))


def centred_logprobs(logits: np.ndarray) -> np.ndarray:
    row = np.asarray(logits, dtype=np.float64)
    shifted = row - row.max()
    logprobs = shifted - np.log(np.exp(shifted).sum())
    return np.asarray(logprobs - logprobs.mean())


def logprob_cosine(draft_logits: np.ndarray, target_logits: np.ndarray) -> float:
    """The stand-in: cosine of centred log-probabilities over the shared vocabulary."""
    n = min(draft_logits.shape[-1], target_logits.shape[-1])
    return cosine(centred_logprobs(draft_logits[:n]), centred_logprobs(target_logits[:n]))


def verify_pass(
    target: LanguageModel, ids: Sequence[int], n_logits: int, with_hidden: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    """The target's verify pass: logits, and its hidden states when asked and it has them."""
    if with_hidden and isinstance(target, HiddenStateModel):
        return target.extend_hidden(ids, n_logits)
    return target.extend(ids, n_logits), None


def annotate(
    records: Sequence[TokenRecord],
    draft_logits: np.ndarray | None,
    draft_hidden: np.ndarray | None,
    target_logits: np.ndarray,
    target_hidden: np.ndarray | None,
) -> None:
    """Set hidden_cos on each judged draft token (row i of each table is draft token i)."""
    comparable = (
        draft_hidden is not None and target_hidden is not None
        and draft_hidden.shape[-1] == target_hidden.shape[-1]
    )
    for i, record in enumerate(records):
        if comparable:
            assert draft_hidden is not None and target_hidden is not None
            record.hidden_cos = cosine(draft_hidden[i], target_hidden[i])
        elif draft_logits is not None:
            record.hidden_cos = logprob_cosine(draft_logits[i], target_logits[i])


def roc_auc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """P(score of an accepted token > score of a rejected one), ties counting half (the
    Mann-Whitney U statistic); None unless both classes occur."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(s.size, dtype=np.float64)
    sorted_scores = s[order]
    # average ranks over ties
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    average = first + (counts - 1) / 2.0 + 1.0
    ranks[order] = np.repeat(average, counts)
    u = ranks[y].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))
