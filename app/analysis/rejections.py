"""Why draft tokens were rejected: pure functions over a run's StepRecords (live or read back
from a trace), for the window's analysis view and `draftlens trace FILE --analysis`.

- acceptance against the target's entropy at that position (a confident target rejects what
  it disagrees with; an unsure one is easy to satisfy in sampling and hard in greedy);
- q(x) against p(x) for every judged draft token, with its decision (calibration);
- the most frequent "draft wrote X, target wanted Y" pairs;
- acceptance by token class (whitespace, punctuation, numbers, identifiers, words);
- why steps drafted or not: counts by the controller's recorded rule (app.analysis.reasons).
Traces written before entropies were recorded read back with 0.0 there: `has_entropy` says so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from app.analysis.reasons import reason_lines
from app.engine.records import StepRecord, TokenRecord

CLASSES = ("whitespace", "punctuation", "number", "identifier", "word", "other")
ENTROPY_BINS = 6


def judged_tokens(steps: list[StepRecord]) -> Iterator[TokenRecord]:
    """Draft tokens that were tested (a tree's untested nodes are left out)."""
    for step in steps:
        yield from (t for t in step.tokens if t.accepted is not None)


def token_class(text: str) -> str:
    """A draft token's class from its text (leading space and SentencePiece's marker aside)."""
    if not text or not text.strip():
        return "whitespace" if text else "other"
    core = text.strip().replace("\u2581", "")
    if not core:
        return "whitespace"
    if not any(ch.isalnum() or ch == "_" for ch in core):
        return "punctuation"
    if core.isdigit():
        return "number"
    if core.isalpha():
        inner_caps = any(ch.isupper() for ch in core[1:]) and not core.isupper()
        return "identifier" if inner_caps else "word"
    if all(ch.isalnum() or ch == "_" for ch in core):
        return "identifier"
    return "other"


@dataclass
class Rate:
    judged: int = 0
    accepted: int = 0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.judged if self.judged else 0.0

    def add(self, accepted: bool) -> None:
        self.judged += 1
        self.accepted += int(accepted)


@dataclass
class EntropyBin:
    low: float
    high: float
    rate: Rate


@dataclass
class Calibration:
    """q and p of each judged draft token, and whether it was accepted (numpy columns)."""

    q: np.ndarray
    p: np.ndarray
    accepted: np.ndarray
    entropy: np.ndarray


@dataclass
class RejectionAnalysis:
    judged: int
    accepted: int
    has_entropy: bool
    by_entropy: list[EntropyBin]
    by_class: dict[str, Rate]
    confusions: list[tuple[str, str, int]]
    calibration: Calibration
    notes: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)  # why each step's k, counted by rule


def calibration(steps: list[StepRecord]) -> Calibration:
    tokens = list(judged_tokens(steps))
    return Calibration(
        q=np.array([t.q for t in tokens], dtype=float),
        p=np.array([t.p for t in tokens], dtype=float),
        accepted=np.array([t.accepted for t in tokens], dtype=bool),
        entropy=np.array([t.p_entropy for t in tokens], dtype=float),
    )


def acceptance_by_entropy(cal: Calibration, bins: int = ENTROPY_BINS) -> list[EntropyBin]:
    """Acceptance in equal-width bins of the target's entropy (nats) over the range seen."""
    if cal.entropy.size == 0:
        return []
    top = float(cal.entropy.max())
    edges = np.linspace(0.0, top if top > 0 else 1.0, bins + 1)
    which = np.clip(np.searchsorted(edges, cal.entropy, side="right") - 1, 0, bins - 1)
    out = []
    for i in range(bins):
        mask = which == i
        rate = Rate(int(mask.sum()), int(cal.accepted[mask].sum()))
        out.append(EntropyBin(float(edges[i]), float(edges[i + 1]), rate))
    return out


def acceptance_by_class(steps: list[StepRecord]) -> dict[str, Rate]:
    rates = {name: Rate() for name in CLASSES}
    for t in judged_tokens(steps):
        rates[token_class(t.text)].add(bool(t.accepted))
    return {name: rate for name, rate in rates.items() if rate.judged}


def confusions(steps: list[StepRecord], top: int = 10) -> list[tuple[str, str, int]]:
    """The most frequent (draft wrote, target wanted instead) pairs among rejections."""
    pairs: Counter[tuple[str, str]] = Counter()
    for t in judged_tokens(steps):
        if not t.accepted and t.replacement_text is not None:
            pairs[(t.text, t.replacement_text)] += 1
    return [(wrote, wanted, n) for (wrote, wanted), n in pairs.most_common(top)]


def analyse(steps: list[StepRecord]) -> RejectionAnalysis:
    cal = calibration(steps)
    has_entropy = bool(cal.entropy.size and np.any(cal.entropy > 0))
    notes = []
    if cal.q.size == 0:
        notes.append("no draft tokens were judged (a plain run, or no draft found)")
    elif not has_entropy:
        notes.append("this trace has no target entropies (written by an older version)")
    return RejectionAnalysis(
        judged=int(cal.q.size),
        accepted=int(cal.accepted.sum()),
        has_entropy=has_entropy,
        by_entropy=acceptance_by_entropy(cal) if has_entropy else [],
        by_class=acceptance_by_class(steps),
        confusions=confusions(steps),
        calibration=cal,
        notes=notes,
        reasons=reason_lines(steps),
    )


def shown(text: str) -> str:
    """A token's text made visible in one line (spaces, newlines and tabs shown)."""
    return repr(text)[1:-1].replace(" ", "␣") if text else "∅"


def report_lines(analysis: RejectionAnalysis) -> list[str]:
    """The analysis as text, for `draftlens trace FILE --analysis`."""
    a = analysis
    rate = a.accepted / a.judged if a.judged else 0.0
    lines = [f"judged draft tokens {a.judged}, accepted {a.accepted} ({100 * rate:.1f}%)"]
    lines += [f"note: {note}" for note in a.notes]
    if a.by_entropy:
        lines.append("acceptance by the target's entropy (nats):")
        for b in a.by_entropy:
            if b.rate.judged:
                lines.append(f"  {b.low:5.2f}-{b.high:5.2f}  {100 * b.rate.acceptance:5.1f}%  "
                             f"of {b.rate.judged}")
    if a.by_class:
        lines.append("acceptance by token class:")
        for name, r in a.by_class.items():
            lines.append(f"  {name:<12} {100 * r.acceptance:5.1f}%  of {r.judged}")
    if a.confusions:
        lines.append("most frequent rejections (draft wrote -> target wanted):")
        for wrote, wanted, n in a.confusions:
            lines.append(f"  {n:4d}x  {shown(wrote)} -> {shown(wanted)}")
    cal = a.calibration
    if cal.q.size:
        over = cal.q > cal.p
        lines.append(f"calibration: the draft was more confident than the target (q > p) on "
                     f"{100 * over.mean():.1f}% of tokens; mean q {cal.q.mean():.3f}, "
                     f"mean p {cal.p.mean():.3f}")
        if a.has_entropy:
            lines.append(f"target entropy at judged tokens: mean {cal.entropy.mean():.2f} nats")
    return lines + a.reasons
