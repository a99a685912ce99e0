"""Does a context ready for tree passes (n_seq_max = MAX_TREE_LEAVES, a unified KV cache) slow
plain decoding? DraftLens plain decoding on one made tree-ready (prepare_tree_passes, as a tree
run makes it) and on the one-sequence context a model starts with (as llama-bench's), beside
llama-bench tg at the same depth and threads; interleaved, the order rotated each round (a
benchmark, not a test).

  .venv/bin/python packaging/research/bench_seq_max.py [--rounds 6]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_threadpool import draftlens_plain, llama_bench  # noqa: E402

import backends.llamacpp as llamacpp  # noqa: E402
from app.models.demo import demo_paths  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--depth", type=int, default=256)
    parser.add_argument("-n", type=int, default=64)
    parser.add_argument("--tools", type=Path,
                        default=Path.home() / ".cache/draftlens-ci/llama-tools/bin")
    args = parser.parse_args()
    target = str(demo_paths()[0])
    tree_ready = llamacpp.LlamaCppModel(target, n_threads=args.threads, batch_invariant=False)
    tree_ready.prepare_tree_passes()
    one_sequence = llamacpp.LlamaCppModel(target, n_threads=args.threads, batch_invariant=False)
    models = {f"n_seq_max {llamacpp.MAX_TREE_LEAVES} (tree-ready)": tree_ready,
              "n_seq_max 1 (the default)": one_sequence}
    prompt = tree_ready.tokenize("def f(x):\n    return x + 1\n" * (args.depth // 8 + 1))
    prompt = prompt[: args.depth]
    for model in models.values():
        draftlens_plain(model, prompt, 8)  # first decodes allocate buffers
    sides = [*models, "llama-bench"]
    totals = {side: [0, 0.0] for side in sides}
    rounds: list[dict[str, float]] = []
    for r in range(args.rounds):
        rates = {}
        for side in sides[r % 3:] + sides[: r % 3]:
            n, seconds = (llama_bench(args.tools, target, args.threads, args.depth, args.n)
                          if side == "llama-bench"
                          else draftlens_plain(models[side], prompt, args.n))
            totals[side][0] += n
            totals[side][1] += seconds
            rates[side] = n / seconds
        rounds.append(rates)
        print(f"round {r + 1}: " + ", ".join(f"{s} {rates[s]:.2f}" for s in sides), flush=True)
    rate = {side: n / seconds for side, (n, seconds) in totals.items()}
    for side in sides:
        per = [x[side] / x["llama-bench"] for x in rounds]
        print(f"{side}: {rate[side]:.2f} tok/s, {rate[side] / rate['llama-bench']:.3f}× "
              f"llama-bench (rounds {min(per):.3f}–{max(per):.3f})")
    first, second = list(models)
    per = [x[second] / x[first] for x in rounds]
    print(f"{second} / {first}: {rate[second] / rate[first]:.3f} "
          f"(rounds {min(per):.3f}–{max(per):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
