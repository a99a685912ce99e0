"""What a target pass over n tokens costs, in seconds: priced from the passes this process has
timed (medians of several kept samples per pass size), over a curve stored from earlier quiet
runs where one exists. Nothing is measured before a run's first token.

On a CPU verifying 9 tokens can cost 3-4 plain steps, on a GPU almost one; where a kernel
takes rows in blocks a longer pass can even cost less than a shorter one. So the curve is
kept per pass size, never assumed linear, and interpolated between the sizes it knows.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.engine.protocol import LanguageModel
from app.engine.records import TIMING_KEPT, TIMING_STALLED, TIMING_WARM_UP
from app.paths import cache_dir, write_atomically

# kept samples per pass size; the price of a size is their median once there are
# MIN_SAMPLES of them: one cold or stalled pass never sets a price (a median of 3 outvotes
# one). Measured in bfae2f5: with each size priced from its own latest time a cold first plain
# step (20 ms against 0.17 warm) priced plain decoding and a draft 13x a plain step drafted
# k = 1 in 15 of 24 steps (tests/test_verify_cost_curve.py replays it)
RECENT_PASSES = 9
MIN_SAMPLES = 3
# a sample this many times its size's price is refused as stalled: on 2 cores shared with a
# build and the test suite single passes took 0.04-3.4 s against 24-123 ms quiet (llama-bench),
# while a quiet machine's passes of one size stay within 1.5x of each other (not swept)
STALL_FACTOR = 3.0
# the machine is busy when more threads want to run than it has cores (os.getloadavg): its
# timings are then the machine's, not the pair's, and are never stored for later runs
BUSY_LOAD_PER_CORE = 1.0


def machine_load() -> float:
    """The 1-minute load average (0 where the system has none, as on Windows)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return 0.0


def machine_busy() -> bool:
    return machine_load() > BUSY_LOAD_PER_CORE * (os.cpu_count() or 1)


@dataclass
class SizeSamples:
    """The kept timings of one pass size, and whether any was taken on a busy machine."""

    times: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_PASSES))
    busy: deque[bool] = field(default_factory=lambda: deque(maxlen=RECENT_PASSES))
    warmed: bool = False  # the first pass of a size (buffers grow then) was seen and dropped
    _median: float | None = field(default=None, init=False, repr=False, compare=False)

    def add(self, seconds: float, busy: bool) -> None:
        """Keep a sample (the one way samples are kept: the median is kept until then)."""
        self.times.append(seconds)
        self.busy.append(busy)
        self._median = None

    @property
    def priced(self) -> bool:
        return len(self.times) >= MIN_SAMPLES

    @property
    def median(self) -> float:
        if self._median is None:
            self._median = float(np.median(self.times))
        return self._median


