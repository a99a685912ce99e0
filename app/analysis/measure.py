"""Timing runs side by side: plain and speculative decoding on the same prompts, in one
process, alternating, so ratios hold on a shared, noisy machine (bench, sweep, rank)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from app.analysis.divergence import MarginTap, TopTwo
from app.engine.cost_curve import MIN_SAMPLES
from app.engine.decode_config import DecodeConfig
from app.engine.metrics import RunStats
from app.engine.session import Session
from app.models.loading import LoadedPair
from app.runs import build_session, calibrate_pair, remember_output


@dataclass
class Tally:
    tokens: int = 0
    seconds: float = 0.0  # decoding only
    prefill_seconds: float = 0.0  # the prompts' prefill, kept apart (generate() times both)
    outputs: list[list[int]] = field(default_factory=list)
    stats: RunStats = field(default_factory=RunStats)
    # per run, when the target is a MarginTap: its top two tokens at each position scored
    tops: list[dict[int, TopTwo]] = field(default_factory=list)
    prompt_lengths: list[int] = field(default_factory=list)
    run_tok_s: list[float] = field(default_factory=list)  # each run's own rate, in run order

    @property
    def tok_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def tok_s_with_prefill(self) -> float:
        total = self.seconds + self.prefill_seconds
        return self.tokens / total if total else 0.0


def timed_run(pair: LoadedPair, config: DecodeConfig, prompt_ids: list[int], plain: bool,
              tally: Tally, retried: bool = False,
              prepare: Callable[[Session], None] | None = None) -> None:
    """One generation into `tally` (decoding time only: the prompt's prefill is left out).
    With a draft memory, a speculative run drafts from earlier prompts' speculative runs,
    never from an answer to its own prompt, and is remembered for the prompts after it;
    `retried`: a prompt a workload sends again on purpose drafts from the answers it got
    before, as a retry in the app does. `prepare`: called with the session before it runs,
    untimed (a research bench's scripted controller)."""
    # timing runs show no per-token alternatives or entropies: none are computed
    session = build_session(pair, config, plain=plain, diagnostics=False,
                            avoid_prompt=None if retried else prompt_ids)
    if prepare is not None:
        prepare(session)
    start = time.perf_counter()
    for step in session.steps(prompt_ids):
        tally.stats.add(step)
    seconds = time.perf_counter() - start - session.prefill_seconds
    tally.seconds += seconds
    tally.run_tok_s.append(len(session.output_ids) / seconds if seconds > 0 else 0.0)
    tally.prefill_seconds += session.prefill_seconds
    tally.tokens += len(session.output_ids)
    tally.outputs.append(list(session.output_ids))
    tally.prompt_lengths.append(len(prompt_ids))
    if not plain:
        remember_output(pair, session, prompt_ids)
    if isinstance(pair.target, MarginTap):
        tally.tops.append(pair.target.top)
        pair.target.top = {}


def pair_ratios(plain: Tally, spec: Tally) -> list[float]:
    """Each speculative run's rate over the plain run of the same prompt and round (they ran
    next to each other), so the spread shows how far the machine's drift moves one ratio."""
    return [s / p for p, s in zip(plain.run_tok_s, spec.run_tok_s, strict=False)
            if p > 0 and s > 0]


# tokens decoded before anything is timed
WARM_UP_TOKENS = 4
# the draft length of the passes that price a draft token before an adaptive bench (its price
# per token does not depend on k; a longer pass only costs more on a CPU)
PRICING_K = 4


def warm_up(pair: LoadedPair, config: DecodeConfig, prompt_ids: list[int]) -> None:
    """Before anything is timed: a few tokens drafted and verified, not remembered (a model's
    first passes are cold, and a drafting run warms the target and the draft alike). For an
    adaptive run, the pair priced first as a calibrated bench should be: the verify curve
    calibrated, then enough fixed-k drafting passes to price a draft token (the price is the
    pair's, shared by its runs), so the timed runs spend no pass on measuring."""
    tokens, k = WARM_UP_TOKENS, config.draft_max
    if config.adaptive:
        calibrate_pair(pair, config.draft_max)  # a new curve: before the draft is priced on it
        k = min(config.draft_max, PRICING_K)
        tokens = (MIN_SAMPLES + 2) * (k + 1)  # the first drafting pass is not kept
    session = build_session(pair, replace(config, n_predict=tokens, adaptive=False, draft_max=k),
                            plain=False, diagnostics=False, avoid_prompt=prompt_ids)
    for _ in session.steps(prompt_ids):
        pass


Cancelled = Callable[[], bool]


def side_by_side(pair: LoadedPair, config: DecodeConfig, encoded: list[list[int]],
                 rounds: int, cancelled: Cancelled = lambda: False) -> tuple[Tally, Tally]:
    """Plain and speculative runs of every prompt, alternating which goes first each round."""
    plain, spec = alternating(pair, [(True, config), (False, config)], encoded, rounds,
                              cancelled)
    return plain, spec


def alternating(pair: LoadedPair, runs: list[tuple[bool, DecodeConfig]],
                encoded: list[list[int]], rounds: int,
                cancelled: Cancelled = lambda: False) -> list[Tally]:
    """Each (plain?, config) run on every prompt, the order reversed every other round."""
    return alternating_pairs([(pair, is_plain, config) for is_plain, config in runs], encoded,
                             rounds, cancelled)


def alternating_pairs(runs: list[tuple[LoadedPair, bool, DecodeConfig]],
                      encoded: list[list[int]], rounds: int,
                      cancelled: Cancelled = lambda: False) -> list[Tally]:
    """alternating, each run on a pair of its own (views of one loaded pair that load their
    self-drafts otherwise, for one)."""
    tallies = [Tally() for _ in runs]
    for round_index in range(rounds):
        for prompt_ids in encoded:
            order = list(zip(runs, tallies, strict=True))
            if round_index % 2:
                order.reverse()
            for (pair, is_plain, run_config), tally in order:
                if cancelled():
                    return tallies
                timed_run(pair, run_config, prompt_ids, is_plain, tally)
    return tallies
