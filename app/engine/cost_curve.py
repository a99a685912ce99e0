"""What a target pass over n tokens costs, in seconds: a calibrated curve, rescaled live.

On a CPU verifying 9 tokens can cost 3-4 plain steps, on a GPU almost one; where a kernel
takes rows in blocks a longer pass can even cost less than a shorter one. So the curve is
kept per pass size, never assumed linear, and interpolated between the sizes it knows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_EMA = 0.15  # weight of a new live time (and load ratio) against what was known


@dataclass
class VerifyCostCurve:
    """Seconds for one target pass over n tokens, keyed by n; interpolated between points.

    `points` are calibrated (measured once per model and device, cached); the machine's load
    moves the level of the whole curve but seldom its shape. So a size seen in this run uses
    its live time, and every other size its calibrated time scaled by `load`, the ratio of live
    to calibrated times so far (the first live pass sets it): a curve measured on a busy
    machine is not trusted for ever.
    """

    points: dict[int, float] = field(default_factory=dict)
    live: dict[int, float] = field(default_factory=dict)
    load: float = 1.0

    def current(self) -> dict[int, float]:
        merged = {n: t * self.load for n, t in self.points.items()}
        merged.update(self.live)
        return merged

    def cost(self, n: int) -> float:
        return interpolate(self.current(), n)

    def observe(self, n: int, seconds: float) -> None:
        if self.points:
            ratio = seconds / max(interpolate(self.points, n), 1e-9)
            self.load = ratio if not self.live else (1 - _EMA) * self.load + _EMA * ratio
        old = self.live.get(n)
        self.live[n] = seconds if old is None else (1 - _EMA) * old + _EMA * seconds


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
