"""Rejection analysis of the run on show (live or opened from a trace): acceptance against the
target's entropy, q(x) against p(x) coloured by the decision, the most frequent "draft wrote X,
target wanted Y" pairs, acceptance by token class, and one per-token diagnostic by decision
(the draft's own q(x), and hidden_cos where the draft's hidden states are comparable with the
target's; see diagnostics). Figures from app.analysis.rejections."""

from __future__ import annotations

from dataclasses import dataclass

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
from app.engine.similarity import auc_interval, judged_confidence, judged_similarity
from ui.theme import LIGHT, Colours

EMPTY_TEXT = "Run a prompt (or open a trace) to see why draft tokens were rejected."
RULE = "Per-token diagnostics, not the acceptance rule."
CONFIDENCE_NOTE = ("q(x): the draft's own probability of the token it wrote; on the demo pair "
                   "it told accepted from rejected tokens apart for every kind of draft "
                   "measured (docs: diagnostics).")
HIDDEN_NOTE = ("hidden_cos: the cosine of the draft's and the target's final hidden states, "
               "shown for a self-draft: the target's own first layers, whose hidden state lives "
               "where the target's does.")
NO_HIDDEN_NOTE = ("No hidden_cos for this draft: a separate draft model's hidden states live "
                  "in another model's space (the log-probability stand-in once shown in their "
                  "place, like draft heads' guesses at the target's hidden state, told "
                  "accepted from rejected tokens no better than chance on the demo pair).")
NO_DIAGNOSTIC_NOTE = ("No per-token diagnostic for this draft: every draft token had q = 1 "
                      "(n-gram lookup copies text and has no probabilities or hidden states "
                      "of its own).")


@dataclass
class Diagnostic:
    """A per-token quantity plotted by decision: its name and the judged tokens' values."""

    name: str
    values: np.ndarray  # (n,)
    accepted: np.ndarray  # (n,) bool
    low: float = 0.0  # the left end of its axis (a cosine reaches -1)


@dataclass
class Diagnostics:
    """What the view shows for a run: the draft's confidence q(x) where its drafts had
    probabilities of their own, hidden_cos where its hidden states are comparable with the
    target's (the tokens carry it), and a note saying what is shown and why the rest is not."""

    confidence: Diagnostic | None
    hidden: Diagnostic | None
    note: str


def as_diagnostic(name: str, pairs: list[tuple[float, bool]], low: float = 0.0) -> Diagnostic:
    values = np.array([value for value, _ in pairs], dtype=float)
    accepted = np.array([ok for _, ok in pairs], dtype=bool)
    return Diagnostic(name, values, accepted, low)


def diagnostics(steps: list[StepRecord]) -> Diagnostics | None:
    """The run's diagnostics; None when no draft token was judged."""
    tokens = [t for step in steps for t in step.tokens]
    confidence = judged_confidence(tokens)
    if not confidence:
        return None
    similarity = judged_similarity(tokens)
    hidden = as_diagnostic("hidden_cos", similarity, low=-1.0) if similarity else None
    if all(q == 1.0 for q, _ in confidence):  # one-hot drafts (n-gram lookup)
        return Diagnostics(None, hidden, NO_DIAGNOSTIC_NOTE)
    note = " ".join([RULE, CONFIDENCE_NOTE, HIDDEN_NOTE if hidden else NO_HIDDEN_NOTE])
    return Diagnostics(as_diagnostic("q(x)", confidence), hidden, note)


def diagnostic_title(d: Diagnostic) -> str:
    """"name by decision · AUC a [low, high]" (the 95% interval), and when the interval
    holds 0.5, that it told the decisions apart no better than chance."""
    title = f"{d.name} by decision"
    fit = auc_interval(d.values, d.accepted)
    if fit is None:
        return title
    auc, low, high = fit
    title += f" · AUC {auc:.2f} [{low:.2f}, {high:.2f}]"
    if low <= 0.5 <= high:
        title += " · no better than chance here"
    return title


