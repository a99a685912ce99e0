"""The CPU threads llama.cpp decodes on in this process, and how its OpenMP threads wait.

ggml's CPU backend runs each graph on n threads that meet at a barrier after every operation
(hundreds per pass). A thread that waits there spins first, then sleeps: libgomp spins
GOMP_SPINCOUNT times (300,000 by default, about 10 ms here), ggml's own threadpool (builds
without OpenMP) only spins. While every core is taken, the thread a barrier waits for is off
its core while its partner spins away the time slice, so a pass that takes 26 ms on a quiet
machine took 0.8-9.5 s beside the test suite. Measured with packaging/research/bench_busy.py
(docs/benchmarks.md, "Decoding on busy cores"), the demo target, 2 cores, this build
(OpenMP):

  quiet (real-time class)   1 token   5 tokens  | busy (load 12-15)  1 token   5 tokens
  default spin, 2 threads   26 ms     96 ms     |                    1000 ms   3460 ms
  GOMP_SPINCOUNT=1000, 2    0.98x     1.00x     |                    216 ms    682 ms
  OMP_WAIT_POLICY=passive   1.43x     1.15x     |                    151 ms    612 ms
  1 thread                  1.57x     1.79x     |                    141 ms    607 ms

So every engine process starts with the short spin (engine_process_env), unless the user chose
a wait policy of their own: a process cannot change it once libgomp has loaded, and a process
started on a quiet machine that met the test suite later decoded 96 tokens of the demo pair in
53 s with libgomp's default against 5.9 s quiet (its 2-thread steps took 8.5 s each until the
engine moved to one thread, and again at each try of two), while on a quiet machine the short
spin costs 1-1.5% (the Xeon, 4 rounds side by side; 4% on the AMD EPYC): docs/benchmarks.md.
The engine also decodes on fewer threads while the machine is busy (app.engine.cores;
limit_threads here applies it to every context of the process).
A threadpool's polling level (backends.llamacpp_threadpool) changes nothing in an OpenMP
build: its threads are OpenMP's, and it polls only between graphs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

OMP_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
# spins at a barrier before a thread sleeps: on a busy machine a fifth of libgomp's default
# time per pass (above); 300 measured the same
SPIN_COUNT = 1000

_limit: int | None = None  # at most this many threads per pass in this process (None: any)


def engine_process_env(environ: Mapping[str, str]) -> dict[str, str]:
    """Variables to start a process that decodes with llama.cpp with (libgomp reads them once,
    when it loads): the short spin, unless the user chose a wait policy of their own."""
    if any(name in environ for name in OMP_VARIABLES):
        return {}
    return {"GOMP_SPINCOUNT": str(SPIN_COUNT)}


def limit_threads(n: int | None) -> None:
    """Every llama.cpp context of this process decodes its next passes on at most n threads
    (None: on the threads it was made with). They share the cores, so they follow together."""
    global _limit
    if n is not None and n < 1:
        raise ValueError(f"a thread limit of {n}: at least 1")
    _limit = n


def threads_for(configured: int) -> int:
    """The threads a context made with `configured` threads decodes on now."""
    return configured if _limit is None else max(1, min(configured, _limit))


def follow_limit(ll: Any, ctx: Any, configured: int, current: int) -> int:
    """Set the context's threads to threads_for(configured) where they differ from `current`
    (llama_set_n_threads: no reload); returns the threads it decodes on."""
    wanted = threads_for(configured)
    if wanted != current:
        ll.llama_set_n_threads(ctx, wanted, wanted)
    return wanted
