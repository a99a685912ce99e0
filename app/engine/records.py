"""What the engine reports: one StepRecord per target pass, one TokenRecord per draft token.

Dataclasses inside the app; the trace file (app.engine.trace) turns them into JSON lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Where an emitted token came from; the UI colours tokens by this.
ORIGIN_ACCEPTED = "accepted"  # a draft token the target accepted
ORIGIN_REPLACEMENT = "replacement"  # the target's token after a rejection
ORIGIN_BONUS = "bonus"  # the target's extra token when every draft token passed
ORIGIN_PLAIN = "plain"  # plain target decoding (no draft this step)


@dataclass
class Alternative:
    token: int
    text: str
    p: float
    q: float


# Where a copied draft token came from (CopySource.kind)
COPIED_FROM_PROMPT = "prompt"
COPIED_FROM_OUTPUT = "output"  # this run's output so far
COPIED_FROM_MEMORY = "memory"  # an earlier run's output (CopySource.run says which)
COPIED_ON_RETRY = "retry"  # an earlier run's answer to this very prompt (CopySource.run)


@dataclass
class CopySource:
    """Where a copying drafter (suffix decoding) found a draft token, and how sure the count
    made it: `count` of the `of` remembered continuations of the matched text (the last
    `match` tokens of the context) went on this way, through this token."""

    kind: str
    run: int | None = None  # the earlier run's id, for COPIED_FROM_MEMORY and _ON_RETRY
    count: int = 1
    of: int = 1
    match: int = 0


@dataclass
class Translation:
    """How a draft token from another vocabulary became this target token
    (app.engine.drafters.draft_model.cross_vocab): the draft's own token text, and for a TLI
    draft the mass its
    distribution put outside the shared vocabulary (None: a string-level draft)."""

    draft_text: str
    outside_mass: float | None = None


@dataclass
class TokenRecord:
    """One draft token and the verdict on it."""

    pos: int
    token: int
    text: str
    q: float
    p: float
    u: float | None
    # None: a tree node that was never tested (its parent was rejected, or a sibling passed)
    accepted: bool | None
    replacement: int | None = None
    replacement_text: str | None = None
    residual_used: bool = False
    top: list[Alternative] = field(default_factory=list)
    p_entropy: float = 0.0
    q_entropy: float = 0.0
    # tree steps only: the parent's index in the step's tokens (-1: a child of the last
    # committed token) and the depth (1 for those children); None in chain steps
    parent: int | None = None
    depth: int | None = None
    # draft/target similarity at this position (app.engine.similarity); None: not measured
    hidden_cos: float | None = None
    # a copied draft token's source (suffix drafting); None for every other draft
    copied_from: CopySource | None = None
    # which of the target's own MTP heads proposed it (0-based); None for other drafts
    head: int | None = None
    # a draft token translated from another vocabulary; None for a same-vocabulary draft
    translated: Translation | None = None

    @property
    def ratio(self) -> float:
        return self.p / self.q if self.q > 0 else float("inf")

    @property
    def acceptance_chance(self) -> float:
        return min(1.0, self.ratio)


def mark_copied(records: list[TokenRecord], sources: list[CopySource] | None) -> None:
    """Give each draft token's record its copy source (records[i] is draft token i's)."""
    for record, source in zip(records, sources or (), strict=False):
        record.copied_from = source


def mark_heads(records: list[TokenRecord], heads: list[int] | None) -> None:
    """Give each draft token's record the MTP head that proposed it."""
    for record, head in zip(records, heads or (), strict=False):
        record.head = head


def mark_translated(records: list[TokenRecord], sources: list[Translation] | None) -> None:
    """Give each draft token's record its translation (records[i] is draft token i's)."""
    for record, source in zip(records, sources or (), strict=False):
        record.translated = source


