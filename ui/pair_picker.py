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
from PySide6.QtGui import QResizeEvent, QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QToolButton,
    QWidget,
)

from app.draft_memory import DEFAULT_CAP_TOKENS, MEMORY_FILE, default_memory_path
from app.engine.decode_config import DrafterChoice, DrafterOptions
from app.models import runtimes
from app.models.loading import ModelSpec, rpc_problem
from app.models.mtp import mtp_offer
from app.models.pair_check import PairCheck, check_pair_files, is_gguf
from app.models.self_skip import layer_count
from app.settings import RecentPair
from ui.background import run_in_thread
from ui.fit import wrapping_check
from ui.hub_download import HubDownloadDialog
from ui.model_browser import FoldersDialog, ModelBrowser, ModelChooser
from ui.path_row import PathRow
from ui.self_draft_option import SelfDraftOption
from ui.theme import LIGHT, Colours


class PairPicker(QGroupBox):
    changed = Signal()  # the choice or its verdict changed
    forget_requested = Signal()  # "Forget…": empty the draft memory
    probed = Signal()  # the backends and devices are known (torch has been imported)
    folders_changed = Signal(list)  # the user's model folders (to save in the settings)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Model pair", parent)
        self.target = PathRow("target model: .gguf file or transformers folder")
        self.draft = PathRow("draft model (smaller, same tokenizer)")
        self.ngram = QCheckBox()
        self.ngram.setToolTip("drafts by copying what followed the same words earlier in the "
                              "prompt and output (q is one-hot)")
        self.suffix = QCheckBox()
        self.suffix.setToolTip(
            "suffix decoding: drafts copied from the prompt, this output and earlier outputs "
            "of the same target, the continuation that followed most often first (q is "
            "one-hot); pays on repetitive work — the same file edited again, similar requests")
        self.remember = QCheckBox()
        self.remember.setChecked(True)
        self.remember.setToolTip(
            f"keeps the text of each suffix-decoded output (as token ids) in {MEMORY_FILE} in "
            f"DraftLens's data folder, at most {DEFAULT_CAP_TOKENS:,} tokens (the oldest go), "
            "so later runs can draft from it; it is your generated text: Forget… empties it")
        self.forget_button = QToolButton(text="Forget…")
        self.forget_button.setToolTip("empty the draft memory (earlier outputs kept for suffix "
                                      "decoding)")
        # shown only for a target whose GGUF carries its own MTP (NextN) layers
        self.own_mtp = QCheckBox()
        self.own_mtp.setToolTip("llama.cpp drafts with the target's own multi-token-prediction "
                                "layers (--draft-mtp): no second model")
        self.self_draft = SelfDraftOption()  # the target with layers skipped drafts
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
        # each model under its caption, the panel's whole width: room for its name in full
        # ("Qwen2.5-Coder 1.5B Instruct · Q4_K_M")
        for caption, row, chooser in (("Target", self.target, self.found_targets),
                                      ("Draft", self.draft, self.found_drafts)):
            form.addRow(QLabel(caption))
            form.addRow(row)
            form.addRow(chooser)
        found = QHBoxLayout()
        found.addWidget(self.folders_button)
        found.addWidget(self.download_button)
        found.addStretch(1)
        form.addRow("", found)
        form.addRow("", wrapping_check(self.ngram,
                                       "n-gram / prompt lookup instead of a draft model"))
        form.addRow("", wrapping_check(self.suffix,
                                       "suffix decoding: copies from this text and earlier runs"))
        self.memory_row = QWidget()
        memory = QHBoxLayout(self.memory_row)
        memory.setContentsMargins(0, 0, 0, 0)
        memory.addWidget(wrapping_check(self.remember, "remember outputs for later runs"), 1)
        memory.addWidget(self.forget_button)
        self.memory_row.setVisible(False)
        form.addRow("", self.memory_row)
        form.addRow("", self.self_draft)
        self._own_mtp_row = wrapping_check(self.own_mtp, "its own MTP layers draft")
        form.addRow("", self._own_mtp_row)
        self._own_mtp_row.setVisible(False)
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
        # one draft at a time: ticking one unticks the others
        self._draftless = (self.ngram, self.suffix, self.own_mtp, self.self_draft.box)
        for box in self._draftless:
            box.toggled.connect(lambda on, box=box: self._draftless_toggled(box, on))
        self.self_draft.changed.connect(self._self_draft_edited)
        self.forget_button.clicked.connect(self.forget_requested)
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
        elif not self.current_pair().draft and not self.draftless():
            self.draft.set_path(path)
        self.rescan_models()

    def _draft_chosen(self, path: str) -> None:
        for box in self._draftless:
            box.setChecked(False)
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
        self.self_draft.set_values(pair.self_skip, pair.self_cost)
        self.ngram.setChecked(pair.ngram)
        self.suffix.setChecked(pair.suffix and not pair.ngram)
        index = self.backend.findData(pair.backend)
        self.backend.setCurrentIndex(max(0, index))
        self._fill_devices()
        index = self.device.findData(pair.device)
        if index >= 0 and self.device.model().item(index).isEnabled():
            self.device.setCurrentIndex(index)
        self.gpu_layers.setValue(pair.n_gpu_layers)
        self.rpc.setText(pair.rpc)

    def own_mtp_chosen(self) -> bool:
        """The target's own MTP layers draft (offered only where its file has them)."""
        return self.own_mtp.isChecked() and self._own_mtp_row.isVisibleTo(self)

    def current_pair(self) -> RecentPair:
        options = self.self_draft.choice().options
        return RecentPair(
            target=self.target.path(),
            draft="" if self.draftless() else self.draft.path(),
            ngram=self.ngram.isChecked(),
            suffix=self.suffix.isChecked(),
            self_skip=options.skip if self.self_draft.chosen() else "",
            self_cost=options.skip_cost if self.self_draft.chosen() else None,
            backend=self.backend.currentData() or "auto",
            device=self.device.currentData() or "auto",
            n_gpu_layers=self.gpu_layers.value(),
            rpc=self.rpc.text().strip(),
        )

    def model_spec(self) -> ModelSpec:
        """Which models to load, and where."""
        pair = self.current_pair()
        backend = self.resolved_backend()
        layers: int | str = "auto" if pair.n_gpu_layers < 0 else pair.n_gpu_layers
        if backend == "llamacpp":
            local_cpu = pair.device == "cpu" and not pair.rpc  # rpc layers go to the servers
            return ModelSpec(pair.target, pair.draft or None, backend="llamacpp",
                             device="auto", n_gpu_layers=0 if local_cpu else layers,
                             rpc=pair.rpc, with_mtp=self.own_mtp_chosen())
        return ModelSpec(pair.target, pair.draft or None, backend="torch", device=pair.device)

    def drafter_choice(self) -> DrafterChoice:
        """What drafts (app.engine.drafters.registry): the lookup, suffix decoding (remembering
        earlier outputs where ticked), the target's MTP layers, the target with layers
        skipped, or the draft model."""
        if self.self_draft.chosen():
            return self.self_draft.choice()
        if self.ngram.isChecked():
            return DrafterChoice(("ngram",))
        if self.suffix.isChecked():
            memory = str(default_memory_path()) if self.remember.isChecked() else ""
            return DrafterChoice(("suffix",), DrafterOptions(memory=memory))
        if self.own_mtp_chosen():
            return DrafterChoice(("mtp",))
        return DrafterChoice(("draft",)) if self.current_pair().draft else DrafterChoice()

    def draftless(self) -> bool:
        """n-gram lookup, suffix decoding, the target's own MTP layers or the target with
        layers skipped: the draft model row does not apply."""
        return (self.ngram.isChecked() or self.suffix.isChecked() or self.own_mtp_chosen()
                or self.self_draft.chosen())

    # --- the verdict --------------------------------------------------------------------
    def _draftless_toggled(self, box: QCheckBox, on: bool) -> None:
        if on:
            for other in self._draftless:
                if other is not box:
                    other.setChecked(False)
        self.memory_row.setVisible(self.suffix.isChecked())
        self.draft.setEnabled(not self.draftless())
        self.draft.setToolTip("off: the target drafts for itself" if self.self_draft.chosen()
                              else "")
        self._paths_changed()

    def _self_draft_edited(self) -> None:
        """The skip set or its cost changed: the verdict and Run follow (nothing loads)."""
        if self.self_draft.chosen():
            self._show_plain_verdict()
            self.changed.emit()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        if event.size().width() != event.oldSize().width():
            self._relayout()
        super().resizeEvent(event)

    def _offer_own_mtp(self) -> str:
        """Show the MTP option for a target whose file has MTP layers; its offer text."""
        offer = mtp_offer(self.target.path()) if self.target.path() else ""
        self._own_mtp_row.setVisible(bool(offer))
        self.own_mtp.setToolTip(offer or self.own_mtp.toolTip())
        return offer

    def _paths_changed(self) -> None:
        self._offer_own_mtp()
        self.self_draft.set_layers(layer_count(self.target.path()) if self.target.path()
                                   else None)
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
        elif self.suffix.isChecked():
            kept = ("and from earlier outputs of this target (remembered)"
                    if self.remember.isChecked() else "(earlier runs are not remembered)")
            self._show_verdict(f"suffix decoding: drafts come from the text itself {kept}; "
                               "no draft model to check", "good")
        elif self.self_draft.chosen():
            self._show_verdict(*self.self_draft.verdict(self.resolved_backend()))
        elif self.own_mtp_chosen():
            self._show_verdict(f"the target {self._offer_own_mtp()} (llama.cpp)", "good")
        elif self._own_mtp_row.isVisibleTo(self):
            self._show_verdict(f"the target {self._offer_own_mtp()}: tick it, or choose a "
                               "draft model; else plain target decoding only", "muted")
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
        self.self_draft.set_colours(colours)
        self._style_verdict()

    def _show_verdict(self, text: str, tone: str) -> None:
        self._tone = tone
        self._style_verdict()
        self.verdict.setText(text)
        self._relayout()

    def _relayout(self) -> None:
        """Once the layouts around have settled, the form works out its wrapped lines'
        heights again: it keeps those of an earlier width or text otherwise, and a longer
        verdict or note would be cut off."""
        QTimer.singleShot(0, self, self.layout().invalidate)

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
        return self.self_draft.problem()
