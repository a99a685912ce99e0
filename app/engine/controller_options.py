"""The draft-length controller's constants, as one value: the controller
(app.engine.adaptive) and its acceptance estimates (app.engine.estimates) read them from a
ControllerOptions, and a replay that moves one passes its own (packaging/research/
replay_ablation.py, replay_draft.py): `ControllerOptions(min_gain=1.0)`.

Each default with its measurement: docs/ablation.md replays the demo target's recorded
outputs (lookup and suffix decoding: its table 1; the demo draft on a GPU-like profile: table
2) with the constant moved one way and the other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ControllerOptions:
    # a draft must be expected to beat plain decoding by this much: the curve and the
    # acceptance estimates are measurements that move by more than a few percent (the demo
    # target's 2-token pass costs 1.9-2.0 single steps from one minute to the next), and a
    # guess drafted on a streak of passes at a few percent of expected gain lost 4% of a
    # fresh-code run to plain decoding (a 2-token pass at 57% acceptance where 94% was needed
    # to pay). Replays, which have no timing noise, favour less: 1.00 +3% on the GPU-like
    # draft, -0.4% on suffix edits
    min_gain: float = 1.05
    # a probe is worth a pass only if drafting could pay at near-perfect acceptance (0.9 or
    # 0.99 replayed the same)
    optimistic_accept: float = 0.95
    # plain steps before a kind that does not pay is drafted again (4: +3.1%, 16: -3.8% on
    # the GPU-like draft; free kinds are never probed), the gap doubling up to max_probe_gap
    # (32 or 512 replayed the same)
    first_probe_gap: int = 8
    max_probe_gap: int = 128
    # with fixed k and plain steps asked for (the window's inspect mode): a plain step after
    # the first draft (the plain size's warm-up pass), then one after every plain_every
    # drafting steps until plain decoding is priced from MIN_SAMPLES of them (by about the
    # tenth step), then one after every plain_refresh to follow the machine (a share of the
    # run, not measured)
    plain_every: int = 2
    plain_refresh: int = 32
    # a tree pass's extra tokens per draft level, averaged over passes at this weight (not
    # measured: no replay models trees)
    tree_average: float = 0.15
    # pooled acceptance counts fade per judged token, to a memory of about this many tokens
    # (however they came: 32 one-token passes or half of one long copy; 16: suffix
    # repetitive -1.0%, 64: -0.2%)
    pool_memory: float = 32.0
    # each position's own counts fade by this per pass (0.6: suffix repetitive -2.0%, 0.9:
    # within 0.3%)
    position_decay: float = 0.8
    # the kind's prior, in tokens, inside the pooled rate (0.5: ngram edit -7.6%, 2: -9.6%)
    prior_weight: float = 1.0
    # the pooled rate, in observations, inside a position's estimate (2: ngram edit -2.0%,
    # 8: -2.2%)
    pool_weight: float = 4.0
    # a copy's measured acceptance rates (app.engine.estimates.RATES) count as this many
    # judged tokens against the kind's own evidence (its decayed pooled count, at most 32).
    # Replayed with --draft-max 64 as a share of the oracle
    # controller's gain (packaging/research/copy_bars.py) on three curves (the EPYC's, the demo
    # curve, the Xeon's), repetitive / edit / verbatim: 4 tokens 15/62/61%, 37/62/64%,
    # 72/82/80%, against the app before it 3/57/62%, 31/65/60%, 69/82/80% (the edits 1.7%
    # slower on the demo curve); 8 tokens lost 3% more of the edits there (57%), 16 and 32 more
    copy_rate_tokens: float = 4.0

    @property
    def pool_decay_per_token(self) -> float:
        return 1 - 1 / self.pool_memory


DEFAULT_OPTIONS = ControllerOptions()
# the default margin, for what reads a decision made with it (app.analysis)
MIN_GAIN = DEFAULT_OPTIONS.min_gain
