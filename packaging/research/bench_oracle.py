"""The share of the oracle controller's gain, timed: on each task of a draftless workload, plain
decoding, `--suffix` (the app's controller) and `--suffix` with an oracle's draft lengths, in
one process, in turns, so the ratios hold on a noisy machine.

The oracle knows the output: before its run, the target's plain greedy output (decoded once,
untimed) is read by a drafter built as the run's own (the same memory and retry copy) at every
position, each draft up to draft-max tokens long, and each k is chosen by the least modelled
time to write the whole output (replay_suffix.oracle_plan) on the curve calibrated at the start.
Its run then drafts those k (capped by what the drafter offers at that step), padded as the
app pads. All three rows run on the exact (batch-invariant) kernels by default, where greedy
speculative decoding writes the plain output bit for bit, so the oracle's positions hold: on
the fast kernels a near-tie parts the outputs (in a trial, 6 tokens into a task whose oracle
drafted 6 at once) and every k after it is for another text. --fast-kernels runs them anyway;
each task's log line says whether each row's output was the plain one.
The bar: the app earns at least 80% of the oracle's gain, (app - 1) / (oracle - 1)
with both as speed over plain decoding; copy_bars.py models the same share from recordings.

  PYTHONPATH=. python packaging/research/bench_oracle.py [--workloads repetitive,edit,verbatim]
      [--tokens 96] [--rounds 1] [--fast-kernels] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_vs_llamacpp import (  # noqa: E402
    draftless_config,
    draftless_workloads,
    log,
    pass_cost,
)
from engine_env import run_as_engine_process  # noqa: E402
from replay_suffix import agreeing, oracle_plan  # noqa: E402

from app.allocator import keep_large_blocks  # noqa: E402
from app.analysis.measure import Tally, timed_run, warm_up  # noqa: E402
from app.engine.adaptive import DraftLengthController  # noqa: E402
from app.engine.decode_config import DecodeConfig, DrafterChoice, DrafterOptions  # noqa: E402
from app.engine.drafters import Budget, DraftKind  # noqa: E402
from app.engine.estimates import CopyEvidence  # noqa: E402
from app.engine.records import RULE_END_OF_OUTPUT, RULE_NOTHING_TO_DRAFT, Decision  # noqa: E402
from app.engine.sampling import SamplingParams  # noqa: E402
from app.engine.session import Session  # noqa: E402
from app.models.loading import LoadedPair, ModelSpec, load_pair  # noqa: E402
from app.runs import build_session, calibrate_pair, encode_prompt, new_drafter  # noqa: E402

PLAIN, APP, ORACLE = "plain", "--suffix", "--suffix, the oracle's k"
NEVER_DRAWN, NEVER_DRAWS = SamplingParams(), np.random.default_rng(0)  # copies sample nothing
SLUGS = {APP: "app", ORACLE: "oracle"}


class OracleLengths(DraftLengthController):
    """The app's controller, but each k is the oracle's for the position the session is at
    (capped by the step's limit: what the drafter offers, what is left to write)."""

    def __init__(self, session: Session, lengths: list[int]) -> None:
        old = session.controller
        super().__init__(old.draft_max, old.adaptive, old.curve, free_kinds_shadowed=True,
                         price_plain=old.price_plain)
        self.machine_busy = old.machine_busy
        self.session, self.lengths = session, lengths

    def decide(self, remaining: int, kind: DraftKind, copied: int = 0,
               available: int | None = None, copy: CopyEvidence | None = None) -> Decision:
        decision = super().decide(remaining, kind, copied, available, copy)
        if decision.rule in (RULE_END_OF_OUTPUT, RULE_NOTHING_TO_DRAFT):
            return decision
        written = len(self.session.output_ids)
        k = min(self.lengths[written] if written < len(self.lengths) else 0, decision.limit)
        self._priced_pass = True  # the oracle's passes are padded as the app's
        return replace(decision, k=k, rule="oracle")


def oracle_lengths(pair: LoadedPair, config: DecodeConfig, prompt: list[int],
                   output: list[int], retried: bool, cost: Any) -> tuple[list[int], float]:
    """The oracle's k at every position of `output`, and its modelled seconds to write it:
    a drafter built as the run's reads the context at each position."""
    drafter = new_drafter(pair, config, None if retried else prompt)
    assert drafter is not None
    drafter.begin(prompt)
    per: list[tuple[int, int]] = []  # (match, agreement); the oracle reads the agreement
    for done in range(len(output)):
        context = [*prompt, *output[:done]]
        draft = drafter.propose(context, Budget(config.draft_max), NEVER_DRAWN, NEVER_DRAWS)
        per.append((0, agreeing(draft.tokens, output, done)))
        drafter.accept([*context, output[done]], None)
    seconds, plan = oracle_plan(per, cost, config.draft_max)
    return [k or 0 for k in plan], seconds


def workload(pair: LoadedPair, config: DecodeConfig, name: str,
             tasks: list[tuple[str, str, bool]], rounds: int, folder: Path) -> dict[str, Any]:
    encoded = [(task, encode_prompt(pair.target, text, chat)) for task, text, chat in tasks]
    encoded = [(task, ids) for task, ids in encoded
               if len(ids) + config.n_predict < pair.target.n_ctx]
    warm_up(pair, replace(config, drafter=DrafterChoice(("ngram",))), encoded[0][1])
    curve = calibrate_pair(pair, config.draft_max)
    cost = pass_cost(curve, config.draft_max)
    outputs = []
    for _, ids in encoded:  # untimed: the outputs the oracle knows
        session = build_session(pair, config, plain=True, diagnostics=False)
        for _ in session.steps(ids):
            pass
        outputs.append(list(session.output_ids))
    tallies = {label: Tally() for label in (PLAIN, APP, ORACLE)}
    modelled_oracle = modelled_plain = 0.0
    for round_index in range(rounds):
        # each speculative row its own memory, filled by its own answers; empty each round
        configs = {PLAIN: config}
        for label, slug in SLUGS.items():
            memory = folder / f"{name}-{slug}-{round_index}.json"
            configs[label] = replace(config, drafter=DrafterChoice(
                ("suffix",), DrafterOptions(memory=str(memory))))
        for index, ((task, ids), output) in enumerate(zip(encoded, outputs, strict=True)):
            retried = any(ids == earlier for _, earlier in encoded[:index])
            lengths, seconds = oracle_lengths(pair, configs[ORACLE], ids, output, retried,
                                              cost)
            modelled_oracle += seconds
            modelled_plain += len(output) * cost(1)

            def script(session: Session, lengths: list[int] = lengths) -> None:
                session.controller = OracleLengths(session, lengths)
            labels = [PLAIN, APP, ORACLE]
            shift = (index + round_index) % 3  # nobody always goes first
            rates = {}
            for label in labels[shift:] + labels[:shift]:
                tally = tallies[label]
                before = (tally.tokens, tally.seconds)
                timed_run(pair, configs[label], ids, label == PLAIN, tally, retried,
                          script if label == ORACLE else None)
                rates[label] = (tally.tokens - before[0]) / (tally.seconds - before[1])
            same = ", ".join(
                f"{label} {'identical' if tallies[label].outputs[-1] == output else 'parted'}"
                for label in (PLAIN, APP, ORACLE))
            log(f"  {task}: " + ", ".join(f"{k} {v:.1f}" for k, v in rates.items())
                + f" tok/s ({same})")
    plain = tallies[PLAIN].tok_s
    app, best = tallies[APP].tok_s / plain, tallies[ORACLE].tok_s / plain
    share = (app - 1) / (best - 1) if best > 1 else None
    return {"plain_tok_s": plain, "app": app, "oracle": best, "share": share,
            "oracle_modelled": modelled_plain / modelled_oracle,
            "identical": {label: tallies[label].outputs == tallies[PLAIN].outputs
                          for label in (APP, ORACLE)},
            "curve": {str(n): t for n, t in curve.points.items()}}


def main(argv: list[str] | None = None) -> int:
    run_as_engine_process()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="repetitive,edit,verbatim")
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tasks", type=int, default=0)
    parser.add_argument("--fast-kernels", action="store_true",
                        help="the fast kernels (the default decoding), where near-ties part "
                             "the outputs and the oracle's k no longer fit after them")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    args.quick = False
    keep_large_blocks()
    from app.models.demo import demo_paths

    target, _ = demo_paths()
    pair = load_pair(ModelSpec(target=str(target), n_threads=args.threads,
                               batch_invariant=not args.fast_kernels))
    config = draftless_config(args)
    results: dict[str, Any] = {}
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="draftlens-oracle-") as folder:
            for name, tasks in draftless_workloads(args).items():
                log(f"workload '{name}': {len(tasks)} task(s), {args.rounds} round(s)")
                results[name] = workload(pair, config, name, tasks, args.rounds, Path(folder))
    finally:
        pair.close()
    print("\n| workload | plain tok/s | --suffix × plain | the oracle's k × plain (modelled) "
          "| share of the oracle's gain (bar ≥ 80%) | greedy identical (app / oracle) |\n"
          "|---|---|---|---|---|---|")
    for name, r in results.items():
        share = "–" if r["share"] is None else f"{r['share']:.0%}"
        same = " / ".join("yes" if v else "no" for v in r["identical"].values())
        print(f"| {name} | {r['plain_tok_s']:.1f} | {r['app']:.2f}× | {r['oracle']:.2f}× "
              f"({r['oracle_modelled']:.2f}×) | {share} | {same} |")
    if args.json:
        args.json.write_text(json.dumps({"exact_kernels": not args.fast_kernels,
                                         "workloads": results,
                                         "seconds": time.perf_counter() - started}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
