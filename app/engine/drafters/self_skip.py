"""Which of the target's layers a self-draft skips: the set's text form, and the search that
chooses it by measurement (in the spirit of SWIFT, arXiv 2410.06916, and Draft & Verify,
arXiv 2309.08168: the target with some layers left out drafts for the whole target).

A skip set keeps the target's first layer, its last layers as the search finds them, its
final norm and its output head; it drops the layers named, e.g. `6-11,15-20` (0-based).

The search is greedy: from all layers, drop in turn the layer whose removal keeps the
skipped model's greedy agreement with the target highest, until the draft's estimated cost
is within the target cost. Agreement: over every position of the texts (the user's prompt
and a short plain continuation of it by the target), how often the skipped model's argmax
equals the target's own, the two read teacher-forced from one pass each. A greedy draft
token is accepted exactly when it equals the target's argmax, so agreement estimates the
greedy acceptance of a draft that holds its own cache (the llama.cpp draft file; the torch
draft, which reads the target's cache for the committed text, measured at least as high).

Estimated cost: the share of the target's weight bytes one step of the draft reads (its kept
blocks and the output head), since a decode step on a CPU is bound by reading the weights;
the measured cost is stated beside it once the draft runs (app.models.self_skip).

A draft whose head keeps a subset of the tokens (llama.cpp: app.models.early_exit) is
measured as it drafts: its argmax among those tokens, and the head's bytes in proportion.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from app.engine.protocol import SkipScorer
from app.errors import SettingsError

# agreement is measured from this position of each text on (the first tokens of a prompt
# follow almost nothing, and both models guess there)
FIRST_SCORED = 1
# after the first round, each round re-measures only the removals that did best last time
# (their agreement moves little from one round to the next: a lazy greedy search)
RECHECKED = 4


def parse_skip(text: str, n_layers: int | None = None) -> frozenset[int]:
    """`6-11,15-20` as the set of layer indexes it names; checked against n_layers when
    given (the first layer is always kept). The one reader of a skip set: the command line's
    --self-skip and the window's field both go through it, so its messages name no flag."""
    layers: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError as exc:
            raise SettingsError(f"layers to skip are 0-based layer ranges like 6-11,15-20, or "
                                f"auto (got {text!r})") from exc
        if first > last:
            raise SettingsError(f"layers to skip: the range {part} runs backwards — write "
                                f"{last}-{first}")
        layers.update(range(first, last + 1))
    if not layers:
        raise SettingsError(f"layers to skip: {text!r} names no layer — give ranges like "
                            "6-11,15-20, or auto to choose them by measurement")
    if n_layers is not None:
        check_skip(frozenset(layers), n_layers)
    return frozenset(layers)


def check_skip(skip: frozenset[int], n_layers: int) -> None:
    if max(skip) >= n_layers:
        raise SettingsError(f"layers to skip: layer {max(skip)} is not in the target, which has "
                            f"{n_layers} layers (0 to {n_layers - 1}) — name layers up to "
                            f"{n_layers - 1}")
    if 0 in skip:
        raise SettingsError("layers to skip: the draft cannot skip layer 0, it keeps the "
                            "target's first layer (the torch draft reads its positions from "
                            "that layer's cache) — start the ranges at 1")


def format_skip(skip: Sequence[int] | frozenset[int]) -> str:
    """The set as ranges: {6, 7, 8, 15} -> `6-8,15`."""
    parts: list[str] = []
    ordered = sorted(skip)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def estimated_cost(skip: frozenset[int], head: int, blocks: Sequence[int],
                   head_share: float = 1.0) -> float:
    """The share of the target's weight bytes one draft step reads (see the module doc);
    head_share: the share of the head's rows the draft keeps."""
    total = head + sum(blocks)
    kept = head * head_share + sum(b for i, b in enumerate(blocks) if i not in skip)
    return kept / total if total else 1.0


@dataclass(frozen=True)
class DraftHead:
    """The tokens a self-draft's head keeps (`ids`, in the target's numbering) of the
    target's `n_vocab`; None where it keeps them all."""

    ids: np.ndarray
    n_vocab: int

    @property
    def share(self) -> float:
        return len(self.ids) / self.n_vocab


@dataclass(frozen=True)
class SkipPoint:
    """One set the search settled on: the layers skipped, its agreement, estimated cost."""

    skip: str
    agreement: float
    cost: float


