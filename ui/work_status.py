"""The status bar's word on work the engine host does outside a run's steps (a compare's
plain baseline, explaining why two texts differ, an analysis job): what it is, how far it has
come and about how long it has left where its size is known (`progress_text`), a progress bar
(a fraction where the host knows one, else busy) and Cancel. Hidden while there is none.

The estimate is the work's own pace so far: what it did since its first report, over the
time that took; none before MIN_PACE_S have passed, where one slow start would mislead."""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QPushButton, QWidget

from app.host.protocol import PERCENT

MIN_PACE_S = 1.0  # the least time a pace is measured over before an estimate is given


class Pace:
    """When the work on show began and how far it was then; a new total, or a count that
    goes back, is new work."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._start: tuple[float, int] | None = None  # when, and how much was done then
        self._total = 0
        self._done = 0

    def reset(self) -> None:
        self._start = None

    def seconds_left(self, done: int, total: int) -> float | None:
        """About how long `total - done` more will take at the pace so far; None without a
        known total or before the pace has been measured over MIN_PACE_S."""
        now = self.clock()
        if total <= 0:
            self._start = None
            return None
        if self._start is None or total != self._total or done < self._done:
            self._start = (now, done)
        self._total, self._done = total, done
        began, done_then = self._start
        elapsed = now - began
        if elapsed < MIN_PACE_S or done <= done_then:
            return None
        return (total - done) * elapsed / (done - done_then)


def time_left(seconds: float) -> str:
    if seconds < 60:
        return f"about {max(1, round(seconds))} s left"
    return f"about {round(seconds / 60)} min left"


def progress_text(task: str, done: int, total: int, unit: str = "",
                  left: float | None = None) -> str:
    """"comparing: decoding the plain baseline · 40 of 120 tokens · about 4 s left"; a task
    of no known size is its words alone."""
    if total <= 0:
        return task
    count = f"{round(100 * done / total)}%" if unit == PERCENT else (
        f"{done} of {total}" + (f" {unit}" if unit else ""))
    return f"{task} · {count}" + (f" · {time_left(left)}" if left is not None else "")


class WorkStatus(QWidget):
    cancel_requested = Signal()

    def __init__(self, parent: QWidget | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(parent)
        self.task = ""
        self.pace = Pace(clock)
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

    def show_work(self, task: str, done: int, total: int, unit: str = "") -> None:
        """`total` 0: no size known (a busy bar); `unit`: what done and total count (PERCENT:
        hundredths)."""
        self.task = task
        left = self.pace.seconds_left(done, total)
        self.label.setText(progress_text(task, done, total, unit, left) if total
                           else f"{task}…")
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
        self.pace.reset()
        self.setVisible(False)
