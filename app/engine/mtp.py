"""Drafting with the target's own multi-token-prediction (MTP / NextN) layers.

The MTP block turns the target's hidden state at the last emitted token (with that token's
embedding) into a distribution for the token after it, and then its own state with each
drafted token into the next (llama.cpp's draft-mtp). Each drafted token is drawn from the
block's processed row, with the target's sampling transforms: that row is the q the verifier
tests, so the p/q rule stays exact. Its cost is a pass of one block per drafted token (plus
the catch-up over the tokens the target accepted), which the controller measures.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.engine.drafters import EMPTY_DRAFT, Budget, Draft, Drafter, DraftKind
from app.engine.protocol import MtpHeads
from app.engine.sampling import SamplingParams, choose, finite_logits, process

# one small block per drafted token, with a q per token (so its draft may end on its own
# confidence); trained for the next-but-one token, so a prior like a good draft model's
DRAFT_MTP = DraftKind("mtp", free=False, prior=0.6, confident=True)


class MtpDrafter(Drafter):
    kind = DRAFT_MTP

    def __init__(self, heads: MtpHeads, label: str = "", p_min: float = 0.0,
                 draft_min: int = 0, eos_ids: frozenset[int] = frozenset()) -> None:
        self.heads = heads
        self.name = label or f"MTP layers ({heads.n_heads})"
        self.p_min = p_min
        self.draft_min = draft_min
        self.eos_ids = eos_ids

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self.heads.reset()

    def propose(
        self, context: list[int], budget: Budget, params: SamplingParams,
        rng: np.random.Generator,
    ) -> Draft:
        k, stop = budget.max_tokens, budget.stop
        logits = self.heads.start(context) if k > 0 else None
        if logits is None:
            return EMPTY_DRAFT
        tokens: list[int] = []
        rows: list[np.ndarray] = []
        while True:
            q = process(finite_logits(logits, self.name), params)
            # decided before the draw, from the best candidate (llama.cpp's p-min)
            if len(tokens) >= self.draft_min and q.max() < self.p_min:
                break
            token = choose(q, params, rng)
            tokens.append(token)
            rows.append(q)
            if len(tokens) == k or token in self.eos_ids:
                break
            if (stop is not None and not stop.keep_drafting(len(tokens), float(q[token]))
                    and len(tokens) >= self.draft_min):
                break
            logits = self.heads.step(token)
        if not tokens:
            return EMPTY_DRAFT
        # one trained head drafts every position (head 0), as in llama.cpp for one block
        return Draft(tokens, np.stack(rows), heads=[0] * len(tokens))
