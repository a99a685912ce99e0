"""Comparing a speculative run with its plain baseline, the same way for the bench
(app.cli.bench) and the window's engine host (app.host.server): while both runs decode, a
greedy compare notes the target's top two tokens per position (MarginTap); where the texts
then differ, the first difference is explained against the kernels' measured disagreement
between a one-token step and a verify pass (app.analysis.kernel_noise)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from app.analysis.divergence import (
    Divergence,
    MarginTap,
    TopTwo,
    explain_divergence,
    is_length_only,
)
from app.analysis.kernel_noise import KernelNoise, Progress, cached_kernel_noise
from app.engine.protocol import LanguageModel
from app.models.loading import LoadedPair

Say = Callable[[str], None]


@contextmanager
def margins_noted(pair: LoadedPair, greedy: bool) -> Iterator[MarginTap | None]:
    """While the block runs, a greedy pair's target notes its top two tokens per position
    (the tap; None for sampled runs, whose texts differ by design)."""
    model = pair.target
    tap = MarginTap(model) if greedy else None
    if tap is not None:
        pair.target = tap
    try:
        yield tap
    finally:
        pair.target = model


def kernel_noise(model: LanguageModel, say: Say, progress: Progress | None = None,
                 cancelled: Callable[[], bool] | None = None) -> KernelNoise:
    """The kernels' measured disagreement on this model (measured once, then cached);
    `progress` and `cancelled` as app.analysis.kernel_noise.measure_kernel_noise takes them
    (a cancel raises MeasurementCancelled)."""
    say("texts differ: measuring how far verify passes stray from single steps on this model "
        "(once; cached)")
    return cached_kernel_noise(model.model if isinstance(model, MarginTap) else model,
                               progress=progress, cancelled=cancelled)


def explain_difference(model: LanguageModel, prompt_len: int, plain: Sequence[int],
                       other: Sequence[int], plain_top: dict[int, TopTwo],
                       other_top: dict[int, TopTwo], say: Say,
                       progress: Progress | None = None,
                       cancelled: Callable[[], bool] | None = None) -> Divergence | None:
    """None when the texts agree; else their first difference, explained (see
    app.analysis.divergence.explain_divergence)."""
    if list(plain) == list(other):
        return None
    # a run that only ends earlier is no near-tie: nothing to measure for it
    bound = 0.0 if is_length_only(plain, other) else kernel_noise(model, say, progress,
                                                                  cancelled).bound
    return explain_divergence(prompt_len, plain, other, plain_top, other_top, model.token_text,
                              bound)
