"""Replaying prompt lookup over the target's own greedy outputs: an ablation bench for the
lookup drafters and the adaptive controller that is cheap, deterministic and exact.

Greedy speculative decoding writes the plain output (tests/test_greedy_matches_plain.py), and
a lookup's draft depends only on the context, so a pass that drafts k tokens keeps as many
as its draft shares with the recorded output, plus one. Each pass is priced on a verify-cost
curve (the demo target's calibrated one by default), so a variant's tokens per modelled
second can be compared with plain decoding's without running the target again.

  record:  python packaging/research/replay_lookup.py record OUT.json
           (runs the demo target plainly)
  replay:  python packaging/research/replay_lookup.py replay OUT.json [--by-task]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.cli.bench_tasks import (  # noqa: E402
    CODE_PROMPTS,
    EDIT_PROMPTS,
    REPETITIVE_PROMPTS,
    TEXT_PROMPTS,
    VERBATIM_PROMPTS,
)
from app.engine.adaptive import DraftLengthController, PassOutcome  # noqa: E402
from app.engine.cost_curve import VerifyCostCurve  # noqa: E402
from app.engine.drafters import Budget, Drafter, written_copy  # noqa: E402
from app.engine.drafters.lookup import PromptLookup  # noqa: E402
from app.engine.drafters.lookup.edits import EditAwareLookup  # noqa: E402
from app.engine.records import Decision  # noqa: E402
from app.engine.sampling import SamplingParams  # noqa: E402
from app.engine.session import ShadowCheck  # noqa: E402

# the demo target's calibrated verify curve, seconds (Q4_K_M, 2 threads, every size to 17 as
# app.engine.cost_curve calibrates them; 2026-11-26)
DEMO_CURVE = {1: .0314, 2: .0547, 3: .0716, 4: .0857, 5: .1095, 6: .1353, 7: .1555, 8: .2401,
              9: .2567, 10: .2713, 11: .2863, 12: .2903, 13: .3048, 14: .3228, 15: .3343,
              16: .2815, 17: .3481, 32: .4719, 33: .5438, 64: .8518, 65: .9253}
_NEVER_DRAWN = np.random.default_rng(0)  # lookups and copies sample nothing


def add_curve_option(parser: argparse.ArgumentParser) -> None:
    """--curve FILE: the verify curve the replays price passes on (see use_curve)."""
    parser.add_argument("--curve", type=Path,
                        help="price passes on this verify curve instead of the demo target's: "
                             "a JSON object of pass size -> seconds")


def read_curve(path: Path) -> dict[int, float]:
    """A verify curve from a JSON object of pass size -> seconds."""
    return {int(n): float(s) for n, s in json.loads(path.read_text()).items()}


def use_curve(path: Path | None) -> None:
    """Make the curve of `path` (None: keep the demo target's) the one every replay and its
    pricing read: DEMO_CURVE, changed in place."""
    if path:
        measured = read_curve(path)
        DEMO_CURVE.clear()
        DEMO_CURVE.update(measured)
TOKENS = {"code": 128, "edit": 360, "text": 200, "repetitive": 256, "verbatim": 256}


def record(out: Path, suites: list[str] | None = None, threads: int | None = None,
           tokens: int | None = None, per_suite: int | None = None) -> None:
    """The target's plain greedy output for each task (at most `tokens` each, the first
    `per_suite` tasks of each suite), with the vocabulary sidecar."""
    from app.engine.decode_config import DecodeConfig
    from app.engine.session import Session
    from app.models.demo import demo_paths
    from app.models.loading import ModelSpec, load_pair
    from app.runs import encode_prompt

    target_path, _ = demo_paths()
    pair = load_pair(ModelSpec(str(target_path), n_threads=threads))
    # in order: suffix decoding's memory of earlier runs fills as a session's would
    tasks = [("repetitive", name, p, True) for name, p in REPETITIVE_PROMPTS.items()]
    tasks += [("verbatim", name, p, True) for name, p in VERBATIM_PROMPTS.items()]
    tasks += [("code", f"code {i}", p, False) for i, p in enumerate(CODE_PROMPTS)]
    tasks += [("edit", name, p, True) for name, p in EDIT_PROMPTS.items()]
    tasks += [("text", f"text {i}", p, True) for i, p in enumerate(TEXT_PROMPTS)]
    tasks = [task for task in tasks if suites is None or task[0] in suites]
    if per_suite is not None:
        suites_in_order = [task[0] for task in tasks]
        tasks = [task for i, task in enumerate(tasks)
                 if i - suites_in_order.index(task[0]) < per_suite]
    rows = []
    for suite, name, prompt, chat in tasks:
        ids = encode_prompt(pair.target, prompt, chat)
        n = TOKENS[suite] if tokens is None else min(tokens, TOKENS[suite])
        session = Session(pair.target, None, DecodeConfig(n_predict=n),
                          diagnostics=False)
        for _ in session.steps(ids):
            pass
        rows.append({"suite": suite, "name": name, "prompt": ids,
                     "output": session.output_ids})
        print(f"{name}: {len(session.output_ids)} tokens", file=sys.stderr)
        out.write_text(json.dumps(rows))
    write_vocab(pair.target, rows, out)
    pair.close()


def write_vocab(model: Any, rows: list[dict[str, Any]], out: Path) -> None:
    """Beside OUT.json, the texts of the tokens it holds and the end-of-generation ids, so a
    replay can end drafts where the app's do (lookup.block_limit)."""
    used = sorted({t for row in rows for t in (*row["prompt"], *row["output"])})
    vocab = {"eos": sorted(model.eos_ids), "texts": {t: model.token_text(t) for t in used}}
    out.with_suffix(".vocab.json").write_text(json.dumps(vocab))


