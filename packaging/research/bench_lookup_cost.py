"""What a drafting step of `--ngram` costs besides the target pass, in two parts, for one
checkout (a benchmark, not a test):

  lookup    the n-gram drafter's own work in a step (outlook: its index brought up to date and
            the match found; propose: the draft read out), on histories of 100, 1000 and 4000
            tokens of this repository's text, one token added a step
  decision  the adaptive controller's choice of k for an n-gram guess at draft_max 64 (what
            `bench_vs_llamacpp.py` runs), with the demo target's stored verify curve and
            every size up to 17 priced live, as in a long run, one pass timed between two
            decisions
  run       the time before each target pass (t_draft: the drafter's outlook, the
            controller's choice, any draft), per step over every step, of 96-token
            `--ngram --adaptive --draft-max 64` runs on the prose and fresh code prompts

Run it for two checkouts in one go to compare them (each side is a child process, the order
alternating by round):

  .venv/bin/python packaging/research/bench_lookup_cost.py --before /tmp/before [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LENGTHS = (100, 1000, 4000)
TIMED_STEPS = 64
DRAFT_MAX = 64
DECISIONS = 200
RUN_TOKENS = 96
# prose and code from this repository: the history a lookup searches
SOURCES = ("docs/user-guide.md", "app/engine/adaptive.py", "app/engine/session.py",
           "docs/benchmarks.md")


def history(model: Any, length: int) -> list[int]:
    text = "\n".join((ROOT / name).read_text() for name in SOURCES)
    ids: list[int] = model.tokenize(text)
    if len(ids) < length:
        raise SystemExit(f"the sources hold {len(ids)} tokens, fewer than {length}")
    return ids[:length]


def lookup_ms(model: Any, length: int) -> dict[str, float]:
    """Milliseconds per step of the drafter's outlook and a 16-token proposal, the history
    growing from length - TIMED_STEPS to length (the prompt indexed before the clock)."""
    import numpy as np

    from app.engine.decode_config import NO_EARLY_STOP, DrafterOptions
    from app.engine.drafters import Budget
    from app.engine.drafters.lookup.edits import ngram_drafter
    from app.engine.sampling import SamplingParams

    class Sources:
        target = model

    ids = history(model, length)
    prompt = ids[: length - TIMED_STEPS]
    drafter = ngram_drafter(Sources(), DrafterOptions(), NO_EARLY_STOP, False)
    drafter.begin(prompt)
    drafter.outlook(list(prompt))  # the prompt indexed, as the first step does
    params, rng = SamplingParams(temperature=0.0), np.random.default_rng(0)
    times = []
    for end in range(length - TIMED_STEPS + 1, length + 1):
        context = ids[:end]
        start = time.perf_counter()
        drafter.outlook(context)
        drafter.propose(context, Budget(16), params, rng)
        times.append(time.perf_counter() - start)
    return {"median_ms": 1000 * statistics.median(times), "mean_ms": 1000 * statistics.fmean(times)}


def decision_ms(model: Any) -> float:
    """Milliseconds per decision of k for an n-gram guess, draft_max 64, the curve priced as in
    a long run: the stored shape, and every size up to 17 with enough kept samples."""
    from app.engine.adaptive import DraftLengthController
    from app.engine.cost_curve import RECENT_PASSES, interpolate, stored_verify_curve
    from app.engine.drafters.lookup import NGRAM_GUESS

    curve = stored_verify_curve(model)
    if not curve.points:
        raise SystemExit("no stored verify curve for the target: run a calibrated bench first")
    for n in range(1, 18):
        for i in range(RECENT_PASSES + 1):
            curve.observe(n, interpolate(curve.points, n) * (1 + 0.01 * i))
    controller = DraftLengthController(DRAFT_MAX, True, curve, free_kinds_shadowed=True)
    controller.decide(96, NGRAM_GUESS, 0, 40)
    seconds = 0.0
    for i in range(DECISIONS):
        n = 1 + i % 17  # a pass timed between two decisions, as in a run
        curve.observe(n, interpolate(curve.points, n))
        start = time.perf_counter()
        controller.decide(96, NGRAM_GUESS, 0, 40)
        seconds += time.perf_counter() - start
    return 1000 * seconds / DECISIONS


def run_ms(pair: Any) -> dict[str, float]:
    """Milliseconds before each target pass, per step, in --ngram runs of the bench's prose
    (chat) and fresh code prompts, after one untimed run."""
    from app.cli.bench_tasks import CODE_PROMPTS, TEXT_PROMPTS
    from app.engine.decode_config import DecodeConfig, DrafterChoice
    from app.engine.sampling import SamplingParams
    from app.runs import build_session, encode_prompt

    config = DecodeConfig(n_predict=RUN_TOKENS, draft_max=DRAFT_MAX, adaptive=True,
                          sampling=SamplingParams(temperature=0.0),
                          drafter=DrafterChoice(("ngram",)))
    workloads = {"prose": [(text, True) for text in TEXT_PROMPTS],
                 "fresh code": [(text, False) for text in CODE_PROMPTS]}
    warm = encode_prompt(pair.target, TEXT_PROMPTS[0], True)
    list(build_session(pair, config, diagnostics=False, avoid_prompt=warm).steps(warm))
    result = {}
    for name, prompts in workloads.items():
        seconds, steps = 0.0, 0
        for text, chat in prompts:
            ids = encode_prompt(pair.target, text, chat)
            session = build_session(pair, config, diagnostics=False, avoid_prompt=ids)
            records = list(session.steps(ids))
            seconds += sum(r.t_draft for r in records)
            steps += len(records)
        result[name] = 1000 * seconds / steps
    return result


def measure() -> dict[str, Any]:
    from app.models.demo import demo_paths
    from app.models.loading import ModelSpec, load_pair

    target, _ = demo_paths()
    pair = load_pair(ModelSpec(str(target), n_ctx=8192, n_threads=2))
    return {"lookup": {str(n): lookup_ms(pair.target, n) for n in LENGTHS},
            "decision_ms": decision_ms(pair.target), "run_ms": run_ms(pair)}


def child(checkout: Path) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(checkout), BENCH_LOOKUP_CHILD="1")
    out = subprocess.run([sys.executable, str(Path(__file__).resolve())], cwd=checkout,
                         env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{checkout} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    if os.environ.get("BENCH_LOOKUP_CHILD"):
        print(json.dumps(measure()))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="checkout of the old commit")
    parser.add_argument("--after", type=Path, default=ROOT, help="checkout of the new commit")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sides = {"after": args.after.resolve()}
    if args.before is not None:
        sides = {"before": args.before.resolve(), **sides}
    start_load = os.getloadavg()[0]
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    for round_index in range(args.rounds):
        order = list(sides) if round_index % 2 == 0 else list(reversed(sides))
        for side in order:
            runs[side].append(child(sides[side]))
    workloads = list(runs["after"][0]["run_ms"])
    print("| side | " + " | ".join(f"lookup, {n} tokens (ms/step)" for n in LENGTHS)
          + " | decision, draft_max 64 (ms) | "
          + " | ".join(f"{w} run, before each pass (ms/step)" for w in workloads) + " |")
    print("|---|" + "---|" * (len(LENGTHS) + 1 + len(workloads)))
    for side, results in runs.items():
        cells = [statistics.median(r["lookup"][str(n)]["median_ms"] for r in results)
                 for n in LENGTHS]
        cells.append(statistics.median(r["decision_ms"] for r in results))
        cells += [statistics.median(r["run_ms"][w] for r in results) for w in workloads]
        print(f"| {side} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    print(f"(medians of {args.rounds} rounds; load average before and after: "
          f"{start_load:.2f} / {os.getloadavg()[0]:.2f})")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
