"""Live charts of a run (pyqtgraph): throughput, acceptance, accepted lengths, time split and
the theory next to the measurement.

`redraw()` reads the runs' numpy columns and the engine's RunStats and calls setData on
existing items; the window calls it from a ~10 Hz timer when something changed, never per token.
Rolling windows and stacking are display smoothing of record values; the figures (alpha, k,
cost ratio c, E, theory speedup) come from app.engine.metrics.

During a run the charts are redrawn one per timer tick (`redraw_some`): Qt defers each plot's
repaint to a queued call, and six of them in one batch kept the event loop from its timers for
~60 ms. Drawing six plots is the costliest thing the window does (tens of ms on a software-rendered
display), so during a run `due()` spaces redraws to keep them under CPU_SHARE of one core: the
interval is ~49x the measured cost of the last redraw + its repaints, at least REDRAW_MIN_S
(on a 2-core machine every UI millisecond is taken from the engine's threads).
Every range is set here from the data (autorange off): pyqtgraph's deferred autorange would
change the range during the paint and so paint everything twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QPaintEvent
from PySide6.QtWidgets import (
    QGraphicsItem,
    QGridLayout,
    QLabel,
    QStackedLayout,
    QVBoxLayout,
    QWidget,
)

from app.analysis.cost import predicted_curve
from app.engine.metrics import expected_tokens_per_pass, theory_speedup
from ui.run_data import RunData, run_costs
from ui.theme import LIGHT, Colours

WINDOW = 8  # steps in the rolling tok/s and acceptance
REDRAW_MIN_S = 0.1
REDRAW_MAX_S = 2.0
CPU_SHARE = 0.02  # of one core, at most, for chart drawing during a run
LIVE_HEADROOM = 1.5  # during a run a growing axis gets this much room ahead of the data...
LIVE_FILL = 0.5  # ...and keeps its range while the data fills at least this share of it
_ALPHAS = np.linspace(0.0, 0.995, 80)
EMPTY_TEXT = "The live charts fill in when a run starts (or a trace is opened)."
WAITING_TEXT = "waiting for the first step…"


def rolling_ratio(numerator: np.ndarray, denominator: np.ndarray, window: int) -> np.ndarray:
    """sum(numerator) / sum(denominator) over the last `window` entries, at every entry."""
    top = np.cumsum(numerator)
    bottom = np.cumsum(denominator)
    top[window:] = top[window:] - top[:-window].copy()
    bottom[window:] = bottom[window:] - bottom[:-window].copy()
    out = np.full(top.shape, np.nan)
    np.divide(top, bottom, out=out, where=bottom > 0)
    return out


def _held_span(current: float, needed: float) -> float:
    """A live axis span: kept while the data needs between LIVE_FILL of it and all of it,
    else LIVE_HEADROOM times what the data needs."""
    if LIVE_FILL * current <= needed <= current:
        return current
    return needed * LIVE_HEADROOM


class _PaintClock:
    """Adds up the time the charts' repaints take (the panel resets it per redraw)."""

    seconds = 0.0


class _TimedPlot(pg.PlotWidget):
    """One chart in its own view: a repaint is one short event per chart, not one long one
    for all six, so the event loop gets a turn between them."""

    def __init__(self, clock: _PaintClock) -> None:
        super().__init__()
        self._clock = clock
        # the view fills its background itself (setBackground): nothing behind it to repaint
        self.viewport().setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        start = time.perf_counter()
        super().paintEvent(event)
        self._clock.seconds += time.perf_counter() - start