# Why the controller picked a step's k (Decision.rule): one name per rule that can decide
RULE_FIXED = "fixed"  # not adaptive: k is the configured draft length (or what is left)
RULE_NOTHING_TO_DRAFT = "nothing-to-draft"  # the drafter had no draft to offer
RULE_END_OF_OUTPUT = "end-of-output"  # one token or none left to write: nothing to verify
RULE_BEST_RATE = "best-rate"  # k = argmax expected tokens per second; drafting pays
RULE_NO_GAIN = "no-gain"  # no k beats plain decoding by the required margin: k = 0
RULE_PROBE = "probe"  # k > 0 although plain decoding was priced faster: to measure acceptance
# a pass taken to price a pass size or a draft token that has too few kept samples (adaptive),
# or a plain step taken to price plain decoding beside a fixed k
RULE_MEASURE = "measure"


@dataclass
class Decision:
    """Why a step's k was chosen, with the figures that decided it, recorded by the
    controller at the moment it chose. `rule` names the rule that fired; the figures are
    those it compared (None where the rule needed none)."""

    rule: str
    k: int
    kind: str = ""  # the kind of draft priced (DraftKind.name)
    limit: int = 0  # the largest k allowed this step (draft-max, what is left, what the
    # drafter had)
    # acceptance of this kind as priced (its pooled rate, which prices every position not yet
    # reached; a copy's run may have lifted it), the 95% Wilson interval of the draft tokens
    # of this kind judged so far and their count (0: the prior alone)
    acceptance: float | None = None
    acceptance_low: float | None = None
    acceptance_high: float | None = None
    evidence: int = 0
    prior: float | None = None  # the kind's acceptance before any was measured
    plain_seconds: float | None = None  # one plain step, as priced
    pass_seconds: float | None = None  # the chosen k's pass (drafting + verify), as priced
    expected_tokens: float | None = None  # E(k): the tokens the chosen k's pass should write
    # expected speed against plain decoding (expected_tokens * plain_seconds / pass_seconds):
    # of the chosen k, and of the best other k (alternative_k: which; for k = 0 the best
    # drafting k)
    gain: float | None = None
    alternative_k: int | None = None
    alternative_gain: float | None = None
    alternative_seconds: float | None = None  # its pass, as priced
    alternative_tokens: float | None = None  # its E(k)
    min_gain: float | None = None  # the margin a k had to beat plain decoding by
    # the pass may draft up to this many tokens, its draft ending on the draft model's own
    # confidence (app.engine.estimates.ConfidenceStop); None: it drafts k
    stop_limit: int | None = None
    # acceptance as priced at each draft position (position i once i-1 passed): E(k) is
    # 1 + a0 + a0 a1 + ... over the first k of them
    accept_at: list[float] = field(default_factory=list)
    # each k's pass (k drafted tokens + the verify pass), seconds as priced, k = 0..limit;
    # prices[0] is the plain step
    prices: list[float] = field(default_factory=list)
    # the pass is padded to this many tokens, filler read after the draft and never judged,
    # because a pass of that size was priced below the pass's own (cost_curve.cheapest_size);
    # pass_seconds is the padded pass's price, unpadded_seconds the pass's at its own size
    padded_to: int | None = None
    unpadded_seconds: float | None = None
    draft_token_seconds: float | None = None  # one drafted token after the first, as priced
    # the first drafted token, as priced (it also brings the draft up to the context)
    first_draft_seconds: float | None = None
    # a probe: seconds its draft first spends reading what the target wrote since the kind
    # last drafted, as priced (None: nothing to read, or not measured yet)
    catch_up_seconds: float | None = None
    plain_samples: int = 0  # kept plain steps behind the plain step's price (0: stored curve)
    refused: int = 0  # pass timings refused so far as stalled (app.engine.cost_curve)
    busy: bool = False  # the machine was busy, or a price's samples were taken while it was
    stored_at: float | None = None  # the plain step priced from a curve stored at this time
    # a copy's acceptance (app.engine.estimates): its source and match, and the kind's own
    # rates at each position with the evidence behind them, that accept_at was priced from
    copy_source: str | None = None
    copy_match: int | None = None
    # the draft positions (from 0) at which the copy's source had gone on in more than one way
    # (app.engine.estimates.CopyEvidence.splits)
    copy_splits: list[int] | None = None
    learnt_at: list[float] | None = None
    learnt_evidence: float | None = None
    # RULE_MEASURE: the pass size being timed, and its kept samples before this pass
    measuring: int | None = None
    samples: int | None = None


