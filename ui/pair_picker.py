"""Choosing the model pair: target, draft (a model, n-gram lookup, or none), backend, device,
GPU layers, llama.cpp rpc-servers for the target, with lists of the models found on this
machine (drafts that fit the target first), the user's model folders and a download dialog.
The compatibility check (app.models.pair_check.check_pair_files, no weights loaded) runs off
the UI thread as soon as the paths change, and its verdict is shown; an incompatible pair
cannot be run, and the verdict says why.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QToolButton,
    QWidget,
)

from app.models import runtimes
from app.models.loading import ModelSpec, rpc_problem
from app.models.pair_check import PairCheck, check_pair_files, is_gguf
from app.settings import RecentPair
from ui.background import run_in_thread
from ui.fit import wrapping_check
from ui.hub_download import HubDownloadDialog
from ui.model_browser import FoldersDialog, ModelBrowser, ModelChooser
from ui.theme import LIGHT, Colours

MODEL_FILTER = "Models (*.gguf);;All files (*)"


class _PathRow(QWidget):
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


class PairPicker(QGroupBox):
    changed = Signal()  # the choice or its verdict changed
    probed = Signal()  # the backends and devices are known (torch has been imported)
    folders_changed = Signal(list)  # the user's model folders (to save in the settings)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Model pair", parent)
        self.target = _PathRow("target model: .gguf file or transformers folder")
        self.draft = _PathRow("draft model (smaller, same tokenizer)")
        self.ngram = QCheckBox()
        self.ngram.setToolTip("drafts by copying what followed the same words earlier in the "
                              "prompt and output (q is one-hot)")
        self.recent = QComboBox()
        self.recent.setToolTip("pairs you ran before")
        # a long pair name is cut at the panel's edge rather than widening the panel
        self.recent.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.recent.setMinimumContentsLength(16)
        self.backend = QComboBox()
        self.device = QComboBox()
        self.gpu_layers = QSpinBox()
        self.gpu_layers.setRange(-1, 999)
        self.gpu_layers.setSpecialValueText("auto")
        self.gpu_layers.setValue(-1)
        self.gpu_layers.setToolTip("llama.cpp: layers offloaded to the GPU (auto = all that fit)")
        self.found_targets = ModelChooser("models found on this machine…")
        self.found_drafts = ModelChooser("choose a target to see its drafts")
        self.found_drafts.setToolTip("drafts whose vocabulary fits the target come first")
        self.browser = ModelBrowser(self.found_targets, self.found_drafts)
        self.folders_button = QToolButton(text="Model folders…")
        self.download_button = QToolButton(text="Download…")
        self.download_button.setToolTip("a GGUF file from Hugging Face, by repo id")
        self.rpc = QLineEdit()
        self.rpc.setPlaceholderText("servers: HOST:PORT,… (optional)")
        self.rpc.setClearButtonEnabled(True)
        self.rpc.setToolTip("llama.cpp: put the target's layers on rpc-servers on these "
                            "machines (start one with: rpc-server -H 0.0.0.0 -p 50052).\n"
                            "The RPC protocol is not secure: trusted networks only.")
        self.verdict = QLabel()
        self.verdict.setWordWrap(True)
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        form = QFormLayout(self)
        form.addRow("Recent", self.recent)
        form.addRow("Target", self.target)
        form.addRow("", self.found_targets)
        form.addRow("Draft", self.draft)
        form.addRow("", self.found_drafts)
        found = QHBoxLayout()
        found.addWidget(self.folders_button)
        found.addWidget(self.download_button)
        found.addStretch(1)
        form.addRow("", found)
        form.addRow("", wrapping_check(self.ngram,
                                       "n-gram / prompt lookup instead of a draft model"))
        form.addRow("Backend", self.backend)
        form.addRow("Device", self.device)
        form.addRow("GPU layers", self.gpu_layers)
        form.addRow("RPC", self.rpc)
        form.addRow(self.verdict)
        self._colours = LIGHT
        self._tone = "muted"
        self._caps = runtimes.unknown()
        self._check: PairCheck | None = None
        self._check_error = ""
        self._checking = False
        self._generation = 0
        self._debounce = QTimer(self, singleShot=True, interval=250)
        self._debounce.timeout.connect(self._start_check)
        self._fill_backends()
        self._fill_devices()
        self.target.changed.connect(self._paths_changed)
        self.draft.changed.connect(self._paths_changed)
        self.ngram.toggled.connect(self._ngram_toggled)
        self.backend.currentIndexChanged.connect(self._backend_changed)
        self.device.currentIndexChanged.connect(self._device_changed)
        self.recent.activated.connect(self._recent_chosen)
        self.found_targets.chosen.connect(self.target.set_path)
        self.found_drafts.chosen.connect(self._draft_chosen)
        self.folders_button.clicked.connect(self.edit_folders)
        self.download_button.clicked.connect(self.open_download)
        self.rpc.textChanged.connect(self._device_changed)
        self._paths_changed()

    # --- models on this machine ---------------------------------------------------------
    def set_model_folders(self, folders: list[str]) -> None:
        self.browser.folders = list(folders)

    def rescan_models(self) -> None:
        """Look through the stores again (off the UI thread)."""
        self.browser.rescan()

    def edit_folders(self) -> None:
        dialog = FoldersDialog(self.browser.folders, self)
        if dialog.exec():
            self.set_model_folders(dialog.folders())
            self.folders_changed.emit(dialog.folders())
            self.rescan_models()

    def open_download(self) -> HubDownloadDialog:
        dialog = HubDownloadDialog(self)
        dialog.downloaded.connect(self._downloaded)
        dialog.show()
        return dialog

    def _downloaded(self, path: str) -> None:
        if not self.target.path():
            self.target.set_path(path)
        elif not self.current_pair().draft and not self.ngram.isChecked():
            self.draft.set_path(path)
        self.rescan_models()

    def _draft_chosen(self, path: str) -> None:
        self.ngram.setChecked(False)
        self.draft.set_path(path)

    # --- capabilities -------------------------------------------------------------------
    def probe_devices(self) -> None:
        """Ask (off the UI thread) which backends and devices exist; grey out the rest."""
        run_in_thread(runtimes.probe, self._probed, self)

    def _probed(self, caps: runtimes.Capabilities | None, error: BaseException | None) -> None:
        if caps is not None:
            self.set_capabilities(caps)
        self.probed.emit()

    def set_capabilities(self, caps: runtimes.Capabilities) -> None:
        self._caps = caps
        self._fill_backends()
        self._fill_devices()

    def _fill_combo(self, combo: QComboBox, options: tuple[runtimes.Option, ...]) -> None:
        current = combo.currentData()
        combo.blockSignals(True)
        combo.clear()
        model = combo.model()
        for option in options:
            combo.addItem(option.label, option.key)
            item = model.item(combo.count() - 1) if isinstance(model, QStandardItemModel) else None
            if item is not None and not option.available:
                item.setEnabled(False)
                item.setToolTip(option.reason)
                item.setText(f"{option.label} (unavailable)")
        index = combo.findData(current)
        usable = index >= 0 and options[index].available
        combo.setCurrentIndex(index if usable else 0)
        combo.blockSignals(False)

    def _fill_backends(self) -> None:
        self._fill_combo(self.backend, self._caps.backends)

    def resolved_backend(self) -> str:
        chosen = self.backend.currentData() or "auto"
        if chosen != "auto":
            return chosen
        return "llamacpp" if is_gguf(self.target.path() or "x.gguf") else "torch"

    def _fill_devices(self) -> None:
        self._fill_combo(self.device, self._caps.devices[self.resolved_backend()])
        self._device_changed()

    def _backend_changed(self) -> None:
        self._fill_devices()
        self.changed.emit()

    def _device_changed(self) -> None:
        llama = self.resolved_backend() == "llamacpp"
        remote = llama and bool(self.rpc.text().strip())
        self.rpc.setEnabled(llama)
        self.gpu_layers.setEnabled(remote or (llama and self.device.currentData() != "cpu"))
        index = self.device.currentIndex()
        unavailable = [self.device.itemText(i) + ": " + (self.device.itemData(
            i, Qt.ItemDataRole.ToolTipRole) or "") for i in range(self.device.count())
            if not self.device.model().item(i).isEnabled()]  # fmt: skip
        self.device.setToolTip("\n".join(unavailable) if unavailable else "all devices available")
        if index >= 0:
            self.changed.emit()

    # --- recent pairs -------------------------------------------------------------------
    def set_recent(self, pairs: list[RecentPair], demo: RecentPair | None = None) -> None:
        self.recent.blockSignals(True)
        self.recent.clear()
        self.recent.addItem("choose a recent pair…", None)
        if demo is not None:
            self.recent.addItem("Demo: Qwen2.5-Coder 1.5B + 0.5B (GGUF)", demo)
        for pair in pairs:
            if demo is None or (pair.target, pair.draft) != (demo.target, demo.draft):
                self.recent.addItem(pair.label, pair)
                self.recent.setItemData(self.recent.count() - 1,
                                        f"{pair.target}\n{pair.draft or ''}",
                                        Qt.ItemDataRole.ToolTipRole)
        self.recent.blockSignals(False)

    def _recent_chosen(self, index: int) -> None:
        pair = self.recent.itemData(index)
        if isinstance(pair, RecentPair):
            self.set_pair(pair)
        self.recent.setCurrentIndex(0)

    def set_pair(self, pair: RecentPair) -> None:
        self.target.set_path(pair.target)
        self.draft.set_path(pair.draft)
        self.ngram.setChecked(pair.ngram)
        index = self.backend.findData(pair.backend)
        self.backend.setCurrentIndex(max(0, index))
        self._fill_devices()
        index = self.device.findData(pair.device)
        if index >= 0 and self.device.model().item(index).isEnabled():
            self.device.setCurrentIndex(index)
        self.gpu_layers.setValue(pair.n_gpu_layers)
        self.rpc.setText(pair.rpc)

    def current_pair(self) -> RecentPair:
        return RecentPair(
            target=self.target.path(),
            draft="" if self.ngram.isChecked() else self.draft.path(),
            ngram=self.ngram.isChecked(),
            backend=self.backend.currentData() or "auto",
            device=self.device.currentData() or "auto",
            n_gpu_layers=self.gpu_layers.value(),
            rpc=self.rpc.text().strip(),
        )

    def model_spec(self) -> ModelSpec:
        pair = self.current_pair()
        backend = self.resolved_backend()
        layers: int | str = "auto" if pair.n_gpu_layers < 0 else pair.n_gpu_layers
        if backend == "llamacpp":
            local_cpu = pair.device == "cpu" and not pair.rpc  # rpc layers go to the servers
            return ModelSpec(pair.target, pair.draft or None, pair.ngram, backend="llamacpp",
                             device="auto", n_gpu_layers=0 if local_cpu else layers,
                             rpc=pair.rpc)
        return ModelSpec(pair.target, pair.draft or None, pair.ngram, backend="torch",
                         device=pair.device)

    # --- the verdict --------------------------------------------------------------------
    def _ngram_toggled(self, on: bool) -> None:
        self.draft.setEnabled(not on)
        self._paths_changed()

    def _paths_changed(self) -> None:
        self.browser.set_target(self.target.path())
        self._fill_devices()
        self._generation += 1
        self._check = None
        self._check_error = ""
        target, draft = self.target.path(), self.current_pair().draft
        if target and draft:
            self._checking = True
            self._show_verdict("checking that target and draft share a vocabulary…", "muted")
            self._debounce.start()
        else:
            self._checking = False
            self._debounce.stop()
            self._show_plain_verdict()
        self.changed.emit()

    def _show_plain_verdict(self) -> None:
        target = self.target.path()
        if not target:
            self._show_verdict("choose a target model (or download the demo pair)", "muted")
        elif not Path(target).exists():
            self._show_verdict(f"⚠ target not found: {target}", "bad")
        elif self.ngram.isChecked():
            self._show_verdict("n-gram lookup: drafts come from the text itself; no draft "
                               "model to check", "good")
        else:
            self._show_verdict("no draft: plain target decoding only", "muted")

    def _start_check(self) -> None:
        generation = self._generation
        target, draft = self.target.path(), self.current_pair().draft

        def done(check: PairCheck | None, error: BaseException | None) -> None:
            if generation != self._generation:
                return  # the paths changed meanwhile
            self._checking = False
            self._check = check
            self._check_error = str(error) if error is not None else ""
            self._show_check()
            self.changed.emit()

        run_in_thread(lambda: check_pair_files(target, draft), done, self)

    def _show_check(self) -> None:
        if self._check_error:
            self._show_verdict(f"⚠ cannot check the pair: {self._check_error}", "bad")
        elif self._check is not None and self._check.compatible:
            lines = [f"✓ {self._check.message}"] + [f"⚠ {w}" for w in self._check.warnings]
            self._show_verdict("<br>".join(lines), "good")
        elif self._check is not None and self._check.usable:
            lines = [f"⇄ {self._check.message}"] + [f"⚠ {w}" for w in self._check.warnings]
            self._show_verdict("<br>".join(lines), "good")
        elif self._check is not None:
            self._show_verdict(f"✗ incompatible: {self._check.message}", "bad")

    def set_colours(self, colours: Colours) -> None:
        self._colours = colours
        self._style_verdict()

    def _show_verdict(self, text: str, tone: str) -> None:
        self._tone = tone
        self._style_verdict()
        self.verdict.setText(text)

    def _style_verdict(self) -> None:
        c = self._colours
        colour = {"good": c.foreground, "bad": c.bad, "muted": c.muted}[self._tone]
        weight = "bold" if self._tone == "bad" else "normal"
        self.verdict.setStyleSheet(f"color: {colour}; font-weight: {weight};")

    @property
    def checking(self) -> bool:
        return self._checking

    def blocking_reason(self) -> str:
        """Why Run must stay disabled, or "" when the pair may run."""
        if not self.target.path():
            return "choose a target model first"
        if self._checking:
            return "checking the pair…"
        if self.rpc.isEnabled() and (problem := rpc_problem(self.rpc.text().strip())):
            return problem
        if self._check is not None and not self._check.usable:
            return f"incompatible pair: {self._check.message}"
        return ""