@dataclass(frozen=True)
class ReplayedPass:
    drafted: int  # draft tokens judged
    kept: int  # of them accepted
    seconds: float  # the pass's modelled time
    decision: Decision  # the controller's, that chose the pass's k


def replay_passes(prompt: list[int], output: list[int], drafter: Drafter,
                  controller: DraftLengthController,
                  cost: Callable[[int], float]) -> Iterator[ReplayedPass]:
    """Write `output` after `prompt` as greedy speculative decoding would (it writes the
    plain output), pass by pass, each priced by `cost` (seconds of a pass over n tokens) at
    the size the session runs it: padded where the curve prices a larger pass below it
    (DraftLengthController.padded_size; the context never runs out here)."""
    drafter.begin(prompt)
    controller.pad_room = controller.draft_max + 1  # the context never runs out here
    context, done = list(prompt), 0
    shadow = ShadowCheck()  # as the session does: free drafts declined are checked, not probed
    while done < len(output):
        remaining = len(output) - done
        outlook = drafter.outlook(context)
        decision = controller.decide(remaining, outlook.kind, min(outlook.copied, done),
                                     outlook.available, written_copy(outlook, done))
        k = decision.k
        shadow.offer(controller, drafter, outlook, k, context, done, remaining,
                     SamplingParams(), _NEVER_DRAWN)
        draft = drafter.propose(context, Budget(k), SamplingParams(), _NEVER_DRAWN) if k else None
        tokens = [] if draft is None else draft.tokens[: remaining - 1]
        kept = 0
        while kept < len(tokens) and tokens[kept] == output[done + kept]:
            kept += 1
        emitted = output[done : done + kept + 1]
        size = controller.padded_size(len(tokens) + 1) if tokens else 1
        t = cost(size)
        verdicts = [True] * kept + ([False] if kept < len(tokens) else [])
        controller.observe(PassOutcome(outlook.kind if tokens else None, verdicts,
                                       pass_tokens=size, draft_depth=len(tokens),
                                       t_verify=t, pads=size - len(tokens) - 1))
        yield ReplayedPass(len(tokens), kept, t, decision)
        context += emitted
        done += len(emitted)
        shadow.settle_into(controller, output[:done])
        drafter.accept(context, None)


def replay(prompt: list[int], output: list[int], drafter: Drafter,
           controller: DraftLengthController, cost: Callable[[int], float]) -> tuple[float, int]:
    """Modelled seconds and passes to write `output` after `prompt` with this drafter."""
    passes = list(replay_passes(prompt, output, drafter, controller, cost))
    return sum(p.seconds for p in passes), len(passes)


DRAFTERS: dict[str, Callable[[], Drafter]] = {
    "edit-aware": EditAwareLookup, "prompt lookup": PromptLookup,
}


def replay_all(rows: list[dict[str, Any]], drafter: str, draft_max: int,
               by_task: bool = False) -> dict[str, float]:
    """Speedup over plain decoding per suite, or per task (total modelled plain time /
    replayed time)."""
    curve = VerifyCostCurve(dict(DEMO_CURVE))
    plain: dict[str, float] = {}
    spec: dict[str, float] = {}
    for row in rows:
        ctl = DraftLengthController(draft_max, adaptive=True, curve=VerifyCostCurve(
            dict(DEMO_CURVE)), free_kinds_shadowed=True)
        seconds, _ = replay(row["prompt"], row["output"], DRAFTERS[drafter](), ctl, curve.cost)
        suite = row["name"] if by_task else row["suite"]
        plain[suite] = plain.get(suite, 0.0) + len(row["output"]) * curve.cost(1)
        spec[suite] = spec.get(suite, 0.0) + seconds
    return {suite: plain[suite] / spec[suite] for suite in plain}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("record", "replay"))
    parser.add_argument("file", type=Path)
    parser.add_argument("--draft-max", type=int, default=32)
    parser.add_argument("--suite", action="append", choices=tuple(TOKENS),
                        help="record only these suites (default: all)")
    parser.add_argument("--threads", type=int, default=None,
                        help="record with this many threads (1 on a machine shared with "
                             "other work, where waiting threads spin)")
    parser.add_argument("--tokens", type=int, help="record at most this many per task")
    parser.add_argument("--tasks", type=int, help="record the first N tasks of each suite")
    parser.add_argument("--by-task", action="store_true",
                        help="the drafters side by side on every task")
    args = parser.parse_args(argv)
    if args.mode == "record":
        record(args.file, args.suite, args.threads, args.tokens, args.tasks)
        return 0
    rows = json.loads(args.file.read_text())
    if args.by_task:
        for drafter in DRAFTERS:
            speedups = replay_all(rows, drafter, args.draft_max, by_task=True)
            print(drafter + ": " + ", ".join(f"{t} {x:.3f}" for t, x in speedups.items()))
        return 0
    suites = sorted({row["suite"] for row in rows})
    print(f"{'drafter':14} " + " ".join(f"{s:>7}" for s in suites))
    for drafter in DRAFTERS:  # the controller's ablations: replay_ablation.py
        speedups = replay_all(rows, drafter, args.draft_max)
        print(f"{drafter:14} " + " ".join(f"{speedups[s]:7.3f}" for s in suites))
    return 0


if __name__ == "__main__":
    sys.exit(main())