@dataclass(frozen=True)
class SkipChoice:
    """The skip set a self-draft uses, with the figures it was chosen by (a decision record:
    the window and the CLI state these, never figures of their own)."""

    skip: str  # the layers left out, e.g. "6-11,15-20"
    n_layers: int  # the target's
    agreement: float  # greedy agreement with the target over `positions` (see the module doc)
    positions: int  # positions the agreement was measured over
    cost: float  # estimated draft cost in target steps (the share of weight bytes read)
    how: str  # "searched" (chosen here) or "given" (--self-skip by hand)
    target_cost: float = 0.0  # what the search aimed for (searched only)
    seconds: float = 0.0  # the search's time
    evaluations: int = 0  # skipped-model passes the search ran
    path: tuple[SkipPoint, ...] = ()  # the search's sets, one layer more dropped each
    # a draft step over a target step, timed in turns once the draft was built (None until)
    measured_cost: float | None = None
    # llama.cpp: the size of the draft file of the kept blocks (0: no file, torch)
    file_bytes: int = 0
    # a head over some of the tokens: how many it keeps (0: all), of how many, and the share
    # of the target's own tokens on the texts (its argmax) that are among them
    head_tokens: int = 0
    n_vocab: int = 0
    head_coverage: float = 1.0

    @property
    def kept(self) -> int:
        return self.n_layers - len(parse_skip(self.skip))

    def label(self) -> str:
        """The draft as the trace header and the CLI name it."""
        cost = self.measured_cost if self.measured_cost is not None else self.cost
        what = "measured" if self.measured_cost is not None else "estimated"
        return (f"self-draft (skip {self.skip}: {self.kept} of {self.n_layers} layers"
                f"{self._head_words()}, agreement {self.agreement:.2f}, {what} cost "
                f"{cost:.2f})")

    def _head_words(self) -> str:
        if not self.head_tokens:
            return ""
        return f", head {self.head_tokens:,} of {self.n_vocab:,} tokens"

    def describe(self) -> str:
        """The set and its figures in words (the window's note on a self-drafted run)."""
        chosen = (f"chosen by search down to an estimated cost of {self.target_cost:g}"
                  if self.how == "searched" else "given by hand")
        cost = (f"a draft step costs {self.measured_cost:.2f} target steps (measured; "
                f"{self.cost:.2f} estimated)" if self.measured_cost is not None
                else f"a draft step costs an estimated {self.cost:.2f} target steps")
        head = (f" Its output head keeps {self.head_tokens:,} of the {self.n_vocab:,} tokens; "
                f"they hold {self.head_coverage:.1%} of the target's own tokens on this text "
                "(q is 0 for the rest)." if self.head_tokens else "")
        return (f"Self-draft: the target skipping layers {self.skip} ({self.kept} of "
                f"{self.n_layers} kept), {chosen}. Its agreement with the target: "
                f"{self.agreement:.2f} of {self.positions} positions; {cost}.{head}")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["kept"] = self.kept
        return data

    @staticmethod
    def from_dict(data: dict[str, Any]) -> SkipChoice:
        path = tuple(SkipPoint(**p) for p in data.get("path", ()))
        names = {f for f in SkipChoice.__dataclass_fields__ if f != "path"}
        return SkipChoice(**{k: v for k, v in data.items() if k in names}, path=path)


@dataclass
class Agreement:
    """The skipped model's agreement with the target's argmax over a list of texts."""

    scorer: SkipScorer
    texts: list[list[int]]
    head: DraftHead | None = None  # the draft's head, where it keeps some tokens only
    wanted: list[np.ndarray] = field(default_factory=list)  # the target's argmax per text
    evaluations: int = 0

    def __post_init__(self) -> None:
        self.wanted = [self.scorer.skipped_argmax(text, frozenset()) for text in self.texts]

    @property
    def positions(self) -> int:
        return sum(max(0, len(t) - FIRST_SCORED) for t in self.texts)

    @property
    def head_share(self) -> float:
        """The share of the head's rows the draft keeps."""
        return self.head.share if self.head is not None else 1.0

    @property
    def head_coverage(self) -> float:
        """The share of the target's argmax tokens that the draft's head keeps."""
        if self.head is None:
            return 1.0
        inside = sum(int(np.isin(w[FIRST_SCORED:], self.head.ids).sum()) for w in self.wanted)
        return inside / max(1, self.positions)

    def choice(self, **figures: Any) -> SkipChoice:
        """A SkipChoice with these figures and the head's."""
        head = self.head
        return SkipChoice(positions=self.positions, evaluations=self.evaluations,
                          head_tokens=len(head.ids) if head is not None else 0,
                          n_vocab=head.n_vocab if head is not None else 0,
                          head_coverage=self.head_coverage, **figures)

    def of(self, skip: frozenset[int]) -> float:
        self.evaluations += 1
        hits = 0
        for text, wanted in zip(self.texts, self.wanted, strict=True):
            got = self.scorer.skipped_argmax(
                text, skip, self.head.ids if self.head is not None else None)
            hits += int(np.count_nonzero(got[FIRST_SCORED:] == wanted[FIRST_SCORED:]))
        return hits / max(1, self.positions)


