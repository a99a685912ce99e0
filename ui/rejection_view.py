"""Rejection analysis of the run on show (live or opened from a trace): acceptance against the
target's entropy, q(x) against p(x) coloured by the decision, the most frequent "draft wrote X,
target wanted Y" pairs and acceptance by token class. Figures from app.analysis.rejections."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGridLayout,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.analysis.rejections import RejectionAnalysis, analyse, shown
from app.engine.records import StepRecord
from app.engine.similarity import judged_similarity, roc_auc
from ui.theme import LIGHT, Colours

EMPTY_TEXT = "Run a prompt (or open a trace) to see why draft tokens were rejected."
HIDDEN_TITLE = "hidden_cos by decision (a diagnostic, not the acceptance rule)"


def hidden_cos_points(steps: list[StepRecord]) -> tuple[np.ndarray, np.ndarray]:
    """(hidden_cos, accepted) of every judged draft token that carries a hidden_cos."""
    pairs = [pair for step in steps for pair in judged_similarity(step.tokens)]
    if not pairs:
        return np.zeros(0), np.zeros(0, dtype=bool)
    cos, accepted = zip(*pairs, strict=True)
    return np.asarray(cos, dtype=float), np.asarray(accepted, dtype=bool)


def make_table(headers: list[str]) -> QTableWidget:
    table = QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.verticalHeader().setVisible(False)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.horizontalHeader().setStretchLastSection(True)
    return table


def fill(table: QTableWidget, rows: list[list[str]]) -> None:
    table.setRowCount(len(rows))
    for r, row in enumerate(rows):
        for c, text in enumerate(row):
            table.setItem(r, c, QTableWidgetItem(text))
    table.resizeColumnsToContents()


class RejectionPanel(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.analysis: RejectionAnalysis | None = None
        self._shown: tuple[int, int] = (0, -1)  # (id of the steps list, its length) on show
        self.summary = QLabel(EMPTY_TEXT)
        self.summary.setWordWrap(True)
        self.entropy_view = pg.PlotWidget()
        self.scatter_view = pg.PlotWidget()
        self.hidden_view = pg.PlotWidget()
        for view, title, left, bottom in (
            (self.hidden_view, HIDDEN_TITLE, "decision", "hidden_cos"),
            (self.entropy_view, "acceptance by the target's entropy", "accepted", "entropy (nats)"),
            (self.scatter_view, "q(x) vs p(x) of each draft token", "p (target)", "q (draft)"),
        ):
            plot = view.getPlotItem()
            plot.setTitle(title, size="9pt")
            plot.setLabel("left", left)
            plot.setLabel("bottom", bottom)
            plot.setMenuEnabled(False)
            plot.setMouseEnabled(x=False, y=False)
            plot.hideButtons()
            view.setMinimumSize(160, 120)
        self.entropy_bars = pg.BarGraphItem(x=[], height=[], width=0.1)
        self.entropy_view.addItem(self.entropy_bars)
        sp = self.scatter_view.getPlotItem()
        sp.addLegend(offset=(4, 4), labelTextSize="8pt")
        self.accepted_dots = sp.plot([], [], pen=None, symbol="o", symbolSize=5, name="accepted")
        self.rejected_dots = sp.plot([], [], pen=None, symbol="x", symbolSize=7, name="rejected")
        self.diagonal = sp.plot([0, 1], [0, 1])
        sp.setRange(xRange=(0, 1), yRange=(0, 1), padding=0.02)
        hp = self.hidden_view.getPlotItem()
        hp.getAxis("left").setTicks([[(0, "rejected"), (1, "accepted")]])
        hp.setRange(xRange=(-1, 1), yRange=(-0.5, 1.5), padding=0.02)
        self.hidden_accepted = hp.plot([], [], pen=None, symbol="o", symbolSize=5)
        self.hidden_rejected = hp.plot([], [], pen=None, symbol="x", symbolSize=7)
        self.classes = make_table(["token class", "accepted", "judged"])
        self.confusions = make_table(["times", "draft wrote", "target wanted"])
        grid = QGridLayout()
        grid.addWidget(self.entropy_view, 0, 0)
        grid.addWidget(self.scatter_view, 0, 1)
        grid.addWidget(self.classes, 0, 2)
        grid.addWidget(self.confusions, 0, 3)
        grid.addWidget(self.hidden_view, 1, 0, 1, 2)
        for col in range(4):
            grid.setColumnStretch(col, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.summary)
        layout.addLayout(grid, 1)
        self.set_colours(LIGHT)
        self._set_visible(False)

    def set_colours(self, colours: Colours) -> None:
        for view in (self.entropy_view, self.scatter_view, self.hidden_view):
            view.setBackground(colours.background)
        self.hidden_accepted.setSymbolBrush(colours.good)
        self.hidden_accepted.setSymbolPen(None)
        self.hidden_rejected.setSymbolBrush(colours.bad)
        self.hidden_rejected.setSymbolPen(colours.bad)
        self.entropy_bars.setOpts(brush=colours.speculative, pen=pg.mkPen(None))
        self.accepted_dots.setSymbolBrush(colours.good)
        self.accepted_dots.setSymbolPen(None)
        self.rejected_dots.setSymbolBrush(colours.bad)
        self.rejected_dots.setSymbolPen(colours.bad)
        self.diagonal.setPen(pg.mkPen(colours.muted, style=pg.QtCore.Qt.PenStyle.DashLine))

    def _set_visible(self, on: bool) -> None:
        for widget in (self.entropy_view, self.scatter_view, self.classes, self.confusions):
            widget.setVisible(on)
        self.hidden_view.setVisible(on and self.hidden_count() > 0)

    def show_steps(self, steps: list[StepRecord]) -> None:
        """Analyse the records (skipped when nothing new arrived since the last call)."""
        key = (id(steps), len(steps))
        if key == self._shown:
            return
        self._shown = key
        a = analyse(steps)
        self.analysis = a
        if a.judged == 0:
            self.summary.setText(EMPTY_TEXT if not steps else " ".join(a.notes))
            self._set_visible(False)
            return
        self._set_visible(True)
        rate = a.accepted / a.judged
        text = f"{a.judged} draft tokens judged, {100 * rate:.1f}% accepted."
        self.summary.setText(" ".join([text, *a.notes]))
        bins = a.by_entropy
        width = (bins[0].high - bins[0].low) * 0.85 if bins else 0.1
        self.entropy_bars.setOpts(x=[(b.low + b.high) / 2 for b in bins],
                                  height=[b.rate.acceptance for b in bins], width=width)
        top = bins[-1].high if bins else 1.0
        self.entropy_view.getPlotItem().setRange(xRange=(0, top), yRange=(0, 1.05), padding=0.02)
        cal = a.calibration
        ok = cal.accepted
        self.accepted_dots.setData(cal.q[ok], cal.p[ok])
        self.rejected_dots.setData(cal.q[~ok], cal.p[~ok])
        self._show_hidden_cos(steps)
        fill(self.classes, [[name, f"{100 * r.acceptance:.0f}%", str(r.judged)]
                            for name, r in a.by_class.items()])
        fill(self.confusions, [[str(n), shown(wrote), shown(wanted)]
                               for wrote, wanted, n in a.confusions])

    def _show_hidden_cos(self, steps: list[StepRecord]) -> None:
        """Accepted tokens on one line, rejected on another, a little jitter so equal values
        stay visible; the title carries the ROC AUC."""
        cos, accepted = hidden_cos_points(steps)
        jitter = np.random.default_rng(0).uniform(-0.15, 0.15, cos.size)
        self.hidden_accepted.setData(cos[accepted], 1 + jitter[accepted])
        self.hidden_rejected.setData(cos[~accepted], jitter[~accepted])
        auc = roc_auc(list(cos), list(accepted)) if cos.size else None
        title = HIDDEN_TITLE if auc is None else f"{HIDDEN_TITLE} · AUC {auc:.2f}"
        self.hidden_view.getPlotItem().setTitle(title, size="9pt")
        self.hidden_view.setVisible(cos.size > 0)

    def hidden_count(self) -> int:
        x, _ = self.hidden_accepted.getData()
        y, _ = self.hidden_rejected.getData()
        return (0 if x is None else len(x)) + (0 if y is None else len(y))

    def point_count(self) -> int:
        x, _ = self.accepted_dots.getData()
        y, _ = self.rejected_dots.getData()
        return (0 if x is None else len(x)) + (0 if y is None else len(np.asarray(y)))

    def reset(self) -> None:
        self._shown = (0, -1)
        self.show_steps([])
