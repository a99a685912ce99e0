"""A retried request: the same prompt sent again to the same target (an agent loop after a
timeout, a person pressing retry). The draft memory kept the answer it got before; suffix
decoding (app.engine.suffix) drafts that answer from its first token, ahead of any match.

Greedy decoding is a function of the context, so on the same target the answer comes back
as it was: it departs only where the fast kernels break a near-tie the other way. Sampled, it
departs early. So the kind starts from a high prior, and its evidence is a copy's
(Outlook.copied): the output tokens so far, all of which agreed with the answer. At the
first token that departs the copy is over for the rest of the run, and suffix decoding
drafts as it would without it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.engine.drafters import DraftKind, Outlook
from app.engine.records import COPIED_ON_RETRY, CopySource

# learnt apart from suffix decoding's own kinds; its run is evidence, as a prompt copy's is.
# Its prior lets the first pass draft long at once (about 31 tokens on the demo target's
# curve, where the free kinds' even odds draft none and wait for shadowed verdicts): in the
# verbatim workload (app.cli.bench_tasks) the three retries' answers came back whole, token
# for token. A sampled retry that departs costs that one pass; its verdicts then rule.
# Replayed (packaging/research/replay_suffix.py, verbatim, the Xeon's curve, draft-max 64):
# prior 0.5 2.887x plain, 0.9 2.940x, 0.95 2.979x, 0.98 2.996x, 0.995 3.021x (one retry
# faster, another slower); 0.98 leaves a sampled retry less to lose on its first pass
RETRY_COPY = DraftKind("suffix-retry", free=True, prior=0.98)


@dataclass(frozen=True)
class EarlierAnswer:
    """The output a remembered run wrote for this very prompt."""

    run: int
    tokens: Sequence[int]


# the latest answer the memory kept for a prompt, or None (app.runs.PairSources.answer_to)
Recall = Callable[[Sequence[int]], EarlierAnswer | None]


class RetryCopy:
    """Follows this run's output along an earlier answer to its prompt."""

    def __init__(self, answer: EarlierAnswer, prompt_length: int) -> None:
        self.answer = answer
        self.prompt_length = prompt_length
        # output tokens that equal the answer's, from the first: it stops growing at the first
        # that departs, so from there on the output is never again the answer's beginning
        self.agreed = 0

    def outlook(self, context: Sequence[int]) -> Outlook | None:
        """RETRY_COPY, with the output so far as its evidence, while the output is still the
        answer's beginning and the answer goes on; else None."""
        written, answer = len(context) - self.prompt_length, self.answer.tokens
        while (self.agreed < min(written, len(answer))
               and context[self.prompt_length + self.agreed] == answer[self.agreed]):
            self.agreed += 1
        if written != self.agreed:
            return None
        available = len(self.answer.tokens) - self.agreed
        return Outlook(RETRY_COPY, self.agreed, available) if available > 0 else None

    def tokens(self, n: int) -> list[int]:
        """The answer's next n tokens (after outlook() said it goes on)."""
        return list(self.answer.tokens[self.agreed: self.agreed + n])

    def source(self, context: Sequence[int]) -> CopySource:
        return CopySource(kind=COPIED_ON_RETRY, run=self.answer.run, match=len(context))
