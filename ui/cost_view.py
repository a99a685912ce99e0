"""The cost view: why this pair is (not) faster on this device.

Left, the target's measured verify-cost curve t_verify(n) (ms for one pass over n tokens) next
to one plain step and one draft token; right, the speedup the cost model predicts at each k
beside the textbook E/(1+kc), shaded between the interval's two ends once a run has judged
enough draft tokens; above, the one-line verdict (app.analysis.cost owns every figure).
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import QGridLayout, QLabel, QVBoxLayout, QWidget

from app.analysis.cost import AcceptanceSeen, CostView, PairCosts
from ui.theme import LIGHT, Colours

EMPTY_TEXT = ("The cost view appears when a pair is loaded: it measures what verifying n tokens "
              "costs on this device and says what speedup this pair can reach.")


def _plot(title: str, left: str, bottom: str) -> pg.PlotWidget:
    view = pg.PlotWidget()
    view.setMinimumSize(160, 120)
    plot = view.getPlotItem()
    plot.setTitle(title, size="9pt")
    plot.setLabel("left", left)
    plot.setLabel("bottom", bottom)
    plot.showGrid(x=False, y=True, alpha=0.2)
    plot.setMenuEnabled(False)
    plot.setMouseEnabled(x=False, y=False)
    plot.hideButtons()
    plot.addLegend(offset=(4, 4), labelTextSize="8pt")
    return view


class CostPanel(QWidget):
    costs_shown = Signal()  # the view has a pair's costs (drawn now, or when next shown)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.costs: PairCosts | None = None
        self.seen: AcceptanceSeen | None = None  # the acceptance a run measured
        self.view_data: CostView | None = None
        self._drawn = True  # False: view_data changed while hidden, not yet drawn
        self.verdict = QLabel(EMPTY_TEXT)
        self.verdict.setWordWrap(True)
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.curve_view = _plot("verify cost on this device", "ms", "tokens in one target pass")
        self.speedup_view = _plot("speedup by draft length", "×", "k (draft tokens per pass)")
        grid = QGridLayout()
        grid.setContentsMargins(0, 0, 0, 0)
        grid.addWidget(self.curve_view, 0, 0)
        grid.addWidget(self.speedup_view, 0, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.verdict)
        layout.addLayout(grid, 1)
        self._colours = LIGHT
        cp = self.curve_view.getPlotItem()
        self.verify_curve = cp.plot([], [], name="t_verify(n)", symbol="o", symbolSize=6)
        self.plain_line = cp.plot([], [], name="plain step")
        self.draft_line = cp.plot([], [], name="one draft token")
        sp = self.speedup_view.getPlotItem()
        # the cost model at the two ends of acceptance's 95% interval, and the band between
        self.interval_low = sp.plot([], [])
        self.interval_high = sp.plot([], [])
        self.interval_band = pg.FillBetweenItem(self.interval_low, self.interval_high)
        sp.addItem(self.interval_band)
        self.predicted = sp.plot([], [], name="cost model", symbol="o", symbolSize=6)
        self.theory = sp.plot([], [], name="textbook E/(1+kc)")
        self.best_point = sp.plot([], [], name="best k", pen=None, symbol="star", symbolSize=14)
        self.break_even = pg.InfiniteLine(pos=1.0, angle=0)
        sp.addItem(self.break_even)
        self.set_colours(LIGHT)
        self._set_visible(False)

    def set_colours(self, colours: Colours) -> None:
        self._colours = colours
        for view in (self.curve_view, self.speedup_view):
            view.setBackground(colours.background)
            for axis in ("left", "bottom"):
                view.getPlotItem().getAxis(axis).setTextPen(colours.foreground)
        self.verify_curve.setPen(pg.mkPen(colours.t_verify, width=2))
        self.verify_curve.setSymbolBrush(colours.t_verify)
        dashed = pg.QtCore.Qt.PenStyle.DashLine
        self.plain_line.setPen(pg.mkPen(colours.plain, width=2, style=dashed))
        self.draft_line.setPen(pg.mkPen(colours.t_draft, width=2, style=dashed))
        self.predicted.setPen(pg.mkPen(colours.speculative, width=2))
        edge = pg.mkColor(colours.speculative)
        edge.setAlpha(110)
        for line in (self.interval_low, self.interval_high):
            line.setPen(pg.mkPen(edge, width=1))
        fill = pg.mkColor(colours.speculative)
        fill.setAlpha(45)
        self.interval_band.setBrush(fill)
        self.predicted.setSymbolBrush(colours.speculative)
        self.theory.setPen(pg.mkPen(colours.muted, width=2))
        self.best_point.setSymbolBrush(colours.plain)
        self.best_point.setSymbolPen(colours.foreground)
        self.break_even.setPen(pg.mkPen(colours.muted, style=dashed))

    def _set_visible(self, on: bool) -> None:
        # no axes without data: an empty chart's ticks mean nothing
        self.curve_view.setVisible(on)
        self.speedup_view.setVisible(on)

    def set_costs(self, costs: PairCosts | None) -> None:
        self.show_costs(costs, self.seen)

    def show_costs(self, costs: PairCosts | None, seen: AcceptanceSeen | None) -> None:
        """The pair's costs and the acceptance a run measured (None: not measured, the prior
        is assumed), redrawn once (during a run this comes every second: one redraw, not one
        per figure)."""
        if (costs, seen) != (self.costs, self.seen):
            self.costs, self.seen = costs, seen
            self.refresh()

    def refresh(self) -> None:
        costs = self.costs
        if costs is None:
            self.view_data = None
            self.verdict.setText(EMPTY_TEXT)
            self._set_visible(False)
            return
        view = costs.view(self.seen)
        self.view_data = view
        self.verdict.setText("<b>" + view.verdict() + "</b>")
        self._set_visible(True)
        if self.isVisible():
            self._draw(view)
        else:  # another tab is on show: drawn when this one is (showEvent)
            self._drawn = False
        self.costs_shown.emit()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt override
        super().showEvent(event)
        if not self._drawn and self.view_data is not None:
            self._draw(self.view_data)

    def _draw(self, view: CostView) -> None:
        """The two charts; only while they are on show (during a run refresh comes every
        second, and on a 2-core machine each hidden redraw was taken from the engine)."""
        self._drawn = True
        sizes = [1] + [p.k + 1 for p in view.points]
        times = [view.t_plain * 1000] + [p.t_verify * 1000 for p in view.points]
        self.verify_curve.setData(sizes, times)
        span = [1, sizes[-1]]
        self.plain_line.setData(span, [view.t_plain * 1000] * 2)
        self.draft_line.setData(span, [view.t_draft * 1000] * 2)
        ks = [p.k for p in view.points]
        self.predicted.setData(ks, [p.predicted_speedup for p in view.points])
        self.theory.setData(ks, [p.theory_speedup for p in view.points])
        for line, points in ((self.interval_low, view.low_points),
                             (self.interval_high, view.high_points)):
            line.setData([p.k for p in points], [p.predicted_speedup for p in points])
        best = view.best
        self.best_point.setData([best.k], [best.predicted_speedup])
        top = max(max(p.theory_speedup for p in view.points), best.predicted_speedup, 1.0,
                  *(p.predicted_speedup for p in view.high_points))
        self.speedup_view.getPlotItem().setRange(xRange=(0.5, ks[-1] + 0.5),
                                                 yRange=(0, top * 1.1), padding=0.02)
        self.curve_view.getPlotItem().setRange(xRange=(0.5, sizes[-1] + 0.5),
                                               yRange=(0, max(times) * 1.1), padding=0.02)
