"""How far llama.cpp's multi-token passes stray from single-token steps on a real model (a
measurement, not a test): the figures behind the greedy near-tie verdict.

  .venv/bin/python packaging/research/measure_kernel_noise.py [-m TARGET.gguf] [--threads 2]
      [--positions 320] [--exact-kernels] [--json FILE]

Prints, per pass size, |Δ logit| of the reference's top two tokens and |Δ (top1 - top2)|
(max and 99th percentile) with a fresh cache (written by single steps) and with a cache
written by the passes themselves, and the bound app.analysis.kernel_noise derives from them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.analysis.kernel_noise import measure_kernel_noise  # noqa: E402
from app.models.demo import demo_paths  # noqa: E402
from app.models.loading import ModelSpec, load_pair  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--target", default=str(demo_paths()[0]))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--positions", type=int, default=320)
    parser.add_argument("--exact-kernels", action="store_true")
    parser.add_argument("--json", help="write the measurement here")
    args = parser.parse_args()
    pair = load_pair(ModelSpec(target=args.target, n_threads=args.threads,
                               batch_invariant=args.exact_kernels))
    try:
        start = time.perf_counter()
        noise = measure_kernel_noise(pair.target, args.positions)
        seconds = time.perf_counter() - start
    finally:
        pair.close()
    kernels = "exact" if args.exact_kernels else "fast"
    print(f"{Path(args.target).name}, {kernels} kernels, {args.threads} threads, "
          f"{noise.positions} positions, measured in {seconds:.0f} s")
    print(f"{'cache':>8} {'n':>3} {'|Δ top logit| max':>17} {'p99':>8} "
          f"{'|Δ gap| max':>12} {'p99':>8} {'argmax flips':>12}")
    for label, table in (("fresh", noise.fresh), ("carried", noise.carried)):
        for n, s in sorted(table.items()):
            print(f"{label:>8} {n:>3} {s.top_logit_max:17.4f} {s.top_logit_p99:8.4f} "
                  f"{s.gap_max:12.4f} {s.gap_p99:8.4f} {s.flips:>12}")
    quarters = " / ".join(f"{q:.4f}" for q in noise.carried_by_quarter)
    print(f"carried |Δ gap| max by quarter of the stretch: {quarters}")
    print(f"bound (largest |Δ gap| seen): {noise.bound:.4f}")
    if args.json:
        Path(args.json).write_text(json.dumps(noise.as_dict(), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
