"""What a target pass over n tokens costs, in seconds: a calibrated curve, rescaled live.

On a CPU verifying 9 tokens can cost 3-4 plain steps, on a GPU almost one; where a kernel
takes rows in blocks a longer pass can even cost less than a shorter one. So the curve is
kept per pass size, never assumed linear, and interpolated between the sizes it knows.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

RECENT_PASSES = 9  # the live level is the median over this many of the latest passes
_LIVE_SAMPLES = 3  # the median of fewer is one cold or stalled pass


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


def verify_slope(points: dict[int, float], up_to: int) -> float:
    """Seconds one more token adds to a verify pass, fitted over the pass sizes up to
    `up_to`: neighbouring sizes, some live and some calibrated, differ by noise larger than
    the step between them (a bfloat16 CPU adds ~9 ms per token to a ~230 ms pass)."""
    sizes = sorted(n for n in points if n <= max(up_to, 2))
    if len(sizes) < 2:
        return 0.0
    slope = np.polyfit(sizes, [points[n] for n in sizes], 1)[0]
    return max(0.0, float(slope))
