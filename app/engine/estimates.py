"""Acceptance as the controller learns it: per kind of draft and per draft position, with its
95% interval, and the rule that ends a draft model's draft on its own confidence.

Their constants come from a ControllerOptions (app.engine.controller_options).

A copy's acceptance (copy_accept_at) is predicted from what the copy knows before it is judged:
where it was copied from (the prompt, this output, an earlier run's output) and how many tokens
of the context its source agrees with (its match, or a prompt copy's run since the last edit),
which grows by one at each further draft position. A copy of the prompt (code asked back) goes
on for lines once it has matched a few tokens; a copy of this output or of an earlier answer
breaks every few lines at a value that differs, however long its match. Each position's
prediction is the rate measured for copies of that source and run (RATES), weighed against what
the kind's own verdicts taught the controller in this run (AcceptanceEstimate: its pooled
evidence, in tokens), with w the options' copy_rate_tokens:

    a_j = (w * rate(source, match + j) + evidence * learnt_j) / (w + evidence)

except where the copy's source had gone on in more than one way after the match (a split:
SuffixDecoding's continuation frequency below 1, two earlier answers that part at a field
name): there a_j is the rate measured at such positions (SPLIT_RATES), so a draft stops
before the split unless what lies beyond it pays for the risk.

A Decision records the source, the match, the splits, the learnt rates and their evidence
beside the accept_at it priced, so app.analysis.decision_audit reproduces every a_j.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.engine.controller_options import DEFAULT_OPTIONS, ControllerOptions
from app.engine.records import COPIED_FROM_MEMORY, COPIED_FROM_OUTPUT, COPIED_FROM_PROMPT

_Z95 = 1.959964  # the normal quantile of a 95% interval


def wilson_interval(hits: int, n: int) -> tuple[float, float]:
    """The 95% Wilson score interval for a rate of hits / n ((0, 1) when n = 0)."""
    if n == 0:
        return 0.0, 1.0
    rate, z2 = hits / n, _Z95 * _Z95
    centre = (rate + z2 / (2 * n)) / (1 + z2 / n)
    half = _Z95 * math.sqrt(rate * (1 - rate) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class AcceptanceEstimate:
    """a_i, the chance that draft position i of one kind is accepted once reached, for
    positions 0..positions-1 (it captures acceptance correlated along a draft, as in copying,
    which a single alpha does not). Hierarchical: a pooled rate over all positions (decayed
    counts, the kind's prior worth options.prior_weight tokens) is the prior of each position's own
    decayed counts, and stands alone for positions never reached. `judged` and `judged_hits`
    count every verdict undecayed: the evidence behind the estimate."""

    prior: float
    positions: int
    accept_at: list[float] = field(default_factory=list)
    hits_at: list[float] = field(default_factory=list)
    seen_at: list[float] = field(default_factory=list)
    pool_hits: float = 0.0
    pool_seen: float = 0.0
    judged: int = 0
    judged_hits: int = 0
    options: ControllerOptions = field(default=DEFAULT_OPTIONS, repr=False)

    def __post_init__(self) -> None:
        for counts in (self.hits_at, self.seen_at):
            counts.extend([0.0] * (self.positions - len(counts)))
        self._estimate()

    def pooled(self) -> float:
        return self.pooled_from(self.pool_hits, self.pool_seen)

    def pooled_from(self, hits: float, seen: float) -> float:
        """The pooled rate these counts give with this kind's prior."""
        weight = self.options.prior_weight
        return (hits + weight * self.prior) / (seen + weight)

    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.judged_hits, self.judged)

    def observe(self, accepted: Sequence[bool]) -> None:
        """One pass's verdicts, position by position up to the first rejection."""
        judged = list(accepted[: self.positions])
        # every position fades each pass, reached or not: an estimate that once fell low would
        # otherwise keep k below that position and never be corrected (it returns to the pool)
        decay = self.options.position_decay
        for i in range(self.positions):
            hit = judged[i] if i < len(judged) else None
            self.seen_at[i] = decay * self.seen_at[i] + (hit is not None)
            self.hits_at[i] = decay * self.hits_at[i] + bool(hit)
        self.count_in_pool(judged)

    def count_in_pool(self, judged: Sequence[bool]) -> None:
        """Judged verdicts into the pooled counts (faded per token) and the evidence, then the
        estimate again."""
        fade = self.options.pool_decay_per_token ** len(judged)
        self.pool_seen = fade * self.pool_seen + len(judged)
        self.pool_hits = fade * self.pool_hits + sum(judged)
        self.judged += len(judged)
        self.judged_hits += sum(judged)
        self._estimate()

    def raise_pool(self, hits: float, seen: float) -> None:
        """Take these pooled counts where, with this kind's prior, they say more is accepted
        than its own."""
        if self.pooled_from(hits, seen) > self.pooled_from(self.pool_hits, self.pool_seen):
            self.pool_hits, self.pool_seen = hits, seen
            self._estimate()

    def lift_by_copy(self, copied: int, run_is_evidence: bool) -> None:
        """A copy of the prompt's evidence beside its own passes: the run of tokens the target
        wrote that it would have predicted (as much as the pool remembers). Code quoted back
        26 tokens into its source has shown what 26 accepted drafts would, whether the tokens
        came from drafts or from plain steps, and takes the place of the kind's pooled
        verdicts when it says more (without it the replayed edits ran 1.7% slower with the
        lookup and 7% with suffix decoding, docs/ablation.md).

        A copy of the output or of an earlier answer (not DraftKind.run_is_evidence) learns
        from its verdicts alone, which shadow checks give it for free: a suffix copy recalled
        from an earlier answer often matches 16 tokens and goes on for 4 (an agent's JSON, a
        dataclass with other fields), and the output repeating a phrase of its own goes its
        own way after it. Counted at all, even beside the verdicts, a long run drafted
        31-token passes that kept 2 (packaging/research/replay_suffix.py, replay_lookup.py)."""
        run = min(float(copied), self.options.pool_memory)
        if run_is_evidence and run:
            self.raise_pool(run, run)

    def _estimate(self) -> None:
        pooled, weight = self.pooled(), self.options.pool_weight
        self.accept_at = [(hits + weight * pooled) / (seen + weight)
                          for hits, seen in zip(self.hits_at, self.seen_at, strict=True)]


