"""Suffix decoding's cost per step, as the paper states it (SuffixDecoding: 3.7 us to
speculate, 2.6 us to update per token, in C++): the time to index one more token (both
trees) and to speculate (the outlook and a chain draft, as a session asks each step), on
text that repeats (phrases drawn from a small set), on fresh text (no match), and with a
memory of earlier runs of either kind. Times are the process's CPU time (not wall time), so
they hold on a machine shared with other work.

    PYTHONPATH=. python packaging/research/suffix_speed.py [--memory-tokens 10000] [--steps 2000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.engine.decode_config import SuffixOptions  # noqa: E402
from app.engine.drafters import Budget  # noqa: E402
from app.engine.drafters.suffix import (  # noqa: E402
    RememberedRun,
    SuffixDrafter,
    memory_buffer,
    tree_budget,
)
from app.engine.drafters.suffix.index import SuffixCache  # noqa: E402
from app.engine.sampling import SamplingParams  # noqa: E402


def repetitive(rng: np.random.Generator, n: int) -> list[int]:
    phrases = [rng.integers(0, 30000, size=int(rng.integers(5, 40))).tolist()
               for _ in range(60)]
    text: list[int] = []
    while len(text) < n:
        text.extend(phrases[int(rng.integers(0, len(phrases)))])
    return text[:n]


def fresh(rng: np.random.Generator, n: int) -> list[int]:
    return rng.integers(0, 150000, size=n).tolist()


def measure(memory_tokens: list[int], prompt: list[int], output: list[int],
            accepted_per_step: int) -> dict[str, float]:
    """Microseconds: building the memory (per token), the index's update (per token, both
    trees) and speculate (per step, a chain up to the trees' depth), and the drafter's whole
    step (per step: the index, the edit-aware prompt lookup, the outlook and a draft)."""
    start = time.process_time()
    memory = memory_buffer([RememberedRun(1, memory_tokens)])
    build = (time.process_time() - start) / max(1, len(memory_tokens))
    options = SuffixOptions()
    cache = SuffixCache(memory, options.max_depth)
    cache.start_request(prompt)
    update = speculate = 0.0
    steps = 0
    for at in range(0, len(output), accepted_per_step):
        t0 = time.process_time()
        cache.add_active_response(output[at : at + accepted_per_step])
        t1 = time.process_time()
        cache.speculate(tree_budget(options, options.max_depth))
        t2 = time.process_time()
        update += t1 - t0
        speculate += t2 - t1
        steps += 1
    drafter = SuffixDrafter(memory)
    drafter.begin(prompt)
    rng = np.random.default_rng(0)
    context = list(prompt)
    start = time.process_time()
    for at in range(0, len(output), accepted_per_step):
        context.extend(output[at : at + accepted_per_step])
        drafter.accept(context, None)
        drafter.outlook(context)
        drafter.propose(context, Budget(16), SamplingParams(), rng)
    step = (time.process_time() - start) / steps
    return {"build": build * 1e6, "update": update / len(output) * 1e6,
            "speculate": speculate / steps * 1e6, "step": step * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory-tokens", type=int, default=10000)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--accepted", type=int, default=1,
                        help="tokens the target keeps per step (1: the worst case)")
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    print(f"{'workload':30} {'memory build':>13} {'update/token':>13} {'speculate':>11} "
          f"{'drafter step':>13}   (microseconds; build and update per token)")
    for name, text in (("repetitive (phrases recur)", repetitive),
                       ("fresh (random ids)", fresh)):
        memory = text(rng, args.memory_tokens)
        run = text(rng, 2000 + args.steps)
        t = measure(memory, run[:2000], run[2000:], args.accepted)
        print(f"{name:30} {t['build']:13.2f} {t['update']:13.2f} {t['speculate']:11.2f} "
              f"{t['step']:13.2f}")


if __name__ == "__main__":
    main()
