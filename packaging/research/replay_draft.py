"""Replaying the demo draft model over the target's recorded greedy outputs: the adaptive
controller's draft-model mechanisms (the confidence stop and its q bins, probes, the prior)
modelled without timing noise, as replay_lookup.py does for the lookups.

Greedy speculative decoding writes the plain output, and a greedy draft's chain from a
context is fixed: while its tokens agree with the output, the draft at depth j from position
i is the draft's own next token after output[:i + j] (recorded once, teacher-forced, with the
q it gave that token); after its first wrong token the draft runs on in its own words, whose
q's (recorded from each such position, up to draft_max - 1 tokens) only decide where the
confidence stop ends the draft. Each pass is priced on the demo target's calibrated verify
curve, and its drafting (a catch-up extend, then a step per token) on that curve scaled by the
quiet ratio of the draft's step to the target's; --profile gpu prices both on an assumed
GPU-like curve instead.

  record:  python packaging/research/replay_draft.py record OUT.json DRAFT.json [--suite code ...]
  replay:  python packaging/research/replay_draft.py replay DRAFT.json [--variant NAME ...]

OUT.json comes from `replay_lookup.py record`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_ablation import OPTION_VARIANTS as ESTIMATE_OPTIONS  # noqa: E402
from replay_lookup import DEMO_CURVE, read_curve  # noqa: E402

from app.engine.adaptive import DraftLengthController, PassOutcome  # noqa: E402
from app.engine.controller_options import ControllerOptions  # noqa: E402
from app.engine.cost_curve import VerifyCostCurve, interpolate  # noqa: E402
from app.engine.drafters import DraftKind  # noqa: E402
from app.engine.drafters.draft_model import DRAFT_MODEL  # noqa: E402
from app.engine.estimates import AcceptanceEstimate, ConfidenceStop  # noqa: E402
from app.engine.sampling import SamplingParams, process  # noqa: E402

DRAFT_MAX = 8  # the CLI's default for a draft model
# the demo draft's step against the target's on this machine, quiet: tg 64 and 34 tok/s
# (/work/shared/MODELS.md, "Heavier targets")
CPU_DRAFT_RATIO = 34 / 64
# an assumed GPU-like profile (no demo-pair GPU timings exist here): a pass over n tokens
# costs a step plus 3% per extra token, and a draft step half a target step
GPU_STEP, GPU_SLOPE, GPU_DRAFT_RATIO = 0.010, 0.03, 0.5
_CHUNK = 32  # output rows teacher-forced per extend


def record(outputs: Path, out: Path, suites: list[str] | None) -> None:
    from app.engine.cost_curve import measure_verify_curve
    from app.models.demo import demo_paths
    from backends.llamacpp import LlamaCppModel

    _, draft_path = demo_paths()
    draft = LlamaCppModel(draft_path, n_gpu_layers=0, n_ctx=4096, n_threads=1)
    greedy = SamplingParams()
    rows = [r for r in json.loads(outputs.read_text()) if suites is None or r["suite"] in suites]
    curve = measure_verify_curve(draft, list(range(1, 10)), repeats=3)
    recorded: list[dict[str, Any]] = []
    for row in rows:
        prompt, output = row["prompt"], row["output"]
        chain: list[tuple[int, float]] = []  # the draft's token and its q after output[:i]
        draft.truncate(0)
        draft.extend(prompt[:-1], 0)
        context = [prompt[-1], *output[:-1]]
        for start in range(0, len(context), _CHUNK):
            ids = context[start : start + _CHUNK]
            q = process(draft.extend(ids, len(ids)), greedy)
            chain += [(int(np.argmax(r)), float(r.max())) for r in np.atleast_2d(q)]
        runs_on: dict[int, list[float]] = {}  # after a wrong token: the q's that follow it
        for i, (token, _) in enumerate(chain):
            if token == output[i] or i >= len(output) - 2:
                continue
            draft.truncate(len(prompt) + i)
            ids, qs = [token], []
            for _ in range(DRAFT_MAX - 1):
                q = process(draft.extend(ids, 1)[0], greedy)
                ids = [int(np.argmax(q))]
                qs.append(float(q.max()))
            runs_on[i] = qs
        recorded.append({**row, "chain": chain, "runs_on": runs_on})
        print(f"{row['name']}: {len(output)} tokens, {len(runs_on)} wrong", file=sys.stderr)
        out.write_text(json.dumps({"draft_curve": curve.points, "rows": recorded}))
    draft.close()


@dataclass
class Tally:
    plain: float = 0.0
    seconds: float = 0.0
    passes: int = 0
    drafting: int = 0
    drafted: int = 0
    accepted: int = 0

    def cell(self, passes: bool = False) -> str:
        speed = f"{self.plain / self.seconds:.3f}"
        return f"{speed} ({self.drafting} drafting of {self.passes} passes)" if passes else speed


def replay(row: dict[str, Any], ctl: DraftLengthController, draft_curve: dict[int, float],
           cost: Callable[[int], float], tally: Tally, stop: bool = True) -> None:
    """Write the row's output as greedy speculative decoding with the demo draft would."""
    output, chain = row["output"], row["chain"]
    runs_on = {int(i): qs for i, qs in row["runs_on"].items()}
    cached = len(row["prompt"]) - 1  # context tokens the draft's cache holds
    done = 0
    # chain passes padded to a cheaper size as the session pads them (the context never runs
    # out here)
    ctl.pad_room = ctl.draft_max + 1
    while done < len(output):
        remaining = len(output) - done
        k = ctl.decide(remaining, DRAFT_MODEL).k
        if k == 0:
            t = cost(1)
            ctl.observe(PassOutcome(None, pass_tokens=1, t_verify=t))
            tally.seconds, tally.passes, done = tally.seconds + t, tally.passes + 1, done + 1
            continue
        rule = ctl.confidence_stop(DRAFT_MODEL, remaining) if stop else None
        limit = k if rule is None else rule.limit
        context = len(row["prompt"]) + done
        verdicts: list[bool] = []
        qs: list[float] = []
        wrong_at = None
        for j in range(limit):
            if wrong_at is None:
                token, q = chain[done + j]
                if token != output[done + j]:
                    wrong_at = j
                qs.append(q)
            else:
                qs.append(runs_on[done + wrong_at][j - wrong_at - 1])
            if len(qs) == limit:
                break
            if rule is not None and not rule.keep_drafting(len(qs), qs[-1]):
                break
        drafted = len(qs)
        accepted = drafted if wrong_at is None else wrong_at
        verdicts = [True] * accepted + ([False] if accepted < drafted else [])
        t_first = interpolate(draft_curve, max(1, context - cached))  # with its catch-up
        t_draft = t_first + (drafted - 1) * interpolate(draft_curve, 1)
        size = ctl.padded_size(drafted + 1)
        t_verify = cost(size)
        bins = getattr(ctl, "bins", None)  # the q-bins variant learns from each judged q
        for q, passed in zip(qs, verdicts, strict=False):
            if bins is not None:
                bins.observe(q, passed)
        ctl.observe(PassOutcome(DRAFT_MODEL, verdicts,
                                pass_tokens=size, draft_depth=drafted,
                                t_draft=t_draft, t_verify=t_verify,
                                pads=size - drafted - 1, t_draft_first=t_first))
        cached = context + min(accepted, drafted - 1)
        tally.seconds += t_draft + t_verify
        tally.passes += 1
        tally.drafting += 1
        tally.drafted += drafted
        tally.accepted += accepted
        done += accepted + 1