@dataclass(frozen=True)
class SearchProgress:
    """How far the search has come, reported after each set it scores: the figures it has
    at that moment (the window and the CLI word these, never figures of their own).

    `to_score` is how many sets the whole search will have scored: exact where the target's
    blocks are all of one size (the rounds left follow from the cost), else an estimate from
    their mean size; it is worked out again each round."""

    scored: int  # sets scored so far (skipped-model passes over the texts)
    to_score: int
    skip: str  # the set settled on so far ("" before the first round ends)
    n_layers: int
    # settled: the agreement of the set just settled on; else the best agreement among the
    # sets this round has scored so far
    agreement: float
    cost: float  # the estimated cost of the set settled on so far
    target_cost: float
    settled: bool  # a round ended: one more layer dropped

    @property
    def dropped(self) -> int:
        return len(parse_skip(self.skip)) if self.skip else 0

    def describe(self) -> str:
        if self.settled:
            return (f"skipping {self.dropped} of {self.n_layers} layers ({self.skip}): "
                    f"agreement {self.agreement:.2f}, estimated cost {self.cost:.2f}")
        return (f"choosing layers to skip: {self.dropped} of {self.n_layers} left out so far "
                f"(estimated cost {self.cost:.2f}, aiming for {self.target_cost:g}); trying "
                f"one more, best agreement {self.agreement:.2f}")


Progress = Callable[[SearchProgress], None]


def _rounds_left(skip: frozenset[int], head: int, blocks: Sequence[int],
                 target_cost: float, head_share: float = 1.0) -> int:
    """Rounds until the cost is within target_cost, each dropping a block of the mean size
    of those still kept (the first block is never dropped)."""
    candidates = [b for i, b in enumerate(blocks) if i and i not in skip]
    if not candidates:
        return 0
    step = sum(candidates) / len(candidates) / (head + sum(blocks))  # a mean block's share
    cost = estimated_cost(skip, head, blocks, head_share)
    rounds = 0
    while cost - rounds * step > target_cost and rounds < len(candidates):
        rounds += 1
    return rounds


def _sets_after(round_sets: int, skip: frozenset[int], n_layers: int, rounds: int) -> int:
    """Sets the rounds after this one score: each rechecks at most RECHECKED."""
    left = n_layers - 1 - len(skip)
    return round_sets + sum(min(RECHECKED, left - j) for j in range(1, rounds))


def search_skip(scorer: SkipScorer, texts: list[list[int]], target_cost: float,
                progress: Progress | None = None, draft_head: DraftHead | None = None
                ) -> SkipChoice:
    """The greedy search of the module doc, down to an estimated cost of target_cost;
    `progress` hears of every set scored (SearchProgress)."""
    report = progress or (lambda at: None)
    start = time.perf_counter()
    n_layers = scorer.n_layers
    head_bytes, blocks = scorer.layer_bytes()
    agreement = Agreement(scorer, texts, draft_head)
    share = agreement.head_share
    skip: frozenset[int] = frozenset()
    candidates = list(range(1, n_layers))
    last_score: dict[int, float] = {}
    path: list[SkipPoint] = []
    score = 1.0
    cost = estimated_cost(skip, head_bytes, blocks, share)
    while cost > target_cost and len(skip) < n_layers - 1:
        left = [c for c in candidates if c not in skip]
        if last_score:  # the removals that did best last round, and any never measured
            left.sort(key=lambda c: -last_score.get(c, 2.0))
            left = left[:RECHECKED]
        scored_before = agreement.evaluations
        to_score = scored_before + _sets_after(
            len(left), skip, n_layers, _rounds_left(skip, head_bytes, blocks, target_cost, share))
        measured: dict[int, float] = {}
        for c in left:
            measured[c] = agreement.of(skip | {c})
            report(SearchProgress(agreement.evaluations, to_score, format_skip(skip), n_layers,
                                  max(measured.values()), cost, target_cost, settled=False))
        last_score.update(measured)
        best = max(measured, key=lambda c: (measured[c], -c))
        skip, score = skip | {best}, measured[best]
        del last_score[best]
        cost = estimated_cost(skip, head_bytes, blocks, share)
        path.append(SkipPoint(format_skip(skip), score, cost))
        report(SearchProgress(agreement.evaluations, to_score, format_skip(skip), n_layers,
                              score, cost, target_cost, settled=True))
    return agreement.choice(
        skip=format_skip(skip), n_layers=n_layers, agreement=score, cost=cost,
        how="searched", target_cost=target_cost, seconds=time.perf_counter() - start,
        path=tuple(path))


def given_skip(scorer: SkipScorer, texts: list[list[int]], skip: frozenset[int],
               draft_head: DraftHead | None = None) -> SkipChoice:
    """A set given by hand, with its agreement on the texts measured all the same."""
    start = time.perf_counter()
    n_layers = scorer.n_layers
    check_skip(skip, n_layers)
    head_bytes, blocks = scorer.layer_bytes()
    agreement = Agreement(scorer, texts, draft_head)
    score = agreement.of(skip)
    return agreement.choice(
        skip=format_skip(skip), n_layers=n_layers, agreement=score,
        cost=estimated_cost(skip, head_bytes, blocks, agreement.head_share), how="given",
        seconds=time.perf_counter() - start)
