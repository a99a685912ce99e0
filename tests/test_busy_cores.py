"""Decoding on busy cores (real llama.cpp, tiny models): passes that get too little of their
cores move decoding to fewer threads, a later try moves it back, greedy output stays plain
decoding's all along; a thread count the user gave is kept; a stalled pass timing is refused
and the trace says so; the engine host starts with a short OpenMP spin."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("llama_cpp")

from app.engine.cores import FIRST_TRY, WINDOW, CoreShare  # noqa: E402
from app.engine.cost_curve import VerifyCostCurve  # noqa: E402
from app.engine.decode_config import DecodeConfig  # noqa: E402
from app.engine.drafters.draft_model import ModelDrafter  # noqa: E402
from app.engine.records import (  # noqa: E402
    THREADS_BUSY,
    THREADS_TRY,
    TIMING_KEPT,
    TIMING_STALLED,
    TIMING_WARM_UP,
)
from app.engine.sampling import SamplingParams  # noqa: E402
from app.engine.session import Session  # noqa: E402
from app.engine.trace import step_from_dict, step_to_dict  # noqa: E402
from backends.llamacpp import LlamaCppModel  # noqa: E402
from backends.llamacpp_threads import SPIN_COUNT, engine_process_env  # noqa: E402
from tests.helpers import assert_drafted  # noqa: E402

PROMPT = "the cat sat on the mat. the cat"
GREEDY = SamplingParams(temperature=0.0)

needs_two_cores = pytest.mark.skipif((os.cpu_count() or 1) < 2,
                                     reason="fewer threads needs two to start from")


class PlantedCpu:
    """A process CPU clock that says the passes got none of their cores while `busy`, and all
    of them otherwise (the wall clock times the threads the model was loaded with)."""

    def __init__(self, model: LlamaCppModel) -> None:
        self.model, self.busy = model, True

    def __call__(self) -> float:
        return 0.0 if self.busy else time.perf_counter() * self.model.n_threads


def greedy_session(target, drafter, n: int, k: int = 3) -> Session:
    return Session(target, drafter, DecodeConfig(n_predict=n, draft_max=k, sampling=GREEDY))


def plain_output(target, n: int) -> list[int]:
    session = greedy_session(target, None, n)
    list(session.steps(target.tokenize(PROMPT)))
    return session.output_ids


def logits_of(model: LlamaCppModel, ids: list[int]) -> np.ndarray:
    model.truncate(0)
    return np.array(model.extend(ids, len(ids)))


def test_one_thread_gives_the_logits_two_threads_give(gguf_files):
    model = LlamaCppModel(gguf_files[0], n_gpu_layers=0, n_ctx=128, n_threads=2)
    try:
        ids = [1, 5, 9, 13, 2, 7]
        two = [logits_of(model, ids[:1]), logits_of(model, ids)]
        assert model.threads_now == 2
        model.limit_threads(1)
        one = [logits_of(model, ids[:1]), logits_of(model, ids)]
        assert model.threads_now == 1
        assert all(np.array_equal(a, b) for a, b in zip(one, two, strict=True))
    finally:
        model.limit_threads(None)
        model.close()


@needs_two_cores
def test_a_busy_machine_moves_decoding_to_one_thread_and_a_try_moves_it_back(gguf_pair):
    target, draft = gguf_pair
    expected = plain_output(target, 60)
    session = greedy_session(target, ModelDrafter(draft), 60)
    cpu, now = PlantedCpu(target), [0.0]
    # a tiny model's passes take a few ms: each is a sample of its own here
    session.cores = CoreShare(target, clock=lambda: now[0], cpu_clock=cpu, sample_seconds=0)
    steps, threads = [], []
    for step in session.steps(target.tokenize(PROMPT)):
        steps.append(step)
        threads.append(target.threads_now)  # what this step's passes ran on
        if len(steps) == 8:  # the machine is quiet again, and the time for a try has come
            cpu.busy, now[0] = False, FIRST_TRY
    switches = [(s.index, s.threads) for s in steps if s.threads is not None]
    (busy_at, busy), (try_at, tried) = switches  # no more: the try found the cores free
    assert busy_at == WINDOW - 1 and (busy.threads, busy.of, busy.share, busy.reason) == (
        1, target.n_threads, 0.0, THREADS_BUSY)
    assert set(threads[busy_at + 1 : try_at + 1]) == {1}  # draft and verify passes alike
    assert tried.reason == THREADS_TRY and tried.threads == target.n_threads
    assert threads[try_at + 1 :] and set(threads[try_at + 1 :]) == {target.n_threads}
    assert all(s.busy for s in steps[busy_at:8]) and not steps[-1].busy
    # the records say so in the trace too
    assert step_from_dict(step_to_dict(steps[busy_at])).threads == busy
    assert session.output_ids == expected
    assert_drafted(steps)


@needs_two_cores
def test_a_try_that_finds_the_machine_still_busy_waits_twice_as_long(gguf_pair):
    target = gguf_pair[0]
    now = [0.0]
    cores = CoreShare(target, clock=lambda: now[0], cpu_clock=lambda: 0.0)

    def busy_window():
        """Up to WINDOW real passes judged busy: the switch they lead to, or None."""
        for _ in range(WINDOW):
            target.extend(target.tokenize("a"), 1)
            target.truncate(0)
            switch = cores.observe(0.1, 0.01)
            if switch is not None:
                return switch
        return None

    try:
        assert busy_window().reason == THREADS_BUSY
        assert target.threads_now == target.n_threads  # applied at the next pass, not before
        assert busy_window() is None and target.threads_now == 1
        now[0] = FIRST_TRY - 0.01
        assert busy_window() is None  # not yet
        now[0] = FIRST_TRY
        assert busy_window().reason == THREADS_TRY
        assert busy_window().reason == THREADS_BUSY  # still busy: the next try waits 2x
        now[0] = FIRST_TRY + 2 * FIRST_TRY - 0.01
        assert busy_window() is None
        now[0] = FIRST_TRY + 2 * FIRST_TRY
        assert busy_window().reason == THREADS_TRY
        assert cores.busy
    finally:
        target.limit_threads(None)


def test_short_passes_are_judged_together_so_a_coarse_process_clock_reads_true(gguf_files):
    model = LlamaCppModel(gguf_files[0], n_gpu_layers=0, n_ctx=128, n_threads=2)
    # 26 ms passes on 2 threads (52 ms of CPU each) timed by a process clock that ticks every
    # 15.6 ms, as Windows's does: alone they read 0.6, 0.6, 1.2, 1.6 of their cores
    ticks = [0.0312, 0.0312, 0.0624, 0.0832]
    try:
        alone = CoreShare(model, sample_seconds=0)
        for cpu in ticks[:WINDOW]:
            alone.observe(0.026, cpu)
        assert alone.busy  # a quiet machine called busy
        summed = CoreShare(model)
        for _ in range(WINDOW):
            for cpu in ticks:
                summed.observe(0.026, cpu)
        assert summed.share == pytest.approx(1.0) and not summed.busy
    finally:
        model.close()


def test_a_thread_count_the_user_gave_is_kept_and_the_machine_still_called_busy(gguf_files):
    model = LlamaCppModel(gguf_files[0], n_gpu_layers=0, n_ctx=128, n_threads=2)
    try:
        cores = CoreShare(model, cpu_clock=lambda: 0.0)
        assert not cores.governs and cores.measures
        assert all(cores.observe(0.1, 0.0) is None for _ in range(3 * WINDOW))
        assert cores.busy and model.threads_now == 2
    finally:
        model.close()


def test_stalled_pass_timings_are_refused_and_the_trace_says_which(gguf_pair):
    target, draft = gguf_pair
    # a curve that prices every pass at a nanosecond: each real pass is a stall against it
    curve = VerifyCostCurve({n: 1e-9 for n in range(1, 6)})
    session = Session(target, ModelDrafter(draft),
                      DecodeConfig(n_predict=24, draft_max=3, sampling=GREEDY), curve)
    steps = list(session.steps(target.tokenize(PROMPT)))
    sizes = [s.n_pass for s in steps]
    first_of_size = {sizes.index(n) for n in set(sizes)}
    for i, step in enumerate(steps):
        assert step.timing == (TIMING_WARM_UP if i in first_of_size else TIMING_STALLED)
        assert step_from_dict(step_to_dict(step)).timing == step.timing
    refused = sum(s.timing == TIMING_STALLED for s in steps)
    assert refused and session.summary()["refused_samples"] == refused
    assert curve.live == {}  # nothing priced from them
    assert TIMING_KEPT not in {s.timing for s in steps}


def test_engine_processes_get_a_short_openmp_spin_unless_the_user_chose_a_policy():
    assert engine_process_env({}) == {"GOMP_SPINCOUNT": str(SPIN_COUNT)}
    assert engine_process_env({"OMP_WAIT_POLICY": "active"}) == {}
    assert engine_process_env({"GOMP_SPINCOUNT": "5"}) == {}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/environ")
@pytest.mark.parametrize("user", [None, "passive"])
def test_the_engine_host_runs_with_the_short_spin(monkeypatch, user):
    from app.host.client import EngineHost

    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    if user is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", user)
    host = EngineHost()
    host.start()
    try:
        assert host._proc is not None
        raw = Path(f"/proc/{host._proc.pid}/environ").read_bytes().split(b"\0")
        env = dict(item.decode().split("=", 1) for item in raw if b"=" in item)
    finally:
        host.close()
    if user is None:
        assert env["GOMP_SPINCOUNT"] == str(SPIN_COUNT)
    else:
        assert env["OMP_WAIT_POLICY"] == user and "GOMP_SPINCOUNT" not in env
