"""What the window keeps of one run: the step records, the engine's RunStats over them, and
numpy columns of per-step values for the charts (appended in O(1), read as array views).

No Qt here. Every figure comes from a record field or from app.engine.metrics; the charts only
smooth or stack these values for display.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.analysis.cost import PairCosts, costs_from_decision
from app.analysis.divergence import Divergence
from app.engine.metrics import RunStats
from app.engine.records import StepRecord
from app.engine.trace import MODE_PLAIN, MODE_SPECULATIVE, TraceHeader

# a run in the window is of the same kind as its trace's mode
KIND_SPECULATIVE = MODE_SPECULATIVE
KIND_PLAIN = MODE_PLAIN

COLUMNS = ("t_draft", "t_verify", "t_overhead", "t_total", "emitted", "k", "accepted", "judged",
           "n_pass")


class StepColumns:
    """Growable float64 columns, one row per step."""

    def __init__(self, capacity: int = 256) -> None:
        self._data = np.zeros((len(COLUMNS), capacity))
        self.n = 0

    def append(self, step: StepRecord) -> None:
        if self.n == self._data.shape[1]:
            grown = np.zeros((len(COLUMNS), 2 * self.n))
            grown[:, : self.n] = self._data
            self._data = grown
        self._data[:, self.n] = (
            step.t_draft, step.t_verify, step.t_overhead, step.t_total,
            len(step.emitted), step.k, step.n_accepted, len(step.tokens), step.n_pass,
        )  # fmt: skip
        self.n += 1

    def __getitem__(self, name: str) -> np.ndarray:
        return self._data[COLUMNS.index(name), : self.n]


@dataclass
class CompareResult:
    """Speculative run against the plain baseline on the same prompt and settings."""

    speculative_tok_s: float
    plain_tok_s: float
    identical: bool
    greedy: bool
    speculative_tokens: int
    plain_tokens: int
    # greedy runs that differ: the first differing token and the target's margins there
    divergence: Divergence | None = None
    explaining: bool = False  # the texts differ and the host is working out why
    explanation_cancelled: bool = False  # ...and that was cancelled

    @property
    def speedup(self) -> float:
        return self.speculative_tok_s / self.plain_tok_s if self.plain_tok_s > 0 else 0.0

    def describe(self) -> str:
        if self.identical:
            verdict = "texts identical"
        elif self.explanation_cancelled:
            verdict = ("texts differ — explaining why was cancelled (`draftlens check-exact` "
                       "measures the kernels' noise on this model and explains such differences)")
        elif self.explaining:
            verdict = "texts differ — working out where and why (see the status bar)"
        elif self.greedy and self.divergence is not None and self.divergence.near_tie:
            verdict = ("texts differ where the target's top two tokens nearly tie — the fast "
                       "kernels sum a verify pass differently from a single step, by no more "
                       "than measured on this model (" + self.divergence.describe()
                       + "); --exact-kernels gives identical text (llama.cpp: with every "
                       "layer on the CPU, where its batch-invariant kernels hold)")
        elif self.greedy:
            verdict = "texts DIFFER (greedy runs should match — please report this)"
            if self.divergence is not None:
                verdict += " — " + self.divergence.describe()
        else:
            verdict = "texts differ (expected when sampling)"
        return (
            f"speedup {self.speedup:.2f}× ({self.speculative_tok_s:.1f} vs "
            f"{self.plain_tok_s:.1f} tok/s plain) · {verdict}"
        )


class RunData:
    """The records of one run as they arrive (live, or read back from a trace)."""

    def __init__(self, kind: str, header: TraceHeader | None = None) -> None:
        self.kind = kind
        self.header = header
        self.steps: list[StepRecord] = []
        self.stats = RunStats()
        self.columns = StepColumns()
        self.summary: dict | None = None

    def add(self, step: StepRecord) -> None:
        self.steps.append(step)
        self.stats.add(step)
        self.columns.append(step)

    @property
    def output_ids(self) -> list[int]:
        return [t for step in self.steps for t in step.emitted]

    @property
    def text(self) -> str:
        return "".join(t for step in self.steps for t in step.emitted_text)


def run_costs(run: RunData | None) -> PairCosts | None:
    """The costs the run's controller priced its latest decision on (None before it priced
    any): the figures the cost view, the speedup chart and the Why line all show."""
    for step in reversed(run.steps if run is not None else []):
        decision = step.decision
        if decision is not None and decision.prices:
            drafter = "draft model" if decision.stop_limit is not None or decision.kind in (
                "model", "tli", "mtp") else decision.kind
            return costs_from_decision(decision, drafter)
    return None


@dataclass(frozen=True)
class PlainRun:
    """A run whose adaptive k decoded (almost) every step plainly."""

    steps: int
    plain_steps: int


def adaptive_ran_plainly(run: RunData | None, min_steps: int = 8) -> PlainRun | None:
    """An adaptive run of at least `min_steps` steps that drafted in under a quarter of them,
    fewer draft tokens than a quarter of its output: the step table, the p/q bars and the
    acceptance charts have (next to) nothing to show. (A retry may draft most of its answer in
    a few long passes and decode the short rest plainly.)"""
    if run is None or run.kind != KIND_SPECULATIVE or run.header is None:
        return None
    if not run.header.settings.get("adaptive"):
        return None
    stats = run.stats
    if (stats.steps < min_steps or stats.spec_steps * 4 >= stats.steps
            or stats.drafted * 4 >= stats.emitted):
        return None
    return PlainRun(stats.steps, stats.plain_steps)
