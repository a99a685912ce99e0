"""The prompt and the decode settings, with the Run / Stop / Step buttons.

The values map one to one onto app.engine.session.DecodeConfig (and app.settings.DecodeChoices,
which remembers them); nothing here exists that the engine does not take.
"""

from __future__ import annotations

from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.engine.decode_config import MAX_DRAFT, MAX_TREE_NODES, MAX_TREE_WIDTH, DecodeConfig
from app.engine.sampling import SamplingParams
from app.settings import (
    FASTEST_K,
    INSPECT_K,
    MODE_CUSTOM,
    MODE_FASTEST,
    MODE_INSPECT,
    DecodeChoices,
)
from ui.fit import wrapping_check


def _spin(low: int, high: int, value: int, tip: str, special: str = "") -> QSpinBox:
    box = QSpinBox()
    box.setRange(low, high)
    box.setValue(value)
    box.setToolTip(tip)
    if special:
        box.setSpecialValueText(special)
    return box


def _dspin(low: float, high: float, value: float, step: float, decimals: int, tip: str,
           special: str = "") -> QDoubleSpinBox:  # fmt: skip
    box = QDoubleSpinBox()
    box.setRange(low, high)
    box.setDecimals(decimals)
    box.setSingleStep(step)
    box.setValue(value)
    box.setToolTip(tip)
    if special:
        box.setSpecialValueText(special)
    return box


