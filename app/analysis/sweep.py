"""Draft-length sweep: each k against plain decoding in the same run, with what the textbook
and the cost model predict for it (the figures are RunStats.summary's, one owner)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from app.analysis.measure import Cancelled, side_by_side, warm_up
from app.engine.decode_config import DecodeConfig
from app.engine.metrics import predicted_speedup
from app.errors import SettingsError
from app.models.loading import LoadedPair
from app.runs import calibrate_pair

Progress = Callable[[str], None]


@dataclass
class SweepRow:
    k: int
    measured_speedup: float
    predicted_speedup: float  # cost model, with this run's measured times
    curve_predicted_speedup: float  # cost model, with the calibrated curve (known in advance)
    theory_speedup: float  # textbook E / (1 + k c)
    acceptance: float
    alpha: float
    tokens_per_pass: float
    plain_tok_s: float
    spec_tok_s: float
    cost_ratio: float
    identical: bool | None

    @property
    def prediction_error(self) -> float:
        """(predicted - measured) / measured."""
        if self.measured_speedup <= 0:
            return 0.0
        return self.predicted_speedup / self.measured_speedup - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "prediction_error": self.prediction_error}


def parse_ks(text: str) -> list[int]:
    """"1,2,4,8" -> [1, 2, 4, 8]; a clear error for anything else."""
    try:
        ks = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError as exc:
        raise SettingsError(f"--k must be draft lengths separated by commas, like 1,2,4,8 "
                            f"(got {text!r})") from exc
    if not ks or ks[0] < 1:
        raise SettingsError(f"--k needs draft lengths of 1 or more, like 1,2,4,8 (got {text!r})")
    return ks


def run_sweep(pair: LoadedPair, config: DecodeConfig, encoded: list[list[int]], ks: list[int],
              rounds: int = 1, progress: Progress | None = None,
              cancelled: Cancelled = lambda: False) -> list[SweepRow]:
    """For each k (fixed, not adaptive), plain and speculative runs side by side."""
    if not config.drafter:
        raise SettingsError("a sweep needs a draft — give --spec-type (or a draft model, "
                            "--ngram, --suffix, --draft-heads, --spec-type self or "
                            "--draft-mtp)")
    say = progress or (lambda message: None)
    base = replace(config, adaptive=False)
    warm_up(pair, base, encoded[0])
    curve = calibrate_pair(pair, max(ks))
    rows = []
    for k in ks:
        if cancelled():
            break
        say(f"k = {k}: plain and speculative, {len(encoded)} prompt(s) x {rounds} round(s)")
        config_k = replace(base, draft_max=k, draft_min=min(base.draft_min, k))
        plain, spec = side_by_side(pair, config_k, encoded, rounds, cancelled)
        if not spec.stats.steps or not plain.stats.steps:
            break
        stats = spec.stats
        t_plain = plain.stats.plain_step_time or 0.0
        summary = stats.summary(t_plain)
        curve_prediction = 0.0
        if stats.spec_steps and t_plain:
            # the calibrated curve's verify cost, scaled to this run's plain step
            t_verify = curve.cost(k + 1) / curve.cost(1) * t_plain
            curve_prediction = predicted_speedup(stats.alpha, stats.mean_k, t_plain,
                                                 stats.draft_time_per_token, t_verify)
        rows.append(SweepRow(
            k=k,
            measured_speedup=spec.tok_s / plain.tok_s if plain.tok_s else 0.0,
            predicted_speedup=summary.get("predicted_speedup", 0.0),
            curve_predicted_speedup=curve_prediction,
            theory_speedup=summary.get("theory_speedup", 0.0),
            acceptance=stats.acceptance,
            alpha=stats.alpha,
            tokens_per_pass=stats.tokens_per_pass,
            plain_tok_s=plain.tok_s,
            spec_tok_s=spec.tok_s,
            cost_ratio=summary.get("cost_ratio", 0.0),
            identical=plain.outputs == spec.outputs if config.sampling.greedy else None,
        ))
    return rows

