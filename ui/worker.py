"""The worker that loads a model pair and runs the engine on its own thread.

It only iterates `Session.steps(...)` and forwards each StepRecord as a signal; the records
are also appended to the trace file as they come (a crash loses at most the last step).
Stop is a flag checked between steps (and between loading phases); Step mode waits on a
semaphore for the UI to release one step at a time. The loaded pair is kept between runs and
reloaded only when the model choice changes.
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import astuple, dataclass, field
from datetime import datetime
from pathlib import Path

from PySide6.QtCore import QObject, QSemaphore, Signal, Slot

from app.analysis.cost import measure_pair_costs
from app.engine.divergence import MarginTap, explain_divergence
from app.engine.kernel_noise import cached_kernel_noise
from app.engine.session import DecodeConfig, Session
from app.engine.trace import TraceWriter
from app.errors import DraftLensError
from app.models.loading import LoadedPair, ModelSpec, load_pair
from app.paths import data_dir
from app.runs import NGRAM_LABEL, Run, finish_trace, prepare_run
from ui.latency import freeze_heap
from ui.run_data import KIND_PLAIN, KIND_SPECULATIVE, CompareResult

_POLL_MS = 50


class _Stopped(Exception):
    """The user pressed Stop while the pair was loading."""


@dataclass
class RunRequest:
    spec: ModelSpec
    prompt: str
    config: DecodeConfig = field(default_factory=DecodeConfig)
    chat: bool = False
    compare: bool = False
    trace_path: Path | None = None


@dataclass
class JobRequest:
    """An analysis on the loaded pair (sweep, ranking, exactness check) on the worker thread:
    `work(pair, cancelled, progress)` returns the result that `job_done` carries."""

    spec: ModelSpec
    name: str
    work: Callable[[LoadedPair, Callable[[], bool], Callable[[str], None]], object]


@dataclass(frozen=True)
class LoadInfo:
    target: str
    draft: str
    backend: str
    device: str
    warnings: tuple[str, ...]


KEEP_TRACES = 50


def default_trace_path(folder: Path | None = None) -> Path:
    """A new file in `folder` (default: the data folder's traces/), where only the newest
    KEEP_TRACES automatic traces are kept."""
    folder = folder if folder is not None else data_dir() / "traces"
    prune_traces(folder, KEEP_TRACES - 1)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    return folder / f"run-{stamp}.jsonl"


def prune_traces(folder: Path, keep: int) -> None:
    """Delete all but the newest `keep` automatic traces (run-*.jsonl, with their baselines)."""
    runs = sorted(p for p in folder.glob("run-*.jsonl") if not p.name.endswith(".plain.jsonl"))
    for old in runs[: max(0, len(runs) - keep)]:
        old.unlink(missing_ok=True)
        plain_trace_path(old).unlink(missing_ok=True)


def plain_trace_path(path: Path) -> Path:
    """Where the plain baseline of a compare run is written, beside the speculative trace."""
    return path.with_name(path.stem + ".plain.jsonl")


def _pair_key(spec: ModelSpec) -> tuple:
    """Every choice that changes what is loaded: a new key means a reload."""
    return astuple(spec)


class RunWorker(QObject):
    """Lives on a QThread; `run` is invoked through a queued signal from the window."""

    progress = Signal(str)
    loaded = Signal(object)  # LoadInfo
    run_started = Signal(str, object)  # kind, TraceHeader
    step = Signal(str, object)  # kind, StepRecord
    run_finished = Signal(str, object)  # kind, summary dict
    compared = Signal(object)  # CompareResult
    waiting = Signal()  # step mode: the next step waits for a release
    failed = Signal(str)  # the one-line message of an error
    done = Signal(str)  # the trace path ("" if none was written) once the request has ended
    costs = Signal(object)  # PairCosts of a newly loaded pair (the cost view's data)
    job_done = Signal(str, object)  # name, result (None when it failed or was stopped)

    def __init__(self) -> None:
        super().__init__()
        self._cancel = threading.Event()
        self._step_mode = threading.Event()
        self._permits = QSemaphore(0)
        self._pair: LoadedPair | None = None
        self._pair_key: tuple | None = None
        self.steps_emitted = 0  # in this request; read by the UI thread (atomic under the GIL)

    # --- called from the UI thread ------------------------------------------------------
    def prepare(self, step_mode: bool) -> None:
        """Reset the controls before a run is queued (the worker is idle then)."""
        self._cancel.clear()
        self.steps_emitted = 0
        self._permits.tryAcquire(self._permits.available())
        self.set_step_mode(step_mode)

    def cancel(self) -> None:
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def set_step_mode(self, on: bool) -> None:
        if on:
            self._step_mode.set()
        else:
            self._step_mode.clear()

    def release_step(self) -> None:
        self._permits.release()

    # --- on the worker thread -----------------------------------------------------------
    @Slot(object)
    def run(self, request: RunRequest) -> None:
        trace_path: Path | None = None
        try:
            pair = self._ensure_pair(request.spec)
            trace_path = request.trace_path or default_trace_path()
            self._generate(pair, request, trace_path)
        except _Stopped:
            pass
        except DraftLensError as exc:
            self.failed.emit(str(exc))
        except MemoryError:
            self.failed.emit("out of memory — try a smaller model, fewer GPU layers or a "
                             "shorter context")
        except Exception as exc:  # noqa: BLE001 - any engine failure becomes a dialog
            traceback.print_exc(file=sys.stderr)
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            self.failed.emit(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)
        finally:
            self.done.emit(str(trace_path) if trace_path is not None else "")

    @Slot(object)
    def run_job(self, job: JobRequest) -> None:
        result: object = None
        try:
            pair = self._ensure_pair(job.spec)
            result = job.work(pair, self._cancel.is_set, self.progress.emit)
        except _Stopped:
            pass
        except DraftLensError as exc:
            self.failed.emit(str(exc))
        except Exception as exc:  # noqa: BLE001 - any failure becomes a dialog
            traceback.print_exc(file=sys.stderr)
            self.failed.emit(f"{type(exc).__name__}: {exc}")
        finally:
            self.job_done.emit(job.name, result)

    @Slot()
    def close_models(self) -> None:
        if self._pair is not None:
            self._pair.close()
        self._pair = None
        self._pair_key = None

    def _ensure_pair(self, spec: ModelSpec) -> LoadedPair:
        key = _pair_key(spec)
        if self._pair is not None and self._pair_key == key:
            return self._pair
        self.close_models()

        def say(message: str) -> None:
            if self._cancel.is_set():
                raise _Stopped
            self.progress.emit(message)

        pair = load_pair(spec, say)
        if self._cancel.is_set():
            pair.close()
            raise _Stopped
        self._pair, self._pair_key = pair, key
        freeze_heap()  # before decoding starts: later GC pauses only walk new objects
        draft_name = pair.draft.name if pair.draft else (NGRAM_LABEL if spec.ngram else "")
        self.loaded.emit(LoadInfo(pair.target.name, draft_name, pair.target.backend,
                                  pair.target.device, tuple(pair.warnings)))
        if pair.draft is not None or spec.ngram:
            self.progress.emit("timing a target step and a draft step side by side")
            self.costs.emit(measure_pair_costs(pair))
        return pair

    def _generate(self, pair: LoadedPair, request: RunRequest, trace_path: Path) -> None:
        greedy = request.config.sampling.greedy
        model = pair.target
        # a greedy compare notes the target's top two per position, to explain a difference
        tap = MarginTap(model) if request.compare and greedy else None
        if tap is not None:
            pair.target = tap
        try:
            self._generate_runs(pair, request, trace_path, tap)
        finally:
            pair.target = model

    def _generate_runs(self, pair: LoadedPair, request: RunRequest, trace_path: Path,
                       tap: MarginTap | None) -> None:
        run = self._prepare(pair, request)
        session = run.session
        kind = KIND_SPECULATIVE if session.drafter else KIND_PLAIN
        with TraceWriter(trace_path) as writer:
            writer.header(run.header)
            self.run_started.emit(kind, run.header)
            self._decode(kind, run, writer)
            interrupted = self._cancel.is_set()
            baseline = None
            spec_top = tap.top if tap is not None else {}
            if tap is not None:
                tap.top = {}
            if request.compare and session.drafter is not None and not interrupted:
                baseline = self._baseline(pair, request, trace_path)
                if self._cancel.is_set():
                    baseline = None  # cut short: no fair comparison
            summary = finish_trace(writer, session, baseline, interrupted=interrupted)
        self.run_finished.emit(kind, summary)
        if baseline is not None and not self._cancel.is_set():
            greedy = request.config.sampling.greedy
            divergence = None
            if tap is not None and session.output_ids != baseline.output_ids:
                self.progress.emit("texts differ: measuring how far verify passes stray from "
                                   "single steps on this model (once; cached)")
                bound = cached_kernel_noise(tap.model).bound
                divergence = explain_divergence(len(run.prompt_ids), baseline.output_ids,
                                                session.output_ids, tap.top, spec_top,
                                                pair.target.token_text, bound)
            self.compared.emit(CompareResult(
                session.stats.tokens_per_second, baseline.stats.tokens_per_second,
                session.output_ids == baseline.output_ids, greedy,
                len(session.output_ids), len(baseline.output_ids), divergence,
            ))  # fmt: skip

    def _prepare(self, pair: LoadedPair, request: RunRequest, plain: bool = False) -> Run:
        return prepare_run(pair, request.config, request.prompt, request.chat, plain=plain,
                           extra_settings={"compare": request.compare})

    def _baseline(self, pair: LoadedPair, request: RunRequest, trace_path: Path) -> Session:
        """The plain target run on the same prompt and settings, for the speedup."""
        run = self._prepare(pair, request, plain=True)
        with TraceWriter(plain_trace_path(trace_path)) as writer:
            writer.header(run.header)
            self.run_started.emit(KIND_PLAIN, run.header)
            self._decode(KIND_PLAIN, run, writer)
            summary = finish_trace(writer, run.session, interrupted=self._cancel.is_set())
        self.run_finished.emit(KIND_PLAIN, summary)
        return run.session

    def _decode(self, kind: str, run: Run, writer: TraceWriter) -> None:
        """Iterate the run into the trace and the window; a fault mid-run (a trace that can no
        longer be written, a model's garbage output) still ends the trace with a summary."""
        steps = run.session.steps(run.prompt_ids)
        try:
            while self._wait_turn(kind):
                step = next(steps, None)
                if step is None:
                    return
                writer.step(step)
                self.steps_emitted += 1
                self.step.emit(kind, step)
        except DraftLensError as exc:
            finish_trace(writer, run.session, error=str(exc))
            raise
        finally:
            steps.close()

    def _wait_turn(self, kind: str) -> bool:
        """False when stopped; in Step mode, blocks until the UI releases one step."""
        if self._cancel.is_set():
            return False
        if kind != KIND_SPECULATIVE or not self._step_mode.is_set():
            return True
        if self._permits.tryAcquire(1):
            return True
        self.waiting.emit()
        while not self._cancel.is_set():
            if self._permits.tryAcquire(1, _POLL_MS) or not self._step_mode.is_set():
                return not self._cancel.is_set()
        return False
