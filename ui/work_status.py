"""The status bar's word on work the engine host does outside a run's steps (a compare's
plain baseline, explaining why two texts differ, an analysis job): what it is, a progress bar
(a fraction where the host knows one, else busy) and Cancel. Hidden while there is none."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QPushButton, QWidget


class WorkStatus(QWidget):
    cancel_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.task = ""
        self.label = QLabel()
        self.bar = QProgressBar()
        self.bar.setMaximumWidth(160)
        self.bar.setTextVisible(False)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("stop this work; a new Run also cancels it first")
        self.cancel_button.clicked.connect(self.cancel_requested)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.label)
        layout.addWidget(self.bar)
        layout.addWidget(self.cancel_button)
        self.setVisible(False)

    def show_work(self, task: str, done: int, total: int) -> None:
        self.task = task
        self.label.setText(f"{task} · {done} of {total}" if total else f"{task}…")
        if total > 0:
            self.bar.setRange(0, total)
            self.bar.setValue(min(done, total))
        else:
            self.bar.setRange(0, 0)  # busy: no fraction known
        self.cancel_button.setEnabled(True)
        self.setVisible(True)

    def cancelling(self, why: str = "") -> None:
        self.label.setText(f"cancelling: {self.task}{' — ' + why if why else ''}…")
        self.cancel_button.setEnabled(False)

    def clear(self) -> None:
        self.task = ""
        self.setVisible(False)
