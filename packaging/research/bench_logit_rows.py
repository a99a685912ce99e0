"""What a verify pass pays for its logits: a pass of n tokens through DraftLens's llama.cpp
backend with logits for every row (as verification needs them) against the same pass with
logits for its last row only (as llama-bench's pp measures), beside llama-bench pp of the same
n, interleaved round by round (a benchmark, not a test).

Each row's logits run the model's output matrix (vocabulary x embedding) once more; on a CPU
that is compute the single-token step does not pay for, so this says how much of the verify
curve's slope is the logits and how much the layers.

  .venv/bin/python packaging/research/bench_logit_rows.py [-m TARGET] [--sizes 1,2,4,8,16,64]
      [--depth 256] [--rounds 4] [--threads 2] [--tools DIR]

llama-bench comes from --tools (packaging/build_llama_tools.sh's folder, CI's by default);
without it that column is left out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_threadpool import code_prompt, interleave, llama_tools  # noqa: E402

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
    parser.add_argument("-m", "--target", default=None)
    parser.add_argument("--sizes", default="1,2,4,8,16,64")
    parser.add_argument("--depth", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tools", default=str(Path.home() / ".cache/draftlens-ci/llama-tools"))
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    if max(sizes) > args.depth:
        parser.error(f"--depth must be at least the largest size ({max(sizes)})")
    target = args.target or str(demo_paths()[0])
    tools = llama_tools(args.tools)
    if tools is None:
        log(f"no llama-bench under {args.tools}: its column is left out")

    model = LlamaCppModel(target, n_threads=args.threads, batch_invariant=False)
    context = code_prompt(model, args.depth)
    model.extend(context, 1)
    sides = ["every row", "last row"] + (["llama-bench pp"] if tools else [])
    ms: dict[tuple[int, str], float] = {}
    for n in sizes:
        def measure(side: str, n: int = n) -> tuple[int, float]:
            if side == "llama-bench pp":
                assert tools is not None
                return n, llama_bench_pp(tools, target, n, args.depth, args.threads)
            return n, pass_seconds(model, context, n, n if side == "every row" else 1)

        def say(line: str, n: int = n) -> None:
            log(f"n {n}: {line}")

        _, rounds = interleave(sides, measure, args.rounds, say)
        for side in sides:
            ms[(n, side)] = statistics.median(n / r[side] for r in rounds) * 1000
    model.close()

    print(f"{Path(target).name}, {args.threads} threads, depth {args.depth}, "
          f"median of {args.rounds} rounds (ms per pass)")
    print("| pass of n tokens | logits for every row | logits for the last row | "
          "every row / last row | llama-bench pp |")
    print("|---|---|---|---|---|")
    for n in sizes:
        every, last = ms[(n, "every row")], ms[(n, "last row")]
        bench = ms.get((n, "llama-bench pp"))
        bench_cell = f"{bench:.1f}" if bench is not None else "–"
        print(f"| {n} | {every:.1f} | {last:.1f} | {every / last:.2f}× | {bench_cell} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
