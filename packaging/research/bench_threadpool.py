"""Plain decoding with and without a polling threadpool attached to the context (as
llama-bench attaches one: backends.llamacpp_threadpool), against llama-bench tg at the same
depth and threads, side by side in one run (a benchmark, not a test).

Each round runs, in an order rotated round by round: DraftLens plain decoding of a prompt of
`--depth` tokens with the threadpool, the same without it (one loaded model, the pool
attached and detached between runs), and llama-bench -d DEPTH -n N. A side's rate is its
tokens over its decoding seconds (prefill left out), summed over rounds.

  .venv/bin/python packaging/research/bench_threadpool.py [-m TARGET.gguf] [--threads 2]
      [--depth 256] [-n 64] [--rounds 6] [--poll 50]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.engine.decode_config import DecodeConfig  # noqa: E402
from app.engine.sampling import SamplingParams  # noqa: E402
from app.engine.session import Session  # noqa: E402
from app.models.demo import demo_paths  # noqa: E402
from backends.llamacpp import LlamaCppModel  # noqa: E402


def log(message: str) -> None:
    print(f"[bench-threadpool] {message}", file=sys.stderr, flush=True)


def draftlens_plain(model: LlamaCppModel, prompt: list[int], n: int) -> tuple[int, float]:
    config = DecodeConfig(n_predict=n, sampling=SamplingParams(temperature=0.0),
                          stop_at_eos=False)
    session = Session(model, None, config)
    start = time.perf_counter()
    for _ in session.steps(prompt):
        pass
    return len(session.output_ids), time.perf_counter() - start - session.prefill_seconds


def llama_bench(tools: Path, model: str, threads: int, depth: int, n: int,
                env: dict[str, str] | None = None, extra: tuple[str, ...] = ()
                ) -> tuple[int, float]:
    """llama-bench tg from the `tools` folder: n tokens after `depth`, and their seconds
    (`env`: variables added to this process's environment for it; `extra`: more options)."""
    out = subprocess.run(
        [str(tools / "llama-bench"), "-m", model, "-t", str(threads), "-p", "0", "-n", str(n),
         "-d", str(depth), "-r", "1", "-o", "json", *extra],
        env=None if env is None else {**os.environ, **env},
        capture_output=True, text=True, check=True).stdout
    row = next(r for r in json.loads(out) if r.get("n_gen", 0) > 0)
    return n, n / float(row["avg_ts"])


def bench_arguments(description: str) -> argparse.ArgumentParser:
    """The flags the plain-decoding benchmarks beside llama-bench share."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("-m", "--target", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--depth", type=int, default=256)
    parser.add_argument("-n", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--tools", default=str(Path.home() / ".cache/draftlens-ci/llama-tools"))
    parser.add_argument("--json", default="")
    return parser


def llama_tools(folder: str) -> Path | None:
    """The folder of the built llama-bench under `folder`, or None."""
    return next((f for f in (Path(folder) / "bin", Path(folder) / "build/bin")
                 if (f / "llama-bench").is_file()), None)


def code_prompt(model: LlamaCppModel, depth: int) -> list[int]:
    """`depth` tokens of repeated code, the context plain decoding is timed after."""
    return model.tokenize("def f(x):\n    return x + 1\n" * (depth // 8 + 1))[:depth]


def interleave(sides: list[str], measure: Callable[[str], tuple[int, float]], rounds: int,
               say: Callable[[str], None] = log
               ) -> tuple[dict[str, float], list[dict[str, float]]]:
    """Each round measures every side once, the order rotated round by round; a side's rate
    is its tokens over its seconds summed over rounds. Returns the rates and each round's."""
    totals = {side: [0, 0.0] for side in sides}
    per_round: list[dict[str, float]] = []
    for r in range(rounds):
        rates: dict[str, float] = {}
        for side in sides[r % len(sides):] + sides[: r % len(sides)]:
            n, seconds = measure(side)
            totals[side][0] += n
            totals[side][1] += seconds
            rates[side] = n / seconds
        per_round.append(rates)
        say(f"round {r + 1}: " + ", ".join(f"{s} {rates[s]:.2f}" for s in sides) + " tok/s")
    return {side: n / s for side, (n, s) in totals.items()}, per_round


def main() -> int:
    args = bench_arguments(__doc__.splitlines()[0]).parse_args()
    target = args.target or str(demo_paths()[0])
    tools = llama_tools(args.tools)
    model = LlamaCppModel(target, n_threads=args.threads, batch_invariant=False)
    prompt = code_prompt(model, args.depth)
    draftlens_plain(model, prompt, 8)  # first decodes allocate buffers
    sides = ["threadpool", "no threadpool"] + (["llama-bench"] if tools else [])

    def measure(side: str) -> tuple[int, float]:
        if side == "llama-bench":
            assert tools is not None
            return llama_bench(tools, target, args.threads, args.depth, args.n)
        model.use_threadpool(side == "threadpool")
        return draftlens_plain(model, prompt, args.n)

    try:
        rate, rounds = interleave(sides, measure, args.rounds)
    finally:
        model.close()
    pool_ratio = [x["threadpool"] / x["no threadpool"] for x in rounds]
    print(f"threads {args.threads}, depth {len(prompt)}, {args.n} tokens, {args.rounds} rounds")
    for side in sides:
        print(f"  {side:14} {rate[side]:6.2f} tok/s")
    print(f"  threadpool / none: {rate['threadpool'] / rate['no threadpool']:.3f} "
          f"(per round {min(pool_ratio):.3f}-{max(pool_ratio):.3f}, "
          f"median {statistics.median(pool_ratio):.3f})")
    if tools:
        for side in ("threadpool", "no threadpool"):
            per = [x[side] / x["llama-bench"] for x in rounds]
            print(f"  {side} / llama-bench: {rate[side] / rate['llama-bench']:.3f} "
                  f"(per round {min(per):.3f}-{max(per):.3f})")
    if args.json:
        Path(args.json).write_text(json.dumps({"rates": rate, "rounds": rounds}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