class DecodePanel(QGroupBox):
    def __init__(self, run: QAction, stop: QAction, step: QAction,
                 parent: QWidget | None = None) -> None:  # fmt: skip
        super().__init__("Prompt and decoding", parent)
        self.prompt = QPlainTextEdit()
        self.prompt.setPlaceholderText("Text to continue from (or a question in chat mode)")
        self.prompt.setMinimumHeight(70)
        self.chat = QCheckBox()
        self._applying = False  # a named mode is setting k and adaptive: it stays named
        self.draft_max = _spin(1, MAX_DRAFT, INSPECT_K,
                               "k: tokens the draft proposes per verify pass")
        self.draft_min = _spin(0, MAX_DRAFT, 0, "fewest draft tokens worth a verify pass")
        self.adaptive = QCheckBox("adaptive k")
        self.adaptive.setToolTip("choose k per step from measured acceptance and this "
                                 "machine's pass prices; decode plainly where no k is priced "
                                 "to pay. A draft model's draft (up to k) ends where its own "
                                 "confidence says no longer draft would pay for its time")
        self.mode = QComboBox()
        # short names keep the left column narrow on a laptop screen; the tooltip says more
        self.mode.addItem(f"Inspect (k = {INSPECT_K}, every step drafts)", MODE_INSPECT)
        self.mode.addItem("Fastest (adaptive k)", MODE_FASTEST)
        self.mode.addItem("Custom (the settings below)", MODE_CUSTOM)
        self.mode.setToolTip("Inspect shows drafts being judged on any machine (and prices "
                             "plain decoding beside them now and then); Fastest chooses k for "
                             "speed and may not draft at all where drafting costs more than "
                             "it saves; Custom is what you set below")
        self.mode.currentIndexChanged.connect(self._apply_mode)
        self.adaptive.toggled.connect(self._mode_follows_settings)
        self.p_min = _dspin(0.0, 0.99, 0.0, 0.05, 2,
                            "stop drafting when the draft's own probability drops below this",
                            special="off")
        self.tree_width = _spin(1, MAX_TREE_WIDTH, 1,
                                "children a draft node may have: 1 drafts a chain, 2-3 "
                                "branch where the draft is unsure (k stays the depth)",
                                special="1 (chain)")
        self.tree_nodes = _spin(1, MAX_TREE_NODES, 16, "draft nodes per verify pass at most")
        self.temperature = _dspin(0.0, 5.0, 0.0, 0.1, 2, "0 = greedy", special="0 (greedy)")
        self.top_k = _spin(0, 100000, 0, "keep the k most likely tokens (0 = off)", "off")
        self.top_p = _dspin(0.01, 1.0, 1.0, 0.05, 2, "nucleus: keep tokens up to this mass")
        self.seed = _spin(-1, 2**31 - 1, -1, "random seed for sampling", "random")
        self.max_new = _spin(1, 100000, 128, "stop after this many new tokens")
        self.compare = QCheckBox()
        self.compare.setToolTip("after the run, decode the same prompt with the target alone "
                                "and report the speedup and whether the texts are identical")
        self.draft_max.valueChanged.connect(lambda v: self.draft_min.setMaximum(v))
        self.draft_max.valueChanged.connect(self._mode_follows_settings)
        self.draft_min.setMaximum(self.draft_max.value())

        grid = QGridLayout()
        grid.setColumnStretch(1, 1)
        grid.setColumnStretch(3, 1)
        rows = (
            ("draft max k", self.draft_max, "min", self.draft_min),
            (None, self.adaptive, "p-min", self.p_min),
            ("tree width", self.tree_width, "nodes", self.tree_nodes),
            ("temperature", self.temperature, "seed", self.seed),
            ("top-k", self.top_k, "top-p", self.top_p),
            ("max new", self.max_new, None, None),
        )
        for row, (label_a, a, label_b, b) in enumerate(rows):
            if label_a is None:
                grid.addWidget(a, row, 0, 1, 2)
            else:
                grid.addWidget(QLabel(label_a), row, 0)
                grid.addWidget(a, row, 1)
            if label_b is not None:
                grid.addWidget(QLabel(label_b), row, 2)
                grid.addWidget(b, row, 3)
        self.max_new.setToolTip("max new tokens: stop after this many")
        grid.addWidget(wrapping_check(self.compare, "compare with plain decoding"), len(rows),
                       0, 1, 4)

        # Run / Stop / Step: the window keeps them in view below the scrolling panels
        self.button_bar = QWidget()
        buttons = QHBoxLayout(self.button_bar)
        buttons.setContentsMargins(4, 2, 4, 2)
        self.run_button, self.stop_button, self.step_button = (
            self._button(action) for action in (run, stop, step)
        )
        for button in (self.run_button, self.stop_button, self.step_button):
            buttons.addWidget(button)
        buttons.addStretch(1)

        layout = QVBoxLayout(self)
        layout.addWidget(self.prompt, 1)
        mode_row = QHBoxLayout()
        mode_row.addWidget(QLabel("mode"))
        mode_row.addWidget(self.mode, 1)
        layout.addLayout(mode_row)
        layout.addWidget(wrapping_check(self.chat, "chat mode (apply the target's chat template)"))
        layout.addLayout(grid)

    @staticmethod
    def _button(action: QAction) -> QToolButton:
        button = QToolButton()
        button.setDefaultAction(action)
        button.setToolButtonStyle(button.toolButtonStyle().ToolButtonTextOnly)
        button.setMinimumWidth(72)
        return button

    # --- the named modes ----------------------------------------------------------------
    @property
    def mode_name(self) -> str:
        return str(self.mode.currentData())

    def set_mode(self, name: str) -> None:
        index = self.mode.findData(name)
        self.mode.setCurrentIndex(index if index >= 0 else self.mode.findData(MODE_CUSTOM))

    def _apply_mode(self) -> None:
        name = self.mode_name
        if name == MODE_CUSTOM:
            return
        self._applying = True
        self.adaptive.setChecked(name == MODE_FASTEST)
        self.draft_max.setValue(FASTEST_K if name == MODE_FASTEST else INSPECT_K)
        self._applying = False

    def _mode_follows_settings(self) -> None:
        """A k or adaptive setting changed by hand that no named mode has: Custom."""
        if self._applying:
            return
        adaptive, k = self.adaptive.isChecked(), self.draft_max.value()
        named = (MODE_FASTEST if adaptive and k == FASTEST_K
                 else MODE_INSPECT if not adaptive and k == INSPECT_K else MODE_CUSTOM)
        if named != self.mode_name:
            self.mode.blockSignals(True)
            self.set_mode(named)
            self.mode.blockSignals(False)

    # --- values -------------------------------------------------------------------------
    def config(self) -> DecodeConfig:
        """The settings as the engine takes them (validated by the engine when a run starts)."""
        seed = self.seed.value()
        return DecodeConfig(
            n_predict=self.max_new.value(),
            draft_max=self.draft_max.value(),
            draft_min=self.draft_min.value(),
            draft_p_min=self.p_min.value(),
            adaptive=self.adaptive.isChecked(),
            # fixed k in the window prices plain decoding beside the draft (cost view)
            price_plain=not self.adaptive.isChecked(),
            tree_width=self.tree_width.value(),
            tree_nodes=self.tree_nodes.value(),
            sampling=SamplingParams(
                temperature=self.temperature.value(),
                top_k=self.top_k.value(),
                top_p=self.top_p.value(),
                seed=None if seed < 0 else seed,
            ),
        )

    def choices(self) -> DecodeChoices:
        return DecodeChoices(
            prompt=self.prompt.toPlainText(),
            chat=self.chat.isChecked(),
            mode=self.mode_name,
            draft_max=self.draft_max.value(),
            draft_min=self.draft_min.value(),
            adaptive=self.adaptive.isChecked(),
            tree_width=self.tree_width.value(),
            tree_nodes=self.tree_nodes.value(),
            p_min=self.p_min.value(),
            temperature=self.temperature.value(),
            top_k=self.top_k.value(),
            top_p=self.top_p.value(),
            seed=self.seed.value(),
            max_new_tokens=self.max_new.value(),
            compare=self.compare.isChecked(),
        )

    def set_choices(self, c: DecodeChoices) -> None:
        self.prompt.setPlainText(c.prompt)
        self.chat.setChecked(c.chat)
        self._applying = True
        self.draft_max.setValue(c.draft_max)
        self.draft_min.setValue(c.draft_min)
        self.adaptive.setChecked(c.adaptive)
        self._applying = False
        self.mode.blockSignals(True)
        self.set_mode(c.mode)
        self.mode.blockSignals(False)
        self._mode_follows_settings()
        self.tree_width.setValue(c.tree_width)
        self.tree_nodes.setValue(c.tree_nodes)
        self.p_min.setValue(c.p_min)
        self.temperature.setValue(c.temperature)
        self.top_k.setValue(c.top_k)
        self.top_p.setValue(c.top_p)
        self.seed.setValue(c.seed)
        self.max_new.setValue(c.max_new_tokens)
        self.compare.setChecked(c.compare)
