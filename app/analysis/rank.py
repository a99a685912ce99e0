"""Draft ranking, the "good enough" trade-off: each candidate way of drafting measured on the
user's prompt against plain decoding, at the draft length that suits it best.

A candidate is a way to draft for the loaded target (a draft model file, n-gram lookup, ...):
it attaches to the target as a LoadedPair (with its draft model, if any) and says what drafts
(a DrafterChoice) for app.runs to build sessions from, and detaches afterwards. New kinds of
draft plug in by implementing `Candidate`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from app.analysis.measure import Cancelled, side_by_side, warm_up
from app.engine.cost_curve import VerifyCostCurve
from app.engine.decode_config import DecodeConfig, DrafterChoice, DrafterOptions
from app.engine.drafters.lookup.edits import NGRAM_LABEL
from app.engine.drafters.self_draft import self_label
from app.engine.metrics import RunStats
from app.engine.pass_pricing import PassCost, rates_by_k
from app.errors import DraftLensError, ModelFileError
from app.models.loading import LoadedPair, load_model
from app.models.pair_check import check_pair_files
from app.runs import calibrate_pair

Progress = Callable[[str], None]


class Candidate(Protocol):
    label: str
    kind: str
    choice: DrafterChoice  # what drafts in the attached pair

    def attach(self, base: LoadedPair) -> LoadedPair:
        """The base pair's target with this candidate drafting; raises DraftLensError when the
        candidate cannot draft for this target."""
        ...

    def detach(self) -> None: ...


class DraftModelCandidate:
    """A draft model file; one of another vocabulary drafts across it by `cross` (TLI or
    string-level; auto: TLI)."""

    kind = "draft model"

    def __init__(self, path: str, cross: str = "auto") -> None:
        self.path = path
        self.cross = cross
        self.choice = DrafterChoice(("draft",), DrafterOptions(cross_vocab=cross))
        self.label = Path(path).name + (f" ({CROSS_LABELS[cross]})" if cross != "auto" else "")
        self._pair: LoadedPair | None = None

    def attach(self, base: LoadedPair) -> LoadedPair:
        check = check_pair_files(base.spec.target, self.path)
        check.raise_if_incompatible()
        spec = replace(base.spec, draft=self.path)
        draft = load_model(self.path, spec)
        if check.cross is not None:
            self.kind = f"draft model, other vocabulary ({CROSS_LABELS[self.cross]})"
        elif draft.n_vocab != base.target.n_vocab:
            draft.close()
            raise ModelFileError(f"the draft scores {draft.n_vocab} tokens but the target "
                                 f"{base.target.n_vocab} — pick a draft from the same family")
        self._pair = LoadedPair(base.target, draft, check, spec, list(check.warnings))
        return self._pair

    def detach(self) -> None:
        if self._pair is not None and self._pair.draft is not None:
            self._pair.draft.close()
        self._pair = None


CROSS_LABELS = {"auto": "TLI", "tli": "TLI", "string": "string-level"}


def draft_model_candidates(target: str, path: str) -> list[DraftModelCandidate]:
    """A draft file as ranking candidates: one of the target's vocabulary once, one of
    another vocabulary once per way of drafting across it (the ranking then shows which
    suits this pair)."""
    try:
        cross = check_pair_files(target, path).cross
    except DraftLensError:
        cross = None  # attach() reports the problem in the candidate's row
    if cross is None:
        return [DraftModelCandidate(path)]
    return [DraftModelCandidate(path, "tli"), DraftModelCandidate(path, "string")]


class NgramCandidate:
    kind = "lookup"
    label = NGRAM_LABEL
    choice = DrafterChoice(("ngram",))

    def attach(self, base: LoadedPair) -> LoadedPair:
        return LoadedPair(base.target, None, None, replace(base.spec, draft=None))

    def detach(self) -> None:
        pass


class LoadedCandidate:
    """The drafter the loaded pair already has (the window ranks it beside the others)."""

    kind = "loaded"

    def __init__(self, label: str, choice: DrafterChoice) -> None:
        self.label = label
        self.choice = choice

    def attach(self, base: LoadedPair) -> LoadedPair:
        return base

    def detach(self) -> None:
        pass


class SelfDraftCandidate:
    """The target with a set of its layers skipped (built once per loaded target, closed
    with it); its figures are those the set was chosen by, where it was settled on the pair
    (app.models.self_skip)."""

    kind = "self-draft"

    def __init__(self, skip: str) -> None:
        self.skip = skip
        self.label = self_label(DrafterOptions(skip=skip))
        self.choice = DrafterChoice(("self",), DrafterOptions(skip=skip))

    def attach(self, base: LoadedPair) -> LoadedPair:
        base.load_self_draft(self.skip)  # once per loaded target, closed with it
        return base

    def detach(self) -> None:
        pass  # the base pair owns its self-drafts


@dataclass
class RankRow:
    label: str
    kind: str
    tok_s: float = 0.0
    plain_tok_s: float = 0.0
    speedup: float = 0.0
    acceptance: float = 0.0
    alpha: float = 0.0
    cost_ratio: float = 0.0
    best_k: int = 0
    predicted_speedup: float = 0.0
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def best_k(stats: RunStats, curve: VerifyCostCurve, t_plain: float, k_max: int) -> int:
    """The draft length the adaptive controller's cost model prefers for these measurements
    (the curve scaled to this run's plain step), at least 1."""
    scale = t_plain / curve.cost(1) if curve.cost(1) > 0 and t_plain > 0 else 1.0
    scaled = VerifyCostCurve({n: t * scale for n, t in curve.points.items()})
    accept_at = (stats.acceptance_by_position + [0.0] * k_max)[:k_max]
    cost = PassCost(stats.draft_time_per_token)
    rates = rates_by_k(accept_at, [cost.seconds(k, scaled.points) for k in range(k_max + 1)])
    return 1 + int(np.argmax(rates[1:]))


def rank_candidates(base: LoadedPair, candidates: list[Candidate], config: DecodeConfig,
                    encoded: list[list[int]], rounds: int = 1,
                    progress: Progress | None = None,
                    cancelled: Cancelled = lambda: False) -> list[RankRow]:
    """Each candidate: a probe at k = config.draft_max, then a run at its best k, both side by
    side with plain decoding. Rows by tok/s, fastest first; candidates that failed last."""
    say = progress or (lambda message: None)
    k_max = config.draft_max
    warm_up(base, replace(config, adaptive=False), encoded[0])
    curve = calibrate_pair(base, k_max)
    rows = []
    for candidate in candidates:
        if cancelled():
            break
        row = RankRow(candidate.label, candidate.kind)
        rows.append(row)
        try:
            pair = candidate.attach(base)
        except DraftLensError as exc:
            row.error = str(exc)
            continue
        probe_config = replace(config, adaptive=False, drafter=candidate.choice)
        try:
            say(f"{candidate.label}: probing at k = {k_max}")
            plain, probe = side_by_side(pair, probe_config, encoded, rounds, cancelled)
            t_plain = plain.stats.plain_step_time or 0.0
            row.best_k = best_k(probe.stats, curve, t_plain, k_max)
            if row.best_k != k_max:
                say(f"{candidate.label}: measuring at its best k = {row.best_k}")
                best = replace(probe_config, draft_max=row.best_k,
                               draft_min=min(probe_config.draft_min, row.best_k))
                plain, probe = side_by_side(pair, best, encoded, rounds, cancelled)
                t_plain = plain.stats.plain_step_time or 0.0
            summary = probe.stats.summary(t_plain)
            row.tok_s, row.plain_tok_s = probe.tok_s, plain.tok_s
            row.speedup = probe.tok_s / plain.tok_s if plain.tok_s else 0.0
            row.acceptance, row.alpha = probe.stats.acceptance, probe.stats.alpha
            row.cost_ratio = summary.get("cost_ratio", 0.0)
            row.predicted_speedup = summary.get("predicted_speedup", 0.0)
        except DraftLensError as exc:
            row.error = str(exc)
        finally:
            candidate.detach()
    # by speedup: tok/s relative to the plain runs measured beside it, robust to a machine
    # whose speed drifts between candidates
    return sorted(rows, key=lambda r: (bool(r.error), -r.speedup))