class ChartsPanel(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        pg.setConfigOptions(antialias=True)
        self.paint_clock = _PaintClock()
        self.views: dict[str, _TimedPlot] = {}
        # before a run: a sentence instead of empty axes (whose ticks would mean nothing)
        self.placeholder = QLabel(EMPTY_TEXT)
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.placeholder.setWordWrap(True)
        self.plots_widget = QWidget()
        self._stack = QStackedLayout(self)
        self._stack.addWidget(self.placeholder)
        self._stack.addWidget(self.plots_widget)
        self.waiting = False  # a run was started: its first step is on the way
        grid_widget = QWidget()
        column = QVBoxLayout(self.plots_widget)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        column.addWidget(grid_widget, 1)
        self._grid = QGridLayout(grid_widget)
        self._grid.setContentsMargins(0, 0, 0, 0)
        self._grid.setSpacing(0)
        self._last_redraw = 0.0
        self._redraw_seconds = 0.0
        self._round_seconds = 0.0
        self._pending: list[int] = []
        self._theory_texts = ("", "", "")
        self._ranges: dict[str, tuple[float, float, float, float]] = {}
        self._live = False  # drawing during a run: ranges grow in steps (_fit)
        self._colours = LIGHT
        self.plots: dict[str, pg.PlotItem] = {}
        self._build()
        self.set_colours(LIGHT)
        self.clear()

    # --- construction -------------------------------------------------------------------
    def _plot(
        self, name: str, title: str, left: str, bottom: str, row: int, col: int
    ) -> pg.PlotItem:
        view = _TimedPlot(self.paint_clock)
        view.setMinimumSize(160, 120)
        self._grid.addWidget(view, row, col)
        self.views[name] = view
        plot = view.getPlotItem()
        plot.setTitle(title, size="9pt")
        plot.setLabel("left", left)
        plot.setLabel("bottom", bottom)
        plot.showGrid(x=False, y=True, alpha=0.2)  # x grid lines cost more than they help
        plot.setMenuEnabled(False)
        plot.disableAutoRange()
        plot.setMouseEnabled(x=False, y=False)
        plot.hideButtons()
        for axis in ("left", "bottom"):
            # an axis replays its tick text on every repaint unless cached as a pixmap
            plot.getAxis(axis).setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
            plot.getAxis(axis).enableAutoSIPrefix(False)
            plot.getAxis(axis).label.setFont(_small_font())
            plot.getAxis(axis).setStyle(tickFont=_small_font())
        self.plots[name] = plot
        return plot

    def _build(self) -> None:
        c = self._colours
        tps = self._plot("tok_s", "tok/s over time (rolling)", "tok/s", "seconds", 0, 0)
        tps.addLegend(offset=(-4, 4), labelTextSize="8pt")
        self.tps_spec = tps.plot([], [], name="speculative", pen=pg.mkPen(c.speculative, width=2))
        self.tps_plain = tps.plot([], [], name="plain", pen=pg.mkPen(c.plain, width=2))

        acc = self._plot("acceptance", "acceptance per step (rolling)", "α", "step", 0, 1)
        acc.setYRange(0, 1.05, padding=0)
        self.acc_points = acc.plot([], [], pen=None, symbol="o", symbolSize=4)
        self.acc_line = acc.plot([], [], pen=pg.mkPen(c.speculative, width=2))

        pos = self._plot("by_position", "acceptance by draft position", "α", "draft position", 0, 2)
        pos.setYRange(0, 1.05, padding=0)
        self.pos_bars = pg.BarGraphItem(x=[], height=[], width=0.7)
        pos.addItem(self.pos_bars)

        hist = self._plot("accepted_length", "accepted draft tokens per pass", "passes",
                          "accepted", 1, 0)
        self.hist_bars = pg.BarGraphItem(x=[], height=[], width=0.7)
        hist.addItem(self.hist_bars)

        split = self._plot("time_split", "time per step", "ms", "step", 1, 1)
        split.addLegend(offset=(-4, 4), labelTextSize="8pt")
        self.split_bars = {
            name: pg.BarGraphItem(x=[], height=[], y0=[], width=0.8, name=name)
            for name in ("draft", "verify", "overhead")
        }
        for bar in self.split_bars.values():
            split.addItem(bar)

        theory = self._plot("theory", "speedup: theory, cost model, measured", "×", "α", 1, 2)
        theory.addLegend(offset=(4, 4), labelTextSize="8pt")  # top left: the curve rises right
        theory.setXRange(0, 1, padding=0.02)
        self.theory_curve = theory.plot([], [], name="theory", pen=pg.mkPen(c.muted, width=2))
        self.cost_curve = theory.plot([], [], name="cost model (measured t_verify)",
                                      pen=pg.mkPen(c.speculative, width=2))
        self.theory_point = theory.plot([], [], name="theory at measured α", pen=None,
                                        symbol="o", symbolSize=9)
        self.measured_point = theory.plot([], [], name="measured", pen=None, symbol="star",
                                          symbolSize=14)
        dashed = pg.mkPen(c.muted, style=Qt.PenStyle.DashLine)
        self.break_even = pg.InfiniteLine(pos=1.0, angle=0, pen=dashed)
        theory.addItem(self.break_even)

    def set_colours(self, colours: Colours) -> None:
        self._colours = colours
        self._theory_texts = ("", "", "")
        self._ranges.clear()
        for view in self.views.values():
            view.setBackground(colours.background)
        for plot in self.plots.values():
            plot.titleLabel.setText(plot.titleLabel.text, color=colours.foreground, size="9pt")
            for axis in ("left", "bottom"):
                plot.getAxis(axis).setPen(colours.muted)
                plot.getAxis(axis).setTextPen(colours.foreground)
            if plot.legend is not None:
                style_legend(plot.legend, colours)
        self.tps_spec.setPen(pg.mkPen(colours.speculative, width=2))
        self.tps_plain.setPen(pg.mkPen(colours.plain, width=2))
        self.acc_line.setPen(pg.mkPen(colours.speculative, width=2))
        self.acc_points.setSymbolBrush(colours.muted)
        self.acc_points.setSymbolPen(None)
        self.pos_bars.setOpts(brush=colours.speculative, pen=pg.mkPen(None))
        self.hist_bars.setOpts(brush=colours.speculative, pen=pg.mkPen(None))
        for name, colour in (("draft", colours.t_draft), ("verify", colours.t_verify),
                             ("overhead", colours.t_overhead)):
            self.split_bars[name].setOpts(brush=colour, pen=pg.mkPen(None))
        self.theory_curve.setPen(pg.mkPen(colours.muted, width=2))
        self.cost_curve.setPen(pg.mkPen(colours.speculative, width=2,
                                        style=Qt.PenStyle.DashDotLine))
        self.theory_point.setSymbolBrush(colours.speculative)
        self.theory_point.setSymbolPen(colours.foreground)
        self.measured_point.setSymbolBrush(colours.plain)
        self.measured_point.setSymbolPen(colours.foreground)
        self.break_even.setPen(pg.mkPen(colours.muted, style=Qt.PenStyle.DashLine))

    # --- drawing ------------------------------------------------------------------------
    def clear(self) -> None:
        self.redraw(None, None)

    def due(self) -> bool:
        """Whether a redraw now keeps chart drawing within CPU_SHARE of one core."""
        cost = self._redraw_seconds + self.paint_clock.seconds
        interval = min(REDRAW_MAX_S, max(REDRAW_MIN_S, cost * (1 - CPU_SHARE) / CPU_SHARE))
        return time.perf_counter() - self._last_redraw >= interval

    def redraw(self, run: RunData | None, baseline: RunData | None) -> None:
        """Every chart, now (idle, paused, or a run just ended)."""
        self._live = False
        self._pending = []
        self._show_placeholder_until_data(run, baseline)
        start = time.perf_counter()
        self.paint_clock.seconds = 0.0  # from now on: the repaints this redraw causes
        for part in self._parts():
            part(run, baseline)
        self._last_redraw = time.perf_counter()
        self._redraw_seconds = self._last_redraw - start

    def _show_placeholder_until_data(self, run: RunData | None,
                                     baseline: RunData | None) -> bool:
        """A sentence instead of empty axes until a run has its first step (an axis with no
        data reads '0.0005 tok/s over 0.0008 s'). True while the sentence shows."""
        empty = all(r is None or r.columns.n == 0 for r in (run, baseline))
        if empty:
            waiting = self.waiting or run is not None or baseline is not None
            self.placeholder.setText(WAITING_TEXT if waiting else EMPTY_TEXT)
        self._stack.setCurrentWidget(self.placeholder if empty else self.plots_widget)
        return empty

    @property
    def in_round(self) -> bool:
        return bool(self._pending)

    def redraw_some(self, run: RunData | None, baseline: RunData | None) -> bool:
        """During a run: one chart per call (so each turn of the event loop stays short),
        starting a new round of all of them when one is due. True when a round began."""
        began = False
        self._live = True
        if self._show_placeholder_until_data(run, baseline):
            return False
        if not self._pending:
            if not self.due():
                return False
            self._pending = list(range(len(self._parts())))
            self._round_seconds = 0.0
            self.paint_clock.seconds = 0.0
            began = True
        start = time.perf_counter()
        self._parts()[self._pending.pop(0)](run, baseline)
        self._round_seconds += time.perf_counter() - start
        if not self._pending:
            self._last_redraw = time.perf_counter()
            self._redraw_seconds = self._round_seconds
        return began

    def _parts(self) -> tuple[Callable[[RunData | None, RunData | None], None], ...]:
        return (
            self._draw_throughput,
            lambda run, _: self._draw_acceptance(run),
            lambda run, _: self._draw_bars(run),
            lambda run, _: self._draw_time_split(run),
            self._draw_theory,
        )

    def _draw_throughput(self, run: RunData | None, baseline: RunData | None) -> None:
        top = max(self._draw_tok_s(self.tps_spec, run), self._draw_tok_s(self.tps_plain, baseline))
        seconds = max(_total_seconds(run), _total_seconds(baseline))
        self._fit("tok_s", 0.0, max(seconds, 1e-3), 0.0, max(top, 1e-3) * 1.1)

    def _fit(self, name: str, x0: float, x1: float, y0: float, y1: float) -> None:
        """Set a plot's range (only when it changed: a new range re-lays out and re-renders the
        axes, the larger part of a chart's paint). During a run an upper bound grows in steps
        (LIVE_HEADROOM) and holds while the data fills most of it; a full redraw fits exactly."""
        old = self._ranges.get(name)
        if self._live and old is not None:
            x1 = x0 + _held_span(old[1] - old[0], x1 - x0) if old[0] == x0 else x1
            y1 = y0 + _held_span(old[3] - old[2], y1 - y0) if old[2] == y0 else y1
        wanted = (x0, x1, y0, y1)
        if old != wanted:
            self._ranges[name] = wanted
            # a little padding, so the tick labels at the ends (0, 1) are drawn too
            self.plots[name].setRange(xRange=(x0, x1), yRange=(y0, y1), padding=0.02)

    def _draw_tok_s(self, curve: pg.PlotDataItem, run: RunData | None) -> float:
        """Draws the rolling tok/s of a run; returns its highest value."""
        if run is None or run.columns.n == 0:
            curve.setData([], [])
            return 0.0
        cols = run.columns
        rolling = rolling_ratio(cols["emitted"], cols["t_total"], WINDOW)
        curve.setData(np.cumsum(cols["t_total"]), rolling)
        return float(np.nanmax(rolling)) if np.isfinite(rolling).any() else 0.0

    def _draw_acceptance(self, run: RunData | None) -> None:
        n = run.columns.n if run is not None else 0
        self._fit("acceptance", 0.5, max(n, 1) + 0.5, 0.0, 1.05)
        if run is None or n == 0:
            self.acc_points.setData([], [])
            self.acc_line.setData([], [])
            return
        cols = run.columns
        judged = cols["judged"]
        steps = np.arange(1, cols.n + 1, dtype=float)
        drafted = judged > 0
        per_step = np.divide(cols["accepted"], judged, out=np.zeros(cols.n), where=drafted)
        self.acc_points.setData(steps[drafted], per_step[drafted])
        rolling = rolling_ratio(cols["accepted"], judged, WINDOW)
        self.acc_line.setData(steps[drafted], rolling[drafted])

    def _draw_bars(self, run: RunData | None) -> None:
        stats = run.stats if run is not None else None
        by_position = stats.acceptance_by_position if stats else []
        self.pos_bars.setOpts(x=np.arange(1, len(by_position) + 1), height=by_position)
        self._fit("by_position", 0.4, max(len(by_position), 1) + 0.6, 0.0, 1.05)
        lengths = sorted(stats.accepted_length.items()) if stats else []
        self.hist_bars.setOpts(x=[n for n, _ in lengths], height=[c for _, c in lengths])
        longest = max((n for n, _ in lengths), default=1)
        most = max((c for _, c in lengths), default=1)
        self._fit("accepted_length", -0.6, longest + 0.6, 0.0, most * 1.1)

    def _draw_time_split(self, run: RunData | None) -> None:
        n = run.columns.n if run is not None else 0
        if run is None or n == 0:
            for bar in self.split_bars.values():
                bar.setOpts(x=[], height=[], y0=[])
            self._fit("time_split", 0.4, 1.6, 0.0, 1.0)
            return
        cols = run.columns
        x = np.arange(1, cols.n + 1, dtype=float)
        base = np.zeros(cols.n)
        for name in ("draft", "verify", "overhead"):
            height = cols[f"t_{name}"] * 1000.0
            self.split_bars[name].setOpts(x=x, height=height, y0=base.copy())
            base = base + height
        self._fit("time_split", 0.4, n + 0.6, 0.0, max(float(base.max()), 1e-3) * 1.1)

    def _draw_theory(self, run: RunData | None, baseline: RunData | None) -> None:
        plot = self.plots["theory"]
        if run is None or run.stats.spec_steps == 0:
            for item in (self.theory_curve, self.cost_curve, self.theory_point,
                         self.measured_point):
                item.setData([], [])
            self._fit("theory", 0.0, 1.0, 0.0, 1.2)
            return
        stats = run.stats
        alpha, k = stats.alpha, stats.mean_k
        live = run_costs(run)
        if live is not None and live.t_plain > 0:
            # a plain step and a draft token from the same run (medians), or measured in turns
            t_target: float | None = live.t_plain
            t_draft = live.t_draft
        else:  # an opened trace, no pair loaded: the run's own means
            t_target = baseline.stats.plain_step_time if baseline else None
            t_target = t_target or stats.plain_step_time
            t_draft = stats.draft_time_per_token
        c = t_draft / t_target if t_target else None
        theory_at_alpha = 0.0
        if c is not None:
            curve = [theory_speedup(a, k, c) for a in _ALPHAS]
            theory_at_alpha = theory_speedup(alpha, k, c)
            self.theory_point.setData([alpha], [theory_at_alpha])
            self._set_texts(plot, "speedup: theory, cost model, measured", "speedup ×",
                            f"α   (k = {k:.1f}, c = {c:.2f})")
        else:
            curve = [expected_tokens_per_pass(a, k) for a in _ALPHAS]
            self.theory_point.setData([alpha], [expected_tokens_per_pass(alpha, k)])
            self._set_texts(plot, "tokens per pass: theory E(α, k) vs measured",
                            "tokens / pass", f"α   (k = {k:.1f}; compare for the speedup)")
        self.theory_curve.setData(_ALPHAS, curve)
        predicted: list[float] = []
        if c is not None and t_target and live is not None and k > 0:
            predicted = predicted_curve(live.curve, t_target, t_draft, k, list(_ALPHAS))
            self.cost_curve.setData(_ALPHAS, predicted)
        else:
            self.cost_curve.setData([], [])
        measured: float | None
        if baseline is not None and baseline.stats.tokens_per_second > 0:
            measured = stats.tokens_per_second / baseline.stats.tokens_per_second
        else:
            measured = stats.tokens_per_pass if c is None else None
        self.measured_point.setData([alpha] if measured is not None else [],
                                    [measured] if measured is not None else [])
        highest = max(max(curve), max(predicted, default=0.0), 1.0, measured or 0.0,
                      theory_at_alpha)
        self._fit("theory", 0.0, 1.0, 0.0, highest * 1.1)

    def _set_texts(self, plot: pg.PlotItem, title: str, left: str, bottom: str) -> None:
        """Retitle only on a change: each new text re-lays out the plot, which costs. Titles
        stay short: a title wider than its chart would push the chart out of view."""
        if (title, left, bottom) == self._theory_texts:
            return
        self._theory_texts = (title, left, bottom)
        plot.setTitle(title, size="9pt", color=self._colours.foreground)
        plot.setLabel("left", left)
        plot.setLabel("bottom", bottom)

    @property
    def showing_placeholder(self) -> bool:
        return self._stack.currentWidget() is self.placeholder

    def point_counts(self) -> dict[str, int]:
        """How many data points each chart holds (for tests and the empty-chart check)."""
        def n(item: pg.PlotDataItem) -> int:
            x, _ = item.getData()
            return 0 if x is None else len(x)

        def bars(item: pg.BarGraphItem) -> int:
            return len(item.opts.get("height") if item.opts.get("height") is not None else [])

        return {
            "tok_s": n(self.tps_spec),
            "tok_s_plain": n(self.tps_plain),
            "acceptance": n(self.acc_line),
            "by_position": bars(self.pos_bars),
            "accepted_length": bars(self.hist_bars),
            "time_split": bars(self.split_bars["verify"]),
            "theory": n(self.theory_curve) + n(self.measured_point),
        }


def _total_seconds(run: RunData | None) -> float:
    return float(run.columns["t_total"].sum()) if run is not None and run.columns.n else 0.0


def style_legend(legend: pg.LegendItem, colours: Colours) -> None:
    """Legend text in the theme's colour (re-rendered: pyqtgraph only stores it) on a
    translucent background, so a legend over data stays readable."""
    legend.setLabelTextColor(colours.foreground)
    for _, label in legend.items:
        label.setText(label.text)
    background = QColor(colours.background)
    background.setAlpha(200)
    legend.setBrush(background)


def _small_font() -> QFont:
    font = QFont()
    font.setPointSize(8)
    return font
