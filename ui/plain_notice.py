"""Said where the empty views are (the step table, the p/q bars, the acceptance charts): adaptive
k decoded this run plainly, why (the cost view's verdict and the two numbers behind it), and
one click to watch the draft anyway at a fixed k taken from the cost view."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

from app.analysis.cost import CostView
from ui.run_data import PlainRun


def plain_run_text(plain: PlainRun, view: CostView | None) -> str:
    """Why this run shows (almost) no drafts, in the cost view's own figures."""
    if plain.plain_steps == plain.steps:
        head = f"Adaptive k decoded all {plain.steps} steps plainly"
    else:
        head = f"Adaptive k decoded {plain.plain_steps} of {plain.steps} steps plainly"
    if view is None:
        return head + ": it found no draft length that pays on this device."
    best = view.best
    numbers = (f"verifying {best.k + 1} tokens costs {best.verify_in_steps:.1f} plain steps "
               f"and one draft token {view.cost_ratio:.2f} of a plain step")
    if not view.pays:
        return (f"{head}: on this device drafting cannot pay — {numbers}, so even the best "
                f"fixed k ({best.k}) would reach {best.predicted_speedup:.2f}× plain at "
                f"acceptance {view.alpha:.2f}.")
    return (f"{head}: the cost view predicts {best.predicted_speedup:.2f}× at k = {best.k} "
            f"({numbers}), but the drafts adaptive k tried were accepted too rarely to pay.")


class PlainRunNotice(QFrame):
    """A framed, wrapping sentence and a button; hidden unless a run decoded plainly."""

    watch_draft = Signal(int)  # run again with this fixed k

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.text = QLabel()
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.button = QPushButton()
        self.button.setToolTip("turn adaptive k off and run the same prompt again with this "
                               "fixed draft length, so each step shows the drafts, p, q and "
                               "the decisions")
        self.button.clicked.connect(lambda: self.watch_draft.emit(self.k))
        self.k = 0
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.addWidget(self.text, 1)
        layout.addWidget(self.button, 0, Qt.AlignmentFlag.AlignVCenter)
        self.setVisible(False)

    def show_reason(self, plain: PlainRun | None, view: CostView | None, run_k: int) -> None:
        """`run_k`: the run's draft max k, offered when no cost view is at hand."""
        if plain is None:
            self.setVisible(False)
            return
        self.k = view.best.k if view is not None else run_k
        self.text.setText(plain_run_text(plain, view))
        self.button.setText(f"Watch the draft anyway\n(fixed k = {self.k})")
        self.setVisible(True)
