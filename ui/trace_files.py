"""Trace files: open a saved trace into the views, save the run's trace (and its plain
baseline), export the steps as CSV and the charts as PNG, and remember the folder last used.

An opened trace goes through RunControl's `begin_run` + `add_step`, the path live records
take, so it looks exactly like a live run. The window owns one TraceFiles and delegates to it;
it is handed in, never imported, so this module does not depend on ui.main_window.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Protocol

from PySide6.QtWidgets import QFileDialog, QLabel

from app.engine.trace import export_csv, read_trace
from app.errors import DraftLensError
from app.settings import Settings
from ui.charts import ChartsPanel
from ui.run_control import RunControl
from ui.run_data import KIND_PLAIN, KIND_SPECULATIVE, CompareResult, RunData
from ui.step_inspector import StepInspector
from ui.worker import plain_trace_path

TRACE_FILTER = "DraftLens traces (*.jsonl);;All files (*)"


class TraceWindow(Protocol):
    """What TraceFiles uses of the window that owns it (ui.main_window.MainWindow)."""

    settings: Settings
    charts: ChartsPanel
    inspector: StepInspector
    status_label: QLabel

    def show_error(self, message: str) -> None: ...

    def show_workspace(self) -> None: ...

    def update_actions(self) -> None: ...


class TraceFiles:
    """The File menu's trace and export actions. `window` must be a QWidget (the dialogs'
    parent); `runs` holds the run on show and feeds the views."""

    def __init__(self, window: TraceWindow, runs: RunControl) -> None:
        self.window = window
        self.runs = runs

    # --- open ---------------------------------------------------------------------------
    def open_trace(self, path: str | Path) -> None:
        """Show a saved trace through the same path live records take."""
        w, runs = self.window, self.runs
        trace = read_trace(path)
        runs.reset_views()
        mode = trace.header.mode if trace.header is not None else KIND_SPECULATIVE
        data = runs.begin_run(KIND_PLAIN if mode == "plain" else KIND_SPECULATIVE, trace.header)
        for step in trace.steps:
            runs.add_step(data, step)
        data.summary = trace.summary
        plain_file = plain_trace_path(Path(path))
        if mode != "plain" and plain_file.exists():
            plain = read_trace(plain_file)
            baseline = runs.begin_run(KIND_PLAIN, plain.header)
            for step in plain.steps:
                runs.add_step(baseline, step)
            self._show_comparison(data, baseline)
        runs.trace_path = Path(path)
        w.show_workspace()
        runs.flush()
        w.inspector.show_step(0)
        opened = " · ".join([f"opened {Path(path).name}", *trace.notes])
        w.status_label.setText(f"{opened} · {w.status_label.text()}")
        w.update_actions()

    def _show_comparison(self, run: RunData, baseline: RunData) -> None:
        greedy = bool(run.header and run.header.settings.get("sampling", {})
                      .get("temperature", 0.0) == 0.0)  # fmt: skip
        self.runs.show_comparison(CompareResult(
            run.stats.tokens_per_second, baseline.stats.tokens_per_second,
            run.output_ids == baseline.output_ids, greedy, run.stats.emitted,
            baseline.stats.emitted,
        ))  # fmt: skip

    def open_trace_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.window, "Open a trace", self._trace_dir(),
                                              TRACE_FILTER)
        if path:
            self._remember_trace_dir(path)
            try:
                self.open_trace(path)
            except DraftLensError as exc:
                self.window.show_error(str(exc))

    # --- save and export ----------------------------------------------------------------
    def save_trace(self, destination: str | Path) -> None:
        """Copy the run's trace (written during the run) and its plain baseline, if any."""
        trace_path = self.runs.trace_path
        if trace_path is None:
            raise DraftLensError("nothing to save yet — run a prompt first")
        destination = Path(destination)
        try:
            if destination.resolve() != trace_path.resolve():
                shutil.copyfile(trace_path, destination)
                plain = plain_trace_path(trace_path)
                if plain.exists():
                    shutil.copyfile(plain, plain_trace_path(destination))
        except OSError as exc:
            raise DraftLensError(f"cannot save the trace to {destination}: "
                                 f"{exc.strerror or exc}") from exc

    def save_trace_dialog(self) -> None:
        trace_path = self.runs.trace_path
        if trace_path is None:
            self.window.show_error("nothing to save yet — run a prompt first")
            return
        start = str(Path(self._trace_dir()) / trace_path.name)
        path, _ = QFileDialog.getSaveFileName(self.window, "Save the trace", start, TRACE_FILTER)
        if path:
            self._remember_trace_dir(path)
            try:
                self.save_trace(path)
            except DraftLensError as exc:
                self.window.show_error(str(exc))

    def export_csv_dialog(self) -> None:
        if self.runs.run is None:
            return
        path, _ = QFileDialog.getSaveFileName(self.window, "Export CSV", self._trace_dir(),
                                              "CSV (*.csv)")
        if path:
            try:
                export_csv(self.runs.run.steps, path)
            except OSError as exc:
                self.window.show_error(f"cannot write {path}: {exc.strerror or exc}")

    def export_charts_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self.window, "Export charts", self._trace_dir(),
                                              "PNG image (*.png)")
        if path and not self.window.charts.grab().save(path):
            self.window.show_error(f"cannot write the image {path}")

    # --- the folder last used -----------------------------------------------------------
    def _trace_dir(self) -> str:
        return self.window.settings.last_trace_dir or str(Path.home())

    def _remember_trace_dir(self, path: str) -> None:
        self.window.settings.last_trace_dir = str(Path(path).parent)
