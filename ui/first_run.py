"""The first screen when there are no models yet: download the demo pair (with progress, size,
speed and cancel) or open model files. The download runs app.models.demo.fetch_demo on a worker
thread; cancelling keeps what was fetched so a later try resumes.
"""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.errors import DownloadCancelled, DraftLensError
from app.models.demo import DEMO_DRAFT, DEMO_TARGET, fetch_demo
from app.models.fetch_progress import FetchProgress

_MB = 1024 * 1024


class DemoFetcher(QObject):
    """Runs fetch_demo on its thread; progress and the outcome come back as signals."""

    progress = Signal(object)  # FetchProgress
    finished = Signal(str, str)  # target, draft paths
    failed = Signal(str)
    cancelled = Signal()

    def __init__(self) -> None:
        super().__init__()
        self._cancel = threading.Event()

    def cancel(self) -> None:
        self._cancel.set()

    @Slot()
    def run(self) -> None:
        self._cancel.clear()
        try:
            target, draft = fetch_demo(self.progress.emit, self._cancel.is_set)
        except DownloadCancelled:
            self.cancelled.emit()
        except DraftLensError as exc:
            self.failed.emit(str(exc))
        except Exception as exc:  # noqa: BLE001 - shown to the user
            self.failed.emit(f"{type(exc).__name__}: {exc}")
        else:
            self.finished.emit(str(target), str(draft))


def describe_progress(p: FetchProgress, file_index: int) -> str:
    """e.g. "file 1 of 2 · downloading part 3/22 · 120.5 of 1,065.6 MiB · 8.2 MiB/s"."""
    phase = {"download": "downloading", "assemble": "assembling", "verify": "verifying"}
    return (
        f"file {file_index} of 2 ({p.filename}) · {phase.get(p.phase, p.phase)} part "
        f"{p.part}/{p.n_parts} · {p.bytes_done / _MB:,.1f} of {p.bytes_total / _MB:,.1f} MiB"
        f" · {p.bytes_per_second / _MB:,.1f} MiB/s"
    )


class FirstRunPage(QWidget):
    demo_ready = Signal(str, str)  # target, draft
    open_files = Signal()  # the user wants to pick models by hand
    failed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        total = (DEMO_TARGET.size + DEMO_DRAFT.size) / 1e9
        title = QLabel("<h1>Welcome to DraftLens</h1>")
        intro = QLabel(
            "DraftLens runs speculative decoding on a pair of local models — a small draft "
            "that guesses tokens and a larger target that checks them — and shows every "
            "decision: what the draft proposed, its probability under each model, what was "
            "accepted, and what the target wrote instead.<br><br>"
            f"To start, download the demo pair (Qwen2.5-Coder 1.5B target + 0.5B draft, "
            f"GGUF, {total:.1f} GB), or open model files you already have."
        )
        intro.setWordWrap(True)
        intro.setMaximumWidth(640)
        self.download_button = QPushButton(f"Download the demo pair ({total:.1f} GB)")
        self.open_button = QPushButton("Open model files…")
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setVisible(False)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setVisible(False)
        self.status = QLabel()
        self.status.setWordWrap(True)
        for button in (self.download_button, self.open_button, self.cancel_button):
            button.setMinimumHeight(36)
        buttons = QHBoxLayout()
        buttons.addWidget(self.download_button)
        buttons.addWidget(self.open_button)
        buttons.addWidget(self.cancel_button)
        buttons.addStretch(1)
        column = QVBoxLayout()
        column.addStretch(1)
        column.addWidget(title)
        column.addWidget(intro)
        column.addSpacing(16)
        column.addLayout(buttons)
        column.addWidget(self.bar)
        column.addWidget(self.status)
        column.addStretch(2)
        outer = QHBoxLayout(self)
        outer.addStretch(1)
        outer.addLayout(column, 3)
        outer.addStretch(1)
        outer.setAlignment(Qt.AlignmentFlag.AlignCenter)

        self.download_button.clicked.connect(self.start_download)
        self.open_button.clicked.connect(self.open_files)
        self.cancel_button.clicked.connect(self.cancel_download)
        self._thread: QThread | None = None
        self._fetcher: DemoFetcher | None = None
        self._file_index = 1

    def start_download(self) -> None:
        if self._thread is not None:
            return
        self._thread = QThread(self)
        self._fetcher = DemoFetcher()
        self._fetcher.moveToThread(self._thread)
        self._thread.started.connect(self._fetcher.run)
        self._fetcher.progress.connect(self._on_progress)
        self._fetcher.finished.connect(self._on_finished)
        self._fetcher.failed.connect(self._on_failed)
        self._fetcher.cancelled.connect(self._on_cancelled)
        self._set_busy(True)
        self.status.setText("starting the download…")
        self._file_index = 1
        self._thread.start()

    def cancel_download(self) -> None:
        if self._fetcher is not None:
            self._fetcher.cancel()
            self.status.setText("cancelling… (what was downloaded is kept for the next try)")

    def _set_busy(self, busy: bool) -> None:
        self.download_button.setEnabled(not busy)
        self.cancel_button.setVisible(busy)
        self.bar.setVisible(busy)

    def _on_progress(self, p: FetchProgress) -> None:
        if p.filename == DEMO_DRAFT.filename:
            self._file_index = 2
        total = DEMO_TARGET.size + DEMO_DRAFT.size
        done = p.bytes_done + (DEMO_TARGET.size if self._file_index == 2 else 0)
        self.bar.setValue(int(1000 * done / total))
        self.status.setText(describe_progress(p, self._file_index))

    def _finish_thread(self) -> None:
        if self._thread is not None:
            self._thread.quit()
            self._thread.wait()
            self._thread.deleteLater()
        if self._fetcher is not None:
            self._fetcher.deleteLater()
        self._thread = None
        self._fetcher = None
        self._set_busy(False)

    def _on_finished(self, target: str, draft: str) -> None:
        self._finish_thread()
        self.status.setText("the demo pair is installed")
        self.demo_ready.emit(target, draft)

    def _on_failed(self, message: str) -> None:
        self._finish_thread()
        self.status.setText(f"download failed: {message}")
        self.failed.emit(message)

    def _on_cancelled(self) -> None:
        self._finish_thread()
        self.status.setText("download cancelled — press Download again to resume")

    def shutdown(self) -> None:
        """Stop a running download (window closing)."""
        if self._fetcher is not None:
            self._fetcher.cancel()
        if self._thread is not None:
            self._thread.quit()
            self._thread.wait()
