"""A copied draft's acceptance, predicted from what the copy knows before it is judged: where
it was copied from (the prompt, this output, an earlier run's output) and how many tokens of
the context its source agrees with (its match, or a prompt copy's run since the last edit),
which grows by one at each further draft position.

A copy of the prompt (code asked back) goes on for lines once it has matched a few tokens; a
copy of this output or of an earlier answer breaks every few lines at a value that differs,
however long its match. Each position's prediction is the rate measured for copies of that
source and run (RATES), weighed against what the kind's own verdicts taught the controller in
this run (app.engine.estimates.AcceptanceEstimate: its pooled evidence, in tokens):

    a_j = (PRIOR_TOKENS * rate(source, match + j) + evidence * learnt_j) / (PRIOR_TOKENS + evidence)

A Decision records the source, the match, the learnt rates and their evidence beside the
accept_at it priced, so app.analysis.decision_audit reproduces every a_j.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.engine.records import COPIED_FROM_MEMORY, COPIED_FROM_OUTPUT, COPIED_FROM_PROMPT

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
# the measured rates count as this many judged tokens against the kind's own evidence (its
# decayed pooled count, at most 32). Replayed with --draft-max 64 as a share of the oracle
# controller's gain (packaging/research/copy_bars.py) on three curves (the EPYC's, the demo
# curve, the Xeon's), repetitive / edit / verbatim: 4 tokens 15/62/61%, 37/62/64%,
# 72/82/80%, against the app before it 3/57/62%, 31/65/60%, 69/82/80% (the edits 1.7%
# slower on the demo curve); 8 tokens lost 3% more of the edits there (57%), 16 and 32 more
PRIOR_TOKENS = 4.0


@dataclass(frozen=True)
class CopyEvidence:
    """What a copy knows before it is judged: its source (records.COPIED_FROM_*) and how many
    of the context's last tokens its source agrees with."""

    source: str
    match: int


def measured_rate(source: str, run: int) -> float | None:
    """The measured acceptance of a copy of `source` at this run (None: never measured)."""
    rates = RATES.get(source)
    if rates is None:
        return None
    bucket = max(i for i, bound in enumerate(RUN_BOUNDS) if run >= bound)
    return rates[bucket]


def copy_accept_at(copy: CopyEvidence, learnt: Sequence[float], evidence: float
                   ) -> list[float]:
    """Each draft position's predicted acceptance: the measured rate of copies of this source
    at the run it reaches, weighed against `learnt` (the kind's own rates) by `evidence`."""
    predicted = []
    for j, rate in enumerate(learnt):
        measured = measured_rate(copy.source, copy.match + j)
        predicted.append(rate if measured is None else
                         (PRIOR_TOKENS * measured + evidence * rate) / (PRIOR_TOKENS + evidence))
    return predicted
