"""A retried request: the same prompt sent again to the same target (an agent loop after a
timeout, a person pressing retry). The draft memory kept the answer it got before; suffix
decoding (app.engine.drafters.suffix) drafts that answer from its first token, ahead of any match.

The memory may hold several answers to the prompt (a run stopped early, one sampled): the
copy follows the latest that the output still agrees with and that goes on.

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


# the answers the memory kept for a prompt, the latest first (app.runs.PairSources.answers_to)
Recall = Callable[[Sequence[int]], list[EarlierAnswer]]


class RetryCopy:
    """Follows this run's output along the earlier answers to its prompt."""

    def __init__(self, answers: Sequence[EarlierAnswer], prompt_length: int) -> None:
        self.answers = list(answers)  # the latest first
        self.prompt_length = prompt_length
        # per answer, output tokens that equal its own, from the first: a count stops growing
        # at the first token that departs, so from there on that answer is never copied again
        self.agreed = [0] * len(self.answers)

    def _following(self, context: Sequence[int]) -> EarlierAnswer | None:
        """The latest answer the output so far still begins and that goes on, else None."""
        written = len(context) - self.prompt_length
        following = None
        for i, answer in enumerate(self.answers):
            tokens = answer.tokens
            while (self.agreed[i] < min(written, len(tokens))
                   and context[self.prompt_length + self.agreed[i]] == tokens[self.agreed[i]]):
                self.agreed[i] += 1
            if self.agreed[i] == written < len(tokens) and following is None:
                following = answer
        return following

    def outlook(self, context: Sequence[int]) -> Outlook | None:
        """RETRY_COPY, with the output so far as its evidence, while the output is still an
        answer's beginning and that answer goes on; else None."""
        answer = self._following(context)
        if answer is None:
            return None
        written = len(context) - self.prompt_length
        return Outlook(RETRY_COPY, written, len(answer.tokens) - written)

    def draft(self, context: Sequence[int], n: int) -> tuple[list[int], CopySource] | None:
        """The next n tokens of the answer the output follows, and where they come from;
        None where it follows none."""
        answer = self._following(context)
        if answer is None:
            return None
        written = len(context) - self.prompt_length
        return (list(answer.tokens[written: written + n]),
                CopySource(kind=COPIED_ON_RETRY, run=answer.run, match=len(context)))
