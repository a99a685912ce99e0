"""One verify step up close: a table of its draft tokens and verdicts, and for the selected
row a bar chart of the top alternatives under p (target) and q (draft), plus the residual
max(0, p - q) over them when the replacement was drawn from it.

Every number shown is a record field; the exact value sits in the cell's UserRole so tests (and
copy-paste) can check it against the record.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QScrollArea,
    QSplitter,
    QTableView,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.analysis.reasons import describe_decision
from app.engine.records import Alternative, StepRecord, TokenRecord
from ui import format as fmt
from ui.charts import style_legend
from ui.step_table import COL_DRAFTED_FROM, StepTableModel
from ui.theme import LIGHT, Colours
from ui.tree_view import TreeView

REASON_LINES = 8  # the Why line's most lines shown at once; a longer one scrolls

MIN_DRAFTED_FROM_WIDTH = 90
MIN_ROWS_SHOWN = 3
ROW_PADDING = 6


class StepInspector(QWidget):
    """Shows `steps[index]`; the list is shared with the window and grows during a run."""

    step_changed = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.steps: list[StepRecord] = []
        self.index = -1
        self._follow = True
        self._colours = LIGHT
        self.header = QLabel("No step selected — run a prompt, then click a token or use ←/→")
        self.header.setWordWrap(True)
        # why the controller chose this step's k: its recorded decision, in words
        self.reason = QLabel()
        self.reason.setWordWrap(True)
        self.reason.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # as tall as its text up to REASON_LINES lines, then it scrolls: a long reason (a
        # copy's acceptance at 60 positions, a padded pass) is never cut off below
        self.reason_area = QScrollArea()
        self.reason_area.setWidget(self.reason)
        self.reason_area.setWidgetResizable(True)
        self.reason_area.setFrameShape(QFrame.Shape.NoFrame)
        self.reason_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.reason_area.setVisible(False)
        self.prev_button = QPushButton("◀ Prev")
        self.next_button = QPushButton("Next ▶")
        self.prev_button.setToolTip("Previous step (← or PgUp)")
        self.next_button.setToolTip("Next step (→ or PgDn)")
        self.prev_button.clicked.connect(self.previous_step)
        self.next_button.clicked.connect(self.next_step)
        self.table = self._make_table()
        self.bars = _AlternativesChart()
        self.tree = TreeView()
        self.tree.node_clicked.connect(self.table.selectRow)
        self.views = QTabWidget()
        self.views.addTab(self.bars, "p vs q")
        self.views.addTab(self.tree, "tree")
        top = QHBoxLayout()
        top.addWidget(self.header, 1)
        top.addWidget(self.prev_button)
        top.addWidget(self.next_button)
        split = QSplitter(Qt.Orientation.Vertical)
        split.setObjectName("inspector_split")
        split.addWidget(self.table)
        split.addWidget(self.views)
        split.setSizes([220, 200])
        split.setStretchFactor(0, 3)  # a short pane's height goes to the table's rows first
        split.setStretchFactor(1, 2)
        split.setCollapsible(0, False)
        self.splitter = split
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(self.reason_area)
        layout.addWidget(split, 1)
        self._update_buttons()

    def _make_table(self) -> QTableView:
        table = QTableView()
        self.model = StepTableModel()
        table.setModel(self.model)
        table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        table.verticalHeader().setVisible(False)
        table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        table.horizontalHeader().setStretchLastSection(True)
        table.setWordWrap(False)  # one line a row, so a short pane still shows several
        rows = table.verticalHeader()
        rows.setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        rows.setDefaultSectionSize(table.fontMetrics().height() + ROW_PADDING)
        table.selectionModel().selectionChanged.connect(self._row_selected)
        self._show_empty(table)
        return table

    def _show_empty(self, table: QTableView) -> None:
        """No step yet: the column titles at their own width and no horizontal scrollbar (a
        bar under an empty table reads as something cut off)."""
        table.setColumnHidden(COL_DRAFTED_FROM, True)
        table.resizeColumnsToContents()
        table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

    def set_colours(self, colours: Colours) -> None:
        self._colours = colours
        self.bars.set_colours(colours)
        self.tree.set_colours(colours)
        self.show_step(self.index)

    # --- navigation ---------------------------------------------------------------------
    def set_steps(self, steps: list[StepRecord]) -> None:
        self.steps = steps
        self.index = -1
        self._follow = True
        self.model.set_step(None)
        self._show_empty(self.table)
        self.bars.show_record(None, None)
        self.tree.show_step(None)
        self.header.setText("No step selected — run a prompt, then click a token or use ←/→")
        self.reason_area.setVisible(False)
        self._update_buttons()

    def steps_added(self) -> None:
        """New steps arrived: keep following the newest one if the newest was selected."""
        if self.index == -1 or self._follow:
            self.show_step(len(self.steps) - 1)
        else:
            self._update_header()
            self._update_buttons()

    def next_step(self) -> None:
        if self.index + 1 < len(self.steps):
            self.show_step(self.index + 1)

    def previous_step(self) -> None:
        if self.index > 0:
            self.show_step(self.index - 1)

    def show_step(self, index: int) -> None:
        if not 0 <= index < len(self.steps):
            return
        changed = index != self.index
        self.index = index
        self._follow = index == len(self.steps) - 1
        self._fill_table(self.steps[index])
        self._update_header()
        self._update_buttons()
        if changed:
            self.step_changed.emit(index)

    def _update_header(self) -> None:
        if 0 <= self.index < len(self.steps):
            step = self.steps[self.index]
            self.header.setText(fmt.step_summary(step, len(self.steps)))
            self._show_reason(step)

    def _show_reason(self, step: StepRecord) -> None:
        """The decision behind this step's k; a run without a drafter has none to show."""
        drafted_or_consulted = step.decision is not None or bool(step.source) or step.k > 0
        self.reason_area.setVisible(drafted_or_consulted)
        if drafted_or_consulted:
            self.reason.setText("Why: " + describe_decision(step.decision))
            self.reason_area.verticalScrollBar().setValue(0)  # each reason read from its start
            self._fit_reason()

    def _fit_reason(self) -> None:
        """The reason's area as tall as its text at this width, up to REASON_LINES lines."""
        width = self.reason_area.viewport().width() or self.width()
        needed = self.reason.heightForWidth(width)
        most = self.reason.fontMetrics().lineSpacing() * REASON_LINES
        self.reason_area.setFixedHeight(max(1, min(needed, most)))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        if self.reason_area.isVisible():
            self._fit_reason()

    def _update_buttons(self) -> None:
        self.prev_button.setEnabled(self.index > 0)
        self.next_button.setEnabled(self.index + 1 < len(self.steps))

    # --- the table ----------------------------------------------------------------------
    def _fill_table(self, step: StepRecord) -> None:
        table, model = self.table, self.model
        model.colours = self._colours
        selection = table.selectionModel()
        selection.blockSignals(True)
        model.set_step(step)
        table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        # only copying and MTP drafts say more than the drafter's name: no empty column else
        table.setColumnHidden(COL_DRAFTED_FROM, not any(
            t.copied_from is not None or t.head is not None for t in step.tokens))
        table.resizeColumnsToContents()
        self._fit_drafted_from()
        self._keep_rows_in_view(len(model.rows))
        rejected = next((i for i, r in enumerate(step.tokens) if r.accepted is False), None)
        if model.rows:
            shown = rejected if rejected is not None else 0
            table.selectRow(shown)
            table.scrollTo(model.index(shown, 0))
        selection.blockSignals(False)
        if step.is_tree and self.views.currentWidget() is self.bars and self._follow:
            self.views.setCurrentWidget(self.tree)
        self._row_selected()

    def _keep_rows_in_view(self, n_rows: int) -> None:
        """The table keeps room for up to MIN_ROWS_SHOWN of the step's rows when the pane is
        short; the p/q chart gets the rest (a one-row step leaves it more)."""
        table = self.table
        shown = max(1, min(n_rows, MIN_ROWS_SHOWN))
        table.setMinimumHeight(table.horizontalHeader().sizeHint().height()
                               + shown * table.verticalHeader().defaultSectionSize()
                               + 2 * table.frameWidth())

    def _fit_drafted_from(self) -> None:
        """The drafted-from column (the last) takes the width its neighbours leave, its text
        cut short with the whole in its tooltip, rather than push the table past its pane."""
        table = self.table
        if table.isColumnHidden(COL_DRAFTED_FROM):
            return
        header = table.horizontalHeader()
        others = sum(header.sectionSize(c) for c in range(COL_DRAFTED_FROM))
        room = table.viewport().width() - others
        if header.sectionSize(COL_DRAFTED_FROM) > room:
            header.resizeSection(COL_DRAFTED_FROM, max(room, MIN_DRAFTED_FROM_WIDTH))

    def row_texts(self) -> list[list[str]]:
        """What the table shows, cell by cell (for tests and copying)."""
        model = self.model
        return [
            [model.index(r, c).data() for c in range(model.columnCount())]
            for r in range(model.rowCount())
        ]

    def _row_selected(self) -> None:
        if not 0 <= self.index < len(self.steps):
            self.bars.show_record(None, None)
            self.tree.show_step(None)
            return
        step = self.steps[self.index]
        rows = self.table.selectionModel().selectedRows()
        row = rows[0].row() if rows else -1
        record = step.tokens[row] if 0 <= row < len(step.tokens) else None
        self.bars.show_record(record, step)
        self.tree.show_step(step, row if record is not None else None)


