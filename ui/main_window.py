"""The main window: pair picker and decode panel on the left; the coloured text, the step
inspector and the live charts on the right; menus, shortcuts, status line.

Records reach the views through one path, `_begin_run` + `_add_step`, whether they come from
the worker live or from a trace file, so an opened trace looks exactly like a live run. Views
render on a ~10 Hz timer (`flush`), never per record.
"""

from __future__ import annotations

import base64
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QByteArray, Qt, QThread, QTimer, Signal
from PySide6.QtGui import (
    QAction,
    QActionGroup,
    QCloseEvent,
    QGuiApplication,
    QKeySequence,
    QShortcut,
)
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.demo import demo_installed, demo_paths
from app.errors import DraftLensError
from app.settings import RecentPair, Settings, load_settings, save_settings
from app.trace import StepRecord, TraceHeader, export_csv, read_trace
from ui import theme
from ui.about import show_about
from ui.charts import ChartsPanel
from ui.decode_panel import DecodePanel
from ui.first_run import FirstRunPage
from ui.icon import app_icon
from ui.latency import freeze_heap
from ui.pair_picker import PairPicker
from ui.run_data import KIND_PLAIN, KIND_SPECULATIVE, CompareResult, RunData
from ui.step_inspector import StepInspector
from ui.token_view import TokenView
from ui.worker import LoadInfo, RunRequest, RunWorker, default_trace_path, plain_trace_path

REDRAW_MS = 100
INSPECTOR_S = 1.0  # during a run, the inspector follows the newest step at most this often
TRACE_FILTER = "DraftLens traces (*.jsonl);;All files (*)"


def demo_pair() -> RecentPair:
    target, draft = demo_paths()
    return RecentPair(str(target), str(draft), backend="llamacpp")


