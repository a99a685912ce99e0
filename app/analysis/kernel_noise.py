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
- trees: a small tree (a chain with a sibling at two depths) in one pass, each node against
  single steps over its own path, and the row after keeping a path that leaves the first
  one (the tree mask, positions by depth and keep_path).
Each is done in two windows of the cache: right after a short prompt, and past 512 cells,
where llama.cpp's flash attention starts to split the cache across threads.
For every position the reference's top two tokens A and B are followed: |Δ logit| of each and
|Δ (A - B)|. Two bounds, the largest |Δ (A - B)| seen on each kind of row:
- chain_bound: chain passes, and the tree rows the runtime computes as a chain pass would
  (it marks them exact: with llama.cpp's exact kernels, the first path of a tree and the
  row after keeping a path);
- tree_bound: the other tree rows, "tree rows" in what the check says (off the first path
  with llama.cpp's exact kernels, every tree row otherwise), which see the cache laid out
  otherwise than plain decoding does, or are summed in another order.
`bound` is the larger of the two. It is measured once per model file, device, kernels,
thread count and runtime version, and cached. A bound above the ceiling for the model's
arithmetic (`noise_ceiling`) is not kernel noise: a batched pass that computes something else
(a wrong mask, position or row) inflates it.

Costs (demo target, 2 shared cores): see docs; the measurement reports progress and can be
cancelled between passes (`progress`, `cancelled`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from app.engine.cost_curve import model_key, read_store, write_store
from app.engine.protocol import LanguageModel
from app.errors import DraftLensError
from app.versions import versions

PASS_SIZES = (2, 5, 9, 17, 33)  # verify passes of k + 1: 1-3 drafted, 4-8, 8-16, 16-32
DEFAULT_POSITIONS = 34  # per window: 2 windows x 5 sizes x fresh/carried = 680 samples
DEEP_START = 528  # the second window starts past llama.cpp's 512-cell flash-attention split
# the most rounding can move a top-two gap in each kind of arithmetic; a bound above it is a
# batched pass that computes something else. float64: rounding at 2^-53 over a few thousand
# products moves a logit by ~1e-12 (measured on the tiny test models: below 1e-13);
# float32: ~1e-5 measured on tiny models, ceiling 1e-2; quantised llama.cpp kernels and
# 16-bit floats: 0.467 measured on the demo target's fast kernels, ceiling 2 logits
CEILINGS = {"float64": 1e-6, "float32": 1e-2}
LOW_PRECISION_CEILING = 2.0

Progress = Callable[[float, str], None]  # fraction done (0..1), what it is doing


class MeasurementCancelled(DraftLensError):
    """`cancelled()` said stop: the kernel-noise measurement ended early (nothing cached)."""
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
TREE_EVERY = 16  # a tree starts every this many positions of a window


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
    tree: PathStats | None = None  # tree passes' rows and the row after keep_path
    cache_lengths: list[int] = field(default_factory=list)  # where each window started
    # the bound over chain passes (fresh and carried) and the tree rows the runtime marks
    # exact; and over the other tree rows (see the module's docstring)
    chain_bound: float = 0.0
    tree_bound: float = 0.0
    seconds: float = 0.0  # how long the measurement took

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KernelNoise:
        tree = data.get("tree")
        # stored before the two kinds of row were told apart: every tree row counts as one
        tree_max = float(tree["gap_max"]) if isinstance(tree, dict) else 0.0
        return cls(
            bound=float(data["bound"]), positions=int(data["positions"]),
            fresh={int(n): PathStats(**s) for n, s in data.get("fresh", {}).items()},
            carried={int(n): PathStats(**s) for n, s in data.get("carried", {}).items()},
            carried_by_quarter=[float(x) for x in data.get("carried_by_quarter", [])],
            tree=PathStats(**tree) if isinstance(tree, dict) else None,
            cache_lengths=[int(x) for x in data.get("cache_lengths", [])],
            chain_bound=float(data.get("chain_bound", data["bound"])),
            tree_bound=float(data.get("tree_bound", tree_max)),
            seconds=float(data.get("seconds", 0.0)),
        )  # fmt: skip

    def describe(self) -> str:
        def worst(stats: dict[int, PathStats]) -> str:
            if not stats:
                return "-"
            return (f"max {max(s.gap_max for s in stats.values()):.4f}, "
                    f"p99 {max(s.gap_p99 for s in stats.values()):.4f}")

        tree = "-" if self.tree is None else f"max {self.tree.gap_max:.4f}"
        return (f"kernel noise on the top-two gap over {self.positions} positions, passes of "
                f"{'/'.join(str(n) for n in sorted(self.fresh))}: fresh cache "
                f"{worst(self.fresh)}; cache written by passes {worst(self.carried)}; "
                f"tree passes {tree}; on chains {self.chain_bound:.4f}, on tree rows "
                f"{self.tree_bound:.4f}; bound {self.bound:.4f}")


def noise_ceiling(model: LanguageModel) -> float:
    """The most this model's arithmetic can move a top-two gap between a batched pass and
    single steps (CEILINGS); more is a batched pass that computes something else."""
    dtype = str(getattr(model, "dtype", "") or "")
    if model.backend == "llamacpp":
        return LOW_PRECISION_CEILING
    return CEILINGS.get(dtype, LOW_PRECISION_CEILING)


def sample_ids(model: LanguageModel, n_tokens: int) -> list[int]:
    ids = model.tokenize(SAMPLE_TEXT)
    while len(ids) < n_tokens:
        ids += model.tokenize(SAMPLE_TEXT, add_special=False)
    return ids[:n_tokens]


class _Work:
    """Progress over a known amount of work (tokens through the model), and the cancel."""

    def __init__(self, total: int, progress: Progress | None,
                 cancelled: Callable[[], bool] | None) -> None:
        self.total, self.done = max(1, total), 0
        self.progress, self.cancelled = progress, cancelled

    def step(self, tokens: int, what: str) -> None:
        if self.cancelled is not None and self.cancelled():
            raise MeasurementCancelled("the kernel-noise measurement was cancelled")
        self.done += tokens
        if self.progress is not None:
            self.progress(min(1.0, self.done / self.total), what)


def _single_steps(model: LanguageModel, ids: list[int], work: _Work) -> np.ndarray:
    rows = []
    for i, t in enumerate(ids):
        if i % 8 == 0:
            work.step(0, f"single steps {i}/{len(ids)}")
        rows.append(model.extend([t], 1)[0])
    work.step(len(ids), "single steps")
    return np.stack(rows)


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


def _merge(old: PathStats | None, new: PathStats) -> PathStats:
    if old is None:
        return new
    return PathStats(
        positions=old.positions + new.positions,
        top_logit_max=max(old.top_logit_max, new.top_logit_max),
        top_logit_p99=max(old.top_logit_p99, new.top_logit_p99),
        gap_max=max(old.gap_max, new.gap_max), gap_p99=max(old.gap_p99, new.gap_p99),
        flips=old.flips + new.flips)


def _planned_tokens(windows: int, positions: int, sizes: tuple[int, ...], depths: list[int],
                    ) -> int:
    trees = len(range(0, max(0, positions - 3), TREE_EVERY))
    return sum(depths) + windows * (positions * (1 + 2 * len(sizes)) + trees * 14)


def measure_kernel_noise(model: LanguageModel, positions: int = DEFAULT_POSITIONS,
                         sizes: tuple[int, ...] = PASS_SIZES, progress: Progress | None = None,
                         cancelled: Callable[[], bool] | None = None) -> KernelNoise:
    """Score `positions` tokens of SAMPLE_TEXT by single steps, by passes of each size and
    by tree passes, in a window after a short prompt and (where the context holds it) one
    past DEEP_START cache cells.

    `progress(fraction, what)` is called between measurements; `cancelled()` is asked there
    too, and True raises MeasurementCancelled. Costs per window `positions` single steps
    plus 2 * len(sizes) * positions tokens in passes and a few small trees; the cache is
    left empty.
    """
    t0 = time.perf_counter()
    positions = _fitting(model, positions)
    depths = [_PROMPT_TOKENS]
    if DEEP_START + positions <= model.n_ctx:
        depths.append(DEEP_START)
    work = _Work(_planned_tokens(len(depths), positions, sizes, depths), progress, cancelled)
    noise = KernelNoise(bound=0.0, positions=0, cache_lengths=depths)
    quarters = np.zeros(4)
    for depth in depths:
        ids = sample_ids(model, depth + positions)
        model.truncate(0)
        work.step(0, f"writing a cache of {depth} tokens")
        model.extend(ids[:depth], 0)
        work.step(depth, f"cache of {depth} tokens written")
        stretch = ids[depth:]
        reference = _single_steps(model, stretch, work)
        noise.positions += positions
        fresh_rows, tree = _on_single_steps(model, depth, stretch, reference, sizes, work)
        if tree is not None:
            stats, gap, vouched = tree
            noise.tree = _merge(noise.tree, stats)
            noise.chain_bound = max(noise.chain_bound,
                                    float(gap.max(initial=0.0, where=vouched)))
            noise.tree_bound = max(noise.tree_bound, float(gap.max(initial=0.0, where=~vouched)))
            noise.bound = max(noise.chain_bound, noise.tree_bound)
        for n in sizes:
            fresh, fresh_gap = _stats(reference, fresh_rows[n])
            carried, carried_gap = _stats(reference, _carried(model, depth, stretch, n, work))
            noise.fresh[n] = _merge(noise.fresh.get(n), fresh)
            noise.carried[n] = _merge(noise.carried.get(n), carried)
            worst = max(float(fresh_gap.max()), float(carried_gap.max()))
            noise.chain_bound = max(noise.chain_bound, worst)
            noise.bound = max(noise.bound, worst)
            quarters = np.maximum(quarters, [q.max() for q in np.array_split(carried_gap, 4)])
    noise.carried_by_quarter = [float(q) for q in quarters]
    model.truncate(0)
    noise.seconds = time.perf_counter() - t0
    if progress is not None:
        progress(1.0, "kernel noise measured")
    return noise


TreeRows = tuple[PathStats, np.ndarray, np.ndarray]  # stats, |Δ gap| per row, marked exact


def _on_single_steps(model: LanguageModel, depth: int, stretch: list[int],
                     reference: np.ndarray, sizes: tuple[int, ...], work: _Work,
                     ) -> tuple[dict[int, np.ndarray], TreeRows | None]:
    """Every measurement that starts on a cache written by single steps: passes of each size
    (fresh) and the trees (with, per tree row, whether the runtime marks it exact). Later
    starts go first: truncating to a start drops what the later ones wrote and leaves the
    single-step rows before it."""
    tree_starts = (list(range(0, len(stretch) - 3, TREE_EVERY))
                   if hasattr(model, "extend_tree") and len(stretch) >= 4 else [])
    jobs = sorted([(start, n) for n in sizes for start in range(0, len(stretch), n)]
                  + [(start, 0) for start in tree_starts], reverse=True)
    chunks: dict[int, dict[int, np.ndarray]] = {n: {} for n in sizes}
    refs: list[np.ndarray] = []
    rows: list[np.ndarray] = []
    vouched: list[bool] = []
    for start, n in jobs:
        model.truncate(depth + start)
        if n:
            chunk = stretch[start:start + n]
            chunks[n][start] = model.extend(chunk, len(chunk))
            work.step(len(chunk), f"passes of {n} on a cache of single steps (from {depth})")
        else:
            tree_refs, tree_rows, exact = _tree(model, depth + start, stretch[start:start + 4],
                                                reference[start:start + 3],
                                                (_other_token(stretch, start + 1),
                                                 _other_token(stretch, start + 2)))
            refs += tree_refs
            rows += tree_rows
            vouched += exact
            work.step(14, f"tree passes (from {depth})")
    fresh = {n: np.concatenate([chunks[n][s] for s in sorted(chunks[n])]) for n in sizes}
    if not rows:
        return fresh, None
    stats, gap = _stats(np.stack(refs), np.stack(rows))
    return fresh, (stats, gap, np.array(vouched, dtype=bool))


def _carried(model: LanguageModel, depth: int, stretch: list[int], n: int,
             work: _Work) -> np.ndarray:
    """The stretch fed in passes of n one after another: every earlier row written by passes
    too, as in a speculative run whose drafts are all accepted."""
    model.truncate(depth)
    rows = []
    for start in range(0, len(stretch), n):
        chunk = stretch[start:start + n]
        rows.append(model.extend(chunk, len(chunk)))
        work.step(len(chunk), f"passes of {n} one after another (from {depth})")
    return np.concatenate(rows)


def _tree(model: LanguageModel, before: int, chain: list[int], chain_refs: np.ndarray,
          siblings: tuple[int, int],
          ) -> tuple[list[np.ndarray], list[np.ndarray], list[bool]]:
    """The tree a0 - a1 - a2 with siblings b1 (of a1) and b2 (of a2) in one pass, each node
    against single steps over its own path; then the path a0 - b1 kept and a token x more,
    against single steps over a0 b1 x. The cache holds single-step rows up to `before`.
    Returns (reference rows, tree rows, whether the runtime marks each row exact: the tree
    pass says so per row; the row after is a chain pass's, exact where the kernels are
    batch-invariant)."""
    a0, a1, a2, x = chain
    b1, b2 = siblings
    model.extend([a0], 1)
    model.extend([a1], 1)
    b2_ref = model.extend([b2], 1)[0]
    model.truncate(before + 1)
    b1_ref = model.extend([b1], 1)[0]
    after_ref = model.extend([x], 1)[0]
    model.truncate(before)
    got, exact = model.extend_tree([a0, a1, a2, b1, b2], [-1, 0, 1, 0, 1], 0)
    model.keep_path([0, 3])  # a0, b1: a path that leaves the first one
    path = [a0, b1][model.n_cached - before:]  # a runtime may keep only a leading part
    after = model.extend([*path, x], 1)[0]
    batch_invariant = bool(getattr(model, "batch_invariant", False))
    return ([*chain_refs, b1_ref, b2_ref, after_ref], [*got, after],
            [*map(bool, exact), batch_invariant])


def _other_token(stretch: list[int], i: int) -> int:
    """A sibling for stretch[i]: a token of the text that is not it."""
    for j in range(i + 5, i + 5 + len(stretch)):
        other = stretch[j % len(stretch)]
        if other != stretch[i]:
            return other
    return stretch[i] + 1


def _fitting(model: LanguageModel, positions: int) -> int:
    """As many positions as the model's context holds after the prompt."""
    return max(4, min(positions, model.n_ctx - _PROMPT_TOKENS))


def runtime_version(model: LanguageModel) -> str:
    """The version of the runtime that computes the kernels (its kernels change with it)."""
    module = {"llamacpp": "llama_cpp", "torch": "torch"}.get(model.backend, model.backend)
    found = versions()
    extra = f"+transformers {found.get('transformers')}" if module == "torch" else ""
    return f"{module} {found.get(module, 'unknown')}{extra}"


def _key(model: LanguageModel) -> str:
    threads = getattr(model, "n_threads", None) or os.cpu_count()
    return f"{model_key(model)}|threads={threads}|{runtime_version(model)}"


def cached_noise(model: LanguageModel, positions: int | None = None) -> KernelNoise | None:
    """The stored measurement for this model, machine and runtime; None if there is none."""
    positions = positions or DEFAULT_POSITIONS
    entry = read_store(_STORE).get(_key(model))
    if not isinstance(entry, dict):
        return None
    try:
        noise = KernelNoise.from_dict(entry)
    except (KeyError, TypeError, ValueError):
        return None
    return noise if noise.positions >= _fitting(model, positions) else None


def cached_kernel_noise(model: LanguageModel, positions: int | None = None,
                        progress: Progress | None = None,
                        cancelled: Callable[[], bool] | None = None) -> KernelNoise:
    """The measured noise for this model and machine; measured now if not cached (a
    cancelled measurement raises MeasurementCancelled and stores nothing)."""
    noise = cached_noise(model, positions)
    if noise is not None:
        return noise
    noise = measure_kernel_noise(model, positions or DEFAULT_POSITIONS, progress=progress,
                                 cancelled=cancelled)
    store = read_store(_STORE)
    store[_key(model)] = noise.as_dict()
    write_store(_STORE, store)
    return noise
