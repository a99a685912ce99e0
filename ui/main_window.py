"""The main window: pair picker and decode panel on the left; the coloured text, the step
inspector and the live charts on the right; menus, shortcuts, status line, and the settings
and theme it restores and saves.

Two helpers the window owns do the rest, and the window's public methods delegate to them:
ui.run_control.RunControl starts, steps and stops runs on the worker thread and renders the
records into the views on a ~10 Hz timer; ui.trace_files.TraceFiles opens, saves and exports
traces through the same record path, so an opened trace looks exactly like a live run.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QByteArray, QRect, QSize, Qt, QThread, Signal
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
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.draft_memory import default_memory_path, forget
from app.errors import DraftMemoryError
from app.models.demo import demo_installed, demo_paths
from app.settings import RecentPair, Settings, load_settings, save_settings
from ui import theme
from ui.about import show_about
from ui.charts import ChartsPanel
from ui.decode_panel import DecodePanel
from ui.first_run import FirstRunPage
from ui.fit import FittingScrollArea, fit_window
from ui.icon import app_icon
from ui.latency import freeze_heap
from ui.pair_picker import PairPicker
from ui.run_control import RunControl
from ui.run_data import CompareResult, RunData
from ui.step_inspector import StepInspector
from ui.token_view import TokenView
from ui.trace_files import TraceFiles
from ui.why_tabs import WhyTabs
from ui.worker import RunWorker

DEFAULT_SIZE = QSize(1500, 940)  # where the screen has room; see fit_to_screen


def demo_pair() -> RecentPair:
    target, draft = demo_paths()
    return RecentPair(str(target), str(draft), backend="llamacpp")


class MainWindow(QMainWindow):
    run_done = Signal()  # a run (live) has ended: finished, stopped or failed
    error_shown = Signal(str)  # an error dialog is about to be shown with this message
    paused = Signal()  # Step mode: the records so far are in; the worker waits for Step

    def __init__(self, settings: Settings | None = None, save_path: Path | None = None) -> None:
        super().__init__()
        self.settings = settings if settings is not None else load_settings(save_path)
        self._save_path = save_path
        self.setWindowTitle("DraftLens")
        self.setWindowIcon(app_icon())
        self._colours = theme.LIGHT
        self.dialogs = True  # False: errors only go to error_shown (self-test, scripts)
        self.trace_folder: Path | None = None  # None: the data folder's traces/

        self._make_actions()
        self._make_widgets()
        self._make_menus()
        self.run_control = RunControl(self)  # the worker thread, the run on show, redraws
        self.trace_files = TraceFiles(self, self.run_control)
        self._make_why_tabs()
        self.worker: RunWorker = self.run_control.worker
        self.thread: QThread = self.run_control.worker_thread  # as before, shadows QObject.thread
        self._restore_settings()
        self.picker.probe_devices()
        hints = QGuiApplication.styleHints()
        if hasattr(hints, "colorSchemeChanged"):
            hints.colorSchemeChanged.connect(self._system_scheme_changed)
        self.update_actions()

    # --- the run on show (kept by run_control) ------------------------------------------
    @property
    def run(self) -> RunData | None:
        return self.run_control.run

    @property
    def baseline(self) -> RunData | None:
        return self.run_control.baseline

    @property
    def compare_result(self) -> CompareResult | None:
        return self.run_control.compare_result

    @property
    def trace_path(self) -> Path | None:
        return self.run_control.trace_path

    @property
    def running(self) -> bool:
        return self.run_control.running

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
        scroll = FittingScrollArea(left)  # as wide as the panels need: nothing cut off
        left_column = QWidget()
        column = QVBoxLayout(left_column)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        column.addWidget(scroll, 1)
        column.addWidget(self.decode.button_bar)  # Run / Stop / Step always in view

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
        self.main_split = QSplitter(Qt.Orientation.Horizontal)
        self.main_split.addWidget(left_column)
        self.main_split.addWidget(self.right_split)
        self.main_split.setStretchFactor(0, 0)
        self.main_split.setStretchFactor(1, 1)
        # the left column as narrow as its panels allow: a small screen's width goes to the
        # text, the step table and the charts
        self.main_split.setSizes([scroll.minimumSizeHint().width(), 1100])
        self.splitters = {"main": self.main_split, "right": self.right_split,
                          "top": self.top_split, "inspector": self.inspector.splitter}

        self.first_run = FirstRunPage()
        self.stack = QStackedWidget()
        self.stack.addWidget(self.main_split)
        self.stack.addWidget(self.first_run)
        self.setCentralWidget(self.stack)

        self.status_label = QLabel("ready")
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)  # busy, until a step of loading says its size
        self.busy.setMaximumWidth(160)
        self.busy.setVisible(False)
        self.statusBar().addWidget(self.status_label, 1)
        self.statusBar().addPermanentWidget(self.busy)

        self.text_view.step_clicked.connect(self.select_step)
        self.inspector.step_changed.connect(self.text_view.select_step)
        self.picker.changed.connect(self.update_actions)
        self.picker.probed.connect(self._startup_settled)
        self.picker.folders_changed.connect(self._folders_changed)
        self.picker.forget_requested.connect(self.forget_draft_memory)
        self.picker.remember.toggled.connect(self._remember_drafts_changed)
        self.first_run.demo_ready.connect(self._demo_ready)
        self.first_run.open_files.connect(self.open_model_files)
        self.first_run.failed.connect(self.show_error)
        for key in ("Left", "PgUp"):
            self._nav_shortcut(key, self.inspector.previous_step)
        for key in ("Right", "PgDown"):
            self._nav_shortcut(key, self.inspector.next_step)

    def _make_why_tabs(self) -> None:
        """The bottom tabs need the run control (worker signals), so they come after it."""
        self.why = WhyTabs(self, self.charts)
        self.why.notice.watch_draft.connect(self.watch_draft_anyway)
        self.right_split.addWidget(self.why)
        # about half for the charts: on a 768-pixel screen less cut their axis labels off
        self.right_split.setSizes([460, 480])
        self.run_done.connect(self.why.refresh)
        # the inspector gets the width its 8 columns need, so u, decision and replacement
        # are not behind a scrollbar at the default window size
        self.top_split.setSizes([440, 600])

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

    # --- settings -----------------------------------------------------------------------
    def _restore_settings(self) -> None:
        s = self.settings
        if s.window_geometry:
            self.restoreGeometry(QByteArray(base64.b64decode(s.window_geometry)))
            preferred = self.size()
        else:
            preferred = DEFAULT_SIZE
        self.fit_to_screen(preferred)
        for name, splitter in self.splitters.items():
            state = s.splitters.get(name)
            if state:
                splitter.restoreState(QByteArray(base64.b64decode(state)))
        self.decode.set_choices(s.decode)
        self.act_rejected.setChecked(s.show_rejected)
        self.text_view.set_show_rejected(s.show_rejected)
        self.set_theme(s.theme)
        demo = demo_pair() if demo_installed() else None
        self.picker.set_model_folders(s.model_folders)
        self.picker.remember.setChecked(s.remember_drafts)
        self.picker.rescan_models()
        self.picker.set_recent(s.recent_pairs, demo)
        if s.recent_pairs:
            self.picker.set_pair(s.recent_pairs[0])
        elif demo is not None:
            self.picker.set_pair(demo)
        if demo is None and not s.recent_pairs:
            self.show_first_run()

    def fit_to_screen(self, preferred: QSize, available: QRect | None = None) -> None:
        """`preferred`, or as much of it as the screen (by default, the window's) has room for
        once its panels and taskbars are left out, centred there."""
        if available is None:
            screen = self.screen() or QGuiApplication.primaryScreen()
            if screen is None:
                self.resize(preferred)
                return
            available = screen.availableGeometry()
        fit_window(self, preferred, available)

    def _store_settings(self) -> None:
        s = self.settings
        s.window_geometry = base64.b64encode(bytes(self.saveGeometry())).decode()
        s.splitters = {name: base64.b64encode(bytes(sp.saveState())).decode()
                       for name, sp in self.splitters.items()}  # fmt: skip
        s.decode = self.decode.choices()
        s.show_rejected = self.act_rejected.isChecked()
        self._save_settings()

    def remember_current_pair(self) -> None:
        """The pair just loaded goes first in the recent pairs (and the settings file)."""
        self.settings.remember_pair(self.picker.current_pair())
        demo = demo_pair() if demo_installed() else None
        self.picker.set_recent(self.settings.recent_pairs, demo)
        self._save_settings()

    def _remember_drafts_changed(self, on: bool) -> None:
        self.settings.remember_drafts = on
        self._save_settings()

    def forget_draft_memory(self) -> None:
        """Empty the draft memory. The engine host holds a copy it would write back after
        its next run, so it goes first (the next run starts a new one)."""
        path = default_memory_path()
        if self.dialogs and QMessageBox.question(
                self, "DraftLens", f"Forget the earlier outputs that suffix decoding keeps in "
                f"{path}?") != QMessageBox.StandardButton.Yes:  # fmt: skip
            return
        self.run_control.worker.close_models()
        try:
            runs, tokens = forget(path)
        except DraftMemoryError as exc:
            self.show_error(str(exc))
            return
        self.status_label.setText(f"Draft memory forgotten: {runs} earlier outputs, "
                                  f"{tokens:,} tokens")

    def _folders_changed(self, folders: list[str]) -> None:
        self.settings.model_folders = folders
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
        if hasattr(self, "why"):
            self.why.set_colours(self._colours)
        self.picker.set_colours(self._colours)
        self.legend.setText("  ".join(theme.legend_html(o, self._colours) for o in (
            "accepted", "replacement", "bonus", "plain", theme.REJECTED)))
        self.run_control.mark_dirty()

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

    # --- actions ------------------------------------------------------------------------
    def update_actions(self) -> None:
        """Enable what makes sense now (idle or running, a pair that can run, a trace to save)."""
        runs = self.run_control
        reason = self.picker.blocking_reason()
        idle = not runs.running
        free = idle or bool(runs.interruptible)  # a job, work after a run: Run cancels it
        self.act_run.setEnabled((free and not reason) or (runs.running and runs.step_mode))
        self.act_step.setEnabled((idle and not reason) or runs.running)
        self.act_stop.setEnabled(runs.running)
        tip = reason or "Run the prompt (Ctrl+Enter)"
        self.act_run.setToolTip(tip)
        self.decode.run_button.setToolTip(tip)
        self.act_save.setEnabled(runs.trace_path is not None and idle)
        self.act_csv.setEnabled(runs.run is not None)
        self.picker.setEnabled(idle)
        self.act_open.setEnabled(idle)

    def show_error(self, message: str) -> None:
        self.error_shown.emit(message)
        if self.dialogs:
            QMessageBox.critical(self, "DraftLens", message)

    def select_step(self, index: int) -> None:
        self.inspector.show_step(index)

    # --- running (ui.run_control) -------------------------------------------------------
    def start_run(self, step_mode: bool = False) -> None:
        """Run (or, during a Step-mode run, continue without pausing)."""
        self.run_control.start_run(step_mode)

    def step_once(self) -> None:
        """Idle: start a run one step at a time. Running: release (or pause at) the next step."""
        self.run_control.step_once()

    def stop_run(self) -> None:
        self.run_control.stop_run()

    def watch_draft_anyway(self, k: int) -> None:
        """Adaptive k decoded plainly: run the same prompt again drafting a fixed k per step."""
        if self.running or k < 1:
            return
        self.decode.adaptive.setChecked(False)
        self.decode.draft_max.setValue(k)
        self.start_run()

    def flush(self, force: bool = False) -> None:
        """Render what arrived since the last redraw (see RunControl.flush)."""
        self.run_control.flush(force)

    # --- traces and exports (ui.trace_files) --------------------------------------------
    def open_trace(self, path: str | Path) -> None:
        """Show a saved trace through the same path live records take."""
        self.trace_files.open_trace(path)
        self.why.refresh()

    def open_trace_dialog(self) -> None:
        self.trace_files.open_trace_dialog()

    def save_trace(self, destination: str | Path) -> None:
        """Copy the run's trace (written during the run) and its plain baseline, if any."""
        self.trace_files.save_trace(destination)

    def save_trace_dialog(self) -> None:
        self.trace_files.save_trace_dialog()

    def export_csv_dialog(self) -> None:
        self.trace_files.export_csv_dialog()

    def export_charts_dialog(self) -> None:
        self.trace_files.export_charts_dialog()

    # --- closing ------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop the worker cleanly (cancel, quit, wait) and free the models."""
        self.run_control.cancel()
        self.first_run.shutdown()
        self.run_control.close()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        self._store_settings()
        self.shutdown()
        event.accept()
