"""Measuring what a target pass over n tokens costs on this hardware (the verify-cost curve).

On a CPU verifying 9 tokens can cost 3-4 plain steps; on a GPU almost one. The adaptive
draft length needs the real curve, so it is measured once per model file and device and
cached; during a run the controller keeps refining it from live steps.
"""

from __future__ import annotations

import os
import time

from app.engine.adaptive import VerifyCostCurve
from app.engine.measurement_store import model_key, read_store, write_store
from app.engine.protocol import LanguageModel

_CONTEXT_TOKENS = 48
_STORE = "verify_cost.json"
# curves measured on a busy machine: kept for this process, never written to the cache
_UNCACHED: dict[str, dict[str, float]] = {}


def calibration_sizes(draft_max: int) -> list[int]:
    """Powers of two and one more: CPU kernels take rows in blocks, so a pass over 16 tokens
    can cost less than one over 15 and much less than 17 (llama.cpp, Q4_K, AVX2)."""
    sizes = [1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 33, 64, 65, 128, 129, 256, 257]
    wanted = [n for n in sizes if n <= draft_max + 1]
    if wanted[-1] < draft_max + 1:
        wanted.append(draft_max + 1)
    return wanted


def measure_verify_curve(
    model: LanguageModel, sizes: list[int], repeats: int = 3
) -> VerifyCostCurve:
    """Time extend(n tokens, n logits) after a short context, best of `repeats` runs.

    The warm-up pass is as large as the largest size: the first pass of a new size grows
    llama.cpp's compute buffers, and a size timed only with that cost (or in a moment of
    load: best of 2 was not enough here) prices a long draft out for every later run, since
    the controller never drafts that long to see its live cost."""
    filler = (model.tokenize("def main():\n    total = 0\n    for i in range(10):\n") * 8)
    context = filler[:_CONTEXT_TOKENS]
    model.truncate(0)
    model.extend(context, 0)
    largest = max(sizes)
    model.extend((context * (largest // len(context) + 1))[:largest], largest)
    model.truncate(len(context))
    curve = VerifyCostCurve()
    for n in sizes:
        best = float("inf")
        ids = (context * (n // len(context) + 1))[:n]
        for _ in range(repeats):
            start = time.perf_counter()
            model.extend(ids, n)
            best = min(best, time.perf_counter() - start)
            model.truncate(len(context))
        curve.points[n] = best
    model.truncate(0)
    return curve


def _busy() -> bool:
    """More runnable work than cores: a curve measured now would teach every later run the
    wrong shape, so it is used for this run only and not cached."""
    try:
        return os.getloadavg()[0] > 1.5 * (os.cpu_count() or 1)
    except OSError:
        return False


def _key(model: LanguageModel) -> str:
    return f"v3|{model_key(model)}|{os.cpu_count()}"


def cached_verify_curve(model: LanguageModel, draft_max: int) -> VerifyCostCurve:
    """The curve for this model and device, measured now if not cached for these sizes."""
    sizes = calibration_sizes(draft_max)
    store = read_store(_STORE)
    key = _key(model)
    entry = _UNCACHED.get(key) or store.get(key, {})
    if all(str(n) in entry for n in sizes):
        return VerifyCostCurve({int(n): float(t) for n, t in entry.items()})
    curve = measure_verify_curve(model, sizes)
    entry.update({str(n): t for n, t in curve.points.items()})
    if _busy():
        _UNCACHED[key] = entry
    else:
        _UNCACHED.pop(key, None)
        store[key] = entry
        write_store(_STORE, store)
    return VerifyCostCurve({int(n): float(t) for n, t in entry.items()})


def measure_token_cost(model: LanguageModel, repeats: int = 3) -> float:
    """Seconds for one single-token step of a (draft) model."""
    return measure_verify_curve(model, [1], repeats).cost(1)
