"""How far a verify pass's logits stray from plain decoding's on this model and machine.

With llama.cpp's fast CPU kernels a pass over n tokens (repacked GEMM, tiled matmul) sums in
another order than a one-token step (GEMV), so the same position's logits differ a little,
and more once the cache holds rows written by the other path. The greedy verdict
(app.analysis.divergence) needs to know how much: a flip between two tokens is the kernels'
doing only if the two runs' margins together are within what the kernels can move.

Measured, not assumed: over a stretch of real code, each position is scored by single-token
steps (the reference) and by passes of n tokens, in two ways:
- fresh: the pass starts on a cache written by single steps (one pass's own difference);
- carried: the whole stretch is fed in passes of n, so every earlier row was written by
  passes too, as in a speculative run whose drafts are all accepted.
For every position the reference's top two tokens A and B are followed: |Δ logit| of each and
|Δ (A - B)|. The bound is the largest |Δ (A - B)| seen, fresh or carried, over all sizes.
It is measured once per model file, device, kernels and thread count, and cached.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from app.engine.cost_curve import model_key, read_store, write_store
from app.engine.protocol import LanguageModel

PASS_SIZES = (2, 5, 9, 17, 33)
DEFAULT_POSITIONS = 256  # a few hundred positions: the bound is the largest of ~2500 samples
# real code the target will have seen the like of; repeated to length, never random ids
SAMPLE_TEXT = '''import json
from pathlib import Path


def load_settings(path):
    """Read a JSON settings file; missing keys fall back to the defaults."""
    defaults = {"theme": "dark", "font_size": 12, "recent": []}
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return dict(defaults)
    merged = dict(defaults)
    merged.update({k: v for k, v in data.items() if k in defaults})
    return merged


class LRUCache:
    def __init__(self, capacity):
        self.capacity = capacity
        self.items = {}

    def get(self, key):
        if key not in self.items:
            return None
        value = self.items.pop(key)
        self.items[key] = value
        return value

    def put(self, key, value):
        self.items.pop(key, None)
        self.items[key] = value
        if len(self.items) > self.capacity:
            oldest = next(iter(self.items))
            del self.items[oldest]


def merge_sorted(a, b):
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        if a[i] <= b[j]:
            out.append(a[i])
            i += 1
        else:
            out.append(b[j])
            j += 1
    return out + a[i:] + b[j:]
'''
_STORE = "kernel_noise.json"
_PROMPT_TOKENS = 16  # context written by single steps before the measured stretch


@dataclass
class PathStats:
    """|Δ| between single-step and n-token-pass logits over the measured positions."""

    positions: int
    top_logit_max: float  # |Δ logit| of the reference's top two tokens
    top_logit_p99: float
    gap_max: float  # |Δ (top1 - top2)|, the two tokens fixed by the reference
    gap_p99: float
    flips: int  # positions where the pass's argmax is not the reference's


@dataclass
class KernelNoise:
    """The measured disagreement between a model's one-token and multi-token passes."""

    bound: float  # the largest |Δ (top1 - top2)| seen: what the kernels can move a margin by
    positions: int
    fresh: dict[int, PathStats] = field(default_factory=dict)
    carried: dict[int, PathStats] = field(default_factory=dict)
    # |Δ gap| of the carried runs by quarter of the stretch: does carrying make it grow?
    carried_by_quarter: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KernelNoise:
        return cls(
            bound=float(data["bound"]), positions=int(data["positions"]),
            fresh={int(n): PathStats(**s) for n, s in data.get("fresh", {}).items()},
            carried={int(n): PathStats(**s) for n, s in data.get("carried", {}).items()},
            carried_by_quarter=[float(x) for x in data.get("carried_by_quarter", [])],
        )  # fmt: skip

    def describe(self) -> str:
        def worst(stats: dict[int, PathStats]) -> str:
            if not stats:
                return "-"
            return (f"max {max(s.gap_max for s in stats.values()):.4f}, "
                    f"p99 {max(s.gap_p99 for s in stats.values()):.4f}")

        return (f"kernel noise on the top-two gap over {self.positions} positions, passes of "
                f"{'/'.join(str(n) for n in sorted(self.fresh))}: fresh cache "
                f"{worst(self.fresh)}; cache written by passes {worst(self.carried)}; "
                f"bound {self.bound:.4f}")


