"""The worker thread that drives the engine host (app.host) for the window.

A run is a command to the host, a child process that owns the loaded pair; the worker reads
its events (the trace's own header, step and summary lines), writes the trace, and forwards
one signal per step, so the UI thread never waits on the engine. Stop asks the host to end
after the step in progress and ends the host when a pass outlasts the grace period. If the
host dies (a native abort, a signal, an out-of-memory kill) the worker finalises the trace
itself, says what happened with the engine's last lines on stderr, and the next run starts a
new host. The host keeps the pair loaded between runs and reloads when the choice changes.

Analyses (sweep, ranking, exactness check) run in the host too, as jobs (app.host.jobs) on the
same loaded pair; the worker forwards their progress and their result.
"""

from __future__ import annotations

import sys
import threading
import traceback
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot

from app.analysis.exactness import ExactReport
from app.engine.decode_config import DecodeConfig, DrafterChoice, choice_to_dict
from app.errors import DraftLensError, TraceWriteError
from app.host import protocol, wire
from app.host.client import EXITED, EngineHost
from app.host.keeper import TraceKeeper, cut_off_note, death_message
from app.models.loading import ModelSpec
from app.paths import data_dir
from ui.latency import freeze_heap
from ui.run_data import KIND_SPECULATIVE, CompareResult

_POLL_MS = 50


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
    """An analysis on the loaded pair (sweep, ranking, exactness check), run in the engine
    host: the job `job` of app.host.jobs.JOBS with its keyword `settings` (sent as JSON by
    app.host.wire) returns the result that `job_done` carries."""

    spec: ModelSpec
    drafter: DrafterChoice  # what drafts on the pair (its costs are measured when it loads)
    name: str  # as the window says it
    job: str
    settings: dict[str, Any]


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


def _amount(event: dict[str, Any]) -> tuple[int, int, str]:
    """How far a `progress` or `work` event's work has come: done, total (0: not known) and
    what they count."""
    return (int(event.get("done") or 0), int(event.get("total") or 0),
            str(event.get("unit") or ""))


