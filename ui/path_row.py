"""A path field with "File…" and "Folder…" buttons: a model file (GGUF) or a transformers
folder."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLineEdit, QToolButton, QWidget

MODEL_FILTER = "Models (*.gguf);;All files (*)"


class PathRow(QWidget):
    """A path field with "File…" and "Folder…" buttons."""

    changed = Signal()

    def __init__(self, placeholder: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.edit = QLineEdit()
        self.edit.setPlaceholderText(placeholder)
        self.edit.setClearButtonEnabled(True)
        self.file_button = QToolButton(text="File…")
        self.folder_button = QToolButton(text="Folder…")
        self.file_button.setToolTip("a GGUF file (llama.cpp or PyTorch)")
        self.folder_button.setToolTip("a transformers model folder (PyTorch)")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.edit, 1)
        layout.addWidget(self.file_button)
        layout.addWidget(self.folder_button)
        self.edit.textChanged.connect(self.changed)
        self.file_button.clicked.connect(self._pick_file)
        self.folder_button.clicked.connect(self._pick_folder)

    def path(self) -> str:
        return self.edit.text().strip()

    def set_path(self, path: str) -> None:
        self.edit.setText(path)

    def _start_dir(self) -> str:
        current = Path(self.path())
        return str(current.parent if current.parent.exists() else Path.home())

    def _pick_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose a model file", self._start_dir(),
                                              MODEL_FILTER)
        if path:
            self.set_path(path)

    def _pick_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Choose a transformers model folder",
                                                self._start_dir())
        if path:
            self.set_path(path)
