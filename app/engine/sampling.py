"""Logits -> the processed distribution tokens are drawn from (temperature, top-k, top-p, min-p).

Each runtime has its own sampler order, and the same flags give another distribution in each,
so DraftLens follows the runtime of the pair (LanguageModel.sampler_order, resolved by the
session from the target):
  - "llama.cpp" (common_sampler's default chain): top-k, top-p, min-p on the untempered
    logits, temperature LAST on the survivors. Top-k keeps exactly k tokens (llama.cpp leaves
    which of tied tokens unspecified; here the lowest ids); top-p keeps the best tokens until
    their mass reaches p, the one that reaches it included.
  - "transformers" (generate()'s warpers): temperature FIRST, then top-k (every token tied
    with the k-th is kept), top-p (ties at the edge keep the higher ids, as its stable
    ascending sort does), min-p.
The same processing is applied to the draft's and the target's logits, so q and p are
comparable. Temperature 0 means greedy: decisions use argmax, and the reported
probabilities are the plain softmax (temperature 1) so the inspector still has numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from app.errors import ModelOutputError, SettingsError

# Nucleus search looks at this many best tokens first and sorts the whole row only if
# they do not reach top_p; the result is identical either way.
_NUCLEUS_PREFETCH = 256

ORDER_LLAMACPP = "llama.cpp"
ORDER_TRANSFORMERS = "transformers"
SAMPLER_ORDERS = (ORDER_LLAMACPP, ORDER_TRANSFORMERS)


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int | None = None
    order: str = ORDER_TRANSFORMERS  # the runtime whose sampler semantics apply

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def validate(self) -> None:
        if not np.isfinite(self.temperature) or self.temperature < 0:
            raise SettingsError(
                f"temperature must be >= 0 (got {self.temperature}); use 0 for greedy decoding"
            )
        if self.top_k < 0:
            raise SettingsError(f"top-k must be >= 0 (got {self.top_k}); 0 turns it off")
        if not 0.0 < self.top_p <= 1.0:
            raise SettingsError(f"top-p must be in (0, 1] (got {self.top_p}); 1 turns it off")
        if not 0.0 <= self.min_p < 1.0:
            raise SettingsError(f"min-p must be in [0, 1) (got {self.min_p}); 0 turns it off")
        if self.order not in SAMPLER_ORDERS:
            raise SettingsError(
                f"unknown sampler order {self.order!r}; use one of {', '.join(SAMPLER_ORDERS)}"
            )


def finite_logits(logits: np.ndarray, model_name: str) -> np.ndarray:
    """The logits, checked: NaN or +inf anywhere means the model's numbers are garbage, and
    sampling from them would be silent garbage too. (-inf alone is a masked token.)"""
    with np.errstate(invalid="ignore", over="ignore"):
        # NaN or +inf anywhere reaches the sum; float32 holds any sum of real logits
        total = float(logits.sum(dtype=np.float32))
    if np.isnan(total) or total == np.inf:
        raise ModelOutputError(
            f"{model_name} returned NaN or infinite logits — the file may be damaged, or the "
            "device's half-precision numbers overflowed; try another file or --device cpu"
        )
    return logits


def softmax(logits: np.ndarray, dtype: type[np.floating[Any]] = np.float64) -> np.ndarray:
    """Row-wise softmax, in float64 unless told otherwise (sampling needs the precision: the
    exactness tests compare small vocabularies' distributions)."""
    z = logits.astype(dtype, copy=True)
    z -= z.max(axis=-1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=-1, keepdims=True)
    return z


def process(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Turn logits of shape (rows, V) or (V,) into the distribution a token is drawn from."""
    rows = np.atleast_2d(logits)
    if params.greedy:
        # the choice is the argmax of the logits; these probabilities are only shown (p, the
        # top alternatives, the entropy), so float32 is enough and halves a row's cost
        return softmax(rows, np.float32).reshape(logits.shape)
    if params.order == ORDER_LLAMACPP:
        # the filters see temperature 1; the temperature then reshapes what survives
        probs = softmax(rows)
        for row, row_logits in zip(probs, rows, strict=True):
            keep = _keep_mask(row, params, cap_ties=True, low_ids_first=True)
            row[:] = 0.0
            row[keep] = softmax(row_logits[keep] / params.temperature)
        return probs.reshape(logits.shape)
    probs = softmax(rows / params.temperature)
    for row in probs:
        keep = _keep_mask(row, params, cap_ties=False, low_ids_first=False)
        row[~keep] = 0.0
        row /= row.sum()
    return probs.reshape(logits.shape)


def _keep_mask(
    row: np.ndarray, params: SamplingParams, cap_ties: bool, low_ids_first: bool
) -> np.ndarray:
    """The tokens top-k, then top-p, then min-p leave of one probability row. With cap_ties,
    top-k keeps exactly k tokens; low_ids_first orders tokens tied in probability for top-p."""
    vocab = row.shape[0]
    keep = np.ones(vocab, dtype=bool)
    if 0 < params.top_k < vocab:
        threshold = np.partition(row, vocab - params.top_k)[vocab - params.top_k]
        keep &= row >= threshold
        if cap_ties:
            keep &= _cap_ties(row, keep, params.top_k)
    if params.top_p < 1.0:
        keep &= _nucleus_mask(np.where(keep, row, 0.0), params.top_p, low_ids_first)
    if params.min_p > 0.0:
        keep &= row >= params.min_p * row[keep].max()
    return keep


def _cap_ties(row: np.ndarray, keep: np.ndarray, k: int) -> np.ndarray:
    """Ties at the top-k threshold could keep more than k tokens; keep the lowest ids."""
    if keep.sum() <= k:
        return keep
    order = np.lexsort((np.arange(row.shape[0]), -row))[:k]
    capped = np.zeros_like(keep)
    capped[order] = True
    return capped


def _nucleus_mask(row: np.ndarray, top_p: float, low_ids_first: bool) -> np.ndarray:
    """Smallest set of most likely tokens whose mass reaches top_p (mass taken over `row`);
    tokens of equal probability enter lowest id first, or highest id first."""
    total = row.sum()
    vocab = row.shape[0]
    n = min(_NUCLEUS_PREFETCH, vocab)
    if n < vocab:
        # every token tied with the n-th best is a candidate, so ties break by id as in a
        # full sort
        nth_best = np.partition(row, vocab - n)[vocab - n]
        candidates = np.flatnonzero(row >= nth_best)
    else:
        candidates = np.arange(vocab)
    tie_key = 1 if low_ids_first else -1
    order = candidates[np.lexsort((tie_key * candidates, -row[candidates]))]
    cumulative = np.cumsum(row[order]) / total
    if cumulative[-1] < top_p and len(candidates) < vocab:
        order = np.lexsort((tie_key * np.arange(vocab), -row))
        cumulative = np.cumsum(row[order]) / total
    # keep tokens until the mass before them already reaches top_p
    n_keep = int(np.searchsorted(cumulative, top_p, side="left")) + 1
    mask = np.zeros(vocab, dtype=bool)
    mask[order[: min(n_keep, len(order))]] = True
    return mask


def fit_width(row: np.ndarray, width: int) -> np.ndarray:
    """A draft's distribution over the target's `width` logit rows, where the two differ by
    vocabulary padding: zeros for the target's extra ids, so the residual max(0, p - q) may
    put mass there. (A draft never draws an id the target lacks, so cutting is lossless.)"""
    have = row.shape[-1]
    if have == width:
        return row
    if have > width:
        return row[..., :width]
    padding = [(0, 0)] * (row.ndim - 1) + [(0, width - have)]
    return np.pad(row, padding)


def choose(probs: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    """Pick one token from a processed row: argmax under greedy, else a draw."""
    if params.greedy:
        return int(np.argmax(probs))
    return draw(probs, rng)


def draw(probs: np.ndarray, rng: np.random.Generator) -> int:
    """One draw from a (possibly unnormalised) non-negative row, by inverse CDF."""
    cumulative = np.cumsum(probs)
    index = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    return min(index, int(probs.shape[0]) - 1)
