"""Said once in the window (ui.why_tabs puts it under the cost view's verdict, the width of the
window's right side, between the step table and the charts a plain run leaves empty): adaptive
k decoded this run (almost) plainly, why (the controller's recorded decisions, in the words of
app.analysis.reasons, with the figures of its last decision that no draft paid), and one click
to watch the draft anyway at a fixed k."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

from app.analysis.cost import CostView
from app.analysis.reasons import best_alternative_k, plain_run_reason
from app.engine.records import StepRecord
from ui.run_data import PlainRun


def watch_k(steps: list[StepRecord], view: CostView | None, run_k: int) -> int:
    """The fixed k to offer: the draft length the controller last priced best, else the cost
    view's best k, else the run's draft max."""
    return best_alternative_k(steps) or (view.best.k if view is not None else run_k)


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

    def show_reason(self, plain: PlainRun | None, steps: list[StepRecord],
                    view: CostView | None, run_k: int) -> None:
        """`steps`: the run's records (their decisions say why); `run_k`: the run's draft max
        k, offered when neither the decisions nor a cost view name one."""
        if plain is None:
            self.setVisible(False)
            return
        self.k = watch_k(steps, view, run_k)
        self.text.setText(plain_run_reason(steps))
        self.button.setText(f"Watch the draft anyway\n(fixed k = {self.k})")
        self.setVisible(True)
