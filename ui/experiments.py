"""Experiments on the loaded pair, run in the engine host through the worker thread: the
draft-length sweep, the draft ranking and the exactness check (app.analysis does the work, as
the jobs of app.host.jobs; this module starts them, shows progress and puts the results in
tables and a chart)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

import pyqtgraph as pg
from PySide6.QtWidgets import (
    QCheckBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.analysis.exactness import EXACTNESS_SENTENCE, ExactReport
from app.analysis.rank import (
    Candidate,
    DraftModelCandidate,
    LoadedCandidate,
    NgramCandidate,
    RankRow,
    SelfDraftCandidate,
)
from app.analysis.sweep import SweepRow, parse_ks
from app.engine.decode_config import DecodeConfig, DrafterChoice
from app.engine.drafters.registry import label
from app.errors import DraftLensError
from app.models.loading import ModelSpec
from ui.decode_panel import DecodePanel
from ui.pair_picker import PairPicker
from ui.rejection_view import fill, make_table
from ui.run_control import RunControl
from ui.theme import LIGHT, Colours
from ui.worker import JobRequest


class ExperimentWindow(Protocol):
    """What the panel uses of the main window."""

    run_control: RunControl
    picker: PairPicker
    decode: DecodePanel

    def show_error(self, message: str) -> None: ...

    def update_actions(self) -> None: ...


class ExperimentsPanel(QWidget):
    def __init__(self, window: ExperimentWindow, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.window = window
        self.runs = window.run_control
        self.sweep_rows: list[SweepRow] = []
        self.rank_rows: list[RankRow] = []
        self.exact: ExactReport | None = None
        self.busy_with = ""
        self.runs.job_ended.connect(self._job_done)

        self.ks = QLineEdit("1,2,4,8")
        self.ks.setToolTip("draft lengths to measure, each against plain decoding")
        self.sweep_button = QPushButton("Sweep k")
        self.sweep_button.clicked.connect(self.start_sweep)
        self.candidates = QLineEdit()
        self.candidates.setPlaceholderText("more draft files, separated by ;")
        self.rank_ngram = QCheckBox("n-gram")
        self.rank_ngram.setChecked(True)
        self.self_layers = QLineEdit()
        self.self_layers.setPlaceholderText("self-draft layers, e.g. 8,14")
        self.rank_button = QPushButton("Rank drafts")
        self.rank_button.clicked.connect(self.start_rank)
        self.samples = QSpinBox()
        self.samples.setRange(20, 5000)
        self.samples.setValue(200)
        self.samples.setToolTip("seeded speculative runs for the sampled test")
        self.exact_button = QPushButton("Check exactness")
        self.exact_button.setToolTip(EXACTNESS_SENTENCE)
        self.exact_button.clicked.connect(self.start_check)
        self.buttons = (self.sweep_button, self.rank_button, self.exact_button)

        controls = QHBoxLayout()
        for widget in (QLabel("k:"), self.ks, self.sweep_button, QLabel("  candidates:"),
                       self.candidates, self.rank_ngram, self.self_layers, self.rank_button,
                       QLabel("  samples:"), self.samples, self.exact_button):
            controls.addWidget(widget)
        self.status = QLabel("Sweep: each k against plain decoding on the prompt. Rank: the "
                             "loaded draft and others, at each one's best k. Exactness: greedy "
                             "identity in your mode and with exact kernels, and a sampled G-test.")
        self.status.setWordWrap(True)
        self.sweep_table = make_table(["k", "measured", "predicted", "theory", "acceptance",
                                   "tokens/pass", "plain tok/s", "spec tok/s"])
        self.rank_table = make_table(["#", "candidate", "tok/s", "speedup", "acceptance",
                                  "cost ratio", "best k"])
        self.sweep_view = pg.PlotWidget()
        plot = self.sweep_view.getPlotItem()
        plot.setTitle("sweep: speedup by k", size="9pt")
        plot.setLabel("left", "×")
        plot.setLabel("bottom", "k")
        plot.setMenuEnabled(False)
        plot.setMouseEnabled(x=False, y=False)
        plot.hideButtons()
        plot.addLegend(offset=(4, 4), labelTextSize="8pt")
        self.measured_line = plot.plot([], [], name="measured", symbol="star", symbolSize=12)
        self.predicted_line = plot.plot([], [], name="cost model", symbol="o", symbolSize=6)
        self.theory_line = plot.plot([], [], name="textbook", symbol="t", symbolSize=6)
        self.break_even = pg.InfiniteLine(pos=1.0, angle=0)
        plot.addItem(self.break_even)
        grid = QGridLayout()
        grid.addWidget(self.sweep_view, 0, 0)
        grid.addWidget(self.sweep_table, 0, 1)
        grid.addWidget(self.rank_table, 0, 2)
        grid.setColumnStretch(0, 2)
        grid.setColumnStretch(1, 3)
        grid.setColumnStretch(2, 3)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(controls)
        layout.addWidget(self.status)
        layout.addLayout(grid, 1)
        self.set_colours(LIGHT)
        self.sweep_view.setVisible(False)

    def set_colours(self, colours: Colours) -> None:
        self.sweep_view.setBackground(colours.background)
        self.measured_line.setPen(pg.mkPen(colours.plain, width=2))
        self.measured_line.setSymbolBrush(colours.plain)
        self.predicted_line.setPen(pg.mkPen(colours.speculative, width=2))
        self.predicted_line.setSymbolBrush(colours.speculative)
        self.theory_line.setPen(pg.mkPen(colours.muted, width=2))
        self.break_even.setPen(pg.mkPen(colours.muted, style=pg.QtCore.Qt.PenStyle.DashLine))

    # --- starting ---------------------------------------------------------------------
    def _inputs(self) -> tuple[ModelSpec, DecodeConfig, str, bool] | None:
        w = self.window
        picker, decode = w.picker, w.decode
        reason = picker.blocking_reason()
        if self.runs.running:
            return None
        if reason:
            w.show_error(reason)
            return None
        choices = decode.choices()
        config = replace(decode.config(), drafter=picker.drafter_choice())
        try:
            config.validate()
        except DraftLensError as exc:
            w.show_error(str(exc))
            return None
        return picker.model_spec(), config, choices.prompt, choices.chat

    def _start(self, name: str, spec: ModelSpec, drafter: DrafterChoice, job: str,
               **settings: Any) -> None:
        self.busy_with = name
        for button in self.buttons:
            button.setEnabled(False)
        self.status.setText(f"{name}: running… (Stop or Run cancels it)")
        self.runs.start_job(JobRequest(spec, drafter, name, job, settings))

    def start_sweep(self) -> None:
        inputs = self._inputs()
        if inputs is None:
            return
        spec, config, prompt, chat = inputs
        try:
            ks = parse_ks(self.ks.text())
        except DraftLensError as exc:
            self.window.show_error(str(exc))
            return

        self._start("sweep", spec, config.drafter, "sweep",
                    config=config, prompt=prompt, chat=chat, ks=ks)

    def candidate_list(self, spec: ModelSpec, choice: DrafterChoice) -> list[Candidate]:
        found: list[Candidate] = []
        if choice:
            found.append(LoadedCandidate(label(choice, spec.draft or "") + " (loaded)", choice))
        for path in (p.strip() for p in self.candidates.text().split(";")):
            if path:
                found.append(DraftModelCandidate(path))
        if self.rank_ngram.isChecked() and choice.names != ("ngram",):
            found.append(NgramCandidate())
        for part in self.self_layers.text().split(","):
            if part.strip().isdigit() and int(part) > 0:
                found.append(SelfDraftCandidate(int(part)))
        return found

    def start_rank(self) -> None:
        inputs = self._inputs()
        if inputs is None:
            return
        spec, config, prompt, chat = inputs
        candidates = self.candidate_list(spec, config.drafter)

        self._start("rank", spec, config.drafter, "rank",
                    candidates=candidates, config=config, prompt=prompt, chat=chat)

    def start_check(self) -> None:
        inputs = self._inputs()
        if inputs is None:
            return
        spec, config = inputs[0], inputs[1]
        samples = self.samples.value()

        self._start("exactness check", spec, config.drafter, "exactness",
                    samples=samples, choice=config.drafter)

    # --- results ----------------------------------------------------------------------
    def _job_done(self, name: str, result: object, why: str) -> None:
        """`why`: where a Run cancelled the job, that (what the job had finished by then, if
        anything, is shown)."""
        self.busy_with = ""
        for button in self.buttons:
            button.setEnabled(True)
        if result is None:
            self.status.setText(f"{name}: {why or 'stopped or failed'}")
            return
        before = self.status.text()
        if name == "sweep" and isinstance(result, list):
            self.show_sweep(result)
        elif name == "rank" and isinstance(result, list):
            self.show_rank(result)
        elif isinstance(result, ExactReport):
            self.show_exact(result)
        if why:
            shown = self.status.text()
            self.status.setText(f"{name}: {why}" + (f" — {shown}" if shown != before else ""))

    def show_sweep(self, rows: list[SweepRow]) -> None:
        self.sweep_rows = rows
        fill(self.sweep_table, [[str(r.k), f"{r.measured_speedup:.2f}×",
                                 f"{r.predicted_speedup:.2f}×", f"{r.theory_speedup:.2f}×",
                                 f"{r.acceptance:.2f}", f"{r.tokens_per_pass:.2f}",
                                 f"{r.plain_tok_s:.1f}", f"{r.spec_tok_s:.1f}"] for r in rows])
        ks = [r.k for r in rows]
        self.measured_line.setData(ks, [r.measured_speedup for r in rows])
        self.predicted_line.setData(ks, [r.predicted_speedup for r in rows])
        self.theory_line.setData(ks, [r.theory_speedup for r in rows])
        self.sweep_view.setVisible(bool(rows))
        if rows:
            top = max(max(r.theory_speedup, r.measured_speedup, r.predicted_speedup)
                      for r in rows)
            self.sweep_view.getPlotItem().setRange(xRange=(0.5, max(ks) + 0.5),
                                                   yRange=(0, max(top, 1.0) * 1.1))
            best = max(rows, key=lambda r: r.measured_speedup)
            worst = max(rows, key=lambda r: abs(r.prediction_error))
            self.status.setText(
                f"sweep: best measured {best.measured_speedup:.2f}× at k = {best.k}; the cost "
                f"model is within {100 * abs(worst.prediction_error):.0f}% of every measurement")

    def show_rank(self, rows: list[RankRow]) -> None:
        self.rank_rows = rows
        fill(self.rank_table, [
            [str(i), r.label, "" if r.error else f"{r.tok_s:.1f}",
             "" if r.error else f"{r.speedup:.2f}×", "" if r.error else f"{r.acceptance:.2f}",
             "" if r.error else f"{r.cost_ratio:.3f}", r.error or str(r.best_k)]
            for i, r in enumerate(rows, start=1)])
        ok = [r for r in rows if not r.error]
        self.status.setText(f"rank: fastest {ok[0].label} at {ok[0].speedup:.2f}× (k = "
                            f"{ok[0].best_k})" if ok else "rank: no candidate could draft")

    def show_exact(self, report: ExactReport) -> None:
        self.exact = report
        lines = [report.verdict()]
        for d in report.greedy.divergences:
            margins = d["margins"]
            lines.append(
                f"{report.greedy.mode}: {d['prompt']!r} parts at generated token "
                f"{d['position']} ({d['plain_text']!r} plain, {d['other_text']!r} speculative);"
                f" top-two margins {margins['plain']:.3f} / {margins['speculative']:.3f} logits"
                f" against a kernel noise bound of {d['noise_bound']:.3f}: "
                f"{'a near-tie' if d['near_tie'] else 'NOT a near-tie'}")
        exact = ("no batch-invariant mode for this backend here" if report.exact is None else
                 f"{report.exact.mode}: greedy output "
                 f"{'identical to' if report.exact.identical else 'DIFFERS from'} plain "
                 f"decoding over {report.exact.prompts} prompts")
        lines.append(f"{exact}; sampled G-test over {report.samples} runs (temperature "
                     f"{report.temperature}, top-k {report.top_k}): p = {report.p_value:.3g}"
                     f" (fails below {report.threshold:g})")
        self.status.setText("exactness — " + "\n".join(lines))
