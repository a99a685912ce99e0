"""The bottom of the window: the live charts, and beside them the views that say why a run is
(not) faster and why tokens were rejected — the cost view, the rejection analysis, and the
sweep / ranking / exactness experiments — under the cost model's one-line verdict."""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel, QTabWidget, QVBoxLayout, QWidget

from app.analysis.cost import PairCosts
from ui.charts import ChartsPanel
from ui.cost_view import CostPanel
from ui.experiments import ExperimentsPanel, ExperimentWindow
from ui.rejection_view import RejectionPanel
from ui.run_data import RunData
from ui.theme import Colours

REFRESH_MS = 1000


class WhyTabs(QWidget):
    def __init__(self, window: ExperimentWindow, charts: ChartsPanel) -> None:
        super().__init__()
        self.window = window
        self.charts = charts
        self.verdict = QLabel("")
        self.verdict.setWordWrap(True)
        self.verdict.setVisible(False)
        self.cost = CostPanel()
        self.rejections = RejectionPanel()
        self.experiments = ExperimentsPanel(window)
        self.tabs = QTabWidget()
        self.tabs.addTab(charts, "Live charts")
        self.tabs.addTab(self.cost, "Cost on this device")
        self.tabs.addTab(self.rejections, "Rejections")
        self.tabs.addTab(self.experiments, "Sweep · rank · exactness")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.verdict)
        layout.addWidget(self.tabs, 1)
        self.tabs.currentChanged.connect(lambda _: self.refresh())
        self.timer = QTimer(self, interval=REFRESH_MS)
        self.timer.timeout.connect(self._tick)
        self.timer.start()
        runs = window.run_control
        runs.worker.costs.connect(self.set_costs)

    def set_colours(self, colours: Colours) -> None:
        self.cost.set_colours(colours)
        self.rejections.set_colours(colours)
        self.experiments.set_colours(colours)

    def set_costs(self, costs: PairCosts) -> None:
        self.charts.set_costs(costs)
        self.cost.set_costs(costs)
        self._show_verdict()
        self.window.run_control.mark_dirty()

    def _show_verdict(self) -> None:
        view = self.cost.view_data
        self.verdict.setVisible(view is not None)
        if view is not None:
            self.verdict.setText("<b>Cost view:</b> " + view.verdict())

    def _tick(self) -> None:
        """Once a second: the current tab's view follows the run (skipped when unchanged)."""
        if self.tabs.currentWidget() in (self.cost, self.rejections):
            self.refresh()

    def refresh(self) -> None:
        run: RunData | None = self.window.run_control.run
        if run is None:
            self.rejections.reset()
            return
        if run.stats.spec_steps and not self.window.run_control.running:
            self.cost.set_alpha(round(run.stats.alpha, 2), run.stats.judged)
            self._show_verdict()
        if self.tabs.currentWidget() is self.rejections or not self.window.run_control.running:
            self.rejections.show_steps(run.steps)