class MainWindow(QMainWindow):
    run_done = Signal()  # a run (live) has ended: finished, stopped or failed
    error_shown = Signal(str)  # an error dialog is about to be shown with this message
    paused = Signal()  # Step mode: the records so far are in; the worker waits for Step

    _request_run = Signal(object)  # RunRequest, to the worker thread

    def __init__(self, settings: Settings | None = None, save_path: Path | None = None) -> None:
        super().__init__()
        self.settings = settings if settings is not None else load_settings(save_path)
        self._save_path = save_path
        self.setWindowTitle("DraftLens")
        self.setWindowIcon(app_icon())
        self.run: RunData | None = None
        self.baseline: RunData | None = None
        self.compare_result: CompareResult | None = None
        self.trace_path: Path | None = None
        self.running = False
        self._step_mode = False
        self._dirty = False
        self._charts_dirty = False
        self._inspector_dirty = False
        self._inspector_at = 0.0
        self._current: RunData | None = None
        self._colours = theme.LIGHT
        self.dialogs = True  # False: errors only go to error_shown (self-test, scripts)
        self.trace_folder: Path | None = None  # None: the data folder's traces/

        self._make_actions()
        self._make_widgets()
        self._make_menus()
        self._make_worker()
        self._restore_settings()
        self.picker.probe_devices()
        hints = QGuiApplication.styleHints()
        if hasattr(hints, "colorSchemeChanged"):
            hints.colorSchemeChanged.connect(self._system_scheme_changed)
        self.timer = QTimer(self, interval=REDRAW_MS)
        self.timer.timeout.connect(self.flush)
        self.timer.start()
        self._update_actions()

    # --- construction -------------------------------------------------------------------
    def _action(self, text: str, slot: Callable[..., object], shortcuts: tuple = (),
                tip: str = "") -> QAction:  # fmt: skip
        action = QAction(text, self)
        if shortcuts:
            action.setShortcuts([QKeySequence(s) for s in shortcuts])
        if tip:
            action.setToolTip(tip)
            action.setStatusTip(tip)
        action.triggered.connect(slot)
        return action

    def _make_actions(self) -> None:
        self.act_open = self._action("&Open trace…", self.open_trace_dialog,
                                     (QKeySequence.StandardKey.Open,))
        self.act_save = self._action("&Save trace…", self.save_trace_dialog,
                                     (QKeySequence.StandardKey.Save,))
        self.act_csv = self._action("Export &CSV…", self.export_csv_dialog)
        self.act_png = self._action("Export charts &PNG…", self.export_charts_dialog)
        self.act_models = self._action("Open &model files…", self.open_model_files)
        self.act_demo = self._action("&Download the demo pair…", self.show_first_run)
        self.act_quit = self._action("&Quit", self.close, (QKeySequence.StandardKey.Quit,))
        self.act_run = self._action("Run", self.start_run, ("Ctrl+Return", "Ctrl+Enter"),
                                    "Run the prompt (Ctrl+Enter)")
        self.act_stop = self._action("Stop", self.stop_run, ("Esc",), "Stop the run (Esc)")
        self.act_step = self._action("Step", self.step_once, ("F10",),
                                     "One verify step at a time (F10)")
        self.act_rejected = self._action("Show &rejected drafts", self._toggle_rejected)
        self.act_rejected.setCheckable(True)
        self.act_about = self._action("&About DraftLens", lambda: show_about(self))
        self.theme_group = QActionGroup(self)
        self.theme_actions: dict[str, QAction] = {}
        for name in ("system", "light", "dark"):
            action = self._action(name.capitalize(), lambda _=False, n=name: self.set_theme(n))
            action.setCheckable(True)
            self.theme_group.addAction(action)
            self.theme_actions[name] = action

    def _make_widgets(self) -> None:
        self.picker = PairPicker()
        self.decode = DecodePanel(self.act_run, self.act_stop, self.act_step)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(4, 4, 4, 4)
        left_layout.addWidget(self.picker)
        left_layout.addWidget(self.decode, 1)
        scroll = QScrollArea()
        scroll.setWidget(left)
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setMinimumWidth(340)

        self.text_view = TokenView()
        self.plain_view = TokenView()
        self.legend = QLabel()
        self.legend.setWordWrap(True)
        self.compare_label = QLabel()
        self.compare_label.setWordWrap(True)
        self.text_tabs = QTabWidget()
        self.text_tabs.addTab(self.text_view, "Output")
        self.text_tabs.addTab(self.plain_view, "Plain baseline")
        text_panel = QWidget()
        text_layout = QVBoxLayout(text_panel)
        text_layout.setContentsMargins(4, 4, 4, 4)
        text_layout.addWidget(self.legend)
        text_layout.addWidget(self.text_tabs, 1)
        text_layout.addWidget(self.compare_label)

        self.inspector = StepInspector()
        self.charts = ChartsPanel()
        self.top_split = QSplitter(Qt.Orientation.Horizontal)
        self.top_split.addWidget(text_panel)
        self.top_split.addWidget(self.inspector)
        self.top_split.setSizes([520, 520])
        self.right_split = QSplitter(Qt.Orientation.Vertical)
        self.right_split.addWidget(self.top_split)
        self.right_split.addWidget(self.charts)
        self.right_split.setSizes([520, 400])
        self.main_split = QSplitter(Qt.Orientation.Horizontal)
        self.main_split.addWidget(scroll)
        self.main_split.addWidget(self.right_split)
        self.main_split.setStretchFactor(1, 1)
        self.main_split.setSizes([400, 1100])
        self.splitters = {"main": self.main_split, "right": self.right_split,
                          "top": self.top_split, "inspector": self.inspector.splitter}

        self.first_run = FirstRunPage()
        self.stack = QStackedWidget()
        self.stack.addWidget(self.main_split)
        self.stack.addWidget(self.first_run)
        self.setCentralWidget(self.stack)

        self.status_label = QLabel("ready")
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)  # indeterminate: loading has phases, not a fraction
        self.busy.setMaximumWidth(160)
        self.busy.setVisible(False)
        self.statusBar().addWidget(self.status_label, 1)
        self.statusBar().addPermanentWidget(self.busy)

        self.text_view.step_clicked.connect(self.select_step)
        self.inspector.step_changed.connect(self.text_view.select_step)
        self.picker.changed.connect(self._update_actions)
        self.picker.probed.connect(self._startup_settled)
        self.first_run.demo_ready.connect(self._demo_ready)
        self.first_run.open_files.connect(self.open_model_files)
        self.first_run.failed.connect(self.show_error)
        for key in ("Left", "PgUp"):
            self._nav_shortcut(key, self.inspector.previous_step)
        for key in ("Right", "PgDown"):
            self._nav_shortcut(key, self.inspector.next_step)

    def _nav_shortcut(self, key: str, slot: Callable[[], object]) -> None:
        shortcut = QShortcut(QKeySequence(key), self.right_split)
        shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        shortcut.activated.connect(slot)

    def _make_menus(self) -> None:
        bar = self.menuBar()
        file = bar.addMenu("&File")
        for action in (self.act_open, self.act_save, self.act_csv, self.act_png):
            file.addAction(action)
        file.addSeparator()
        file.addAction(self.act_models)
        file.addAction(self.act_demo)
        file.addSeparator()
        file.addAction(self.act_quit)
        run = bar.addMenu("&Run")
        for action in (self.act_run, self.act_stop, self.act_step):
            run.addAction(action)
        view = bar.addMenu("&View")
        themes = view.addMenu("&Theme")
        for action in self.theme_actions.values():
            themes.addAction(action)
        view.addAction(self.act_rejected)
        bar.addMenu("&Help").addAction(self.act_about)

    def _make_worker(self) -> None:
        self.thread = QThread(self)
        self.thread.setObjectName("draftlens-worker")
        self.worker = RunWorker()
        self.worker.moveToThread(self.thread)
        self._request_run.connect(self.worker.run)
        self.worker.progress.connect(self._on_progress)
        self.worker.loaded.connect(self._on_loaded)
        self.worker.run_started.connect(self._on_run_started)
        self.worker.step.connect(self._on_step)
        self.worker.run_finished.connect(self._on_run_finished)
        self.worker.compared.connect(self._on_compared)
        self.worker.waiting.connect(self._on_waiting)
        self.worker.failed.connect(self.show_error)
        self.worker.done.connect(self._on_done)
        self.thread.start()

    # --- settings -----------------------------------------------------------------------
    def _restore_settings(self) -> None:
        s = self.settings
        if s.window_geometry:
            self.restoreGeometry(QByteArray(base64.b64decode(s.window_geometry)))
        else:
            self.resize(1500, 940)
        for name, splitter in self.splitters.items():
            state = s.splitters.get(name)
            if state:
                splitter.restoreState(QByteArray(base64.b64decode(state)))
        self.decode.set_choices(s.decode)
        self.act_rejected.setChecked(s.show_rejected)
        self.text_view.set_show_rejected(s.show_rejected)
        self.set_theme(s.theme)
        demo = demo_pair() if demo_installed() else None
        self.picker.set_recent(s.recent_pairs, demo)
        if s.recent_pairs:
            self.picker.set_pair(s.recent_pairs[0])
        elif demo is not None:
            self.picker.set_pair(demo)
        if demo is None and not s.recent_pairs:
            self.show_first_run()

    def _store_settings(self) -> None:
        s = self.settings
        s.window_geometry = base64.b64encode(bytes(self.saveGeometry())).decode()
        s.splitters = {name: base64.b64encode(bytes(sp.saveState())).decode()
                       for name, sp in self.splitters.items()}  # fmt: skip
        s.decode = self.decode.choices()
        s.show_rejected = self.act_rejected.isChecked()
        self._save_settings()

    def _save_settings(self) -> None:
        try:
            save_settings(self.settings, self._save_path)
        except OSError as exc:
            self.status_label.setText(f"could not save settings: {exc}")

    # --- theme --------------------------------------------------------------------------
    def set_theme(self, name: str) -> None:
        app = QApplication.instance()
        if name not in self.theme_actions:
            name = "system"
        self.settings.theme = name
        self.theme_actions[name].setChecked(True)
        self._colours = theme.apply_theme(app, name) if app is not None else theme.LIGHT
        for view in (self.text_view, self.plain_view):
            view.set_colours(self._colours)
        self.inspector.set_colours(self._colours)
        self.charts.set_colours(self._colours)
        self.picker.set_colours(self._colours)
        self.legend.setText("  ".join(theme.legend_html(o, self._colours) for o in (
            "accepted", "replacement", "bonus", "plain", theme.REJECTED)))
        self._dirty = True

    def _startup_settled(self) -> None:
        if not self.running:
            freeze_heap()  # the big imports are done: keep later GC pauses short

    def _system_scheme_changed(self, *_: object) -> None:
        if self.settings.theme == "system":
            self.set_theme("system")

    def _toggle_rejected(self, on: bool) -> None:
        self.settings.show_rejected = on
        self.text_view.set_show_rejected(on)
        self.text_view.select_step(self.inspector.index, scroll=False)

    # --- pages --------------------------------------------------------------------------
    def show_first_run(self) -> None:
        self.stack.setCurrentWidget(self.first_run)

    def show_workspace(self) -> None:
        self.stack.setCurrentWidget(self.main_split)

    def open_model_files(self) -> None:
        self.show_workspace()
        self.picker.target.edit.setFocus()
        if not self.picker.target.path():
            self.picker.target._pick_file()

    def _demo_ready(self, target: str, draft: str) -> None:
        demo = RecentPair(target, draft, backend="llamacpp")
        self.picker.set_recent(self.settings.recent_pairs, demo)
        self.picker.set_pair(demo)
        self.show_workspace()

    # --- running ------------------------------------------------------------------------
    def _update_actions(self) -> None:
        reason = self.picker.blocking_reason()
        idle = not self.running
        self.act_run.setEnabled((idle and not reason) or (self.running and self._step_mode))
        self.act_step.setEnabled((idle and not reason) or self.running)
        self.act_stop.setEnabled(self.running)
        tip = reason or "Run the prompt (Ctrl+Enter)"
        self.act_run.setToolTip(tip)
        self.decode.run_button.setToolTip(tip)
        self.act_save.setEnabled(self.trace_path is not None and idle)
        self.act_csv.setEnabled(self.run is not None)
        self.picker.setEnabled(idle)
        self.act_open.setEnabled(idle)

    def start_run(self, step_mode: bool = False) -> None:
        """Run (or, during a Step-mode run, continue without pausing)."""
        if self.running:
            if self._step_mode and not step_mode:
                self._step_mode = False
                self.worker.set_step_mode(False)
                self._update_actions()
            return
        reason = self.picker.blocking_reason()
        if reason:
            self.status_label.setText(reason)
            return
        choices = self.decode.choices()
        config = self.decode.config()
        try:
            config.validate()
        except DraftLensError as exc:
            self.show_error(str(exc))
            return
        request = RunRequest(self.picker.model_spec(), choices.prompt, config,
                             chat=choices.chat, compare=choices.compare,
                             trace_path=default_trace_path(self.trace_folder))
        self._reset_views()
        self.trace_path = None
        self.running = True
        self._step_mode = step_mode
        self.worker.prepare(step_mode)
        if step_mode:
            self.worker.release_step()
        self.status_label.setText("starting…")
        self.busy.setVisible(True)
        self._request_run.emit(request)
        self._update_actions()

    def step_once(self) -> None:
        """Idle: start a run one step at a time. Running: release (or pause at) the next step."""
        if not self.running:
            self.start_run(step_mode=True)
        elif self._step_mode:
            self.worker.release_step()
        else:
            self._step_mode = True
            self.worker.set_step_mode(True)
            self._update_actions()

    def stop_run(self) -> None:
        if self.running:
            self.worker.cancel()
            self.status_label.setText("stopping after this step…")

    def _reset_views(self) -> None:
        self.run = None
        self.baseline = None
        self.compare_result = None
        self.compare_label.setText("")
        self.text_view.clear_run()
        self.plain_view.clear_run()
        self.inspector.set_steps([])
        self.text_tabs.setCurrentWidget(self.text_view)
        self._dirty = True

    # --- records in (live or from a trace) ----------------------------------------------
    def _begin_run(self, kind: str, header: TraceHeader | None) -> RunData:
        data = RunData(kind, header)
        chat = bool(header and header.settings.get("chat"))
        prefix = header.prompt if header is not None and not chat else ""
        if self.run is None:
            self.run = data
            self.text_view.clear_run(prefix)
            self.inspector.set_steps(data.steps)
        else:
            self.baseline = data
            self.plain_view.clear_run(prefix)
        self._dirty = True
        return data

    def _add_step(self, data: RunData, step: StepRecord) -> None:
        data.add(step)
        (self.text_view if data is self.run else self.plain_view).add_step(step)
        self._dirty = True

    def flush(self, force: bool = False) -> None:
        """Render what arrived since the last call (the ~10 Hz timer calls this). During a run
        the inspector follows the newest step every INSPECTOR_S and the charts redraw when due
        (ChartsPanel.due); idle, paused or forced, everything is brought up to date at once."""
        if self._dirty:
            self._dirty = False
            self._charts_dirty = self._inspector_dirty = True
            self.text_view.flush()
            self.plain_view.flush()
            self._update_status()
        live = self.running and not force
        now = time.perf_counter()
        if self._inspector_dirty and (not live or now - self._inspector_at >= INSPECTOR_S):
            self._inspector_dirty = False
            self._inspector_at = now
            if self.run is not None:
                self.inspector.steps_added()
        if not live:
            if self._charts_dirty or self.charts.in_round:
                self._charts_dirty = False
                self.charts.redraw(self.run, self.baseline)
        elif (self._charts_dirty or self.charts.in_round) and self.charts.redraw_some(
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
        if self.baseline is not None and self.baseline.steps:
            parts.append(f"plain {self.baseline.stats.tokens_per_second:.1f} tok/s")
        prefix = "running · " if self.running else ""
        self.status_label.setText(prefix + " · ".join(parts))

    # --- worker signals -----------------------------------------------------------------
    def _on_progress(self, message: str) -> None:
        self.status_label.setText(f"loading: {message}…")

    def _on_loaded(self, info: LoadInfo) -> None:
        text = f"loaded {info.target}" + (f" + {info.draft}" if info.draft else "")
        text += f" ({info.backend}, {info.device})"
        if info.warnings:
            text += " · ⚠ " + "; ".join(info.warnings)
        self.status_label.setText(text)
        self.settings.remember_pair(self.picker.current_pair())
        demo = demo_pair() if demo_installed() else None
        self.picker.set_recent(self.settings.recent_pairs, demo)
        self._save_settings()

    def _on_run_started(self, kind: str, header: TraceHeader) -> None:
        self.busy.setVisible(False)
        self._current = self._begin_run(kind, header)

    def _on_step(self, kind: str, step: StepRecord) -> None:
        data = self._current
        if data is not None and data.kind == kind:
            self._add_step(data, step)

    def _on_run_finished(self, kind: str, summary: dict) -> None:
        if self._current is not None:
            self._current.summary = summary

    def _on_compared(self, result: CompareResult) -> None:
        self.compare_result = result
        self.compare_label.setText("Compared with plain decoding: " + result.describe())

    def _on_waiting(self) -> None:
        self._dirty = True
        self.flush(force=True)
        self.status_label.setText(self.status_label.text().replace("running · ", "")
                                  + " · paused: Step for the next verify step, Run to continue")
        self.paused.emit()

    def _on_done(self, trace_path: str) -> None:
        self.busy.setVisible(False)
        self.running = False
        self._step_mode = False
        self._current = None
        if trace_path and Path(trace_path).exists():
            self.trace_path = Path(trace_path)
        self._dirty = True
        self.flush()
        if self.run is None:
            self.status_label.setText("stopped" if self.worker.cancelled else "ready")
        self._update_actions()
        self.run_done.emit()

    def show_error(self, message: str) -> None:
        self.error_shown.emit(message)
        if self.dialogs:
            QMessageBox.critical(self, "DraftLens", message)

    def select_step(self, index: int) -> None:
        self.inspector.show_step(index)

    # --- traces and exports -------------------------------------------------------------
    def open_trace(self, path: str | Path) -> None:
        """Show a saved trace through the same path live records take."""
        trace = read_trace(path)
        self._reset_views()
        mode = trace.header.mode if trace.header is not None else KIND_SPECULATIVE
        data = self._begin_run(KIND_PLAIN if mode == "plain" else KIND_SPECULATIVE, trace.header)
        for step in trace.steps:
            self._add_step(data, step)
        data.summary = trace.summary
        plain_file = plain_trace_path(Path(path))
        if mode != "plain" and plain_file.exists():
            plain = read_trace(plain_file)
            baseline = self._begin_run(KIND_PLAIN, plain.header)
            for step in plain.steps:
                self._add_step(baseline, step)
            self._show_trace_comparison(data, baseline)
        self.trace_path = Path(path)
        self.show_workspace()
        self.flush()
        self.inspector.show_step(0)
        self.status_label.setText(f"opened {Path(path).name} · " + self.status_label.text())
        self._update_actions()

    def _show_trace_comparison(self, run: RunData, baseline: RunData) -> None:
        greedy = bool(run.header and run.header.settings.get("sampling", {})
                      .get("temperature", 0.0) == 0.0)  # fmt: skip
        self._on_compared(CompareResult(
            run.stats.tokens_per_second, baseline.stats.tokens_per_second,
            run.output_ids == baseline.output_ids, greedy, run.stats.emitted,
            baseline.stats.emitted,
        ))  # fmt: skip

    def open_trace_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a trace", self._trace_dir(),
                                              TRACE_FILTER)
        if path:
            self._remember_trace_dir(path)
            try:
                self.open_trace(path)
            except DraftLensError as exc:
                self.show_error(str(exc))

    def save_trace(self, destination: str | Path) -> None:
        """Copy the run's trace (written during the run) and its plain baseline, if any."""
        if self.trace_path is None:
            raise DraftLensError("nothing to save yet — run a prompt first")
        destination = Path(destination)
        try:
            if destination.resolve() != self.trace_path.resolve():
                shutil.copyfile(self.trace_path, destination)
                plain = plain_trace_path(self.trace_path)
                if plain.exists():
                    shutil.copyfile(plain, plain_trace_path(destination))
        except OSError as exc:
            raise DraftLensError(f"cannot save the trace to {destination}: "
                                 f"{exc.strerror or exc}") from exc

    def save_trace_dialog(self) -> None:
        if self.trace_path is None:
            self.show_error("nothing to save yet — run a prompt first")
            return
        start = str(Path(self._trace_dir()) / self.trace_path.name)
        path, _ = QFileDialog.getSaveFileName(self, "Save the trace", start, TRACE_FILTER)
        if path:
            self._remember_trace_dir(path)
            try:
                self.save_trace(path)
            except DraftLensError as exc:
                self.show_error(str(exc))

    def export_csv_dialog(self) -> None:
        if self.run is None:
            return
        path, _ = QFileDialog.getSaveFileName(self, "Export CSV", self._trace_dir(),
                                              "CSV (*.csv)")
        if path:
            try:
                export_csv(self.run.steps, path)
            except OSError as exc:
                self.show_error(f"cannot write {path}: {exc.strerror or exc}")

    def export_charts_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export charts", self._trace_dir(),
                                              "PNG image (*.png)")
        if path and not self.charts.grab().save(path):
            self.show_error(f"cannot write the image {path}")

    def _trace_dir(self) -> str:
        return self.settings.last_trace_dir or str(Path.home())

    def _remember_trace_dir(self, path: str) -> None:
        self.settings.last_trace_dir = str(Path(path).parent)

    # --- closing ------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop the worker cleanly (cancel, quit, wait) and free the models."""
        self.timer.stop()
        self.worker.cancel()
        self.first_run.shutdown()
        self.thread.quit()
        self.thread.wait()
        self.worker.close_models()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        self._store_settings()
        self.shutdown()
        event.accept()
