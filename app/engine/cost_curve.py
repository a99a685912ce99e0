"""What a target pass over n tokens costs, in seconds: a curve calibrated once per model file
and device (measured, then cached), rescaled live by the passes of the run.

On a CPU verifying 9 tokens can cost 3-4 plain steps, on a GPU almost one; where a kernel
takes rows in blocks a longer pass can even cost less than a shorter one. So the curve is
kept per pass size, never assumed linear, and interpolated between the sizes it knows.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.engine.protocol import LanguageModel
from app.paths import cache_dir, write_atomically

# the live level is the median over this many of the latest passes, once there are
# _LIVE_SAMPLES of them (fewer: one cold or stalled pass decides). Measured in bfae2f5: with
# each size's own live time a cold first plain step (20 ms against 0.17 warm) priced plain
# decoding and a draft 13x a plain step drafted k = 1 in 15 of 24 steps
# (tests/test_verify_cost_curve.py replays it); 9 and 3 themselves were not swept
RECENT_PASSES = 9
_LIVE_SAMPLES = 3


@dataclass
class VerifyCostCurve:
    """Seconds for one target pass over n tokens, keyed by n; interpolated between points.

    `points` are calibrated (measured once per model and device, cached); the machine's load
    moves the level of the whole curve but seldom its shape. So live passes set one `load`,
    the median ratio of live to calibrated time over the last few passes of any size, and
    every size costs its calibrated time scaled by it: all sizes are priced at the same
    moment. Per-size live times would not be: a plain step is timed only while k = 0, so a
    slow (cold) plain step once made every later pass size look cheap beside it and kept a
    draft that never passed drafting. A curve measured on a busy machine is not trusted for
    ever, and one slow pass moves nothing. Without calibrated points the live median of each
    size is the curve.

    The one exception is the plain step, every draft's yardstick: this machine's 2 cores switch
    for minutes at a time between a state where a single step costs 29.5 ms and a 2-token pass
    56.5 (1.9x) and one where they cost 33-34 and 55.7 (1.65x). A calibration catches one state,
    the run may be in the other, and at 1.65x a 1-token guess pays from 74% acceptance, at 1.9x
    never. So once a few plain steps are timed lately, their median is t(1), and the passes
    over more tokens set the level of the rest of the curve (the median of all passes until
    there are a few of them).
    """

    points: dict[int, float] = field(default_factory=dict)
    recent: deque[tuple[int, float]] = field(
        default_factory=lambda: deque(maxlen=RECENT_PASSES))

    recent_plain: deque[float] = field(
        default_factory=lambda: deque(maxlen=RECENT_PASSES))
    recent_passes: deque[tuple[int, float]] = field(
        default_factory=lambda: deque(maxlen=RECENT_PASSES))

    @property
    def load(self) -> float:
        return self._load(self.recent)

    def _load(self, passes: deque[tuple[int, float]]) -> float:
        ratios = [t / max(interpolate(self.points, n), 1e-9) for n, t in passes]
        return float(np.median(ratios)) if self.points and ratios else 1.0

    @property
    def live(self) -> dict[int, float]:
        """The median live time of each pass size seen lately."""
        by_size: dict[int, list[float]] = {}
        for n, t in self.recent:
            by_size.setdefault(n, []).append(t)
        return {n: float(np.median(times)) for n, times in by_size.items()}

    def current(self) -> dict[int, float]:
        if not self.points:
            return self.live
        enough = len(self.recent_passes) >= _LIVE_SAMPLES
        load = self._load(self.recent_passes) if enough else self.load
        scaled = {n: t * load for n, t in self.points.items()}
        if len(self.recent_plain) >= _LIVE_SAMPLES:
            # never above a 2-token pass: plain steps stalled that long say nothing of the shape
            scaled[1] = min(float(np.median(self.recent_plain)), interpolate(scaled, 2))
        return scaled

    def cost(self, n: int) -> float:
        return interpolate(self.current(), n)

    def observe(self, n: int, seconds: float) -> None:
        self.recent.append((n, seconds))
        if n == 1:
            self.recent_plain.append(seconds)
        else:
            self.recent_passes.append((n, seconds))


def interpolate(points: dict[int, float], n: int) -> float:
    """Seconds of a pass over n tokens: a known size's time, else linear between the two
    nearest sizes (beyond the last, along the last two's slope)."""
    if not points:
        return float(n)  # unknown: assume linear, which makes no k pay less than it should
    if n in points:
        return points[n]
    sizes = sorted(points)
    values = [points[s] for s in sizes]
    if n > sizes[-1] and len(sizes) > 1:
        slope = (values[-1] - values[-2]) / (sizes[-1] - sizes[-2])
        return values[-1] + slope * (n - sizes[-1])
    return float(np.interp(n, sizes, values))


# -- calibration: measuring the curve once per model file and device, and caching it --
_CONTEXT_TOKENS = 48  # the context a calibration pass follows (not measured)
# pass sizes timed over more rounds (measure_verify_curve): 43836f7, 3-round calibrations put
# the demo target's t(2) / t(1) at 1.59-1.69 against 1.88-1.96 live
_SMALL = 5
# sizes up to this one each timed (calibration_sizes): 85fe594's timed A/B, and
# docs/ablation.md (the 5-size calibration: suffix repetitive -2.9% before the removals)
_EVERY_SIZE = 17
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
        return os.getloadavg()[0] > 1.5 * (os.cpu_count() or 1)  # threshold not measured
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


# -- the cache: measurements kept per model file and machine, one JSON file per kind --


def model_key(model: LanguageModel) -> str:
    """The model file (path, size, mtime), its runtime, device and kernels."""
    path = Path(model.path)
    stamp = ""
    if path.exists():
        stat = path.stat()
        stamp = f"{stat.st_size}:{int(stat.st_mtime)}"
    return f"{model.backend}|{path.resolve()}|{stamp}|{model.device}|{model.speed_key}"


def read_store(name: str) -> dict[str, Any]:
    """The cache file `name`; empty when missing or unreadable (it is rebuilt by measuring)."""
    try:
        store = json.loads((cache_dir() / name).read_text())
    except (OSError, ValueError):
        return {}
    return store if isinstance(store, dict) else {}


def write_store(name: str, store: dict[str, Any]) -> None:
    write_atomically(cache_dir() / name, json.dumps(store, indent=1))