class _AlternativesChart(pg.PlotWidget):
    """Top alternatives at one position: p and q side by side, and the residual if used.

    The three bar series are created once and updated with setOpts (no item churn)."""

    SERIES = ("p (target)", "q (draft)", "max(0, p−q)")

    def __init__(self) -> None:
        super().__init__()
        self.setMinimumHeight(100)
        self._colours = LIGHT
        self.setMouseEnabled(x=False, y=False)
        self.hideButtons()
        self.setMenuEnabled(False)
        plot = self.getPlotItem()
        plot.setLabel("left", "probability")
        plot.getAxis("left").enableAutoSIPrefix(False)
        # one row of entries: the chart is short on a laptop screen
        self.legend = plot.addLegend(offset=(-4, 4), labelTextSize="8pt", colCount=3)
        # p and q are named (always in the legend); the residual joins it only when shown
        self.bars = [pg.BarGraphItem(x=[], height=[], width=0.3, pen=pg.mkPen(None), name=name)
                     for name in (*self.SERIES[:2], None)]  # fmt: skip
        for bar in self.bars:
            plot.addItem(bar)
        self._residual_in_legend = False
        self._title = ""
        self.set_colours(LIGHT)
        self.show_record(None, None)

    def set_colours(self, colours: Colours) -> None:
        self._colours = colours
        self._title = ""
        self.setBackground(colours.background)
        for bar, colour in zip(self.bars, (colours.p_bar, colours.q_bar, colours.residual_bar),
                               strict=True):  # fmt: skip
            bar.setOpts(brush=colour)
        style_legend(self.legend, colours)
        for axis in ("left", "bottom"):
            ax = self.getPlotItem().getAxis(axis)
            ax.setPen(colours.muted)
            ax.setTextPen(colours.foreground)

    def _set_title(self, text: str, colour: str) -> None:
        if text != self._title:
            self._title = text
            self.getPlotItem().setTitle(text, size="9pt", color=colour)

    def _show_residual_in_legend(self, on: bool) -> None:
        if on != self._residual_in_legend:
            self._residual_in_legend = on
            if on:
                self.legend.addItem(self.bars[2], self.SERIES[2])
                style_legend(self.legend, self._colours)
            else:
                self.legend.removeItem(self.bars[2])

    def show_record(self, record: TokenRecord | None, step: StepRecord | None) -> None:
        plot = self.getPlotItem()
        plot.showAxis("left", record is not None)  # no axes without bars: their ticks
        plot.showAxis("bottom", record is not None)  # would mean nothing
        if record is None:
            for bar in self.bars:
                bar.setOpts(x=[], height=[])
            self._show_residual_in_legend(False)
            self._set_title("select a draft token to see the alternatives under p and q",
                            self._colours.muted)
            plot.getAxis("bottom").setTicks([[]])
            return
        alternatives = list(record.top)
        if record.token not in {a.token for a in alternatives}:
            alternatives.append(Alternative(record.token, record.text, record.p, record.q))
        p = np.array([a.p for a in alternatives])
        q = np.array([a.q for a in alternatives])
        x = np.arange(len(alternatives), dtype=float)
        series = [p, q] + ([np.maximum(p - q, 0.0)] if record.residual_used else [])
        width = 0.8 / len(series)
        for i, bar in enumerate(self.bars):
            if i < len(series):
                bar.setOpts(x=x + (i - (len(series) - 1) / 2) * width, height=series[i],
                            width=width * 0.95)
            else:
                bar.setOpts(x=[], height=[])
        self._show_residual_in_legend(record.residual_used)
        ticks = []
        for i, a in enumerate(alternatives):
            label = fmt.token(a.text)
            if a.token == record.token:
                label += " ◆"
            if record.replacement is not None and a.token == record.replacement:
                label += " ★"
            ticks.append((float(i), label))
        plot.getAxis("bottom").setTicks([ticks])
        plot.setXRange(-0.6, len(alternatives) - 0.4, padding=0)
        plot.setYRange(0, max(1e-6, float(max(p.max(), q.max()))) * 1.15, padding=0)
        where = f"position {record.pos}"
        if step is not None:
            where = f"step {step.index + 1}, {where}"
        self._set_title(f"top alternatives at {where} (◆ draft token, ★ replacement)",
                        self._colours.foreground)

    def series_heights(self) -> list[list[float]]:
        """The heights drawn per series (p, q, residual), for tests."""
        return [list(np.asarray(bar.opts["height"], dtype=float)) for bar in self.bars]
