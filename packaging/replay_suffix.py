"""Replaying suffix decoding over the target's own greedy outputs (see replay_lookup.py): each
suite's tasks in order, the draft memory filling with every answer as a working session's
does (app.runs keeps the prompt's last MEMORY_LEAD_TOKENS, then the output), each pass priced
on the demo target's verify curve. Modelled, not timed: a variant's speed is compared with
plain decoding's on the same curve.

  python packaging/replay_suffix.py OUT.json [--variant NAME ...] [--by-task]

OUT.json comes from `replay_lookup.py record`; its sidecar OUT.vocab.json (token texts and
end-of-generation ids, also written there) lets drafts end at a code fence as the app's do.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_lookup import DEMO_CURVE, _step  # noqa: E402

from app.engine.adaptive import DraftLengthController  # noqa: E402
from app.engine.cost_curve import VerifyCostCurve  # noqa: E402
from app.engine.drafters import Budget, Drafter, DraftKind, Outlook  # noqa: E402
from app.engine.lookup import block_limit  # noqa: E402
from app.engine.sampling import SamplingParams  # noqa: E402
from app.engine.suffix import RememberedRun, SuffixDrafter, memory_buffer  # noqa: E402
from app.engine.token_buffer import TokenBuffer  # noqa: E402
from app.runs import MEMORY_LEAD_TOKENS  # noqa: E402

SUITES = ("repetitive", "edit", "code", "text")
Limit = Callable[[list[int]], int] | None


@dataclass
class Tally:
    """What a replay adds up, per suite."""

    plain: float = 0.0  # modelled seconds of plain decoding
    seconds: float = 0.0  # modelled seconds of the replay
    tokens: int = 0
    passes: int = 0
    drafting: int = 0  # passes that drafted
    drafted: int = 0  # draft tokens judged
    accepted: int = 0

    def row(self) -> str:
        return (f"{self.plain / self.seconds:6.3f}x"
                f"  accept {self.accepted / max(1, self.drafted):4.0%}"
                f"  k {self.drafted / max(1, self.drafting):5.1f}"
                f"  tok/pass {self.tokens / max(1, self.passes):4.2f}"
                f"  drafting {self.drafting / max(1, self.passes):4.0%}")


class _Vocab:
    """The little of a model block_limit reads."""

    def __init__(self, texts: dict[int, str], eos_ids: frozenset[int]) -> None:
        self.texts, self.eos_ids = texts, eos_ids

    def token_text(self, token: int) -> str:
        return self.texts.get(token, "")


def load_limit(recording: Path) -> Callable[[list[int]], int] | None:
    sidecar = recording.with_suffix(".vocab.json")
    if not sidecar.exists():
        print(f"no {sidecar.name}: drafts run past code fences", file=sys.stderr)
        return None
    data = json.loads(sidecar.read_text())
    vocab = _Vocab({int(t): s for t, s in data["texts"].items()}, frozenset(data["eos"]))
    return block_limit(vocab)  # type: ignore[arg-type]


def replay(prompt: list[int], output: list[int], drafter: Drafter,
           controller: DraftLengthController, cost: Callable[[int], float],
           tally: Tally) -> None:
    """Write `output` after `prompt` as greedy speculative decoding would (it writes the
    plain output), adding each pass's modelled time and verdicts to `tally`."""
    drafter.begin(prompt)
    context, done = list(prompt), 0
    while done < len(output):
        remaining = len(output) - done
        outlook = drafter.outlook(context)
        k = controller.next_k(remaining, outlook.kind, min(outlook.copied, done),
                              outlook.available)
        draft = drafter.propose(context, Budget(k), SamplingParams(), None) if k else None  # type: ignore[arg-type]
        tokens = [] if draft is None else draft.tokens[: remaining - 1]
        kept = 0
        while kept < len(tokens) and tokens[kept] == output[done + kept]:
            kept += 1
        emitted = output[done : done + kept + 1]
        t = cost(len(tokens) + 1)
        tally.seconds += t
        tally.passes += 1
        tally.drafting += bool(tokens)
        tally.drafted += len(tokens)
        tally.accepted += kept
        controller.observe(_step(tally.passes, tokens, kept, emitted, t, outlook.kind.name))
        context += emitted
        done += len(emitted)
        drafter.accept(context, None)
    tally.tokens += len(output)
    tally.plain += len(output) * cost(1)


def _controller(draft_max: int) -> DraftLengthController:
    return DraftLengthController(draft_max, adaptive=True, curve=VerifyCostCurve(dict(DEMO_CURVE)))


def current(memory: TokenBuffer, limit: Limit, draft_max: int
            ) -> tuple[SuffixDrafter, DraftLengthController]:
    return SuffixDrafter(memory, limit=limit), _controller(draft_max)


