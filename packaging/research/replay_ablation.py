"""The controller's mechanisms, each removed in turn, replayed over the demo target's recorded
greedy outputs (docs/ablation.md): the edit-aware lookup (--ngram) and suffix decoding with
a memory of the suite's earlier answers (--suffix --draft-memory), every pass priced on the
demo target's calibrated verify curve. Modelled, not timed: no noise, so a row differs from
the app's only by what the mechanism did.

  python packaging/replay_ablation.py OUT.json [MORE.json ...] [--variant NAME ...]

Each OUT.json (and its OUT.vocab.json) comes from `replay_lookup.py record`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_lookup import DEMO_CURVE, add_curve_option, replay, use_curve  # noqa: E402
from replay_suffix import SUITES, Tally, _Vocab, recall  # noqa: E402
from replay_suffix import replay as replay_tally  # noqa: E402

from app.engine.adaptive import DraftLengthController  # noqa: E402
from app.engine.controller_options import ControllerOptions  # noqa: E402
from app.engine.cost_curve import VerifyCostCurve  # noqa: E402
from app.engine.drafters import DraftKind  # noqa: E402
from app.engine.drafters.lookup import block_limit  # noqa: E402
from app.engine.drafters.lookup.edits import EditAwareLookup  # noqa: E402
from app.engine.drafters.suffix import RememberedRun, SuffixDrafter, memory_buffer  # noqa: E402
from app.engine.estimates import AcceptanceEstimate  # noqa: E402
from app.runs import remembered_tokens  # noqa: E402

Make = Callable[[int], DraftLengthController]


def _app(draft_max: int) -> DraftLengthController:
    return DraftLengthController(draft_max, adaptive=True,
                                 curve=VerifyCostCurve(dict(DEMO_CURVE)),
                                 free_kinds_shadowed=True)


VARIANTS: dict[str, Make] = {"app": _app}


def variant(name: str) -> Callable[[Make], Make]:
    def register(make: Make) -> Make:
        VARIANTS[name] = make
        return make
    return register


@variant("no shadow checks (free kinds probed)")
def _no_shadow(draft_max: int) -> DraftLengthController:
    return DraftLengthController(draft_max, adaptive=True,
                                 curve=VerifyCostCurve(dict(DEMO_CURVE)))


def _never(kind: str) -> bool:
    return False


@variant("no shadow checks, no probes")
def _no_shadow_no_probes(draft_max: int) -> DraftLengthController:
    ctl = _no_shadow(draft_max)
    ctl.probes.probe_now = _never  # type: ignore[method-assign]
    return ctl


@variant("no probes")
def _no_probes(draft_max: int) -> DraftLengthController:
    ctl = _app(draft_max)
    ctl.probes.probe_now = _never  # type: ignore[method-assign]
    return ctl


# the free kinds' own priors until docs/ablation.md showed they did not pay (copies 7/8, a
# copy resumed past an edit 3/4)
OLD_PRIORS = {"ngram": 0.875, "ngram-self": 0.875, "suffix": 0.875, "ngram-edit": 0.75}


class _OldPriors(DraftLengthController):
    def estimate(self, kind: DraftKind) -> AcceptanceEstimate:
        return super().estimate(replace(kind, prior=OLD_PRIORS.get(kind.name, kind.prior)))


class _NoRunEvidence(DraftLengthController):
    def _lift(self, kind: DraftKind, copied: int) -> None:
        super()._lift(kind, 0)


class _NoLifts(DraftLengthController):
    def _lift(self, kind: DraftKind, copied: int) -> None:
        return None


class _PooledEstimate(AcceptanceEstimate):
    def _estimate(self) -> None:
        self.accept_at = [self.pooled()] * self.positions


class _NoBins(DraftLengthController):
    def estimate(self, kind: DraftKind) -> AcceptanceEstimate:
        known = self.estimates.get(kind.name)
        return known if known is not None else _PooledEstimate(kind.prior, self.draft_max,
                                                               options=self.options)


def _subclass(cls: type[DraftLengthController], **options: Any) -> Make:
    """The controller `cls` with these ControllerOptions moved from their defaults."""
    def make(draft_max: int) -> DraftLengthController:
        return cls(draft_max, adaptive=True, curve=VerifyCostCurve(dict(DEMO_CURVE)),
                   free_kinds_shadowed=True, options=ControllerOptions(**options))
    return make


VARIANTS["the copies' own priors (7/8, 3/4)"] = _subclass(_OldPriors)
VARIANTS["no run evidence"] = _subclass(_NoRunEvidence)
VARIANTS["no lifts (neither)"] = _subclass(_NoLifts)
VARIANTS["no position bins (one pooled rate)"] = _subclass(_NoBins)
VARIANTS["min gain 1.00"] = _subclass(DraftLengthController, min_gain=1.0)
VARIANTS["min gain 1.02"] = _subclass(DraftLengthController, min_gain=1.02)
VARIANTS["min gain 1.10"] = _subclass(DraftLengthController, min_gain=1.10)

# the sizes calibrated before 85fe594: the controller prices passes on this curve, interpolated,
# while each pass costs what the full curve says
V5_SIZES = (1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 33, 64, 65)


@variant("calibration sizes before 85fe594 (1-5, 8, 9, 16, 17, 32, ...)")
def _v5_sizes(draft_max: int) -> DraftLengthController:
    return DraftLengthController(draft_max, adaptive=True, curve=VerifyCostCurve(
        {n: DEMO_CURVE[n] for n in V5_SIZES if n in DEMO_CURVE}), free_kinds_shadowed=True)


# the estimate's constants (ControllerOptions), each moved one way and the other
OPTION_VARIANTS: dict[str, dict[str, float]] = {
    "pool memory 16 tokens (not 32)": {"pool_memory": 16},
    "pool memory 64 tokens": {"pool_memory": 64},
    "pool memory 128 tokens": {"pool_memory": 128},
    "position decay 0.6 (not 0.8)": {"position_decay": 0.6},
    "position decay 0.9": {"position_decay": 0.9},
    "prior weight 0.5 token (not 1)": {"prior_weight": 0.5},
    "prior weight 2 tokens": {"prior_weight": 2.0},
    "pool weight 2 (not 4)": {"pool_weight": 2.0},
    "pool weight 8": {"pool_weight": 8.0},
}
for _name, _options in OPTION_VARIANTS.items():
    VARIANTS[_name] = _subclass(DraftLengthController, **_options)


def full_cost(n: int) -> float:
    return VerifyCostCurve(dict(DEMO_CURVE)).cost(n)


def run_lookup(rows: list[dict[str, Any]], make: Make, draft_max: int) -> dict[str, Tally]:
    tallies: dict[str, Tally] = {}
    for row in rows:
        tally = tallies.setdefault(row["suite"], Tally())
        seconds, passes = replay(row["prompt"], row["output"], EditAwareLookup(),
                                 make(draft_max), full_cost)
        tally.seconds += seconds
        tally.passes += passes
        tally.tokens += len(row["output"])
        tally.plain += len(row["output"]) * full_cost(1)
    return tallies


def run_suffix(rows: list[dict[str, Any]], make: Make, draft_max: int,
               limit: Any) -> dict[str, Tally]:
    tallies: dict[str, Tally] = {}
    for suite in SUITES:
        runs: list[RememberedRun] = []  # each suite's memory starts empty
        suite_rows = [r for r in rows if r["suite"] == suite]
        for row in suite_rows:
            drafter = SuffixDrafter(memory_buffer(runs), limit=limit,
                                    recall=recall(suite_rows, runs))
            replay_tally(row["prompt"], row["output"], drafter, make(draft_max), full_cost,
                         tallies.setdefault(suite, Tally()))
            runs.append(RememberedRun(len(runs) + 1,
                                      remembered_tokens(row["prompt"], row["output"])))
    return tallies


def merged_limit(files: list[Path]) -> Any:
    """block_limit over the token texts of every recording's sidecar (a recording cut short
    has none: its tokens' texts are read from the others')."""
    texts: dict[int, str] = {}
    eos: set[int] = set()
    for file in files:
        if not file.with_suffix(".vocab.json").exists():
            print(f"no {file.with_suffix('.vocab.json').name}", file=sys.stderr)
            continue
        sidecar = json.loads(file.with_suffix(".vocab.json").read_text())
        texts.update({int(t): text for t, text in sidecar["texts"].items()})
        eos.update(sidecar["eos"])
    return block_limit(_Vocab(texts, frozenset(eos)))  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", type=Path, nargs="+", help="recordings, read in order")
    parser.add_argument("--variant", action="append", choices=tuple(VARIANTS))
    parser.add_argument("--draft-max", type=int, default=32)
    add_curve_option(parser)
    args = parser.parse_args(argv)
    use_curve(args.curve)
    rows = [row for file in args.files for row in json.loads(file.read_text())]
    limit = merged_limit(args.files)
    suites = [s for s in SUITES if any(r["suite"] == s for r in rows)]
    print("speedup over plain decoding, modelled; lookup = --ngram, suffix = --suffix with "
          "memory")
    print(f"| {'variant':44} | " + " | ".join(f"ngram {s}" for s in suites) + " | "
          + " | ".join(f"suffix {s}" for s in suites) + " |")
    for name in args.variant or list(VARIANTS):
        make = VARIANTS[name]
        lookup = run_lookup(rows, make, args.draft_max)
        suffix = run_suffix(rows, make, args.draft_max, limit)
        cells = [f"{lookup[s].plain / lookup[s].seconds:.3f}" for s in suites]
        cells += [f"{suffix[s].plain / suffix[s].seconds:.3f}" for s in suites]
        print(f"| {name:44} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