class DecisionPlot:
    """One diagnostic by decision: accepted tokens on one line, rejected on another, a little
    jitter so equal values stay visible; the title carries the AUC with its interval."""

    def __init__(self) -> None:
        self.view = pg.PlotWidget()
        plot = self.view.getPlotItem()
        axis = plot.getAxis("left")
        axis.setTicks([[(0, "rejected"), (1, "accepted")]])
        axis.setWidth(70)  # room for the tick words; pyqtgraph leaves out what does not fit
        plot.setMenuEnabled(False)
        plot.setMouseEnabled(x=False, y=False)
        plot.hideButtons()
        self.view.setMinimumSize(160, 120)
        self.accepted = plot.plot([], [], pen=None, symbol="o", symbolSize=5)
        self.rejected = plot.plot([], [], pen=None, symbol="x", symbolSize=7)
        self.diagnostic: Diagnostic | None = None

    def set_colours(self, colours: Colours) -> None:
        self.view.setBackground(colours.background)
        self.accepted.setSymbolBrush(colours.good)
        self.accepted.setSymbolPen(None)
        self.rejected.setSymbolBrush(colours.bad)
        self.rejected.setSymbolPen(colours.bad)

    def show(self, d: Diagnostic | None) -> None:
        self.diagnostic = d
        self.view.setVisible(d is not None)
        if d is None:
            self.accepted.setData([], [])
            self.rejected.setData([], [])
            return
        jitter = np.random.default_rng(0).uniform(-0.15, 0.15, d.values.size)
        self.accepted.setData(d.values[d.accepted], 1 + jitter[d.accepted])
        self.rejected.setData(d.values[~d.accepted], jitter[~d.accepted])
        plot = self.view.getPlotItem()
        plot.setTitle(diagnostic_title(d), size="9pt")
        plot.setLabel("bottom", d.name)
        plot.setRange(xRange=(d.low, 1), yRange=(-0.5, 1.5), padding=0.02)

    def title(self) -> str:
        return str(self.view.getPlotItem().titleLabel.text)

    def count(self) -> int:
        x, _ = self.accepted.getData()
        y, _ = self.rejected.getData()
        return (0 if x is None else len(x)) + (0 if y is None else len(y))


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
        self.confidence_plot = DecisionPlot()
        self.hidden_plot = DecisionPlot()
        self.diagnostic_note = QLabel("")
        self.diagnostic_note.setWordWrap(True)
        self.diagnostics: Diagnostics | None = None
        for view, title, left, bottom in (
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
        self.classes = make_table(["token class", "accepted", "judged"])
        self.confusions = make_table(["times", "draft wrote", "target wanted"])
        grid = QGridLayout()
        grid.addWidget(self.entropy_view, 0, 0)
        grid.addWidget(self.scatter_view, 0, 1)
        grid.addWidget(self.classes, 0, 2)
        grid.addWidget(self.confusions, 0, 3)
        grid.addWidget(self.confidence_plot.view, 1, 0, 1, 2)
        grid.addWidget(self.hidden_plot.view, 1, 2, 1, 2)
        grid.addWidget(self.diagnostic_note, 2, 0, 1, 4)
        for col in range(4):
            grid.setColumnStretch(col, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.summary)
        layout.addLayout(grid, 1)
        self.set_colours(LIGHT)
        self._set_visible(False)

    def set_colours(self, colours: Colours) -> None:
        for view in (self.entropy_view, self.scatter_view):
            view.setBackground(colours.background)
        self.confidence_plot.set_colours(colours)
        self.hidden_plot.set_colours(colours)
        self.entropy_bars.setOpts(brush=colours.speculative, pen=pg.mkPen(None))
        self.accepted_dots.setSymbolBrush(colours.good)
        self.accepted_dots.setSymbolPen(None)
        self.rejected_dots.setSymbolBrush(colours.bad)
        self.rejected_dots.setSymbolPen(colours.bad)
        self.diagonal.setPen(pg.mkPen(colours.muted, style=pg.QtCore.Qt.PenStyle.DashLine))

    def _set_visible(self, on: bool) -> None:
        for widget in (self.entropy_view, self.scatter_view, self.classes, self.confusions):
            widget.setVisible(on)
        current = self.diagnostics if on else None
        self.confidence_plot.show(current.confidence if current else None)
        self.hidden_plot.show(current.hidden if current else None)
        self.diagnostic_note.setText(current.note if current else "")
        self.diagnostic_note.setVisible(current is not None)

    def show_steps(self, steps: list[StepRecord]) -> None:
        """Analyse the records (skipped when nothing new arrived since the last call)."""
        key = (id(steps), len(steps))
        if key == self._shown:
            return
        self._shown = key
        a = analyse(steps)
        self.analysis = a
        if a.judged == 0:
            self.diagnostics = None
            self.summary.setText(EMPTY_TEXT if not steps else " ".join(a.notes))
            self._set_visible(False)
            return
        self.diagnostics = diagnostics(steps)
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
        fill(self.classes, [[name, f"{100 * r.acceptance:.0f}%", str(r.judged)]
                            for name, r in a.by_class.items()])
        fill(self.confusions, [[str(n), shown(wrote), shown(wanted)]
                               for wrote, wanted, n in a.confusions])

    def point_count(self) -> int:
        x, _ = self.accepted_dots.getData()
        y, _ = self.rejected_dots.getData()
        return (0 if x is None else len(x)) + (0 if y is None else len(np.asarray(y)))

    def reset(self) -> None:
        self._shown = (0, -1)
        self.show_steps([])
