"""Run control: start, step and stop a run on the worker thread, take the worker's signals, and
render what arrived into the window's views on a ~10 Hz timer, with the numbers in the status
line. Window jobs (sweep, ranking, exactness check) start here too; while one goes, or while
the host works after a run's steps, Run stays available: it cancels that work and starts once
the work has stopped, and the status line says so.

Records reach the views through one path, `begin_run` + `add_step`, whether they come from the
worker live or from a trace file (ui.trace_files), so an opened trace looks exactly like a live
run. Views render on the timer (`flush`), never per record.

The window owns one RunControl and delegates to it; it is handed in, never imported, so this
module does not depend on ui.main_window.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from PySide6.QtCore import QObject, QThread, QTimer, Signal, SignalInstance
from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar, QTabWidget

from app.analysis.reasons import machine_note
from app.engine.drafters.registry import check
from app.engine.records import StepRecord
from app.engine.trace import TraceHeader
from app.errors import DraftLensError
from ui.charts import ChartsPanel
from ui.decode_panel import DecodePanel
from ui.pair_picker import PairPicker
from ui.run_data import CompareResult, RunData
from ui.step_inspector import StepInspector
from ui.token_view import TokenView
from ui.work_status import Pace, WorkStatus, progress_text
from ui.worker import JobRequest, LoadInfo, RunRequest, RunWorker, default_trace_path

REDRAW_MS = 100
INSPECTOR_S = 1.0  # during a run, the inspector follows the newest step at most this often
# during a run, the status line's figures change at most this often: each change repaints the
# status bar and what lies behind it, one more flush to the display (and on 2 cores, CPU the
# engine's threads lose)
STATUS_S = 0.5


class _Throttled:
    """A view with new data to show: during a run, shown at most every `interval` seconds;
    idle, paused or forced, at once."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.dirty = False
        self._at = 0.0

    def due(self, now: float, live: bool) -> bool:
        """Whether to show it now (and if so, it is clean until marked dirty again)."""
        if not self.dirty or (live and now - self._at < self.interval):
            return False
        self.dirty = False
        self._at = now
        return True


class RunWindow(Protocol):
    """What RunControl uses of the window that owns it (ui.main_window.MainWindow)."""

    run_done: SignalInstance
    paused: SignalInstance
    trace_folder: Path | None
    picker: PairPicker
    decode: DecodePanel
    text_view: TokenView
    plain_view: TokenView
    text_tabs: QTabWidget
    compare_label: QLabel
    inspector: StepInspector
    charts: ChartsPanel
    status_label: QLabel
    busy: QProgressBar

    def show_error(self, message: str) -> None: ...

    def update_actions(self) -> None: ...

    def remember_current_pair(self) -> None: ...

    def statusBar(self) -> QStatusBar: ...  # noqa: N802 - Qt's name