# Why the engine changed the threads it decodes on (ThreadSwitch.reason)
THREADS_BUSY = "busy"  # the last passes got under app.engine.cores.BUSY_SHARE of their cores
THREADS_TRY = "try"  # all threads again, to see whether the cores are free now


@dataclass
class ThreadSwitch:
    """The engine decodes on `threads` of its `of` threads from the next pass on, because the
    last passes got `share` of the cores they ran on (app.engine.cores)."""

    threads: int
    of: int
    share: float
    reason: str


# What the verify-cost curve did with a pass's time (StepRecord.timing; app.engine.cost_curve)
TIMING_KEPT = "kept"
TIMING_WARM_UP = "warm-up"  # a pass size's first pass: dropped
TIMING_STALLED = "stalled"  # refused: STALL_FACTOR times its size's price


@dataclass
class StepRecord:
    """One target forward pass: the draft, the verdicts and what was emitted."""

    index: int
    k: int
    tokens: list[TokenRecord]
    emitted: list[int]
    emitted_text: list[str]
    origins: list[str]
    t_draft: float
    t_verify: float
    t_overhead: float
    drafter: str = ""  # the drafter's name when this pass drafted; "" for a plain pass
    # the kind of draft consulted for this pass (DraftKind.name, as the drafter declared it),
    # even where the controller then chose to draft nothing; "" without a drafter
    source: str = ""
    # tokens the target read in this pass (0: k + 1, as in a chain step); a tree pass reads
    # every node, and may re-read committed tokens the previous tree step left uncached
    pass_tokens: int = 0
    # of pass_tokens, filler read after the draft to run the pass at a cheaper size
    # (Decision.padded_to): never judged, and dropped from the cache after the pass
    pads: int = 0
    # the draft model's confidence ended this draft (app.engine.estimates.ConfidenceStop): the
    # estimated chance, then, that every drafted token passes; None: it ran to its length or to
    # an EOS
    stop_chance: float | None = None
    # why the controller chose k (None: no drafter, or a trace from before decisions)
    decision: Decision | None = None
    # what the verify-cost curve did with this pass's time (TIMING_*; "": not a priced pass)
    timing: str = ""
    # the pass got under app.engine.cores.BUSY_SHARE of its cores (or, where that cannot be
    # measured, the load average was above the cores)
    busy: bool = False
    threads: ThreadSwitch | None = None  # set on the step after which the threads changed
    # of t_draft, the first drafted token's seconds where the drafter times it (its pass also
    # brings the draft up to the context); None: not timed apart
    t_draft_first: float | None = None

    @property
    def n_accepted(self) -> int:
        return sum(1 for t in self.tokens if t.accepted)

    @property
    def is_tree(self) -> bool:
        return any(t.parent is not None for t in self.tokens)

    @property
    def n_pass(self) -> int:
        return self.pass_tokens or self.k + 1

    @property
    def draft_depth(self) -> int:
        """Draft tokens in a row (k for a chain; the deepest node of a tree)."""
        if not self.is_tree:
            return self.k
        return max((t.depth or 0 for t in self.tokens), default=0)

    def depth_outcomes(self) -> list[bool]:
        """For each draft depth that was reached and judged: whether it passed. In a chain
        this is one entry per judged token; in a tree, the accepted path and the level after
        it (when that level had nodes)."""
        if not self.is_tree:
            return [bool(t.accepted) for t in self.tokens]
        path = self.n_accepted
        judged_next = any(t.accepted is False and (t.depth or 0) == path + 1
                          for t in self.tokens)
        return [True] * path + ([False] if judged_next else [])

    @property
    def t_total(self) -> float:
        return self.t_draft + self.t_verify + self.t_overhead
