"""The bottom of the window: the live charts, and beside them the views that say why a run is
(not) faster and why tokens were rejected — the cost view, the rejection analysis, and the
sweep / ranking / exactness experiments — under the cost model's one-line verdict.

The verdict rests on comparable figures: a plain step and a draft token timed in turns when the
pair loads, then, once a second during a run and when it ends, the run's own step timings
(medians). Where a run's adaptive k decoded plainly, the notice under the verdict says why in the
same figures (ui.plain_notice): one notice, the width of the window's right side, between the
empty step table above and the empty acceptance charts below, whichever tab is open."""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel, QTabWidget, QVBoxLayout, QWidget

from app.analysis.cost import AcceptanceSeen
from app.engine.drafters.self_skip import SkipChoice
from ui.charts import ChartsPanel
from ui.cost_view import CostPanel
from ui.experiments import ExperimentsPanel, ExperimentWindow
from ui.plain_notice import PlainRunNotice
from ui.rejection_view import RejectionPanel
from ui.run_data import RunData, adaptive_ran_plainly, run_costs
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
        self.notice = PlainRunNotice()
        self.self_draft = QLabel("")  # a self-drafted run: the layers skipped, the figures
        self.self_draft.setWordWrap(True)
        self.self_draft.setVisible(False)
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
        layout.addWidget(self.self_draft)
        layout.addWidget(self.notice)
        layout.addWidget(self.tabs, 1)
        self.tabs.currentChanged.connect(lambda _: self.refresh())
        self.timer = QTimer(self, interval=REFRESH_MS)
        self.timer.timeout.connect(self._tick)
        self.timer.start()

    def set_colours(self, colours: Colours) -> None:
        self.cost.set_colours(colours)
        self.rejections.set_colours(colours)
        self.experiments.set_colours(colours)

    def _show_verdict(self) -> None:
        view = self.cost.view_data
        self.verdict.setVisible(view is not None)
        if view is not None:
            self.verdict.setText("<b>Cost view:</b> " + view.verdict())

    def _tick(self) -> None:
        """Once a second: the verdict follows the run's timings; the rejections tab, if on
        show, its steps."""
        if self.window.run_control.running or self.tabs.currentWidget() is self.rejections:
            self.refresh()

    def refresh(self) -> None:
        run: RunData | None = self.window.run_control.run
        self._follow_costs(run)
        self._show_self_draft(run)
        if run is None:
            self.rejections.reset()
            return
        if self.tabs.currentWidget() is self.rejections or not self.window.run_control.running:
            self.rejections.show_steps(run.steps)

    def _follow_costs(self, run: RunData | None) -> None:
        """The cost view from this run's own step timings and acceptance, and the notice."""
        costs = run_costs(run)
        if run is not None and run.stats.spec_steps:
            self.cost.show_costs(costs, AcceptanceSeen(run.stats.accepted, run.stats.judged))
        elif costs is not None:
            self.cost.set_costs(costs)
        self._show_verdict()
        plain = adaptive_ran_plainly(run)
        run_k = int(run.header.settings.get("draft_max", 0)) if run and run.header else 0
        self.notice.show_reason(plain, run.steps if run else [], self.cost.view_data, run_k)

    def _show_self_draft(self, run: RunData | None) -> None:
        """The figures the self-draft's layers were chosen by, from the run's trace header."""
        figures = run.header.settings.get("self_skip") if run and run.header else None
        self.self_draft.setVisible(bool(figures))
        self.self_draft.setText(SkipChoice.from_dict(figures).describe() if figures else "")