@dataclass
class ConfidenceStop:
    """Where a draft model's draft should end: after the token where its own confidence says
    that no longer draft would pay for its time. With c the chance that every token drafted so
    far passes (their q's multiplied), a the kind's pooled acceptance for the tokens not yet
    drawn, and R the rate the controller expects, a pass that has drafted j tokens keeps
    drafting while some longer draft m <= limit earns its extra time at that rate:

        c * (a + a^2 + ... + a^(m-j))  >=  R * (seconds[m] - seconds[j])

    `seconds` are the pass times the controller priced k on (drafting plus the verify curve),
    not a straight line: on a CPU whose 4-token pass costs less than its 3-token one (the demo
    target, 2 threads: 0.118 against 0.140 s) a one-token slope stopped every draft after its
    first token, at a pass that loses to plain decoding, where the k it had priced paid.
    On a straight line the first extra token decides alone, as it did before.
    Each q is taken at face value as the chance its token passes: on the demo pair 99.6% of
    the tokens drafted with q >= 0.9 passed, and learning a calibration of q in 9 bins made
    the replayed drafts no faster (docs/ablation.md). Ending the draft keeps sampling exact:
    the token whose q ended it is kept, so the length is a stopping time of the draft's own
    tokens."""

    limit: int  # the most tokens this pass may draft
    next_accept: float
    rate: float
    seconds: Sequence[float]  # a pass that drafts m tokens, m = 0..limit
    chance: float = 1.0  # that every token drafted so far passes
    stopped: bool = False  # the last answer was to stop: the confidence ended the draft

    def keep_drafting(self, drafted: int, q: float) -> bool:
        """`drafted` tokens so far, the last of them drawn with probability q."""
        self.chance *= q
        # the last answer counts: a drafter held to a minimum length may draft on after a no
        longest = min(self.limit, len(self.seconds) - 1)
        spent = self.seconds[min(drafted, longest)]
        self.stopped = True
        reach = 0.0  # a + a^2 + ... up to the longer draft m: its further tokens' chances
        for m in range(drafted + 1, longest + 1):
            reach += self.next_accept ** (m - drafted)
            if self.chance * reach >= self.rate * (self.seconds[m] - spent):
                self.stopped = False
                break
        return not self.stopped


