"""Per-token diagnostics shown beside the decisions, never the acceptance rule, and how well
each tells accepted draft tokens from rejected ones (packaging/research/measure_diagnostics.py
measures them on a real pair; figures in docs).

hidden_cos: for each judged draft token, in [-1, 1], the cosine of the draft's and the
target's final hidden states (the output of the final norm, which the output head reads),
set only where a drafter hands comparable states: self-speculative drafts (the target's own
first layers), where it measured better than chance on the demo pair. Everything else
carries None and costs nothing: a separate draft model's hidden states live in another
model's space, and the stand-in once computed for it in the timed loop (a full-vocabulary
log-probability cosine, about 1 ms per token) measured at chance, as did draft heads' z
against the target's hidden state; n-gram drafts have no states at all.
q(x), the draft's own probability of its token, is in every record already and measured
better than chance for every kind of draft: the view shows it for all of them.
Both are judged by the ROC AUC with a 95% interval (auc_interval): 0.5 means no signal.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from app.engine.protocol import HiddenStateModel, LanguageModel
from app.engine.records import TokenRecord


def judged_similarity(tokens: Sequence[TokenRecord]) -> list[tuple[float, bool]]:
    """(hidden_cos, accepted) of every judged draft token that carries a hidden_cos."""
    return [(t.hidden_cos, bool(t.accepted)) for t in tokens
            if t.hidden_cos is not None and t.accepted is not None]


def judged_confidence(tokens: Sequence[TokenRecord]) -> list[tuple[float, bool]]:
    """(q(x), accepted) of every judged draft token: the draft's own probability of the
    token it wrote (1 for drafts without probabilities of their own, such as n-gram lookup)."""
    return [(t.q, bool(t.accepted)) for t in tokens if t.accepted is not None]


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


def verify_pass(
    target: LanguageModel, ids: Sequence[int], n_logits: int, with_hidden: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    """The target's verify pass: logits, and its hidden states when asked and it has them."""
    if with_hidden and isinstance(target, HiddenStateModel):
        return target.extend_hidden(ids, n_logits)
    return target.extend(ids, n_logits), None


def comparable(draft_hidden: np.ndarray | None, target_hidden: np.ndarray | None) -> bool:
    """Whether the draft handed hidden states that live where the target's do (the same width,
    read at the same point): only self-speculative drafts keep theirs (ModelDrafter
    with_hidden)."""
    return (draft_hidden is not None and target_hidden is not None
            and draft_hidden.shape[-1] == target_hidden.shape[-1])


def annotate(
    records: Sequence[TokenRecord], draft_hidden: np.ndarray | None,
    target_hidden: np.ndarray | None,
) -> None:
    """Set hidden_cos on each judged draft token (row i of each table is draft token i)
    where the hidden states are comparable; otherwise leave it None and cost nothing.
    One vectorised pass over the (j, n_embd) rows: it is cheap enough to run wherever a
    self-draft runs (the bench reports its AUC too)."""
    if not records or not comparable(draft_hidden, target_hidden):
        return
    assert draft_hidden is not None and target_hidden is not None
    n = len(records)
    for record, value in zip(records, cosines(draft_hidden[:n], target_hidden[:n]),
                             strict=True):
        record.hidden_cos = float(value)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two (j, d) blocks, 0 where a row is all zeros."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", a, a) * np.einsum("ij,ij->i", b, b))
    dots = np.einsum("ij,ij->i", a, b)
    safe = np.where(norms > 0, norms, 1.0)
    return np.where(norms > 0, np.clip(dots / safe, -1.0, 1.0), 0.0)


def roc_auc(scores: npt.ArrayLike, labels: npt.ArrayLike) -> float | None:
    """P(score of an accepted token > score of a rejected one), ties counting half (the
    Mann-Whitney U statistic); None unless both classes occur."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = midranks(s)
    u = ranks[y].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def midranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing their average rank."""
    order = np.argsort(values, kind="mergesort")
    _, first, counts = np.unique(values[order], return_index=True, return_counts=True)
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = np.repeat(first + (counts - 1) / 2.0 + 1.0, counts)
    return ranks


def auc_interval(
    scores: npt.ArrayLike, labels: npt.ArrayLike, z: float = 1.959964
) -> tuple[float, float, float] | None:
    """(AUC, low, high): the ROC AUC with its 95% interval from DeLong's variance (Sun and
    Xu's rank form), clipped to [0, 1]; None unless each class has two members.
    An interval that contains 0.5 means the score tells accepted from rejected no better
    than chance on these tokens."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    pos, neg = s[y], s[~y]
    n_pos, n_neg = pos.size, neg.size
    if n_pos < 2 or n_neg < 2:
        return None
    ranks = midranks(s)
    # placements: the share of the other class each member beats (ties half)
    v_pos = (ranks[y] - midranks(pos)) / n_neg
    v_neg = 1.0 - (ranks[~y] - midranks(neg)) / n_pos
    auc = float(v_pos.mean())
    se = float(np.sqrt(v_pos.var(ddof=1) / n_pos + v_neg.var(ddof=1) / n_neg))
    return auc, max(0.0, auc - z * se), min(1.0, auc + z * se)