def factor(f: float) -> Callable[..., tuple[SuffixDrafter, DraftLengthController]]:
    def make(memory: TokenBuffer, limit: Limit, draft_max: int
             ) -> tuple[SuffixDrafter, DraftLengthController]:
        return SuffixDrafter(memory, limit=limit, factor=f), _controller(draft_max)
    return make


class _NoRunEvidence(DraftLengthController):
    """Acceptance learnt from verdicts only, not lifted by the match length."""

    def _lift(self, kind: DraftKind, copied: int) -> None:
        super()._lift(kind, 0)


def no_run_evidence(f: float) -> Callable[..., tuple[SuffixDrafter, DraftLengthController]]:
    def make(memory: TokenBuffer, limit: Limit, draft_max: int
             ) -> tuple[SuffixDrafter, DraftLengthController]:
        return (SuffixDrafter(memory, limit=limit, factor=f),
                _NoRunEvidence(draft_max, adaptive=True,
                               curve=VerifyCostCurve(dict(DEMO_CURVE))))
    return make


def _classes(bounds: tuple[int, ...]) -> list[tuple[int, DraftKind]]:
    kinds: list[tuple[int, DraftKind]] = []
    weaker = None
    for b in bounds:
        kind = DraftKind(f"suffix-{b}", free=True, prior=0.5 if weaker is None else 0.875,
                         at_least=weaker)
        kinds.append((b, kind))
        weaker = kind
    return kinds


