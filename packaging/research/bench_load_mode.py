"""Plain decoding on weights memory-mapped from the GGUF (llama.cpp's default) against weights
read into the process's own memory, beside llama-bench tg with its default load mode and with
`-lm none`, at the same depth and threads, side by side in one run (a benchmark, not a test).

Each round runs, in an order rotated round by round: DraftLens plain decoding of a prompt of
`--depth` tokens on a model loaded with mmap, the same on a second copy loaded as the app loads
it by default (read into memory where it fits: backends.llamacpp.weights_read_into_memory), and
llama-bench -d DEPTH -n N with `-lm auto` (mmap on a CPU) and `-lm none`. A side's rate is its
tokens over its decoding seconds (prefill left out), summed over rounds.

  .venv/bin/python packaging/research/bench_load_mode.py [-m TARGET.gguf] [--threads 2]
      [--depth 256] [-n 64] [--rounds 6]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_threadpool import draftlens_plain, llama_bench  # noqa: E402

from app.models.demo import demo_paths  # noqa: E402
from app.models.loading import ModelSpec, load_model  # noqa: E402
from backends.llamacpp import LlamaCppModel  # noqa: E402


def log(message: str) -> None:
    print(f"[bench-load-mode] {message}", file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--target", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--depth", type=int, default=256)
    parser.add_argument("-n", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--tools", default=str(Path.home() / ".cache/draftlens-ci/llama-tools"))
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    target = args.target or str(demo_paths()[0])
    tools = next((f for f in (Path(args.tools) / "bin", Path(args.tools) / "build/bin")
                  if (f / "llama-bench").is_file()), None)
    # "read" is the app's default load (load_model), which reads the weights where they fit
    default = load_model(target, ModelSpec(target=target, backend="llamacpp",
                                           n_threads=args.threads))
    assert isinstance(default, LlamaCppModel)
    if default.mmap:
        log("the app's default maps this model here (too little free memory): no 'read' side")
        return 1
    models = {"mmap": LlamaCppModel(target, n_threads=args.threads, batch_invariant=False,
                                    mmap=True),
              "read": default}
    text = "def f(x):\n    return x + 1\n" * (args.depth // 8 + 1)
    prompt = models["mmap"].tokenize(text)[: args.depth]
    for model in models.values():
        draftlens_plain(model, prompt, 8)  # first decodes allocate buffers
    sides = ["mmap", "read"] + (["llama-bench", "llama-bench -lm none"] if tools else [])
    totals = {side: [0, 0.0] for side in sides}
    rounds: list[dict[str, float]] = []
    try:
        for r in range(args.rounds):
            order = sides[r % len(sides):] + sides[: r % len(sides)]
            rates: dict[str, float] = {}
            for side in order:
                if side.startswith("llama-bench"):
                    assert tools is not None
                    mode = "none" if side.endswith("none") else "auto"
                    n, seconds = llama_bench(tools, target, args.threads, args.depth, args.n,
                                             extra=("-lm", mode))
                else:
                    n, seconds = draftlens_plain(models[side], prompt, args.n)
                totals[side][0] += n
                totals[side][1] += seconds
                rates[side] = n / seconds
            rounds.append(rates)
            log(f"round {r + 1}: " + ", ".join(f"{s} {rates[s]:.2f}" for s in sides) + " tok/s")
    finally:
        for model in models.values():
            model.close()
    rate = {side: n / s for side, (n, s) in totals.items()}
    print(f"threads {args.threads}, depth {len(prompt)}, {args.n} tokens, {args.rounds} rounds")
    for side in sides:
        print(f"  {side:22} {rate[side]:6.2f} tok/s")

    def ratio(a: str, b: str) -> str:
        per = [x[a] / x[b] for x in rounds]
        return (f"  {a} / {b}: {rate[a] / rate[b]:.3f} (per round {min(per):.3f}-{max(per):.3f},"
                f" median {statistics.median(per):.3f})")

    print(ratio("read", "mmap"))
    if tools:
        print(ratio("llama-bench -lm none", "llama-bench"))
        for side in ("mmap", "read"):
            print(ratio(side, "llama-bench"))
        print(ratio("read", "llama-bench -lm none"))
    if args.json:
        Path(args.json).write_text(json.dumps({"rates": rate, "rounds": rounds}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
