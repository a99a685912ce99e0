"""A model field: a model file (GGUF) or a transformers folder, typed or chosen with its "…"
button (a file or a folder). Away from the keyboard it names the model ("Qwen2.5-Coder 1.5B
Instruct · Q4_K_M", app.models.model_label, read off the UI thread), with the path in its
tooltip; while it has the focus it holds the path, to edit or paste. A name longer than the
field shows its start."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLineEdit,
    QMenu,
    QToolButton,
    QWidget,
)

from app.models.model_label import model_label
from ui.background import run_in_thread

MODEL_FILTER = "Models (*.gguf);;All files (*)"


class PathRow(QWidget):
    """A model's path, shown as the model's name away from the keyboard."""

    changed = Signal()  # the path changed

    def __init__(self, placeholder: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._path = ""
        self.label = ""  # the model's name, "" until read or where none can be read
        self._generation = 0  # which path a name being read belongs to
        self._showing = False  # the field is changing what it shows, not the path
        self.edit = QLineEdit()
        self.edit.setPlaceholderText(placeholder)
        self.edit.setClearButtonEnabled(True)
        menu = QMenu(self)
        self.file_action = menu.addAction("Model file (.gguf)…", self._pick_file)
        self.file_action.setToolTip("a GGUF file (llama.cpp or PyTorch)")
        self.folder_action = menu.addAction("Transformers folder…", self._pick_folder)
        self.folder_action.setToolTip("a transformers model folder (PyTorch)")
        self.browse_button = QToolButton(text="…")
        self.browse_button.setToolTip("choose a model file (GGUF) or a transformers folder")
        self.browse_button.setMenu(menu)
        self.browse_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.edit, 1)
        layout.addWidget(self.browse_button)
        # typing, pasting, the clear button: any change but the field's own (_show)
        self.edit.textChanged.connect(self._typed)
        self.edit.installEventFilter(self)

    def path(self) -> str:
        return self._path

    def set_path(self, path: str) -> None:
        self._take(path.strip())
        self._show()

    # --- the path, typed or set ---------------------------------------------------------
    def _take(self, path: str) -> None:
        if path == self._path:
            return
        self._path = path
        self.label = ""
        self._generation += 1
        if path:
            self._read_label(path, self._generation)
        self._show_tooltip()
        self.changed.emit()

    def _typed(self, text: str) -> None:
        if not self._showing:
            self._take(text.strip())

    def _read_label(self, path: str, generation: int) -> None:
        def done(label: str | None, error: BaseException | None) -> None:
            if generation != self._generation:
                return  # the path changed meanwhile
            self.label = label or ""
            self._show()

        run_in_thread(lambda: model_label(path), done, self)

    # --- what the field shows -----------------------------------------------------------
    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if watched is self.edit and event.type() in (QEvent.Type.FocusIn,
                                                     QEvent.Type.FocusOut):
            self._show(editing=event.type() == QEvent.Type.FocusIn)
        return super().eventFilter(watched, event)

    def _show(self, editing: bool | None = None) -> None:
        """The path while the field has the focus, else the model's name (or the path where
        no name could be read), from its start."""
        if editing is None:
            editing = self.edit.hasFocus()
        text = self._path if editing or not self.label else self.label
        if self.edit.text() != text:
            self._showing = True
            try:
                self.edit.setText(text)
            finally:
                self._showing = False
        if not editing:
            self.edit.setCursorPosition(0)  # a clipped text shows its start, not its tail
        self._show_tooltip()

    def _show_tooltip(self) -> None:
        tip = f"{self.label}\n{self._path}" if self.label else self._path
        self.edit.setToolTip(tip)

    # --- the dialogs --------------------------------------------------------------------
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