@dataclass
class VerifyCostCurve:
    """Seconds for one target pass over n tokens, keyed by n.

    `points` is a stored shape (the medians of earlier quiet runs on this model and device, or
    an explicit calibration); `sizes` holds the samples this process kept. A size with
    MIN_SAMPLES kept samples is priced at their median; with a stored shape, every other size
    costs its stored time scaled by the live level (the median ratio of live to stored time
    over the priced sizes), and without one it is interpolated between priced sizes. A size
    past the largest priced one, with no stored shape and a single priced size, has no price:
    the controller measures it (app.engine.adaptive, RULE_MEASURE) rather than guess.

    observe() drops the first pass of each size (a cold pass), and refuses a sample STALL_FACTOR
    times the size's price (a pass stalled on busy cores); `refused` counts them."""

    points: dict[int, float] = field(default_factory=dict)
    sizes: dict[int, SizeSamples] = field(default_factory=dict)
    refused: int = 0
    stored_at: float | None = None  # when the stored shape was measured (time.time())
    # per kind of draft, seconds per drafted token of the kept drafting passes: the draft's
    # price lives beside the target's, shared by the runs on one pair, so a second run does
    # not time the draft again (app.engine.pass_pricing.PassCost keeps them)
    draft_times: dict[str, deque[float]] = field(default_factory=dict)
    # the same for a draft's first token, which also brings the draft up to the context
    draft_first_times: dict[str, deque[float]] = field(default_factory=dict)
    # and seconds per token a probe's draft spent catching up on what the target wrote alone
    draft_catch_up: dict[str, deque[float]] = field(default_factory=dict)
    # the prices current() gives, computed again only when a sample is kept (observe()) or
    # the stored shape changed: the controller asks for them at every k of every step, and
    # recomputing every size's median each time cost 2.6-3.5 ms a step (--ngram on prose,
    # draft_max 64, against a 27 ms target step; docs/benchmarks.md, "N-gram lookup")
    _revision: int = field(default=0, init=False, repr=False, compare=False)
    _prices: tuple[tuple[Any, ...], dict[int, float]] = field(
        default=((), {}), init=False, repr=False, compare=False)

    def samples(self, n: int) -> SizeSamples:
        return self.sizes.setdefault(n, SizeSamples())

    def draft_samples(self, kind: str) -> deque[float]:
        return self.draft_times.setdefault(kind, deque(maxlen=RECENT_PASSES))

    def draft_first_samples(self, kind: str) -> deque[float]:
        return self.draft_first_times.setdefault(kind, deque(maxlen=RECENT_PASSES))

    def catch_up_samples(self, kind: str) -> deque[float]:
        return self.draft_catch_up.setdefault(kind, deque(maxlen=RECENT_PASSES))

    @property
    def live(self) -> dict[int, float]:
        """The median of each size's kept samples, for the sizes that have enough of them; the
        plain step never above a longer pass (it does a part of that pass's work: plain steps
        stalled that long on a busy machine say nothing of the pair)."""
        live = {n: s.median for n, s in self.sizes.items() if s.priced}
        longer = [t for n, t in live.items() if n > 1]
        if 1 in live and longer:
            live[1] = min(live[1], *longer)
        return live

    @property
    def load(self) -> float:
        """Live time over stored time, the median over the sizes priced live (1: no shape)."""
        return self._load(self.live)

    def _load(self, live: dict[int, float]) -> float:
        if not self.points:
            return 1.0
        return level(live, {n: max(interpolate(self.points, n), 1e-9) for n in live})

    def current(self) -> dict[int, float]:
        """Every size this curve can price now, with its price."""
        return dict(self._current())

    def _current(self) -> dict[int, float]:
        """current(), kept until a sample is kept or the stored shape is replaced (not to be
        changed by the caller)."""
        key = (self._revision, *self.points.items())
        if self._prices[0] != key:
            live = self.live
            load = self._load(live)
            prices = {**{n: t * load for n, t in self.points.items()}, **live}
            self._prices = (key, prices)
        return self._prices[1]

    def can_price(self, n: int) -> bool:
        """A stored shape prices every size; live prices alone, the sizes between the
        smallest and largest priced one, and past it along the last two's slope (a draft
        that copies less than asked may never fill the longest pass)."""
        if self.points:
            return True
        known = self._current()
        if not known:
            return False
        return min(known) <= n <= max(known) or (len(known) >= 2 and n > max(known))

    def cost(self, n: int) -> float:
        return interpolate(self._current(), n)

    def busy(self, n: int) -> bool:
        """Whether a kept sample behind size n's live price was taken on a busy machine."""
        samples = self.sizes.get(n)
        return samples is not None and samples.priced and any(samples.busy)

    def observe(self, n: int, seconds: float, busy: bool = False) -> str:
        """Keep one pass's time, or say why not: TIMING_WARM_UP, TIMING_STALLED or
        TIMING_KEPT."""
        samples = self.samples(n)
        if not samples.warmed:
            samples.warmed = True
            return TIMING_WARM_UP
        if samples.priced:
            reference: float | None = samples.median
        else:
            reference = self.cost(n) if self.points else None
        if reference is not None and seconds > STALL_FACTOR * reference:
            self.refused += 1
            return TIMING_STALLED
        samples.add(seconds, busy)
        self._revision += 1
        return TIMING_KEPT

    def quiet_medians(self) -> dict[int, float]:
        """The priced sizes whose kept samples were all taken on a quiet machine."""
        return {n: s.median for n, s in self.sizes.items() if s.priced and not any(s.busy)}


# a pass is padded to a larger size only where that size is priced at least this much below
# its own: on the Xeon a 3-token pass was priced at 112.5, 114.4 and 115.7 ms by three
# measurements on one day (a live run's medians, bench_logit_rows.py, a calibration), a
# 4-token pass at 107.3-107.4, so a real saving of 4-7% was within 5% once; a price moves by
# about 1.5% between such measurements
PAD_MARGIN = 0.02
# a size padded away runs at its own size once in this many of its passes: its price then
# follows the machine as the larger size's does (a price set early in a run would otherwise
# pad every later pass of that size for good); at a 4-7% saving that costs 0.3-0.4%
PAD_RETIME = 16


def cheapest_size(prices: dict[int, float], n: int, largest: int,
                  own: float | None = None) -> int:
    """The size to run a pass of n tokens at: n, or a larger size up to `largest` priced at
    least PAD_MARGIN below it, the cheapest such (the pass then reads filler tokens after
    its own, whose rows are never judged). CPU kernels take rows in blocks of 4 or 16, so on
    the Xeon a pass of 4 tokens costs less than one of 3, and 16 less than 9 to 15. Only
    sizes the curve measured count (keys of `prices`): an interpolated price would not
    show such a step. `own`: n's price, where the caller has it already."""
    own = interpolate(prices, n) if own is None else own
    best, best_price = n, own * (1 - PAD_MARGIN)
    for size, price in prices.items():
        if n < size <= largest and price <= best_price:
            best, best_price = size, price
    return best


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


