"""Models found on this machine, for the pair picker: a target list, a draft list that shows the
drafts whose vocabulary fits the target first (the rest after, greyed, with the reason), and the
dialog that adds or removes the user's own model folders.

Scanning (app.models.discovery.discover_models) and the vocabulary checks
(app.models.discovery.drafts_for) run off the UI thread.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QPushButton,
    QVBoxLayout,
    QWidget,
)
from shiboken6 import isValid

from app.models.discovery import DraftVerdict, discover_models, drafts_for
from app.models.found import FoundModel
from ui.background import run_in_thread

_GB = 1024**3


def describe(model: FoundModel) -> str:
    size = f"{model.size_bytes / _GB:.1f} GB" if model.size_bytes >= _GB / 10 else \
        f"{model.size_bytes / 1024**2:.1f} MB"
    return f"{model.name}  ·  {model.store}, {size}"


def _verdict_text(verdict: DraftVerdict) -> str:
    if verdict.compatible:
        return "✓ " + describe(verdict.model)
    if verdict.usable:
        return f"⇄ {describe(verdict.model)}  —  {verdict.label}"
    return "✗ " + describe(verdict.model)


class ModelChooser(QComboBox):
    """A list of found models; choosing one emits its path (the first row is a prompt)."""

    chosen = Signal(str)

    def __init__(self, prompt: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._prompt = prompt
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.setMinimumContentsLength(20)
        self.activated.connect(self._activated)
        self.show_models([])

    def show_models(self, models: list[FoundModel], prompt: str | None = None) -> None:
        self._fill(prompt or self._prompt, [(describe(m), str(m.path), "") for m in models])

    def show_verdicts(self, verdicts: list[DraftVerdict]) -> None:
        """Same-vocabulary drafts (✓), then those that draft across vocabularies (⇄, with
        what the vocabularies share), then the incompatible ones, disabled, with why."""
        good = sum(v.compatible for v in verdicts)
        across = sum(v.usable and not v.compatible for v in verdicts)
        rows = [(_verdict_text(v), str(v.model.path), "" if v.usable else v.check.message)
                for v in verdicts]
        more = f", {across} across vocabularies" if across else ""
        self._fill(f"{good} compatible draft{'s' * (good != 1)}{more} found…", rows)

    def _fill(self, prompt: str, rows: list[tuple[str, str, str]]) -> None:
        self.blockSignals(True)
        self.clear()
        self.addItem(prompt, None)
        model = self.model()
        for text, path, why in rows:
            self.addItem(f"{text}  —  {why}" if why else text, path)
            index = self.count() - 1
            self.setItemData(index, f"{path}\n{why}".strip(), Qt.ItemDataRole.ToolTipRole)
            item = model.item(index) if isinstance(model, QStandardItemModel) else None
            if why and item is not None:
                item.setEnabled(False)
        self.setCurrentIndex(0)
        self.blockSignals(False)

    def entries(self) -> list[tuple[str, bool]]:
        """(text, enabled) of every model row, in order (for tests and accessibility)."""
        model = self.model()
        return [(self.itemText(i), not isinstance(model, QStandardItemModel)
                 or model.item(i).isEnabled()) for i in range(1, self.count())]

    def _activated(self, index: int) -> None:
        path = self.itemData(index)
        if isinstance(path, str):
            self.chosen.emit(path)
        self.setCurrentIndex(0)


class ModelBrowser:
    """Keeps the found models and the draft verdicts for the current target up to date."""

    def __init__(self, targets: ModelChooser, drafts: ModelChooser) -> None:
        self.targets = targets
        self.drafts = drafts
        self.folders: list[str] = []
        self.models: list[FoundModel] = []
        self._target = ""
        # one count per kind of request, so a newer one of a kind drops an older's result: a
        # target set while the machine is scanned must not drop the scan's
        self._scans = 0
        self._verdicts = 0
        self.scanning = False

    def rescan(self) -> None:
        self._scans += 1
        scan = self._scans
        folders = list(self.folders)
        self.scanning = True
        self.targets.show_models([], "looking for models on this machine…")

        def done(models: list[FoundModel] | None, error: BaseException | None) -> None:
            if scan != self._scans or not isValid(self.targets):
                return
            self.scanning = False
            self.models = models or []
            usable = [m for m in self.models if not m.error]
            self.targets.show_models(usable, f"{len(usable)} models found on this machine…"
                                     if error is None else f"⚠ could not look: {error}")
            self.set_target(self._target, force=True)

        run_in_thread(lambda: discover_models(folders), done)

    def set_target(self, target: str, force: bool = False) -> None:
        if target == self._target and not force:
            return
        self._target = target
        self._verdicts += 1
        request = self._verdicts
        if not target or not Path(target).exists():
            self.drafts.show_models([], "choose a target to see its drafts")
            return
        models = list(self.models)
        self.drafts.show_models([], "checking vocabularies…")

        def done(verdicts: list[DraftVerdict] | None, error: BaseException | None) -> None:
            if request != self._verdicts or not isValid(self.drafts):
                return
            if error is not None or verdicts is None:
                self.drafts.show_models([], f"⚠ cannot read the target: {error}")
            else:
                self.drafts.show_verdicts(verdicts)

        run_in_thread(lambda: drafts_for(target, models), done)


class FoldersDialog(QDialog):
    """Add or remove the folders searched for models besides the known stores."""

    def __init__(self, folders: list[str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Model folders")
        self.list = QListWidget()
        self.list.addItems(folders)
        add = QPushButton("Add…")
        self.remove = QPushButton("Remove")
        add.clicked.connect(self._add)
        self.remove.clicked.connect(self.remove_selected)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                   | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        row = QHBoxLayout()
        row.addWidget(add)
        row.addWidget(self.remove)
        row.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Besides DraftLens's folder, LM Studio, Ollama, the Hugging Face "
                                "cache and llama.cpp's cache, look in:"))
        layout.addWidget(self.list)
        layout.addLayout(row)
        layout.addWidget(buttons)

    def folders(self) -> list[str]:
        return [self.list.item(i).text() for i in range(self.list.count())]

    def add_folder(self, folder: str) -> None:
        if folder and folder not in self.folders():
            self.list.addItem(folder)

    def remove_selected(self) -> None:
        for item in self.list.selectedItems():
            self.list.takeItem(self.list.row(item))

    def _add(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a model folder", str(Path.home()))
        self.add_folder(folder)