def _app(draft_cost: float) -> DraftLengthController:
    return DraftLengthController(DRAFT_MAX, adaptive=True,
                                 curve=VerifyCostCurve(dict(DEMO_CURVE)), draft_cost=draft_cost)


# the q bins the confidence stop learnt from until docs/ablation.md showed they did not pay:
# each bin's acceptance starts at its own q, worth two tokens, and fades over ~64 tokens
_EDGES = np.array([0.2, 0.4, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99])
_CENTRES = np.array([0.1, 0.3, 0.5, 0.65, 0.75, 0.85, 0.925, 0.97, 0.995])


@dataclass
class _QBins:
    hits: np.ndarray = field(default_factory=lambda: np.zeros(len(_CENTRES)))
    seen: np.ndarray = field(default_factory=lambda: np.zeros(len(_CENTRES)))

    def observe(self, q: float, accepted: bool) -> None:
        b = int(np.searchsorted(_EDGES, q, side="right"))
        self.hits[b] = (1 - 1 / 64) * self.hits[b] + accepted
        self.seen[b] = (1 - 1 / 64) * self.seen[b] + 1.0

    def accept(self, q: float) -> float:
        b = int(np.searchsorted(_EDGES, q, side="right"))
        return float((self.hits[b] + 2.0 * _CENTRES[b]) / (self.seen[b] + 2.0))


class _BinnedStop(ConfidenceStop):
    bins: _QBins

    def keep_drafting(self, drafted: int, q: float) -> bool:
        return super().keep_drafting(drafted, self.bins.accept(q))