# -- the stored curve: the medians of quiet runs (or of an explicit calibration), per model
# file and device --
_CONTEXT_TOKENS = 48  # the context a calibration pass follows (not measured)
# pass sizes timed over more rounds (calibrate_verify_curve): 43836f7, 3-round calibrations put
# the demo target's t(2) / t(1) at 1.59-1.69 against 1.88-1.96 live
_SMALL = 5
# sizes up to this one each timed (calibration_sizes): 85fe594's timed A/B, and
# docs/ablation.md (the 5-size calibration: suffix repetitive -2.9% before the removals)
_EVERY_SIZE = 17
_STORE = "verify_cost.json"


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
    over all sizes, and of `small_repeats` rounds for the sizes up to _SMALL (they set whether
    a short draft pays at all, and they are cheap). The warm-up pass is as large as the largest
    size: the first pass of a new size grows llama.cpp's compute buffers."""
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


def _key(model: LanguageModel) -> str:
    return f"v7|{model_key(model)}|{os.cpu_count()}"  # v7: medians of quiet runs, dated


def stored_verify_curve(model: LanguageModel) -> VerifyCostCurve:
    """The stored curve for this model and device (empty when none was stored): read only,
    nothing is measured."""
    entry = read_store(_STORE).get(_key(model), {})
    points = {int(n): float(t) for n, t in entry.get("seconds", {}).items()}
    stored_at = entry.get("measured_at")
    return VerifyCostCurve(points, stored_at=float(stored_at) if points and stored_at else None)


def store_verify_curve(model: LanguageModel, medians: dict[int, float]) -> None:
    """Merge these quiet medians into the stored curve of this model and device
    (merged_shape)."""
    if not medians:
        return
    store = read_store(_STORE)
    entry = store.setdefault(_key(model), {})
    stored = {int(n): float(t) for n, t in entry.get("seconds", {}).items()}
    merged = merged_shape(stored, medians)
    entry["seconds"] = {str(n): merged[n] for n in sorted(merged)}
    entry["measured_at"] = time.time()
    write_store(_STORE, store)


def merged_shape(stored: dict[int, float], medians: dict[int, float]) -> dict[int, float]:
    """A stored curve with a later run's medians in it, at the run's level: the sizes the run
    did not price are scaled by how its prices compare with the stored ones (level()). Each run
    prices the sizes it ran, at its own context depth and on the machine of that moment;
    merged size by size, one day's runs on the Xeon left 128.8 ms stored for a 4-token pass
    beside 117.5 for a 3-token one, where runs and the calibration measured 106-107 against
    112-116 side by side, so a new run did not pad a 3-token pass to 4 until its own passes
    priced both. A shape is only a shape at one level."""
    stored, medians = _usable(stored), _usable(medians)
    scale = level(medians, stored)
    return {**{n: t * scale for n, t in stored.items()}, **medians}


def level(prices: dict[int, float], reference: dict[int, float]) -> float:
    """How `prices` compare with `reference`: the median ratio over the sizes both price,
    the passes over several tokens where there are any (1: none shared). This machine's 2
    cores switch for minutes between states where a 2-token pass costs 1.65x and 1.9x a
    single step, so the plain step's own level says little of the others'."""
    shared = [n for n in prices if n in reference]
    shared = [n for n in shared if n > 1] or shared
    if not shared:
        return 1.0
    return float(np.median([prices[n] / reference[n] for n in shared]))


def _usable(prices: dict[int, float]) -> dict[int, float]:
    """The prices a curve can hold: positive and finite (a store edited by hand, or written by
    a broken build, may hold others; one would set the level of every size for good)."""
    return {n: t for n, t in prices.items() if t > 0 and math.isfinite(t)}


def calibrate_verify_curve(model: LanguageModel, draft_max: int) -> VerifyCostCurve:
    """Measure every calibration size now and store the curve unless the machine is busy
    (benchmarks call this before they time anything; runs never do)."""
    curve = measure_verify_curve(model, calibration_sizes(draft_max))
    if not machine_busy():
        store_verify_curve(model, curve.points)
    curve.stored_at = time.time()
    return curve


def measure_step_costs(target: LanguageModel, draft: LanguageModel | None,
                       rounds: int = 7, warm_up: int = 2) -> tuple[float, float]:
    """Seconds for one plain target step and one draft-model step (0 without a draft model),
    timed in turns, so both see the same load. Each model first takes `warm_up` steps (the
    first steps after loading allocate buffers); each figure is the median of `rounds`."""
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