# Per source, the share of draft tokens accepted at each run (the match plus the draft
# position), from a run of at least the bucket's bound: every position of every copy the app's
# suffix drafter offered over the Xeon's recordings of the repetitive session and the edits
# (docs/ablation-data/rep-all.json, edit-all.json: 39,000 judged positions), each drafted 64
# deep (packaging/research/copy_pricing_fit.py prints them). The verbatim workload and prose
# and fresh code were left out of the fit, to check it on.
RUN_BOUNDS = (0, 3, 6, 12, 24)
RATES: dict[str, tuple[float, ...]] = {
    COPIED_FROM_PROMPT: (0.71, 0.87, 0.98, 0.97, 0.98),
    COPIED_FROM_OUTPUT: (0.36, 0.79, 0.85, 0.94, 0.91),
    COPIED_FROM_MEMORY: (0.92, 0.75, 0.89, 0.88, 0.85),
}

# Per source, the share of draft tokens accepted where the copy's source had gone on in more
# than one way after the match (SuffixDecoding's continuation frequency below 1), over the
# same positions as RATES (copy_pricing_fit.py): of copies of the memory 13 of 97, of this
# output 5 of 29, against 0.75-0.95 elsewhere. A copy that reaches a value one earlier answer
# had and another did not (a field name, a constant) rarely keeps either. A copy of the prompt
# is not priced so: 0 of 5 such positions in the fit, 3 of 4 in the verbatim workload
# (quoting one of a log's lines that begin alike), and pricing them cost that workload 0.3
# points of the oracle's gain on the Xeon's curve. RATES stay as fitted with these positions
# in: refitted without them, the replayed edits lost 3 points on the EPYC's curve.
SPLIT_RATES: dict[str, float] = {COPIED_FROM_OUTPUT: 0.17, COPIED_FROM_MEMORY: 0.13}


@dataclass(frozen=True)
class CopyEvidence:
    """What a copy knows before it is judged: its source (records.COPIED_FROM_*), how many
    of the context's last tokens its source agrees with, and the draft positions at which the
    source's earlier occurrences of the match went on in more than one way (`splits`:
    SuffixDecoding's continuation frequency below 1)."""

    source: str
    match: int
    splits: tuple[int, ...] = ()


def measured_rate(source: str, run: int) -> float | None:
    """The measured acceptance of a copy of `source` at this run (None: never measured)."""
    rates = RATES.get(source)
    if rates is None:
        return None
    bucket = max(i for i, bound in enumerate(RUN_BOUNDS) if run >= bound)
    return rates[bucket]


def copy_accept_at(copy: CopyEvidence, learnt: Sequence[float], evidence: float,
                   options: ControllerOptions = DEFAULT_OPTIONS) -> list[float]:
    """Each draft position's predicted acceptance: the measured rate of copies of this source
    at the run it reaches (worth options.copy_rate_tokens judged tokens), weighed against
    `learnt` (the kind's own rates) by `evidence`; at a split (CopyEvidence.splits), the
    measured rate of copies of this source where its occurrences went different ways
    (SPLIT_RATES), whatever the kind learnt: its verdicts are nearly all from positions
    without one."""
    weight = options.copy_rate_tokens
    predicted = []
    at_split = SPLIT_RATES.get(copy.source)
    for j, rate in enumerate(learnt):
        measured = measured_rate(copy.source, copy.match + j)
        if at_split is not None and j in copy.splits:
            predicted.append(at_split)
        else:
            predicted.append(rate if measured is None else
                             (weight * measured + evidence * rate) / (weight + evidence))
    return predicted
