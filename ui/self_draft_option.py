"""The self-draft choice in the pair picker: the target drafts for itself with some of its
layers skipped, so no draft model is needed. Its layers are `auto` (chosen by measurement on
the run's own prompt before the run starts, dropped until a draft step is estimated to cost at
most the limit set here) or a set typed by hand such as 6-11,15-20.

The set is checked as it is typed by the registry's check of the choice (the one reader of a
skip set, app.engine.drafters.self_skip.parse_skip, as the command line's --self-skip is), and
against the target's layer count once the target is known; the problem and its fix show under
the field, and Run waits until it is mended.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QGridLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

from app.engine.decode_config import DrafterChoice, DrafterOptions
from app.engine.drafters.registry import check
from app.engine.drafters.self_draft import AUTO, is_auto
from app.engine.drafters.self_skip import parse_skip
from app.errors import SettingsError
from ui.fit import wrapping_check
from ui.theme import LIGHT, Colours

NAME = "self"  # the registry's name for it (app.engine.drafters.registry)


class SelfDraftOption(QWidget):
    changed = Signal()  # ticked, or its layers or cost changed

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.box = QCheckBox()
        self.box.setToolTip("self-speculation: the target with some of its layers left out "
                            "drafts for the whole target, which checks every draft token as "
                            "it would a draft model's; no second model")
        self.skip = QLineEdit(AUTO)
        self.skip.setPlaceholderText("auto, or layers like 6-11,15-20")
        self.skip.setClearButtonEnabled(True)
        self.skip.setToolTip("auto: the layers are chosen on your prompt before the run (the "
                             "status bar shows the search); or the layers to leave out, "
                             "0-based ranges such as 6-11,15-20 (layer 0 is always kept)")
        self.cost = QDoubleSpinBox()
        self.cost.setRange(0.05, 0.95)
        self.cost.setSingleStep(0.05)
        self.cost.setDecimals(2)
        self.cost.setValue(DrafterOptions.skip_cost)
        self.cost.setToolTip("with auto: leave out layers until a draft step is estimated to "
                             "cost at most this share of a target step (lower: faster drafts "
                             "that the target agrees with less often)")
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.details = QWidget()
        # the set on a line of its own: a long hand-written set stays in view
        fields = QGridLayout()
        fields.setContentsMargins(0, 0, 0, 0)
        fields.addWidget(QLabel("layers to skip"), 0, 0)
        fields.addWidget(self.skip, 0, 1, 1, 2)
        fields.addWidget(QLabel("cost at most"), 1, 0)
        fields.addWidget(self.cost, 1, 1)
        fields.addWidget(QLabel("of a target step"), 1, 2)
        fields.setColumnStretch(2, 1)
        details = QVBoxLayout(self.details)
        details.setContentsMargins(20, 0, 0, 0)
        details.addLayout(fields)
        details.addWidget(self.note)
        self.details.setVisible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(wrapping_check(self.box, "the target drafts for itself, some of its "
                                                  "layers skipped (no draft model)"))
        layout.addWidget(self.details)
        self._layers: int | None = None  # the target's, once known
        self._colours = LIGHT
        self.box.toggled.connect(self._edited)
        self.skip.textChanged.connect(self._edited)
        self.cost.valueChanged.connect(self._edited)
        self._show_note()

    # --- values -------------------------------------------------------------------------
    def chosen(self) -> bool:
        return self.box.isChecked()

    def skip_text(self) -> str:
        """The field as the choice takes it: auto where it is empty."""
        text = self.skip.text().strip()
        return AUTO if is_auto(text.lower()) else text

    def choice(self) -> DrafterChoice:
        """What drafts, as --spec-type self with --self-skip and --self-cost make it."""
        return DrafterChoice((NAME,), DrafterOptions(skip=self.skip_text(),
                                                     skip_cost=round(self.cost.value(), 2)))

    def set_values(self, skip: str, cost: float | None) -> None:
        """As a recent pair left them ("" skip: not chosen; None cost: the default)."""
        self.box.setChecked(bool(skip))
        self.skip.setText(skip or AUTO)
        self.cost.setValue(DrafterOptions.skip_cost if cost is None else cost)

    def set_layers(self, n_layers: int | None) -> None:
        """The target's layer count (None: not known yet), to check a set typed by hand."""
        self._layers = n_layers
        self._show_note()

    def problem(self) -> str:
        """Why the choice cannot run as typed ("" where it can): the registry's check, and
        the set against the target's layers where they are known."""
        if not self.chosen():
            return ""
        choice = self.choice()
        try:
            check(choice)
            if not is_auto(choice.options.skip) and self._layers is not None:
                parse_skip(choice.options.skip, self._layers)
        except SettingsError as exc:
            return str(exc)
        return ""

    def verdict(self, backend: str) -> tuple[str, str]:
        """The pair picker's verdict on the choice, and its tone (good or bad)."""
        problem = self.problem()
        if problem:
            return f"⚠ self-draft: {problem}", "bad"
        kept = (" (llama.cpp writes a file of the kept layers once per set and keeps it in "
                "the data folder)" if backend == "llamacpp" else "")
        return ("self-draft: the target drafts for itself with some of its layers skipped"
                f"{kept}; no draft model is needed, so the draft model row is off", "good")

    # --- the note under the field -------------------------------------------------------
    def set_colours(self, colours: Colours) -> None:
        self._colours = colours
        self._show_note()

    def _edited(self) -> None:
        self.details.setVisible(self.chosen())
        self.cost.setEnabled(is_auto(self.skip_text()))
        self._show_note()
        self.changed.emit()

    def _show_note(self) -> None:
        problem = self.problem()
        c = self._colours
        self.note.setStyleSheet(f"color: {c.bad if problem else c.muted};")
        self.skip.setStyleSheet(f"border: 1px solid {c.bad};" if problem else "")
        self.note.setText(f"⚠ {problem}" if problem else self._explain())

    def _explain(self) -> str:
        of = f" of {self._layers}" if self._layers is not None else ""
        skip = self.skip_text()
        if is_auto(skip):
            return (f"The layers to skip are chosen on your prompt before the run: those "
                    f"whose absence changes the target's next token least, left out until a "
                    f"draft step costs at most {self.cost.value():.2f} of a target step.")
        count = len(parse_skip(skip))
        return (f"Skips {count}{of} layers ({skip}); their agreement with the target is "
                "measured on your prompt before the run.")
