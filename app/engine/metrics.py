"""Run statistics from step records, and the theory they are compared with.

alpha: fraction of draft tokens accepted. c: cost of one drafted token / one target step.
Textbook (Leviathan et al.): E[tokens per pass] = (1 - alpha^(k+1)) / (1 - alpha),
speedup = E / (1 + k c). The cost model replaces "a verify pass costs one target step"
with the measured time to verify k+1 tokens: E * t_target(1) / (k t_draft + t_verify(k+1)).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.engine.records import StepRecord
from app.engine.similarity import auc_interval, judged_confidence, judged_similarity


def expected_tokens_per_pass(alpha: float, k: float) -> float:
    """Tokens a pass emits when each of k draft tokens passes with the same chance alpha."""
    if k <= 0:
        return 1.0
    if alpha >= 1.0:
        return k + 1.0
    return float((1.0 - alpha ** (k + 1)) / (1.0 - alpha))


def expected_tokens_by_position(accept_at: Sequence[float]) -> float:
    """Tokens a pass emits when draft position i, once reached, passes with accept_at[i]:
    1 + sum_j prod_{i<=j} accept_at[i] (acceptance correlated along a draft, as in copying)."""
    return 1.0 + float(np.cumprod(accept_at).sum()) if len(accept_at) else 1.0


def expected_tokens_for_each_k(accept_at: Sequence[float]) -> np.ndarray:
    """expected_tokens_by_position(accept_at[:k]) for every k from 0 to len(accept_at)."""
    return np.concatenate(([1.0], 1.0 + np.cumsum(np.cumprod(accept_at))))


def theory_speedup(alpha: float, k: float, c: float) -> float:
    return expected_tokens_per_pass(alpha, k) / (1.0 + k * c)


def predicted_speedup(
    alpha: float, k: float, t_target: float, t_draft_token: float, t_verify: float,
    t_first_extra: float = 0.0,
) -> float:
    """Speedup when verifying k+1 tokens costs t_verify rather than one target step;
    t_first_extra: what a draft's first token costs beyond the others (it also brings the
    draft up to the context)."""
    denominator = k * t_draft_token + (t_first_extra if k > 0 else 0.0) + t_verify
    if denominator <= 0:
        return 0.0
    return expected_tokens_per_pass(alpha, k) * t_target / denominator


@dataclass
class RunStats:
    """Accumulates step records; every figure the UI and CLI show comes from here."""

    steps: int = 0
    emitted: int = 0
    drafted: int = 0
    judged: int = 0
    accepted: int = 0
    spec_steps: int = 0
    t_draft: float = 0.0
    t_verify: float = 0.0
    t_overhead: float = 0.0
    t_verify_plain: float = 0.0
    plain_steps: int = 0
    # drafted tokens after each draft's first, and their time, where the drafter timed its
    # first token apart (StepRecord.t_draft_first: that pass also reads what the target wrote)
    drafted_later: int = 0
    t_draft_later: float = 0.0
    k_sum: int = 0
    judged_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)
    accepted_length: Counter[int] = field(default_factory=Counter)
    # (hidden_cos, accepted) of every judged draft token that has one
    similarity: list[tuple[float, bool]] = field(default_factory=list)
    # (q(x), accepted) of every judged draft token: the draft's own confidence
    confidence: list[tuple[float, bool]] = field(default_factory=list)

    def add(self, step: StepRecord) -> None:
        self.steps += 1
        self.emitted += len(step.emitted)
        self.t_draft += step.t_draft
        self.t_verify += step.t_verify
        self.t_overhead += step.t_overhead
        drafted = step.k
        if drafted == 0:
            self.plain_steps += 1
            self.t_verify_plain += step.t_verify
            return
        self.spec_steps += 1
        self.k_sum += step.draft_depth
        self.drafted += drafted
        if step.t_draft_first is not None and drafted > 1:
            self.drafted_later += drafted - 1
            self.t_draft_later += step.t_draft - step.t_draft_first
        outcomes = step.depth_outcomes()
        accepted = step.n_accepted
        self.accepted += accepted
        self.judged += len(outcomes)
        self.accepted_length[accepted] += 1
        while len(self.judged_at) < len(outcomes):
            self.judged_at.append(0)
            self.accepted_at.append(0)
        for i, passed in enumerate(outcomes):
            self.judged_at[i] += 1
            self.accepted_at[i] += passed
        self.similarity.extend(judged_similarity(step.tokens))
        self.confidence.extend(judged_confidence(step.tokens))

    @property
    def elapsed(self) -> float:
        return self.t_draft + self.t_verify + self.t_overhead

    @property
    def tokens_per_second(self) -> float:
        return self.emitted / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def acceptance(self) -> float:
        """Share of drafted tokens that were accepted (llama.cpp's "accept rate")."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def alpha(self) -> float:
        """Per-token acceptance probability: accepted / judged. Tokens after a rejection are
        never judged, so this (not `acceptance`) is the alpha of the theory."""
        return self.accepted / self.judged if self.judged else 0.0

    @property
    def acceptance_by_position(self) -> list[float]:
        """P(accepted at draft position i | position i was judged)."""
        return [a / n if n else 0.0 for a, n in zip(self.accepted_at, self.judged_at, strict=True)]

    @property
    def tokens_per_pass(self) -> float:
        return self.emitted / self.steps if self.steps else 0.0

    @property
    def hidden_cos_auc(self) -> tuple[float, float, float] | None:
        """How well hidden_cos predicts acceptance: ROC AUC, 95% interval (similarity.
        auc_interval); None without hidden_cos or without two tokens of each outcome."""
        return _auc(self.similarity)

    @property
    def draft_q_auc(self) -> tuple[float, float, float] | None:
        """How well the draft's own q(x) predicts acceptance, as hidden_cos_auc; None also
        when every draft token had q = 1 (drafts without probabilities: n-gram lookup)."""
        if all(q == 1.0 for q, _ in self.confidence):
            return None
        return _auc(self.confidence)

    @property
    def mean_k(self) -> float:
        return self.k_sum / self.spec_steps if self.spec_steps else 0.0

    @property
    def plain_step_time(self) -> float | None:
        """Mean seconds of a pass without drafts (one target step), if any was measured."""
        return self.t_verify_plain / self.plain_steps if self.plain_steps else None

    @property
    def spec_verify_time(self) -> float:
        """Mean seconds of a verify pass that carried drafts."""
        spec_verify = self.t_verify - self.t_verify_plain
        return spec_verify / self.spec_steps if self.spec_steps else 0.0

    @property
    def draft_time_per_token(self) -> float:
        return self.t_draft / self.drafted if self.drafted else 0.0

    @property
    def later_draft_time_per_token(self) -> float | None:
        """A drafted token's time after each draft's first (None: none timed apart)."""
        return self.t_draft_later / self.drafted_later if self.drafted_later else None

    def summary(self, t_target: float | None = None, mean_plain: bool = True
                ) -> dict[str, Any]:
        """Figures for the trace's summary line; t_target is one plain target step, if known
        (else, with mean_plain, the mean of this run's plain steps)."""
        if t_target is None and mean_plain:
            t_target = self.plain_step_time
        k = self.mean_k
        data: dict[str, Any] = {
            "steps": self.steps,
            "emitted": self.emitted,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance": self.acceptance,
            "alpha": self.alpha,
            "acceptance_by_position": self.acceptance_by_position,
            "accepted_length_histogram": {
                str(n): c for n, c in sorted(self.accepted_length.items())
            },
            "tokens_per_pass": self.tokens_per_pass,
            "tok_s": self.tokens_per_second,
            "mean_k": k,
            "t_draft": self.t_draft,
            "t_verify": self.t_verify,
            "t_overhead": self.t_overhead,
            "expected_tokens_per_pass": expected_tokens_per_pass(self.alpha, k),
        }
        for name, fit in (("hidden_cos_auc", self.hidden_cos_auc),
                          ("draft_q_auc", self.draft_q_auc)):
            if fit is not None:
                data[name] = fit[0]
                data[f"{name}_interval"] = [fit[1], fit[2]]
        if t_target and self.spec_steps:
            c = self.draft_time_per_token / t_target
            data["t_target"] = t_target
            data["cost_ratio"] = c
            data["theory_speedup"] = theory_speedup(self.alpha, k, c)
            data["predicted_speedup"] = predicted_speedup(
                self.alpha, k, t_target, self.draft_time_per_token, self.spec_verify_time
            )
        return data



def _auc(pairs: list[tuple[float, bool]]) -> tuple[float, float, float] | None:
    if not pairs:
        return None
    scores, labels = zip(*pairs, strict=True)
    return auc_interval(scores, labels)