class _WithQBins(DraftLengthController):
    """The confidence stop reading each q through bins learnt from the verdicts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bins = _QBins()

    def confidence_stop(self, kind: DraftKind, remaining: int) -> ConfidenceStop | None:
        stop = super().confidence_stop(kind, remaining)
        if stop is None:
            return None
        binned = _BinnedStop(stop.limit, stop.next_accept, stop.rate, stop.seconds)
        binned.bins = self.bins
        return binned


class _NoProbes(DraftLengthController):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.probes.probe_now = lambda kind: False  # type: ignore[method-assign]


class _Prior(DraftLengthController):
    prior = 0.5

    def estimate(self, kind: DraftKind) -> AcceptanceEstimate:
        return super().estimate(replace(kind, prior=self.prior))


class _PooledEstimate(AcceptanceEstimate):
    def _estimate(self) -> None:
        self.accept_at = [self.pooled()] * self.positions


class _NoPositions(DraftLengthController):
    def estimate(self, kind: DraftKind) -> AcceptanceEstimate:
        known = self.estimates.get(kind.name)
        return known if known is not None else _PooledEstimate(kind.prior, self.draft_max,
                                                               options=self.options)


def _made(cls: type[DraftLengthController], **options: Any
          ) -> Callable[[float], DraftLengthController]:
    """The controller `cls` with these ControllerOptions moved from their defaults."""
    def make(draft_cost: float) -> DraftLengthController:
        return cls(DRAFT_MAX, adaptive=True, curve=VerifyCostCurve(dict(DEMO_CURVE)),
                   draft_cost=draft_cost, options=ControllerOptions(**options))
    return make


def _fixed(k: int) -> Callable[[float], DraftLengthController]:
    return lambda draft_cost: DraftLengthController(k, adaptive=False)


Variant = tuple[Callable[[float], DraftLengthController], bool]
VARIANTS: dict[str, Variant] = {
    "app": (_app, True),
    "no confidence stop": (_app, False),
    "confidence stop reading q through learnt bins": (_made(_WithQBins), True),
    "no probes": (_made(_NoProbes), True),
    "prior 0.5 (not 0.6)": (_made(_Prior), True),
    "no position bins (one pooled rate)": (_made(_NoPositions), True),
    "min gain 1.00": (_made(DraftLengthController, min_gain=1.0), True),
    "min gain 1.10": (_made(DraftLengthController, min_gain=1.10), True),
    "min gain 1.02": (_made(DraftLengthController, min_gain=1.02), True),
    "fixed k = 2 (reference)": (_fixed(2), False),
    "fixed k = 8 (reference)": (_fixed(8), False),
}


# the probes' and the estimate's constants (ControllerOptions), each moved one way and the
# other
OPTION_VARIANTS: dict[str, dict[str, float]] = {
    "first probe gap 4 (not 8)": {"first_probe_gap": 4},
    "first probe gap 16": {"first_probe_gap": 16},
    "max probe gap 32 (not 128)": {"max_probe_gap": 32},
    "max probe gap 512": {"max_probe_gap": 512},
    "probe at acceptance 0.9 (not 0.95)": {"optimistic_accept": 0.9},
    "probe at acceptance 0.99": {"optimistic_accept": 0.99},
    **ESTIMATE_OPTIONS,  # the estimate's, as replay_ablation.py moves them
}
for _name, _options in OPTION_VARIANTS.items():
    VARIANTS[_name] = (_made(DraftLengthController, **_options), True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("record", "replay"))
    parser.add_argument("files", type=Path, nargs="+")
    parser.add_argument("--suite", action="append")
    parser.add_argument("--variant", action="append", choices=tuple(VARIANTS))
    parser.add_argument("--profile", choices=("cpu", "gpu"), default="cpu",
                        help="cpu: the demo target's calibrated curve, the draft at its quiet "
                             "ratio to it; gpu: an assumed GPU-like one (see GPU_SLOPE)")
    parser.add_argument("--curve", type=Path,
                        help="with --profile cpu: the target's verify curve from this JSON "
                             "object of pass size -> seconds, not the demo target's")
    parser.add_argument("--passes", action="store_true",
                        help="beside each speed, how many of the passes drafted")
    args = parser.parse_args(argv)
    if args.mode == "record":
        record(args.files[0], args.files[1], args.suite)
        return 0
    data = json.loads(args.files[0].read_text())
    target_curve, ratio = dict(DEMO_CURVE), CPU_DRAFT_RATIO
    if args.curve:
        target_curve = read_curve(args.curve)
    if args.profile == "gpu":
        target_curve = {n: GPU_STEP * (1 + GPU_SLOPE * (n - 1)) for n in range(1, 18)}
        ratio = GPU_DRAFT_RATIO
    # the draft's curve recorded beside its tokens was timed on a loaded machine; the target's
    # is a quiet calibration, so the draft is priced at the quiet ratio of their steps
    draft_curve = {n: ratio * t for n, t in target_curve.items()}
    suites = sorted({r["suite"] for r in data["rows"]})
    print("| variant | " + " | ".join(f"draft model {s}" for s in suites) + " |")
    for name in args.variant or list(VARIANTS):
        make, stop = VARIANTS[name]
        tallies = {s: Tally() for s in suites}
        run_all(data["rows"], make, stop, tallies, target_curve, draft_curve)
        print(f"| {name} | " + " | ".join(tallies[s].cell(args.passes) for s in suites) + " |",
              flush=True)
    return 0


def run_all(rows: list[dict[str, Any]], make: Callable[[float], DraftLengthController],
            stop: bool, tallies: dict[str, Tally], target_curve: dict[int, float],
            draft_curve: dict[int, float]) -> None:
    cost = VerifyCostCurve(dict(target_curve)).cost
    for row in rows:
        tally = tallies[row["suite"]]
        ctl = make(interpolate(draft_curve, 1))
        ctl.curve = VerifyCostCurve(dict(target_curve))
        replay(row, ctl, draft_curve, cost, tally, stop)
        tally.plain += len(row["output"]) * cost(1)

if __name__ == "__main__":
    sys.exit(main())
