"""What a verify pass pays for its logits: a pass of n tokens through DraftLens's llama.cpp
backend with logits for every row (as verification needs them) against the same pass with
logits for its last row only (as llama-bench's pp measures), beside llama-bench pp of the same
n, interleaved round by round (a benchmark, not a test).

Each row's logits run the model's output matrix (vocabulary x embedding) once more; on a CPU
that is compute the single-token step does not pay for, so this says how much of the verify
curve's slope is the logits and how much the layers.

  .venv/bin/python packaging/research/bench_logit_rows.py [-m TARGET] [--sizes 1,2,4,8,16,64]
      [--depth 256] [--rounds 4] [--threads 2]

llama-bench comes from DRAFTLENS_LLAMA_TOOLS (packaging/build_llama_tools.sh); without it that
column is left out.
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.models.demo import demo_paths  # noqa: E402
from backends.llamacpp import LlamaCppModel  # noqa: E402


def log(message: str) -> None:
    print(f"[bench-logit-rows] {message}", file=sys.stderr, flush=True)


def pass_seconds(model: LlamaCppModel, context: list[int], n: int, rows: int) -> float:
    """One pass of n tokens after `context` (already in the cache), logits for its last
    `rows` rows; the cache is cut back to the context afterwards."""
    start = time.perf_counter()
    model.extend(context[:n], rows)
    seconds = time.perf_counter() - start
    model.truncate(len(context))
    return seconds


def llama_bench_pp(tools: Path, target: str, n: int, depth: int, threads: int) -> float:
    """Seconds of llama-bench's pp of n tokens at `depth` (one repetition)."""
    out = subprocess.run(
        [str(tools / "llama-bench"), "-m", target, "-t", str(threads), "-p", str(n), "-n", "0",
         "-d", str(depth), "-r", "1", "-o", "json"],
        capture_output=True, text=True, check=True).stdout
    row = next(r for r in json.loads(out) if r.get("n_prompt", 0) == n)
    return float(row["avg_ns"]) / 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-m", "--model", default=str(demo_paths()[0]))
    parser.add_argument("--sizes", default="1,2,4,8,16,64")
    parser.add_argument("--depth", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    tools_dir = os.environ.get("DRAFTLENS_LLAMA_TOOLS")
    tools = Path(tools_dir) / "bin" if tools_dir else None
    if tools is not None and not (tools / "llama-bench").exists():
        log(f"no llama-bench in {tools}: its column is left out")
        tools = None

    model = LlamaCppModel(args.model, n_threads=args.threads, batch_invariant=False)
    filler = model.tokenize("def main():\n    total = 0\n    for i in range(10):\n")
    context = (filler * (args.depth // len(filler) + 1))[: args.depth]
    model.extend(context, 1)
    if max(sizes) > len(context):
        parser.error(f"--depth must be at least the largest size ({max(sizes)})")

    times: dict[tuple[int, str], list[float]] = {}
    for round_index in range(args.rounds):
        for n in sizes:
            sides = ["every row", "last row"] + (["llama-bench pp"] if tools else [])
            if round_index % 2:
                sides.reverse()
            for side in sides:
                if side == "llama-bench pp":
                    assert tools is not None
                    seconds = llama_bench_pp(tools, args.model, n, args.depth, args.threads)
                else:
                    seconds = pass_seconds(model, context, n, n if side == "every row" else 1)
                times.setdefault((n, side), []).append(seconds)
        log(f"round {round_index + 1} of {args.rounds} done")

    print(f"{Path(args.model).name}, {args.threads} threads, depth {args.depth}, "
          f"median of {args.rounds} rounds (ms per pass)")
    print("| pass of n tokens | logits for every row | logits for the last row | "
          "every row / last row | llama-bench pp |")
    print("|---|---|---|---|---|")
    for n in sizes:
        every = statistics.median(times[(n, "every row")]) * 1000
        last = statistics.median(times[(n, "last row")]) * 1000
        bench = times.get((n, "llama-bench pp"))
        bench_cell = f"{statistics.median(bench) * 1000:.1f}" if bench else "–"
        print(f"| {n} | {every:.1f} | {last:.1f} | {every / last:.2f}× | {bench_cell} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
