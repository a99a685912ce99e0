"""Download a GGUF file by Hugging Face repo id: type the repo, list its GGUF files, pick one,
watch the progress bar, cancel (a later try resumes). Through app.models.hub, the same code as
`draftlens models fetch`; the sha256 is checked there before the file is used.
"""

from __future__ import annotations

import threading

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.errors import DownloadCancelled, DraftLensError
from app.models.fetch_progress import FetchProgress
from app.models.hub import HubFile, choose_file, fetch_model, list_gguf_files
from ui.background import run_in_thread

_MB = 1024 * 1024


class _Fetcher(QObject):
    progress = Signal(object)  # FetchProgress
    finished = Signal(str)
    failed = Signal(str)

    def __init__(self, repo: str, filename: str) -> None:
        super().__init__()
        self.repo, self.filename = repo, filename
        self.cancel_event = threading.Event()

    @Slot()
    def run(self) -> None:
        try:
            path = fetch_model(self.repo, self.filename, progress=self.progress.emit,
                               cancel=self.cancel_event.is_set)
        except DownloadCancelled as exc:
            self.failed.emit(str(exc))
        except DraftLensError as exc:
            self.failed.emit(str(exc))
        except Exception as exc:  # noqa: BLE001 - shown to the user
            self.failed.emit(f"{type(exc).__name__}: {exc}")
        else:
            self.finished.emit(str(path))


class HubDownloadDialog(QDialog):
    downloaded = Signal(str)  # the file's path

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Download a model from Hugging Face")
        self.repo = QLineEdit()
        self.repo.setPlaceholderText("repo id, e.g. Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF")
        self.list_button = QPushButton("List files")
        self.files = QListWidget()
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.status = QLabel("type a repo id and list its GGUF files")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.download_button = QPushButton("Download")
        self.cancel_button = QPushButton("Cancel download")
        self.close_button = QPushButton("Close")
        row = QHBoxLayout()
        row.addWidget(self.repo, 1)
        row.addWidget(self.list_button)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        for button in (self.download_button, self.cancel_button, self.close_button):
            buttons.addWidget(button)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.files, 1)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addLayout(buttons)
        self.repo.returnPressed.connect(self.list_files)
        self.list_button.clicked.connect(self.list_files)
        self.download_button.clicked.connect(self.start_download)
        self.cancel_button.clicked.connect(self.cancel_download)
        self.close_button.clicked.connect(self.close)
        self.files.currentRowChanged.connect(lambda _row: self._update_buttons())
        self._thread: QThread | None = None
        self._fetcher: _Fetcher | None = None
        self._listing = False
        self._update_buttons()

    @property
    def busy(self) -> bool:
        return self._listing or self._thread is not None

    def _update_buttons(self) -> None:
        self.list_button.setEnabled(not self.busy)
        self.repo.setEnabled(not self.busy)
        self.download_button.setEnabled(not self.busy and self.files.currentItem() is not None)
        self.cancel_button.setEnabled(self._thread is not None)

    def list_files(self) -> None:
        repo = self.repo.text().strip()
        if not repo or self.busy:
            return
        self._listing = True
        self.files.clear()
        self.status.setText(f"asking the hub for {repo}…")
        self._update_buttons()

        def done(files: list[HubFile] | None, error: BaseException | None) -> None:
            self._listing = False
            if error is not None or files is None:
                self.status.setText(f"⚠ {error}")
            elif not files:
                self.status.setText(f"{repo} has no GGUF files — DraftLens downloads GGUF files")
            else:
                default = choose_file(files)
                for file in files:
                    size = f"{(file.size or 0) / _MB:,.1f} MiB"
                    item = QListWidgetItem(f"{file.name}    {size}")
                    item.setData(Qt.ItemDataRole.UserRole, file.name)
                    self.files.addItem(item)
                    if file is default:
                        self.files.setCurrentItem(item)
                self.status.setText(f"{len(files)} GGUF files in {repo}; pick one"
                                    + (" (Q4_K_M preselected)" if default else ""))
            self._update_buttons()

        run_in_thread(lambda: list_gguf_files(repo), done)

    def start_download(self) -> None:
        item = self.files.currentItem()
        if item is None or self.busy:
            return
        repo, filename = self.repo.text().strip(), item.data(Qt.ItemDataRole.UserRole)
        self._fetcher = _Fetcher(repo, filename)
        self._thread = QThread(self)
        self._fetcher.moveToThread(self._thread)
        self._thread.started.connect(self._fetcher.run)
        self._fetcher.progress.connect(self._show_progress)
        self._fetcher.finished.connect(self._finished)
        self._fetcher.failed.connect(self._failed)
        self.progress.setValue(0)
        self.status.setText(f"downloading {filename}…")
        self._thread.start()
        self._update_buttons()

    def cancel_download(self) -> None:
        if self._fetcher is not None:
            self._fetcher.cancel_event.set()

    def _show_progress(self, p: FetchProgress) -> None:
        self.progress.setValue(int(1000 * p.fraction))
        verb = {"download": "downloading", "verify": "checking sha256 of"}.get(p.phase, p.phase)
        self.status.setText(f"{verb} {p.filename}: {p.bytes_done / _MB:,.1f} of "
                            f"{p.bytes_total / _MB:,.1f} MiB, "
                            f"{p.bytes_per_second / _MB:,.1f} MiB/s")

    def _finished(self, path: str) -> None:
        self._stop_thread()
        self.progress.setValue(1000)
        self.status.setText(f"✓ downloaded and checked: {path}")
        self.downloaded.emit(path)

    def _failed(self, message: str) -> None:
        self._stop_thread()
        self.status.setText(f"⚠ {message}")

    def _stop_thread(self) -> None:
        if self._thread is not None:
            self._thread.quit()
            self._thread.wait()
        self._thread = None
        self._fetcher = None
        self._update_buttons()

    def closeEvent(self, event: object) -> None:  # noqa: N802 - Qt's name
        self.cancel_download()
        self._stop_thread()
        super().closeEvent(event)  # type: ignore[arg-type]
