"""Self-speculation on the demo target, skip sets side by side (a benchmark, not a test).

For one backend: the target's skip sets chosen by the search (app.engine.drafters.self_skip) at each
cost target, the first-N-layers drafts of comparable cost (skip N..L-1), and the demo draft
model, each drafting greedily on the code prompts; plain decoding interleaved with all of
them, the order turned round each round, so every speed is a ratio to the plain runs beside
it (the machine may be shared).

Per row: the set, layers kept, the search's agreement and estimated cost, the draft cost in
target steps measured in turns before the runs (app.models.self_skip.measured_cost) and in
the runs (draft time per drafted token over the plain runs' step), acceptance (accepted /
drafted), alpha (accepted / judged), tokens per pass, speed x plain, greedy identical.
On llama.cpp each set is drafted with each head of --heads (0: the whole output head; N: the
first N token ids and the control tokens, app.models.early_exit), side by side in one run.

  .venv/bin/python packaging/research/bench_self_skip.py --backend llamacpp
      [--costs 0.7,0.6] [--first 17,24] [--skip 6-11,15-20] [--heads 0,32768] [-n 32]
      [-k 1,3] [--rounds 2] [--json OUT]

torch loads the GGUF through transformers (dequantized float32, ~9 GiB for the target and
~3 GiB for the draft model); keep its runs short.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.analysis.measure import Tally, alternating_pairs, pair_ratios, timed_run  # noqa: E402
from app.cli.bench_tasks import CODE_PROMPTS  # noqa: E402
from app.engine.decode_config import (  # noqa: E402
    DecodeConfig,  # noqa: E402
    DrafterChoice,
    DrafterOptions,
)
from app.engine.drafters.self_skip import SkipChoice, format_skip  # noqa: E402
from app.engine.sampling import SamplingParams  # noqa: E402
from app.models.demo import demo_paths  # noqa: E402
from app.models.loading import LoadedPair, ModelSpec, load_pair  # noqa: E402
from app.models.self_skip import settle_self_skip  # noqa: E402
from app.runs import encode_prompt  # noqa: E402


def log(message: str) -> None:
    print(f"[bench-self-skip] {message}", file=sys.stderr, flush=True)


def self_config(base: DecodeConfig, skip: str, cost: float = DrafterOptions.skip_cost
                ) -> DecodeConfig:
    return replace(base, drafter=DrafterChoice(("self",), DrafterOptions(skip=skip,
                                                                          skip_cost=cost)))


Row = tuple[str, LoadedPair, DecodeConfig, SkipChoice | None]


def with_head(pair: LoadedPair, head: int) -> LoadedPair:
    """The loaded pair as one whose self-drafts keep `head` tokens in their head: the same
    target and draft model, self-drafts of its own."""
    return LoadedPair(target=pair.target, draft=pair.draft, check=pair.check,
                      spec=replace(pair.spec, self_head=head), verify_curve=pair.verify_curve)


def candidates(pair: LoadedPair, base: DecodeConfig, encoded: list[list[int]],
               args: argparse.Namespace) -> list[Row]:
    """(row name, pair, config, the set's figures) for every draft to time. The search runs
    once, down to the lowest cost asked; each cost's row is the first set on its path within
    it. Every set is timed with each head of --heads."""
    rows: list[Row] = [
        ("demo draft model", pair, replace(base, drafter=DrafterChoice(("draft",))), None)]
    n_layers = int(pair.target.n_layers)  # type: ignore[attr-defined]
    costs = sorted((float(c) for c in _list(args.costs)), reverse=True)
    wanted: list[tuple[str, str]] = []
    if costs:
        log(f"searching down to an estimated cost of {costs[-1]}")
        _, searched = settle_self_skip(pair, self_config(base, "auto", costs[-1]), encoded, log)
        assert searched is not None
        for cost in costs:
            point = next(p for p in searched.path if p.cost <= cost)
            wanted.append((f"search, cost {cost}", point.skip))
    wanted += [(f"first {n} layers", format_skip(range(int(n), n_layers)))
               for n in _list(args.first)]
    wanted += [(f"by hand {s}", s) for s in args.skip]
    heads = [int(h) for h in _list(args.heads)] if pair.target.backend == "llamacpp" else [0]
    views = {head: with_head(pair, head) for head in heads}
    for name, skip in wanted:
        for head, view in views.items():
            log(f"{name}: skipping {skip}, head {head or 'whole'}")
            config, choice = settle_self_skip(view, self_config(base, skip), encoded, log)
            rows.append((name, view, config, choice))
    return rows


def measure(pair: LoadedPair, rows: list[Row], encoded: list[list[int]], k: int,
            rounds: int) -> list[dict[str, Any]]:
    runs = [(pair, True, rows[0][2])] + [(view, False, replace(config, draft_max=k))
                                         for _, view, config, _ in rows]
    warm = DecodeConfig(n_predict=4, sampling=rows[0][2].sampling)
    timed_run(pair, warm, encoded[0], plain=True, tally=Tally())
    plain, *tallies = alternating_pairs(runs, encoded, rounds)
    t_target = plain.stats.plain_step_time or 0.0
    report = []
    for (name, _, _, choice), tally in zip(rows, tallies, strict=True):
        stats = tally.stats
        ratios = pair_ratios(plain, tally)
        report.append({
            "draft": name, "k": k,
            "skip": choice.skip if choice else "", "kept": choice.kept if choice else None,
            "head_tokens": choice.head_tokens if choice else None,
            "head_coverage": choice.head_coverage if choice else None,
            "n_layers": choice.n_layers if choice else None,
            "agreement": choice.agreement if choice else None,
            "estimated_cost": choice.cost if choice else None,
            "measured_cost": choice.measured_cost if choice else None,
            "run_cost": stats.draft_time_per_token / t_target if t_target else None,
            # a drafted token after each draft's first (whose pass also reads what the target
            # wrote: the token it chose, and the last drafted one when every one passed)
            "run_cost_later": (stats.later_draft_time_per_token / t_target
                               if t_target and stats.later_draft_time_per_token else None),
            "acceptance": stats.acceptance, "alpha": stats.alpha,
            "tokens_per_pass": stats.tokens_per_pass,
            "speed_x_plain": statistics.median(ratios) if ratios else None,
            "ratio_spread": [min(ratios), max(ratios)] if ratios else None,
            "identical": tally.outputs == plain.outputs,
            "search_seconds": choice.seconds if choice else None,
            "file_mb": choice.file_bytes / 1e6 if choice and choice.file_bytes else None,
        })
    return report


def print_table(report: list[dict[str, Any]]) -> None:
    print(f"{'draft':<22} {'k':>2} {'skip':<24} {'kept':>5} {'head':>6} {'cover':>6} "
          f"{'agree':>6} {'est c':>6} "
          f"{'meas c':>6} {'run c':>6} {'c 2nd+':>6} {'accept':>6} {'alpha':>6} {'tok/pass':>8} "
          f"{'x plain':>8} {'same':>5}")
    def num(value: Any, width: int = 6) -> str:
        return f"{value:>{width}.2f}" if isinstance(value, float) else f"{'-':>{width}}"

    for r in report:
        kept = f"{r['kept']}/{r['n_layers']}" if r["kept"] is not None else "-"
        head = f"{r['head_tokens']:,}" if r["head_tokens"] else "whole"
        print(f"{r['draft']:<22} {r['k']:>2} {r['skip'] or '-':<24} {kept:>5} {head:>6} "
              f"{num(r['head_coverage'])} "
              f"{num(r['agreement'])} {num(r['estimated_cost'])} {num(r['measured_cost'])} "
              f"{num(r['run_cost'])} {num(r['run_cost_later'])} "
              f"{num(r['acceptance'])} {num(r['alpha'])} "
              f"{num(r['tokens_per_pass'], 8)} {num(r['speed_x_plain'], 8)} "
              f"{r['identical']!s:>5}")


def _list(text: str) -> list[str]:
    return [part for part in text.split(",") if part.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("llamacpp", "torch"), default="llamacpp")
    parser.add_argument("--costs", default="0.7,0.6", help="search cost targets")
    parser.add_argument("--first", default="17,24", help="first-N-layers drafts (N)")
    parser.add_argument("--skip", action="append", default=[], help="a skip set by hand")
    parser.add_argument("--heads", default="0,32768",
                        help="llama.cpp: the self-drafts' head sizes, each set timed with each "
                             "(0: the whole head)")
    parser.add_argument("-n", type=int, default=32, help="tokens per run")
    parser.add_argument("-k", default="1,3", help="draft lengths (one interleaved run each)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--exact-kernels", action="store_true")
    parser.add_argument("--json", help="write the rows here too")
    args = parser.parse_args()
    target, draft = demo_paths()
    spec = ModelSpec(target=str(target), draft=str(draft), backend=args.backend,
                     device="cpu", n_gpu_layers=0, batch_invariant=args.exact_kernels)
    log(f"loading the demo pair on {args.backend}")
    pair = load_pair(spec, progress=log)
    try:
        encoded = [encode_prompt(pair.target, p, False) for p in CODE_PROMPTS]
        base = DecodeConfig(n_predict=args.n, sampling=SamplingParams(temperature=0.0))
        rows = candidates(pair, base, encoded, args)
        report = []
        for k in _list(args.k):
            log(f"timing plain and {len(rows)} drafts interleaved, k={k}, {args.rounds} "
                "rounds")
            report += measure(pair, rows, encoded, int(k), args.rounds)
    finally:
        pair.close()
    print(f"backend {args.backend}, {len(encoded)} code prompts, {args.n} tokens, greedy; "
          "speeds are ratios to the plain runs interleaved with them")
    print_table(report)
    if args.json:
        Path(args.json).write_text(json.dumps({"backend": args.backend, "rows": report},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