def sample_ids(model: LanguageModel, n_tokens: int) -> list[int]:
    ids = model.tokenize(SAMPLE_TEXT)
    while len(ids) < n_tokens:
        ids += model.tokenize(SAMPLE_TEXT, add_special=False)
    return ids[:n_tokens]


def _single_steps(model: LanguageModel, ids: list[int]) -> np.ndarray:
    return np.stack([model.extend([t], 1)[0] for t in ids])


def _stats(ref: np.ndarray, other: np.ndarray) -> tuple[PathStats, np.ndarray]:
    """Per position: |Δ| of the reference's top two logits and of their difference."""
    rows = np.arange(ref.shape[0])
    order = np.argsort(ref, axis=1)
    a, b = order[:, -1], order[:, -2]
    delta_a = np.abs(other[rows, a] - ref[rows, a])
    delta_b = np.abs(other[rows, b] - ref[rows, b])
    gap = np.abs((other[rows, a] - other[rows, b]) - (ref[rows, a] - ref[rows, b]))
    tops = np.concatenate([delta_a, delta_b])
    stats = PathStats(
        positions=len(rows), top_logit_max=float(tops.max()),
        top_logit_p99=float(np.percentile(tops, 99)), gap_max=float(gap.max()),
        gap_p99=float(np.percentile(gap, 99)),
        flips=int((other.argmax(axis=1) != a).sum()),
    )  # fmt: skip
    return stats, gap


def measure_kernel_noise(model: LanguageModel, positions: int = DEFAULT_POSITIONS,
                         sizes: tuple[int, ...] = PASS_SIZES) -> KernelNoise:
    """Score `positions` tokens of SAMPLE_TEXT by single steps and by passes of each size.

    Costs `positions` single steps plus 2 * len(sizes) * positions tokens in passes; the
    cache is left empty.
    """
    positions = _fitting(model, positions)
    ids = sample_ids(model, _PROMPT_TOKENS + positions)
    prompt, stretch = ids[:_PROMPT_TOKENS], ids[_PROMPT_TOKENS:]
    model.truncate(0)
    model.extend(prompt, 0)
    reference = _single_steps(model, stretch)
    noise = KernelNoise(bound=0.0, positions=positions)
    quarters = np.zeros(4)
    for n in sizes:
        # last chunk first: truncating to a chunk's start drops the later chunk's pass rows
        # and leaves the single-step rows before it, so every chunk starts on a fresh cache
        starts = list(range(0, positions, n))
        fresh_rows: list[np.ndarray] = []
        for start in reversed(starts):
            chunk = stretch[start:start + n]
            model.truncate(_PROMPT_TOKENS + start)
            fresh_rows.insert(0, model.extend(chunk, len(chunk)))
        fresh, fresh_gap = _stats(reference, np.concatenate(fresh_rows))
        model.truncate(_PROMPT_TOKENS)
        carried_rows = [model.extend(stretch[s:s + n], len(stretch[s:s + n])) for s in starts]
        carried, carried_gap = _stats(reference, np.concatenate(carried_rows))
        noise.fresh[n], noise.carried[n] = fresh, carried
        noise.bound = max(noise.bound, float(fresh_gap.max()), float(carried_gap.max()))
        quarters = np.maximum(quarters, [q.max() for q in np.array_split(carried_gap, 4)])
    noise.carried_by_quarter = [float(q) for q in quarters]
    model.truncate(0)
    return noise


def _fitting(model: LanguageModel, positions: int) -> int:
    """As many positions as the model's context holds after the prompt."""
    return max(1, min(positions, model.n_ctx - _PROMPT_TOKENS))


def _key(model: LanguageModel) -> str:
    threads = getattr(model, "n_threads", None) or os.cpu_count()
    return f"{model_key(model)}|threads={threads}"


def cached_kernel_noise(model: LanguageModel, positions: int | None = None) -> KernelNoise:
    """The measured noise for this model and machine; measured now if not cached."""
    positions = positions or DEFAULT_POSITIONS
    store = read_store(_STORE)
    key = _key(model)
    entry = store.get(key)
    if isinstance(entry, dict):
        try:
            noise = KernelNoise.from_dict(entry)
            if noise.positions >= _fitting(model, positions):
                return noise
        except (KeyError, TypeError, ValueError):
            pass
    noise = measure_kernel_noise(model, positions)
    store[key] = noise.as_dict()
    write_store(_STORE, store)
    return noise