class RunControl(QObject):
    """The worker and its thread, the run on show (and its plain baseline), and the redraw
    timer. `window` must be a QObject (it becomes this object's parent)."""

    _request_run = Signal(object)  # RunRequest, to the worker thread
    _request_job = Signal(object)  # JobRequest, to the worker thread
    # a window job has ended: its name, its result (None: failed or cancelled) and, where a
    # Run cancelled it, why ("" else)
    job_ended = Signal(str, object, str)

    def __init__(self, window: RunWindow) -> None:
        super().__init__(window)
        self.window = window
        self.run: RunData | None = None
        self.baseline: RunData | None = None
        self.compare_result: CompareResult | None = None
        self.trace_path: Path | None = None  # the trace file of the run on show, if any
        self.running = False
        # the host's work after the run's steps (a compare's baseline, explaining a
        # difference): "" while there is none; Run stays available and cancels it
        self.finishing = ""
        self.job = ""  # the window job going (its name), "" while there is none
        # a Run pressed during work it cancels: its step mode, and the work in words
        self._pending_run: tuple[bool, str] | None = None
        self.step_mode = False
        self._dirty = False
        self._charts_dirty = False
        self._inspector = _Throttled(INSPECTOR_S)
        self._status = _Throttled(STATUS_S)
        self._loading = Pace()  # the pace of loading's steps that have a known size
        self._current: RunData | None = None

        self.worker_thread = QThread(self)
        self.worker_thread.setObjectName("draftlens-worker")
        self.worker = RunWorker()
        self.worker.moveToThread(self.worker_thread)
        self._request_run.connect(self.worker.run)
        self._request_job.connect(self.worker.run_job)
        self.worker.progress.connect(self._on_progress)
        self.worker.preparing.connect(self._on_preparing)
        self.worker.loaded.connect(self._on_loaded)
        self.worker.run_started.connect(self._on_run_started)
        self.worker.step.connect(self._on_step)
        self.worker.run_finished.connect(self._on_run_finished)
        self.worker.compared.connect(self.show_comparison)
        self.worker.waiting.connect(self._on_waiting)
        self.worker.failed.connect(window.show_error)
        self.worker.done.connect(self._on_done)
        self.worker.work.connect(self._on_work)
        self.worker.job_done.connect(self._on_job_done)
        self.worker_thread.start()
        self.work_status = WorkStatus()
        self.work_status.cancel_requested.connect(self.cancel_work)
        window.statusBar().addPermanentWidget(self.work_status)

        self.timer = QTimer(self, interval=REDRAW_MS)
        self.timer.timeout.connect(self.flush)
        self.timer.start()

    # --- start, step, stop --------------------------------------------------------------
    @property
    def interruptible(self) -> str:
        """The work a Run cancels (a window job, or the host's work after a run's steps), in
        words; "" while a run's own steps go, or nothing does."""
        if not self.running:
            return ""
        return f"the {self.job}" if self.job else f"“{self.finishing}”" if self.finishing else ""

    def start_run(self, step_mode: bool = False) -> None:
        """Run (or, during a Step-mode run, continue without pausing). During a window job or
        the work after a run, cancel that work and run once it has stopped."""
        w = self.window
        if self.running and not self.interruptible:
            if self.step_mode and not step_mode:
                self.step_mode = False
                self.worker.set_step_mode(False)
                w.update_actions()
            return
        request = self._run_request()
        if request is None:
            return
        if self.running:
            what = self.interruptible
            self._pending_run = (step_mode, what)
            self.cancel_work("to start the new run")
            w.status_label.setText(f"Run: cancelling {what} — the new run starts once it "
                                   "has stopped")
            return
        self.reset_views()
        self.trace_path = None
        self.running = True
        w.charts.waiting = True
        self.step_mode = step_mode
        self.worker.prepare(step_mode)
        if step_mode:
            self.worker.release_step()
        w.status_label.setText("starting…")
        w.busy.setRange(0, 0)  # busy until loading says how far it has come
        self._loading.reset()
        w.busy.setVisible(True)
        self._request_run.emit(request)
        w.update_actions()

    def _run_request(self) -> RunRequest | None:
        """The run the window's settings ask for, or None (with the reason shown) when the
        pair cannot run or a setting is wrong."""
        w = self.window
        reason = w.picker.blocking_reason()
        if reason:
            w.status_label.setText(reason)
            return None
        choices = w.decode.choices()
        config = replace(w.decode.config(), drafter=w.picker.drafter_choice())
        try:
            check(config.drafter)  # as the command line's choice is checked
            config.validate()
        except DraftLensError as exc:
            w.show_error(str(exc))
            return None
        return RunRequest(w.picker.model_spec(), choices.prompt, config, chat=choices.chat,
                          compare=choices.compare, trace_path=default_trace_path(w.trace_folder))

    def start_job(self, request: JobRequest) -> None:
        """A window job on the worker: Run stays available, and cancels it."""
        self.running = True
        self.job = request.name
        self.worker.prepare(step_mode=False)
        self.window.status_label.setText(f"{request.name}: running…")
        self.window.update_actions()
        self._request_job.emit(request)

    def _on_job_done(self, name: str, result: object) -> None:
        self.work_status.clear()
        self.running = False
        self.job = ""
        why = "cancelled to start a run" if self._pending_run is not None else ""
        self.window.status_label.setText(f"{name} finished" if result is not None
                                         else f"{name} stopped")
        self.window.update_actions()
        self.job_ended.emit(name, result, why)
        self._start_pending()

    def _start_pending(self) -> None:
        """The Run pressed during work it cancelled, now that the work has stopped."""
        if self._pending_run is None:
            return
        (step_mode, what), self._pending_run = self._pending_run, None
        self.start_run(step_mode)
        if self.running:
            self.window.status_label.setText(f"{what[0].upper()}{what[1:]} was cancelled · "
                                             "starting the new run…")

    def step_once(self) -> None:
        """Idle: start a run one step at a time. Running: release (or pause at) the next step.
        During work a Run would cancel, a Step does the same, then steps."""
        if not self.running or self.interruptible:
            self.start_run(step_mode=True)
        elif self.step_mode:
            self.worker.release_step()
        else:
            self.step_mode = True
            self.worker.set_step_mode(True)
            self.window.update_actions()

    def stop_run(self) -> None:
        if self.interruptible:
            self.cancel_work()
        elif self.running:
            self.worker.cancel()
            self.window.status_label.setText("stopping after this step…")

    def cancel_work(self, why: str = "") -> None:
        """Cancel the host's work (after a run, or a job): at its next check, or by ending the
        host when it takes no cancel (the worker's grace period, as for Stop)."""
        if self.running:
            self.worker.cancel()
            self.work_status.cancelling(why)

    def _on_work(self, task: str, done: int, total: int, unit: str) -> None:
        if not self.running:
            return
        first = not self.finishing
        current = self._current  # None in a window job (its own state: self.job)
        if current is not None and (current.summary is not None or current is self.baseline):
            self.finishing = task  # the run's own steps are over: Run is available again
        self.work_status.show_work(task, done, total, unit)
        if self.worker.cancelled:
            self.work_status.cancelling()
        if first and self.finishing:
            self._status.dirty = True
            self.window.update_actions()

    # --- records in (live or from a trace) ----------------------------------------------
    def reset_views(self) -> None:
        w = self.window
        self.run = None
        self.baseline = None
        self.compare_result = None
        w.compare_label.setText("")
        w.text_view.clear_run()
        w.plain_view.clear_run()
        w.inspector.set_steps([])
        w.text_tabs.setCurrentWidget(w.text_view)
        self._dirty = True

    def begin_run(self, kind: str, header: TraceHeader | None) -> RunData:
        w = self.window
        data = RunData(kind, header)
        chat = bool(header and header.settings.get("chat"))
        prefix = header.prompt if header is not None and not chat else ""
        if self.run is None:
            self.run = data
            w.text_view.clear_run(prefix)
            w.inspector.set_steps(data.steps)
        else:
            self.baseline = data
            w.plain_view.clear_run(prefix)
        self._dirty = True
        return data

    def add_step(self, data: RunData, step: StepRecord) -> None:
        data.add(step)
        w = self.window
        (w.text_view if data is self.run else w.plain_view).add_step(step)
        self._dirty = True

    def show_comparison(self, result: CompareResult) -> None:
        self.compare_result = result
        self.window.compare_label.setText("Compared with plain decoding: " + result.describe())

    # --- rendering ----------------------------------------------------------------------
    def mark_dirty(self) -> None:
        """Have the next flush re-render the views (e.g. after a theme change)."""
        self._dirty = True

    def flush(self, force: bool = False) -> None:
        """Render what arrived since the last call (the ~10 Hz timer calls this). During a run
        the inspector follows the newest step every INSPECTOR_S and the charts redraw when due
        (ChartsPanel.due); idle, paused or forced, everything is brought up to date at once."""
        w = self.window
        live = self.running and not force
        now = time.perf_counter()
        if self._dirty:
            self._dirty = False
            self._charts_dirty = self._inspector.dirty = self._status.dirty = True
            w.text_view.flush()
            w.plain_view.flush()
        if self._status.due(now, live):
            self._update_status()
        if self._inspector.due(now, live) and self.run is not None:
            w.inspector.steps_added()
        if not live:
            if self._charts_dirty or w.charts.in_round:
                self._charts_dirty = False
                w.charts.redraw(self.run, self.baseline)
        elif (self._charts_dirty or w.charts.in_round) and w.charts.redraw_some(
            self.run, self.baseline
        ):
            self._charts_dirty = False  # a round began: it shows the data up to now

    def _update_status(self) -> None:
        run = self.run
        if run is None or not run.steps:
            return
        s = run.stats
        parts = [f"{s.tokens_per_second:.1f} tok/s"]
        if s.spec_steps:
            parts += [f"α {s.alpha:.2f}", f"{s.tokens_per_pass:.2f} tokens/pass",
                      f"k {run.steps[-1].k} (mean {s.mean_k:.1f})"]
        parts.append(f"{s.emitted} tokens in {s.steps} steps")
        if note := machine_note(run.steps):
            parts.append(note)
        if self.baseline is not None and self.baseline.steps:
            parts.append(f"plain {self.baseline.stats.tokens_per_second:.1f} tok/s")
        prefix = "running · " if self.running and not self.finishing else ""
        self.window.status_label.setText(prefix + " · ".join(parts))

    # --- worker signals -----------------------------------------------------------------
    def _on_progress(self, message: str, done: int, total: int, unit: str) -> None:
        """What loading (or timing the pair) is at; with its size known, how far it has come,
        about how long it has left, and a bar with the fraction."""
        self._show_progress("loading: ", message, done, total, unit)

    def _on_preparing(self, message: str, done: int, total: int, unit: str) -> None:
        """The work before the run's first step (a self-draft's search of layers to skip),
        in its own words, as loading is shown; Stop ends it."""
        self._show_progress("", message, done, total, unit)

    def _show_progress(self, prefix: str, message: str, done: int, total: int,
                       unit: str) -> None:
        left = self._loading.seconds_left(done, total)
        text = progress_text(message, done, total, unit, left) if total else f"{message}…"
        self.window.status_label.setText(prefix + text)
        busy = self.window.busy
        busy.setRange(0, max(0, total))  # (0, 0): busy, no fraction known
        busy.setValue(min(done, total))

    def _on_loaded(self, info: LoadInfo) -> None:
        text = f"loaded {info.target}" + (f" + {info.draft}" if info.draft else "")
        text += f" ({info.backend}, {info.device})"
        if info.warnings:
            text += " · ⚠ " + "; ".join(info.warnings)
        self.window.status_label.setText(text)
        self.window.remember_current_pair()

    def _on_run_started(self, kind: str, header: TraceHeader) -> None:
        self.window.busy.setVisible(False)
        self._current = self.begin_run(kind, header)

    def _on_step(self, kind: str, step: StepRecord) -> None:
        data = self._current
        if data is not None and data.kind == kind:
            self.add_step(data, step)

    def _on_run_finished(self, kind: str, summary: dict) -> None:
        if self._current is not None:
            self._current.summary = summary

    def _on_waiting(self) -> None:
        label = self.window.status_label
        self._dirty = True
        self.flush(force=True)
        label.setText(label.text().replace("running · ", "")
                      + " · paused: Step for the next verify step, Run to continue")
        self.window.paused.emit()

    def _on_done(self, trace_path: str) -> None:
        w = self.window
        w.busy.setVisible(False)
        self.work_status.clear()
        self.finishing = ""
        result = self.compare_result
        if result is not None and result.explaining:
            result.explaining, result.explanation_cancelled = False, True
            self.show_comparison(result)
        self.running = False
        w.charts.waiting = False
        self.step_mode = False
        self._current = None
        if trace_path and Path(trace_path).exists():
            self.trace_path = Path(trace_path)
        self._dirty = True
        self.flush()
        if self.run is None:
            w.status_label.setText("stopped" if self.worker.cancelled else "ready")
        w.update_actions()
        w.run_done.emit()
        self._start_pending()

    # --- closing ------------------------------------------------------------------------
    def cancel(self) -> None:
        """First half of closing: stop redrawing and ask the worker to stop after this step."""
        self.timer.stop()
        self.worker.cancel()

    def close(self) -> None:
        """Second half of closing: end the worker thread (waiting for it) and free the models."""
        self.worker_thread.quit()
        self.worker_thread.wait()
        self.worker.close_models()
