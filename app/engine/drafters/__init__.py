"""One lifecycle for every drafter (as llama.cpp's common/speculative: begin, draft, accept).

A run calls, in order:
  begin(prompt_ids)                      a generation starts: forget the last one
  outlook(context) -> Outlook            which kind of guess propose() would make now
  propose(context, budget, params, rng)  up to budget.max_tokens tokens, each with the q it
                                         was drawn from (a Draft)
  propose_tree(...)                      the same as a tree, where the drafter can branch
  accept(context, hidden)                the target kept what now ends `context`
propose() drafts the kind outlook() named for the same context: a free kind's draft runs no
model (the session may propose one it will not verify, app.engine.session.ShadowCheck).
Every method but propose has a no-op default in Drafter. A drafter declares once what it is
(a DraftKind: its name, whether drafting is free, its prior), and whether it wants the
target's hidden states; the session and the controller read those declarations, never the
drafter's class. A drafter that drafts more than one kind of guess (a lookup: a copy, a
guess, a copy resumed past an edit) declares each and says in outlook() which one is next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from app.engine.decode_config import DrafterOptions, StopRule, TreeShape
from app.engine.estimates import CopyEvidence
from app.engine.records import (
    CopySource,
    TokenRecord,
    Translation,
    mark_copied,
    mark_heads,
    mark_translated,
)
from app.engine.sampling import SamplingParams, fit_width
from app.engine.similarity import annotate
from app.engine.tree import DraftTree, one_hot


@dataclass(frozen=True)
class DraftKind:
    """What a kind of draft is, declared by its drafter; the controller keeps statistics per
    kind and each step record names the kind consulted."""

    name: str
    free: bool  # drafting costs no model step (a lookup); else it costs the drafter's steps
    # the acceptance expected of it before any is measured: even odds for a free kind (one
    # prior for every free kind did better than per-kind priors, docs/ablation.md); a draft
    # model declares 0.6 (0.5 drafted 2.2% slower in the replays of the demo draft)
    prior: float = 0.5
    # its draft may end on its own confidence (app.engine.estimates.ConfidenceStop): it pays a
    # step per token and knows how sure it was of each
    confident: bool = False
    # a copy's run (Outlook.copied) may take the place of this kind's pooled verdicts when
    # it says more (a copy of the prompt, its run since the last edit); False: the run says
    # nothing and the kind learns from its verdicts alone (a copy of the output or of an
    # earlier answer, which goes its own way after a few tokens however long it agreed)
    run_is_evidence: bool = True


@dataclass(frozen=True)
class Outlook:
    """What propose() would draft now: its kind, and for a copy, how many of the context's
    last tokens in a row equal the source text it continues (the copy's evidence), and how
    many tokens its draft would hold at most (None: as many as asked), so a pass is priced
    at the size it will have, not the size asked for. `copy`: for a copy, where it was copied
    from and its match (app.engine.estimates prices it from them)."""

    kind: DraftKind
    copied: int = 0
    available: int | None = None
    copy: CopyEvidence | None = None


def written_copy(outlook: Outlook, written: int) -> CopyEvidence | None:
    """The outlook's copy with its match cut to the tokens the target wrote: only they are
    evidence of a copy, not the prompt's own words (None: no copy)."""
    copy = outlook.copy
    return None if copy is None else CopyEvidence(copy.source, min(copy.match, written),
                                                 copy.splits)


class DraftStop(Protocol):
    """Ends a draft model's draft on its own confidence (app.engine.estimates.ConfidenceStop)."""

    def keep_drafting(self, drafted: int, q: float) -> bool:
        """Asked after each drafted token, drawn with probability q: draft another?"""
        ...


@dataclass(frozen=True)
class Budget:
    """How much one pass may draft: at most max_tokens, and where the drafter has a
    confidence (DraftKind.confident) and `stop` is given, ending where stop says."""

    max_tokens: int
    stop: DraftStop | None = None


@dataclass
class Draft:
    tokens: list[int]
    # q_rows[i] (V,) is the distribution tokens[i] was drawn from; None: one-hot at tokens[i]
    q_rows: np.ndarray | None
    # per token, a hidden state comparable with the target's final hidden state at the same
    # position, for hidden_cos: a self-draft's final-norm output; None for every other draft
    # (app.engine.similarity says why)
    hidden: np.ndarray | None = None
    # per token, where a copying drafter found it (app.engine.drafters.suffix); None for the others
    copied_from: list[CopySource] | None = None
    # per token, which of the target's own MTP heads proposed it (app.engine.drafters.mtp), 0-based;
    # None for every other draft
    heads: list[int] | None = None
    # per token, how a draft from another vocabulary became it
    # (app.engine.drafters.draft_model.cross_vocab)
    translated: list[Translation] | None = None
    # seconds the first token took, where the drafter times it: its pass also brings the
    # draft up to the context (app.engine.pass_pricing.PassCost prices it apart)
    first_seconds: float | None = None

    def q_row(self, i: int, vocab: int) -> np.ndarray:
        """q for tokens[i] over the target's `vocab` logit rows (the widths may differ by
        vocabulary padding; see fit_width)."""
        if self.q_rows is not None:
            return fit_width(np.asarray(self.q_rows[i]), vocab)
        return one_hot(self.tokens[i], vocab)


EMPTY_DRAFT = Draft([], None)


def mark_judged(records: list[TokenRecord], draft: Draft | DraftTree,
                target_hidden: np.ndarray | None = None) -> None:
    """The drafter's own record of each draft token, onto that token's judged record
    (records[i] is draft token i's): where it was copied from, how it was translated, which
    MTP head drafted it, and how near its hidden state came to the target's (hidden_cos,
    given the target's hidden states of the pass). A draft without a note leaves it unset."""
    mark_copied(records, draft.copied_from)
    mark_translated(records, draft.translated)
    if isinstance(draft, Draft):
        mark_heads(records, draft.heads)
        annotate(records, draft.hidden, target_hidden)


class Drafter:
    """The lifecycle every drafter implements; see the module docstring."""

    name: str = "drafter"  # for labels and the trace
    kind: DraftKind  # what it drafts (its main kind, where outlook() names others)
    cost_hint: float = 0.0  # seconds per drafted token, before the controller measures it
    # the session hands accept() the target's final hidden state (the target must have them)
    wants_target_hidden: bool = False

    def begin(self, prompt_ids: Sequence[int]) -> None:
        """A generation of this prompt starts."""
        return None

    def has_draft(self, context: list[int]) -> bool:
        """Whether it has anything to draft for this context (a lookup may not; a chain
        then asks the next drafter)."""
        return True

    def outlook(self, context: list[int]) -> Outlook:
        return Outlook(self.kind)

    def propose(
        self, context: list[int], budget: Budget, params: SamplingParams,
        rng: np.random.Generator,
    ) -> Draft:
        raise NotImplementedError

    def propose_tree(
        self, context: list[int], depth: int, shape: TreeShape, params: SamplingParams,
        rng: np.random.Generator,
    ) -> DraftTree | None:
        """Up to `depth` tokens deep, branching where the guess is unsure; the first path is
        what propose() would have drafted. None: this drafter drafts chains only."""
        return None

    def accept(self, context: list[int], hidden: np.ndarray | None) -> None:
        """The target kept the tokens that now end `context`. hidden (n_embd,): the target's
        final hidden state that produced context[-1], given when wants_target_hidden."""
        return None


@dataclass(frozen=True)
class Entry:
    """A drafter as the registry (app.engine.drafters.registry) knows it, declared by its module.

    build(sources, options, rule, fallback): a fresh drafter for one run; `sources` is what
    the run offers (app.runs.PairSources: the target, the draft model, ...; each factory
    states the part it reads as a Protocol), `fallback` whether another drafter follows it
    in a chain. label(options, draft_file): its name in the trace header. needs(options):
    what is missing for it to run, as a message, or "". free: it drafts without a model
    step and may have nothing to draft (a lookup), so a chain may go on past it."""

    name: str
    build: Callable[[Any, DrafterOptions, StopRule, bool], Drafter]
    label: Callable[[DrafterOptions, str], str]
    free: bool = False
    needs: Callable[[DrafterOptions], str] = lambda options: ""


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n
