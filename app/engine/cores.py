"""Whether the passes get the cores they ask for, and how many threads decoding should use:
all of them on a quiet machine, fewer while other programs want the cores.

A pass's share of its cores is the CPU time the process spent during it over its wall time
times the threads it ran on. Measured with packaging/research/bench_busy.py on the demo target
(2 cores, docs/benchmarks.md "Decoding on busy cores"): quiet passes got 0.92-1.00 of their
cores, passes beside the test suite and three other agents' work 0.13-0.14 on 2 threads and
0.27-0.28 on one. There a pass on one thread took 141 ms, on two 216 ms (with the engine's
short OpenMP spin; 1000 ms with libgomp's default), while on a quiet machine one thread is
1.57x slower than two. So: fewer threads while busy, all of them again once a try says the
cores are free. The judgement is the pass's own, so it needs no load average, which counts
the engine's own threads and lags a minute behind.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable

from app.engine.protocol import LanguageModel, ThreadedModel
from app.engine.records import THREADS_BUSY, THREADS_TRY, ThreadSwitch

# passes that got less than this share of their cores ran on a busy machine (measured quiet
# 0.92-1.00, busy 0.13-0.28, above)
BUSY_SHARE = 0.75
# verify passes are summed into samples of at least this much wall time: a process clock may
# tick coarsely (every 15.6 ms on Windows), and a single short pass would read 0 or 2x its cores
SAMPLE_SECONDS = 0.1
# samples judged together, by the median of their shares: one pass can stall on its own (quiet,
# in the real-time class, one 83 ms pass among 25 ms ones got 0.36 of its cores)
WINDOW = 3
# seconds on fewer threads before all of them are tried again; doubled after each try that
# finds the machine still busy, up to LAST_TRY (a try costs WINDOW samples at 1.5x, above)
FIRST_TRY = 8.0
LAST_TRY = 64.0


class CoreShare:
    """Judges each verify pass's share of its cores; where the target decodes on CPU threads
    the engine may change (a ThreadedModel loaded without a thread count), it also chooses
    the threads: fewer while the passes get under BUSY_SHARE of their cores, all of them again
    after FIRST_TRY seconds (then doubling) if a try's passes get their share."""

    def __init__(self, target: LanguageModel, clock: Callable[[], float] = time.monotonic,
                 cpu_clock: Callable[[], float] = time.process_time,
                 sample_seconds: float = SAMPLE_SECONDS) -> None:
        """clock: seconds, for when to try all threads again; cpu_clock: CPU seconds of the
        whole process (every thread), read around each verify pass; sample_seconds: the wall
        time of passes summed into one sample."""
        self.model = target if isinstance(target, ThreadedModel) else None
        self.governs = (self.model is not None and self.model.threads_auto
                        and target.device == "cpu" and self.model.n_threads > 1)
        self.clock, self.cpu_clock = clock, cpu_clock
        self.sample_seconds = sample_seconds
        self._sample = (0.0, 0.0)  # wall and CPU seconds of the passes not yet in a sample
        self._window: deque[float] = deque(maxlen=WINDOW)  # the last samples' shares
        self.share: float | None = None  # the median of a full window; None: none measured yet
        self._wait = FIRST_TRY
        self._next_try = 0.0
        self._trying = False
        if self.governs:
            self._limit(None)  # a run starts on every thread

    @property
    def measures(self) -> bool:
        """Whether the share can be measured: a CPU runtime whose threads are known."""
        return self.model is not None and self.model.device == "cpu"

    @property
    def busy(self) -> bool:
        """The last window of passes got under BUSY_SHARE of their cores, or the engine still
        decodes on fewer threads because the last try found the machine busy."""
        limited = self.model is not None and self.model.threads_now < self.model.n_threads
        return (self.share is not None and self.share < BUSY_SHARE) or \
            (self.governs and limited)

    def observe(self, wall: float, cpu: float) -> ThreadSwitch | None:
        """One verify pass's wall and process CPU seconds (on the threads the model's last
        pass ran on); the thread change it leads to, if any (it applies from the next pass
        on)."""
        if not self.measures or wall <= 0:
            return None
        assert self.model is not None
        threads = self.model.threads_now
        wall, cpu = self._sample[0] + wall, self._sample[1] + cpu
        self._sample = (wall, cpu)
        if wall < self.sample_seconds:
            return None
        self._sample = (0.0, 0.0)
        self._window.append(cpu / (wall * threads))
        if len(self._window) < WINDOW:
            return None
        self.share = statistics.median(self._window)
        if not self.governs:
            return None
        full = self.model.n_threads
        if threads >= full:
            if self.share >= BUSY_SHARE:
                self._trying, self._wait = False, FIRST_TRY
                return None
            # a failed try waits twice as long for the next; a new busy spell starts over
            self._wait = min(LAST_TRY, self._wait * 2) if self._trying else FIRST_TRY
            self._trying = False
            self._next_try = self.clock() + self._wait
            return self._switch(max(1, min(full - 1, int(self.share * full))), THREADS_BUSY)
        if self.clock() >= self._next_try:
            self._trying = True
            return self._switch(full, THREADS_TRY)
        return None

    def _switch(self, threads: int, reason: str) -> ThreadSwitch:
        assert self.share is not None and self.model is not None
        change = ThreadSwitch(threads, self.model.n_threads, round(self.share, 3), reason)
        self._limit(None if threads >= self.model.n_threads else threads)
        return change

    def _limit(self, threads: int | None) -> None:
        assert self.model is not None
        self.model.limit_threads(threads)
        self._window.clear()
        self._sample = (0.0, 0.0)
