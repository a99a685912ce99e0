"""DraftLens at two commits, side by side: the same `draftlens bench` rows, interleaved.

Each row runs `draftlens bench ... --json` from the `before` checkout, then from the `after`
one (the order swaps each round, as the machine is shared and noisy), and the table gives each
side's speculative tok/s, its ratio to the plain run beside it, the ratio after / before, and
the engine's own time per step (what is neither a draft nor a target pass: the controller,
the judge, bookkeeping). Plain decoding's row pools every bench call's plain runs.

    git worktree add /tmp/before 7ab8b5c
    .venv/bin/python packaging/research/bench_before_after.py --before /tmp/before --json out.json

The prompts come from this checkout's suites, written to files both commits read
(`bench --prompt-file`); the demo pair is used unless -m / -md say otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.cli.bench_tasks import (  # noqa: E402
    CODE_PROMPTS,
    EDIT_PROMPTS,
    REPETITIVE_PROMPTS,
    TEXT_PROMPTS,
)
from app.models.demo import demo_paths  # noqa: E402

RENAMES = [text for name, text in EDIT_PROMPTS.items() if name.startswith("rename")]
OTHER_EDITS = [text for name, text in EDIT_PROMPTS.items() if not name.startswith("rename")]
DRAFTLESS = ["--ngram", "--adaptive", "--draft-max", "32", "--chat"]
# the memory file is emptied by each call, so every call starts its memory from nothing
SUFFIX_MEMORY = ["--suffix", "--adaptive", "--draft-max", "32", "--chat",
                 "--draft-memory", "{memory}", "--forget-draft-memory"]

# (row, prompts, needs the draft model, bench flags)
ROWS = [
    ("draft model, k = 2", CODE_PROMPTS, True, ["--draft-max", "2"]),
    ("draft model, k = 4", CODE_PROMPTS, True, ["--draft-max", "4"]),
    ("draft model, adaptive", CODE_PROMPTS, True, ["--adaptive", "--draft-max", "8"]),
    ("n-gram, rename edits", RENAMES, False, DRAFTLESS),
    ("n-gram, other edits", OTHER_EDITS, False, DRAFTLESS),
    ("n-gram, free text", TEXT_PROMPTS, False, DRAFTLESS),
    ("suffix + memory, repetitive session", list(REPETITIVE_PROMPTS.values()), False,
     SUFFIX_MEMORY),
    # as bench_vs_llamacpp.py runs its prose and fresh code (draft_max 64, code unchatted)
    ("n-gram, prose, draft_max 64", TEXT_PROMPTS, False,
     ["--ngram", "--adaptive", "--draft-max", "64", "--chat"]),
    ("n-gram, fresh code, draft_max 64", CODE_PROMPTS, False,
     ["--ngram", "--adaptive", "--draft-max", "64"]),
]


def log(message: str) -> None:
    print(f"[before-after] {message}", file=sys.stderr, flush=True)


def bench(checkout: Path, args: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(checkout), HF_HUB_OFFLINE="1")
    env.pop("DRAFTLENS_IN_PROCESS", None)
    out = subprocess.run([sys.executable, "-m", "app.cli.main", "bench", *args, "--json"],
                         cwd=checkout, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"bench in {checkout} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def ratio_cell(values: list[float]) -> str:
    return f"{statistics.fmean(values):.2f}×"


def before_pass_ms(runs: list[dict]) -> str:
    """Milliseconds per step before the target pass (the drafter's outlook, the controller's
    choice, any draft), over every step; from the drafting steps' figure where a commit's
    bench report lacks it, "–" where that is 0 for want of a drafting step."""
    values = [r.get("t_before_pass_per_step",
                    r["t_draft_per_step"] * r["speculative_step_share"] or None) for r in runs]
    return "–" if None in values else f"{1000 * statistics.fmean(values):.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="checkout of the old commit")
    parser.add_argument("--after", type=Path, default=ROOT, help="checkout of the new commit")
    parser.add_argument("-m", dest="target", help="target model (default: the demo target)")
    parser.add_argument("-md", dest="draft", help="draft model (default: the demo draft)")
    parser.add_argument("-n", type=int, default=128, help="tokens per run")
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="before/after alternations")
    parser.add_argument("--rows", help="only rows whose name contains one of these, by commas")
    parser.add_argument("--json", type=Path, help="write every bench report here")
    parser.add_argument("--sides", default="before,after",
                        help="run only these sides (after: this checkout's greedy identity)")
    parser.add_argument("--exact-kernels", action="store_true",
                        help="both sides with the batch-invariant kernels (greedy identity)")
    parser.add_argument("--table-from", type=Path, help="print the table of a --json file")
    args = parser.parse_args()
    if args.table_from:
        print(table(json.loads(args.table_from.read_text())))
        return 0
    if args.before is None:
        parser.error("--before CHECKOUT is needed (or --table-from FILE)")
    demo_target, demo_draft = demo_paths()
    target, draft = args.target or str(demo_target), args.draft or str(demo_draft)
    sides = {side: path.resolve() for side, path in
             (("before", args.before), ("after", args.after)) if side in args.sides.split(",")}
    rows = [r for r in ROWS if not args.rows or any(w in r[0] for w in args.rows.split(","))]
    results: dict[str, dict[str, list[dict]]] = {row[0]: {s: [] for s in sides} for row in rows}
    with tempfile.TemporaryDirectory(prefix="draftlens-before-after-") as folder:
        for index, (name, prompts, with_draft, flags) in enumerate(rows):
            prompt_file = Path(folder) / f"row-{index}.jsonl"
            prompt_file.write_text("".join(json.dumps(p) + "\n" for p in prompts))
            memory = Path(folder) / f"row-{index}.memory"
            common = ["-m", target, *(["-md", draft] if with_draft else []),
                      *[flag.format(memory=memory) for flag in flags],
                      *(["--exact-kernels"] if args.exact_kernels else []),
                      "-n", str(args.n), "-t", str(args.threads),
                      "--prompt-file", str(prompt_file)]
            for round_ in range(args.rounds):
                order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
                for side in order:
                    report = bench(sides[side], common)
                    results[name][side].append(report)
                    log(f"{name} [{side}] {report['spec_tok_s']:.1f} tok/s, "
                        f"{report['speedup']:.2f}× plain, identical {report['identical']}, "
                        f"engine {1000 * report['t_overhead_per_step']:.2f} ms/step, "
                        f"before each pass {before_pass_ms([report])} ms/step")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print(table(results))
    return 0


def greedy_cell(runs: list[dict]) -> str:
    """Identical to plain, or how many runs parted and whether every parting was a near-tie."""
    parted = [r for r in runs if not r["identical"]]
    if not parted:
        return "identical"
    ties = all(d["near_tie"] for r in parted for d in r.get("divergences", [])) and all(
        r.get("divergences") for r in parted)
    return f"{len(parted)} of {len(runs)} runs part{' at near-ties' if ties else ''}"


def one_side_table(results: dict[str, dict[str, list[dict]]], side: str) -> str:
    lines = [f"| row | {side}: tok/s (× its plain) | engine ms/step | greedy vs plain |",
             "|---|---|---|---|"]
    for name, sides in results.items():
        runs = sides[side]
        lines.append(f"| {name} | {statistics.fmean(r['spec_tok_s'] for r in runs):.1f} "
                     f"({ratio_cell([r['speedup'] for r in runs])}) "
                     f"| {1000 * statistics.fmean(r['t_overhead_per_step'] for r in runs):.2f} "
                     f"| {greedy_cell(runs)} |")
    return "\n".join(lines)


def table(results: dict[str, dict[str, list[dict]]]) -> str:
    present = {side for row in results.values() for side, runs in row.items() if runs}
    if len(present) == 1:
        return one_side_table(results, present.pop())
    lines = ["| row | before: tok/s (× its plain) | after: tok/s (× its plain) | after / before "
             "| (× plain) after / before | engine ms/step, before → after "
             "| before each pass, ms/step, before → after | greedy vs plain (before; after) |",
             "|---|---|---|---|---|---|---|---|"]
    plain = {s: [r["plain_tok_s"] for row in results.values() for r in row[s]]
             for s in ("before", "after")}
    old, new = statistics.fmean(plain["before"]), statistics.fmean(plain["after"])
    lines.append(f"| plain decoding (every bench call's plain runs) | {old:.1f} | {new:.1f} "
                 f"| {new / old:.2f}× | | | | |")
    for name, sides in results.items():
        cells = []
        for side in ("before", "after"):
            runs = sides[side]
            cells.append(f"{statistics.fmean(r['spec_tok_s'] for r in runs):.1f} "
                         f"({ratio_cell([r['speedup'] for r in runs])})")
        before = statistics.fmean(r["spec_tok_s"] for r in sides["before"])
        after = statistics.fmean(r["spec_tok_s"] for r in sides["after"])
        overhead = [1000 * statistics.fmean(r["t_overhead_per_step"] for r in sides[s])
                    for s in ("before", "after")]
        greedy = [greedy_cell(sides[s]) for s in ("before", "after")]
        speedups = [statistics.fmean(r["speedup"] for r in sides[s]) for s in ("before", "after")]
        lines.append(f"| {name} | {cells[0]} | {cells[1]} | {after / before:.2f}× "
                     f"| {speedups[1] / speedups[0]:.2f}× "
                     f"| {overhead[0]:.2f} → {overhead[1]:.2f} "
                     f"| {before_pass_ms(sides['before'])} → "
                     f"{before_pass_ms(sides['after'])} | {greedy[0]}; {greedy[1]} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
