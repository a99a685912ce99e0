"""The inspector's table as a Qt model: one row per judged draft token (plus the bonus or
plain token), cells computed from the records when Qt asks for them, so showing a step costs
one model reset rather than a widget per cell.

Display text comes from ui.format; the exact record value of each cell is its UserRole.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QBrush, QColor

from app.engine.records import ORIGIN_BONUS, ORIGIN_PLAIN, StepRecord, TokenRecord
from ui import format as fmt
from ui.theme import LIGHT, Colours

COLUMNS = ("pos", "draft token", "q (draft)", "p (target)", "min(1, p/q)", "u", "decision",
           "replacement", "drafted from")  # fmt: skip
COL_Q, COL_P, COL_U, COL_DECISION, COL_REPLACEMENT, COL_DRAFTED_FROM = 2, 3, 5, 6, 7, 8
# the titles on two lines where the cells are narrower than the words, so the columns take
# the width of their figures and a laptop screen shows the drafted-from column beside them
HEADERS = tuple(c.replace(" ", "\n", 1) if i in (1, 2, 3, 4) else c
                for i, c in enumerate(COLUMNS))
RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
TIPS = (
    "position of the token in the generated text",
    "the token the draft proposed",
    "q: the draft's probability of its token (it was sampled from q)",
    "p: the target's probability of the same token",
    "chance the token is accepted: min(1, p/q); greedy accepts iff it is argmax p",
    "u: the uniform draw; accepted when u < p/q (sampling only; — under greedy)",
    "the verdict",
    "what the target wrote instead, after a rejection (or the bonus token)",
    "suffix decoding: where the draft token was copied from (the prompt, this output, or an "
    "earlier run) and how many of the remembered continuations went this way; MTP: which of "
    "the target's own MTP heads proposed it (counted from 1)",
)
_Index = QModelIndex | QPersistentModelIndex


@dataclass(frozen=True)
class Row:
    record: TokenRecord | None  # None: the bonus or plain token of the step
    origin: str = ""  # for record None: ORIGIN_BONUS or ORIGIN_PLAIN
    pos: int | None = None
    token: int | None = None
    text: str = ""


def rows_of(step: StepRecord) -> list[Row]:
    rows = [Row(r) for r in step.tokens]
    for j, origin in enumerate(step.origins):
        if origin in (ORIGIN_BONUS, ORIGIN_PLAIN):
            pos = step.tokens[0].pos + j if step.tokens else None
            rows.append(Row(None, origin, pos, step.emitted[j], step.emitted_text[j]))
    return rows


class StepTableModel(QAbstractTableModel):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[Row] = []
        self.colours: Colours = LIGHT

    def set_step(self, step: StepRecord | None) -> None:
        self.beginResetModel()
        self.rows = rows_of(step) if step is not None else []
        self.endResetModel()

    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008, N802 - Qt API
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: B008, N802 - Qt API
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation,  # noqa: N802 - Qt API
                   role: int = Qt.ItemDataRole.DisplayRole) -> object:  # fmt: skip
        if orientation != Qt.Orientation.Horizontal:
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return HEADERS[section]
        if role == Qt.ItemDataRole.ToolTipRole:
            return TIPS[section]
        return None

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid():
            return None
        row, column = self.rows[index.row()], index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return self.cell(row, column)[0]
        if role == Qt.ItemDataRole.UserRole:
            return self.cell(row, column)[1]
        if role == Qt.ItemDataRole.ToolTipRole and column == COL_DRAFTED_FROM and row.record:
            return fmt.drafted_from_detail(row.record) or None
        if role == Qt.ItemDataRole.TextAlignmentRole and COL_Q <= column <= COL_U:
            return RIGHT
        if role == Qt.ItemDataRole.BackgroundRole:
            tint = self._tint(row, column)
            return QBrush(QColor(tint)) if tint else None
        if role == Qt.ItemDataRole.ForegroundRole and self._tint(row, column):
            return QBrush(QColor(self.colours.foreground))
        return None

    def cell(self, row: Row, column: int) -> tuple[str, object]:
        """(display text, exact record value) of one cell."""
        r = row.record
        if r is None:
            label = "★ bonus" if row.origin == ORIGIN_BONUS else "plain step"
            cells = [(str(row.pos) if row.pos is not None else "", row.pos)] + [("", None)] * 5
            return (cells + [(label, None), (fmt.token(row.text), row.token), ("", None)])[column]
        replacement = fmt.token(r.replacement_text) if r.replacement is not None else ""
        return (
            (str(r.pos), r.pos),
            (_draft_token(r), r.token),
            (fmt.prob(r.q), r.q),
            (fmt.prob(r.p), r.p) if r.accepted is not None else ("—", None),
            ((fmt.prob(r.acceptance_chance), r.acceptance_chance) if r.accepted is not None
             else ("—", None)),
            (fmt.prob(r.u) if r.u is not None else "—", r.u),
            (_decision(r), r.accepted),
            (replacement, r.replacement),
            (fmt.drafted_from(r), r.copied_from if r.copied_from is not None else r.head),
        )[column]

    def _tint(self, row: Row, column: int) -> str:
        c, r = self.colours, row.record
        if r is None:
            bonus = row.origin == ORIGIN_BONUS and column >= COL_DECISION
            return c.bonus_bg if bonus else ""
        if column == COL_DECISION and r.accepted is not None:
            return c.accepted_bg if r.accepted else c.replacement_bg
        if column == COL_REPLACEMENT and r.replacement is not None:
            return c.replacement_bg
        return ""


def _draft_token(r: TokenRecord) -> str:
    """The token, and for a draft of another vocabulary what it was in the draft's own
    tokens (and, for TLI, the draft's mass outside the tokens both vocabularies share)."""
    t = r.translated
    if t is None:
        return fmt.token(r.text)
    outside = f"  ({t.outside_mass:.1%} outside)" if t.outside_mass is not None else ""
    return f"{fmt.token(t.draft_text)} → {fmt.token(r.text)}{outside}"


def _decision(r: TokenRecord) -> str:
    if r.accepted is None:
        return "· untested"
    text = "✓ accepted" if r.accepted else "✗ rejected"
    if r.depth is not None:
        text += f" (depth {r.depth})"
    return text
