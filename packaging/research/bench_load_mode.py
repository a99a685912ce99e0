"""Plain decoding on weights memory-mapped from the GGUF (llama.cpp's default) against weights
read into the process's own memory, beside llama-bench tg with its default load mode and with
`-lm none`, at the same depth and threads, side by side in one run (a benchmark, not a test).

Each round runs, in an order rotated round by round: DraftLens plain decoding of a prompt of
`--depth` tokens on a model loaded with mmap, the same on a second copy loaded as the app loads
it by default (read into memory where it fits: backends.llamacpp_load.weights_read_into_memory), and
llama-bench -d DEPTH -n N with `-lm auto` (mmap on a CPU) and `-lm none`. A side's rate is its
tokens over its decoding seconds (prefill left out), summed over rounds. `--fresh-process` adds
two sides that load the model as the app does in a new process every round, as llama-bench
starts afresh every round: one started as the app starts its engine processes, glibc's
malloc asking for transparent huge pages (app.allocator.huge_pages_env), one without.
This process itself runs as it was started.

  .venv/bin/python packaging/research/bench_load_mode.py [-m TARGET.gguf] [--threads 2]
      [--depth 256] [-n 64] [--rounds 6] [--fresh-process]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_threadpool import (  # noqa: E402
    bench_arguments,
    code_prompt,
    draftlens_plain,
    interleave,
    llama_bench,
    llama_tools,
)

from app.allocator import huge_pages_env  # noqa: E402
from app.models.demo import demo_paths  # noqa: E402
from app.models.loading import ModelSpec, load_model  # noqa: E402
from backends.llamacpp import LlamaCppModel  # noqa: E402


def log(message: str) -> None:
    print(f"[bench-load-mode] {message}", file=sys.stderr, flush=True)


def app_default(target: str, threads: int) -> LlamaCppModel:
    """The model as the app loads it by default (load_model): read where it fits."""
    model = load_model(target, ModelSpec(target=target, backend="llamacpp", n_threads=threads))
    assert isinstance(model, LlamaCppModel)
    return model


def fresh_process(target: str, threads: int, depth: int, n: int,
                  huge_pages: bool) -> tuple[int, float]:
    """Plain decoding in a new process that loads the model as the app does (main's child),
    on huge pages as the app's engine processes start, or without."""
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    if huge_pages:
        env.update(huge_pages_env(env))
    out = subprocess.run([sys.executable, __file__, "--child", "-m", target, "--threads",
                          str(threads), "--depth", str(depth), "-n", str(n)],
                         capture_output=True, text=True, check=True, env=env).stdout
    tokens, seconds = json.loads(out.splitlines()[-1])
    return int(tokens), float(seconds)


def main() -> int:
    parser = bench_arguments(__doc__.splitlines()[0])
    parser.add_argument("--fresh-process", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    target = args.target or str(demo_paths()[0])
    if args.child:
        model = app_default(target, args.threads)
        prompt = code_prompt(model, args.depth)
        draftlens_plain(model, prompt, 8)  # as the long-lived sides' first decodes
        print(json.dumps(draftlens_plain(model, prompt, args.n)))
        model.close()
        return 0
    tools = llama_tools(args.tools)
    # "read" is the app's default load (load_model), which reads the weights where they fit
    default = app_default(target, args.threads)
    if default.mmap:
        log("the app's default maps this model here (too little free memory): no 'read' side")
        return 1
    models = {"mmap": LlamaCppModel(target, n_threads=args.threads, batch_invariant=False,
                                    mmap=True),
              "read": default}
    prompt = code_prompt(models["mmap"], args.depth)
    for model in models.values():
        draftlens_plain(model, prompt, 8)  # first decodes allocate buffers
    fresh = ["fresh process", "fresh process, huge pages"]
    sides = ["mmap", "read"] + (fresh if args.fresh_process else []) + (
        ["llama-bench", "llama-bench -lm none"] if tools else [])

    def measure(side: str) -> tuple[int, float]:
        if side in fresh:
            return fresh_process(target, args.threads, args.depth, args.n,
                                 huge_pages=side.endswith("huge pages"))
        if side.startswith("llama-bench"):
            assert tools is not None
            mode = "none" if side.endswith("none") else "auto"
            return llama_bench(tools, target, args.threads, args.depth, args.n,
                               extra=("-lm", mode))
        return draftlens_plain(models[side], prompt, args.n)

    try:
        rate, rounds = interleave(sides, measure, args.rounds, log)
    finally:
        for model in models.values():
            model.close()
    print(f"threads {args.threads}, depth {len(prompt)}, {args.n} tokens, {args.rounds} rounds")
    for side in sides:
        print(f"  {side:26} {rate[side]:6.2f} tok/s")

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
        if args.fresh_process:
            for side in fresh:
                print(ratio(side, "llama-bench -lm none"))
    if args.fresh_process:
        print(ratio("fresh process, huge pages", "fresh process"))
    if args.json:
        Path(args.json).write_text(json.dumps({"rates": rate, "rounds": rounds}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
