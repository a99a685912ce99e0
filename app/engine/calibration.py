"""Measuring what a target pass over n tokens costs on this hardware (the verify-cost curve).

On a CPU verifying 9 tokens can cost 3-4 plain steps; on a GPU almost one. The adaptive
draft length needs the real curve, so it is measured once per model file and device and
cached; during a run the controller keeps refining it from live steps.
"""

from __future__ import annotations

import os
import statistics
import time

from app.engine.cost_curve import VerifyCostCurve
from app.engine.measurement_store import model_key, read_store, write_store
from app.engine.protocol import LanguageModel

_CONTEXT_TOKENS = 48
_SMALL = 5  # pass sizes timed over more rounds (measure_verify_curve)
_EVERY_SIZE = 17  # sizes up to this one each timed (calibration_sizes)
_STORE = "verify_cost.json"
# curves measured on a busy machine: kept for this process, never written to the cache
_UNCACHED: dict[str, dict[str, float]] = {}


def calibration_sizes(draft_max: int) -> list[int]:
    """Every size up to _EVERY_SIZE, then powers of two and one more. CPU kernels take rows in
    blocks, and the steps fall where no interpolation sees them: the demo target (llama.cpp,
    Q4_K, AVX2, 2 threads) costs 148 ms for 7 tokens and 238 for 8, 323 for 15 and 265 for 16;
    interpolated from 5, 8, 9 and 16 it priced 6-7 tokens 20-30% dear and 10-15 up to 20%
    cheap, so drafts of 9-14 were chosen where 6 or 15 pays more."""
    sizes = list(range(1, _EVERY_SIZE + 1)) + [32, 33, 64, 65, 128, 129, 256, 257]
    wanted = [n for n in sizes if n <= draft_max + 1]
    if wanted[-1] < draft_max + 1:
        wanted.append(draft_max + 1)
    return wanted


def _context(model: LanguageModel) -> list[int]:
    filler = (model.tokenize("def main():\n    total = 0\n    for i in range(10):\n") * 8)
    return filler[:_CONTEXT_TOKENS]


def measure_verify_curve(
    model: LanguageModel, sizes: list[int], repeats: int = 3, small_repeats: int = 9
) -> VerifyCostCurve:
    """Time extend(n tokens, n logits) after a short context: the median of `repeats` rounds
    over all sizes (one draw, or the best of a few, is what a moment of load or of luck made
    it), and of `small_repeats` rounds for the sizes up to _SMALL. Those few set whether a
    short draft pays at all, and they are cheap: the demo target's t(2) / t(1) is 1.9 on this
    machine, and 3-round calibrations put it at 1.59-1.69 (a single step timed 17% slow),
    which made 1-token guesses look worth drafting at 74% acceptance where they never pay.

    The warm-up pass is as large as the largest size: the first pass of a new size grows
    llama.cpp's compute buffers, and a size timed only with that cost (or in a moment of
    load: best of 2 was not enough here) prices a long draft out for every later run, since
    the controller never drafts that long to see its live cost."""
    context = _context(model)
    model.truncate(0)
    model.extend(context, 0)
    largest = max(sizes)
    model.extend((context * (largest // len(context) + 1))[:largest], largest)
    model.truncate(len(context))
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for repeat in range(max(repeats, small_repeats)):
        # every size once per round, the order reversed each round: a burst of load then
        # falls on all sizes alike and moves the level, not the shape, of the curve
        this_round = sizes if repeat < repeats else [n for n in sizes if n <= _SMALL]
        for n in this_round if repeat % 2 == 0 else reversed(this_round):
            ids = (context * (n // len(context) + 1))[:n]
            start = time.perf_counter()
            model.extend(ids, n)
            times[n].append(time.perf_counter() - start)
            model.truncate(len(context))
    model.truncate(0)
    return VerifyCostCurve({n: statistics.median(t) for n, t in times.items()})


def _busy() -> bool:
    """More runnable work than cores: a curve measured now would teach every later run the
    wrong shape, so it is used for this run only and not cached."""
    try:
        return os.getloadavg()[0] > 1.5 * (os.cpu_count() or 1)
    except (OSError, AttributeError):  # Windows has no getloadavg
        return False


def _key(model: LanguageModel) -> str:
    return f"v6|{model_key(model)}|{os.cpu_count()}"  # v6: every size up to _EVERY_SIZE


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
    """Seconds for one single-token step of a (draft) model (median, after a warm-up)."""
    return measure_verify_curve(model, [1], repeats).cost(1)


def measure_step_costs(target: LanguageModel, draft: LanguageModel | None,
                       rounds: int = 7, warm_up: int = 2) -> tuple[float, float]:
    """Seconds for one plain target step and one draft-model step (0 without a draft model),
    timed in turns, so both see the same load: a ratio of one measured now and one cached from
    a quiet machine says nothing about either model. Each model first takes `warm_up` steps
    (the first steps after loading allocate buffers); each figure is the median of `rounds`."""
    models = [m for m in (target, draft) if m is not None]
    contexts = [_context(m) for m in models]
    for model, context in zip(models, contexts, strict=True):
        model.truncate(0)
        model.extend(context, 0)
        for _ in range(warm_up):
            model.extend(context[:1], 1)
            model.truncate(len(context))
    times: list[list[float]] = [[] for _ in models]
    for round_index in range(rounds):
        order = list(range(len(models)))
        if round_index % 2:
            order.reverse()  # neither model always goes first
        for i in order:
            start = time.perf_counter()
            models[i].extend(contexts[i][:1], 1)
            times[i].append(time.perf_counter() - start)
            models[i].truncate(len(contexts[i]))
    for model in models:
        model.truncate(0)
    medians = [statistics.median(t) for t in times]
    return medians[0], (medians[1] if draft is not None else 0.0)