class _ByMatch(SuffixDrafter):
    """A kind per class of match length, each learnt apart."""

    def __init__(self, *args: Any, bounds: tuple[int, ...], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.classes = _classes(bounds)

    def outlook(self, context: list[int]) -> Outlook:
        seen = super().outlook(context)
        match = self.match_length(context)
        kind = [k for b, k in self.classes if match >= b or k is self.classes[0][1]][-1]
        return Outlook(kind, seen.copied, seen.available)


def by_match(f: float, bounds: tuple[int, ...], evidence: bool = True
             ) -> Callable[..., tuple[SuffixDrafter, DraftLengthController]]:
    def make(memory: TokenBuffer, limit: Limit, draft_max: int
             ) -> tuple[SuffixDrafter, DraftLengthController]:
        controller = DraftLengthController if evidence else _NoRunEvidence
        return (_ByMatch(memory, limit=limit, factor=f, bounds=bounds),
                controller(draft_max, adaptive=True, curve=VerifyCostCurve(dict(DEMO_CURVE))))
    return make


class _EvidenceUntilJudged(DraftLengthController):
    """The match lifts a kind's rate only until its own verdicts fill the pool's memory."""

    def _lift(self, kind: DraftKind, copied: int) -> None:
        estimate = self.estimates[kind.name]
        super()._lift(kind, copied if estimate.pool_seen < self.judged else 0)

    judged = 8.0


class _EvidenceAdded(DraftLengthController):
    """The match's run is added to the kind's own counts, not put in their place."""

    def _lift(self, kind: DraftKind, copied: int) -> None:
        super()._lift(kind, 0)
        estimate = self.estimates[kind.name]
        self._saved = (estimate.pool_hits, estimate.pool_seen)
        run = min(float(copied), self.cap)
        estimate.pool_hits += run
        estimate.pool_seen += run
        estimate._estimate()

    def observe(self, step: Any) -> None:
        kind = self.kinds.get(step.source)
        if kind is not None and getattr(self, "_saved", None) is not None:
            estimate = self.estimates[kind.name]
            estimate.pool_hits, estimate.pool_seen = self._saved
            estimate._estimate()
        self._saved = None
        super().observe(step)

    cap = 32.0


def controlled(f: float, controller: type[DraftLengthController], bounds: tuple[int, ...] = ()
               ) -> Callable[..., tuple[SuffixDrafter, DraftLengthController]]:
    def make(memory: TokenBuffer, limit: Limit, draft_max: int
             ) -> tuple[SuffixDrafter, DraftLengthController]:
        drafter = (_ByMatch(memory, limit=limit, factor=f, bounds=bounds) if bounds
                   else SuffixDrafter(memory, limit=limit, factor=f))
        return drafter, controller(draft_max, adaptive=True,
                                   curve=VerifyCostCurve(dict(DEMO_CURVE)))
    return make


VARIANTS: dict[str, Callable[..., tuple[SuffixDrafter, DraftLengthController]]] = {
    "until judged": controlled(1, _EvidenceUntilJudged),
    "until judged f4": controlled(4, _EvidenceUntilJudged),
    "added": controlled(1, _EvidenceAdded),
    "added f4": controlled(4, _EvidenceAdded),
    "added f4 2/6/16": controlled(4, _EvidenceAdded, (2, 6, 16)),
    "current": current, "factor 2": factor(2), "factor 4": factor(4), "factor 16": factor(16),
    "no run evidence": no_run_evidence(1), "no run evidence f4": no_run_evidence(4),
    "by match 2/6/16": by_match(1, (2, 6, 16)),
    "by match 2/6/16 f4": by_match(4, (2, 6, 16)),
    "by match 2/4/8/16 no ev": by_match(1, (2, 4, 8, 16), False),
    "by match 2/4/8/16 no ev f4": by_match(4, (2, 4, 8, 16), False),
}


def replay_suite(rows: list[dict[str, Any]], variant: str,
                 limit: Callable[[list[int]], int] | None, draft_max: int,
                 by_task: bool = False) -> dict[str, Tally]:
    """Each task in order, the memory holding the suite's earlier answers."""
    tallies: dict[str, Tally] = {}
    runs: list[RememberedRun] = []
    for row in rows:
        drafter, controller = VARIANTS[variant](memory_buffer(runs), limit, draft_max)
        tally = tallies.setdefault(row["name"] if by_task else row["suite"], Tally())
        cost = VerifyCostCurve(dict(DEMO_CURVE)).cost
        replay(row["prompt"], row["output"], drafter, controller, cost, tally)
        runs.append(RememberedRun(len(runs) + 1,
                                  [*row["prompt"][-MEMORY_LEAD_TOKENS:], *row["output"]]))
    return tallies


def agreement(rows: list[dict[str, Any]], variant: str, limit: Limit,
              depth: int) -> list[list[tuple[int, int]]]:
    """Per task, at every output position: (match length, how many of a `depth`-token chain
    draft agree with the output). A drafter reads only the context, so this is what any
    controller could get from it."""
    found: list[list[tuple[int, int]]] = []
    runs: list[RememberedRun] = []
    for row in rows:
        drafter, _ = VARIANTS[variant](memory_buffer(runs), limit, depth)
        prompt, output = row["prompt"], row["output"]
        drafter.begin(prompt)
        per: list[tuple[int, int]] = []
        for done in range(len(output)):
            context = [*prompt, *output[:done]]
            draft = drafter.propose(context, Budget(depth), SamplingParams(), None)  # type: ignore[arg-type]
            agree = 0
            while (agree < len(draft.tokens) and done + agree < len(output)
                   and draft.tokens[agree] == output[done + agree]):
                agree += 1
            per.append((drafter.match_length(context), agree))
        found.append(per)
        runs.append(RememberedRun(len(runs) + 1, [*prompt[-MEMORY_LEAD_TOKENS:], *output]))
    return found


def oracle(per: list[tuple[int, int]], cost: Callable[[int], float], k_max: int) -> float:
    """The least modelled time to write the output with this drafter, k chosen knowing each
    draft's agreement (a bound on what any controller earns from it)."""
    n = len(per)
    best = [0.0] * (n + 1)  # best[i]: seconds to write output[i:]
    for i in range(n - 1, -1, -1):
        agree = per[i][1]
        best[i] = min(cost(k + 1) + best[min(n, i + min(k, agree) + 1)]
                      for k in range(0, min(k_max, n - i - 1) + 1))
    return best[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--variant", action="append", choices=tuple(VARIANTS))
    parser.add_argument("--draft-max", type=int, default=32)  # the CLI's default for --suffix
    parser.add_argument("--by-task", action="store_true")
    parser.add_argument("--suite", action="append", choices=SUITES)
    parser.add_argument("--oracle", action="store_true",
                        help="the bound a controller that knew each draft's agreement earns")
    args = parser.parse_args(argv)
    rows = json.loads(args.file.read_text())
    limit = load_limit(args.file)
    if args.oracle:
        cost = VerifyCostCurve(dict(DEMO_CURVE)).cost
        for variant in args.variant or list(VARIANTS):
            for suite in args.suite or SUITES:
                suite_rows = [row for row in rows if row["suite"] == suite]
                found = agreement(suite_rows, variant, limit, args.draft_max)
                plain = sum(len(row["output"]) for row in suite_rows) * cost(1)
                bound = sum(oracle(per, cost, args.draft_max) for per in found)
                print(f"{variant:12} {suite:10} oracle k {plain / bound:.3f}x plain")
                if args.by_task:
                    for row, per in zip(suite_rows, found, strict=True):
                        print(f"  {row['name']}: " + " ".join(f"{m}:{a}" for m, a in per))
        return 0
    for variant in args.variant or list(VARIANTS):
        print(variant)
        for suite in args.suite or SUITES:
            suite_rows = [row for row in rows if row["suite"] == suite]
            if not suite_rows:
                continue
            for name, tally in replay_suite(suite_rows, variant, limit, args.draft_max,
                                            args.by_task).items():
                print(f"  {name:34} {tally.row()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