class RunWorker(QObject):
    """Lives on a QThread; `run` is invoked through a queued signal from the window."""

    progress = Signal(str, int, int, str)  # loading: what, done of total (0: unknown), unit
    # the work before a run's first step once the pair is loaded (a self-draft's choice of
    # layers to skip), as `progress` has it
    preparing = Signal(str, int, int, str)
    loaded = Signal(object)  # LoadInfo
    run_started = Signal(str, object)  # kind, TraceHeader
    step = Signal(str, object)  # kind, StepRecord
    run_finished = Signal(str, object)  # kind, summary dict
    compared = Signal(object)  # CompareResult
    waiting = Signal()  # step mode: the next step waits for a release
    failed = Signal(str)  # the one-line message of an error
    done = Signal(str)  # the trace path ("" if none was written) once the request has ended
    job_done = Signal(str, object)  # name, result (None when it failed or was stopped)
    # what the host does after a run's steps, or a job's progress: task, done, total (0: no
    # fraction known), unit (app.host.protocol WORK); the work ends with `done` or `job_done`
    work = Signal(str, int, int, str)

    def __init__(self) -> None:
        super().__init__()
        self._cancel = threading.Event()
        self._step_mode = threading.Event()
        self._lock = threading.Lock()  # the host and the Step releases it has not seen yet
        self._host: EngineHost | None = None
        self._host_busy = False
        self._early_steps = 0  # Step presses before the host had the run
        self.steps_emitted = 0  # in this request; read by the UI thread (atomic under the GIL)

    # --- called from the UI thread ------------------------------------------------------
    def prepare(self, step_mode: bool) -> None:
        """Reset the controls before a run is queued (the worker is idle then)."""
        self._cancel.clear()
        self.steps_emitted = 0
        with self._lock:
            self._early_steps = 0
        self.set_step_mode(step_mode)

    def cancel(self) -> None:
        self._cancel.set()
        with self._lock:
            if self._host is not None and self._host_busy:
                self._host.stop()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def set_step_mode(self, on: bool) -> None:
        if on:
            self._step_mode.set()
        else:
            self._step_mode.clear()
        with self._lock:
            if self._host is not None and self._host_busy:
                self._host.send(protocol.STEP_MODE, on=on)

    def release_step(self) -> None:
        with self._lock:
            if self._host is not None and self._host_busy:
                self._host.send(protocol.STEP)
            else:
                self._early_steps += 1

    # --- on the worker thread: runs through the host ------------------------------------
    @Slot(object)
    def run(self, request: RunRequest) -> None:
        trace_path: Path | None = None
        try:
            trace_path = request.trace_path or default_trace_path()
            host = self._send(protocol.RUN, request.spec, request.config.drafter,
                              config=protocol.config_to_dict(request.config),
                              prompt=request.prompt, chat=request.chat,
                              compare=request.compare)
            try:
                self._follow(host, request, trace_path)
            except BaseException:
                self._discard(host)  # its events for this run would reach the next one
                raise
        except DraftLensError as exc:
            self.failed.emit(str(exc))
        except Exception as exc:  # noqa: BLE001 - any failure here becomes a dialog
            traceback.print_exc(file=sys.stderr)
            self.failed.emit(f"{type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._host_busy = False
            self.done.emit(str(trace_path) if trace_path is not None else "")

    def _send(self, command: str, spec: ModelSpec, drafter: DrafterChoice,
              **data: object) -> EngineHost:
        """A run or a job to the host, started first if there is none (or it died)."""
        with self._lock:
            if self._host is None or not self._host.alive:
                self._host = EngineHost()
                self._host.start()
            host = self._host
            host.ready_for_next()
            host.send(command, spec=protocol.spec_to_dict(spec),
                      drafter=choice_to_dict(drafter),
                      step_mode=self._step_mode.is_set(), permits=self._early_steps, **data)
            self._early_steps = 0
            self._host_busy = True
            if self._cancel.is_set():
                host.stop()
        return host

    def _follow(self, host: EngineHost, request: RunRequest, trace_path: Path) -> None:
        """Events until the host says the run is done, or ends."""
        keepers: dict[str, TraceKeeper] = {}
        dropped: set[str] = set()  # runs with steps made after Stop: not shown, not kept
        error = ""
        while True:
            event = host.next_event(_POLL_MS / 1000)
            if event is None:
                if self._cancel.is_set() and host.overdue():
                    host.kill()  # a pass outlasts the grace period
                continue
            name = event["event"]
            if name == protocol.STEP_DONE:
                if self._cancel.is_set():
                    dropped.add(event["run"])
                    continue
                keeper = keepers[event["run"]]
                try:
                    step = keeper.add(event["line"])
                except TraceWriteError as exc:
                    self.failed.emit(str(exc))
                    self.cancel()
                    continue
                self.steps_emitted += 1
                self.step.emit(event["run"], step)
            elif name == protocol.STARTED:
                kind = event["run"]
                path = trace_path if kind == KIND_SPECULATIVE else plain_trace_path(trace_path)
                keepers[kind] = TraceKeeper(path, event["header"], event.get("t_target"))
                self.run_started.emit(kind, keepers[kind].header)
            elif name == protocol.FINISHED:
                keeper = keepers[event["run"]]
                summary = (keeper.cut_off() if event["run"] in dropped
                           else keeper.finish(event["summary"]))
                self.run_finished.emit(event["run"], summary)
            elif name == protocol.DONE:
                self._unfinished(keepers, error)
                return
            elif name == EXITED:
                self._host_ended(host, event["returncode"], keepers)
                return
            else:
                if name == protocol.ERROR:
                    error = event["message"]
                self._note(event)

    def _unfinished(self, keepers: dict[str, TraceKeeper], error: str) -> None:
        """A run the host ended without its summary (an unexpected error): end it here."""
        for kind, keeper in keepers.items():
            if keeper.summary is None:
                self.run_finished.emit(kind, keeper.cut_off(error))

    def _discard(self, host: EngineHost) -> None:
        with self._lock:
            if self._host is host:
                self._host = None
        host.kill()

    def _note(self, event: dict) -> None:
        """The events that carry no records."""
        name = event["event"]
        if name == protocol.PROGRESS:
            said = self.preparing if event.get("preparing") else self.progress
            said.emit(event["message"], *_amount(event))
        elif name == protocol.LOADED:
            self.loaded.emit(LoadInfo(event["target"], event["draft"], event["backend"],
                                      event["device"], tuple(event["warnings"])))
            freeze_heap()  # the window's own heap: later GC pauses only walk new objects
        elif name == protocol.WAITING:
            if not self._cancel.is_set():
                self.waiting.emit()
        elif name == protocol.WORK:
            self.work.emit(event["task"], *_amount(event))
        elif name == protocol.COMPARED and not self._cancel.is_set():
            self.compared.emit(CompareResult(
                event["speculative_tok_s"], event["plain_tok_s"], event["identical"],
                event["greedy"], event["speculative_tokens"], event["plain_tokens"],
                protocol.divergence_from_dict(event["divergence"]),
                explaining=bool(event.get("explaining"))))
        elif name == protocol.ERROR:
            self.failed.emit(event["message"])

    def _host_ended(self, host: EngineHost, returncode: int,
                    keepers: dict[str, TraceKeeper]) -> None:
        """The host is gone mid-command: finalise its traces here and say how it ended."""
        with self._lock:
            if self._host is host:
                self._host = None  # the next run starts a new one
        for kind, keeper in keepers.items():
            if keeper.summary is None:
                note = cut_off_note(keeper.steps, returncode, host)
                self.run_finished.emit(kind, keeper.cut_off(note))
        if not host.killed_by_us:
            self.failed.emit(death_message(host, returncode))

    @Slot()
    def close_models(self) -> None:
        """End the host; it closes its models."""
        with self._lock:
            host, self._host = self._host, None
        if host is not None:
            host.close()

    # --- on the worker thread: analyses, in the host too --------------------------------
    @Slot(object)
    def run_job(self, job: JobRequest) -> None:
        result: object = None
        try:
            host = self._send(protocol.JOB, job.spec, job.drafter,
                              job=job.job, settings=wire.encode(job.settings))
            try:
                result = self._follow_job(host)
            except BaseException:
                self._discard(host)
                raise
        except DraftLensError as exc:
            self.failed.emit(str(exc))
        except Exception as exc:  # noqa: BLE001 - any failure becomes a dialog
            traceback.print_exc(file=sys.stderr)
            self.failed.emit(f"{type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._host_busy = False
            self.job_done.emit(job.name, result)

    def _follow_job(self, host: EngineHost) -> object:
        result: object = None
        while True:
            event = host.next_event(_POLL_MS / 1000)
            if event is None:
                if self._cancel.is_set() and host.overdue():
                    host.kill()
                continue
            name = event["event"]
            if name == protocol.RESULT:
                result = wire.decode(event.get("result"), (list, ExactReport))
            elif name == protocol.DONE:
                return result
            elif name == EXITED:
                self._host_ended(host, event["returncode"], {})
                return None
            else:
                self._note(event)
