"""The generated text, every token drawn by where it came from.

Tokens are appended to a QTextDocument with a char format per origin (ui.theme); each carries an
anchor naming its entry in `refs`, so hover (tooltip with p, q, p/q, u, decision) and click
(select the step) resolve the token under the mouse through QTextEdit.anchorAt. Appending is
O(new tokens): steps queue up and `flush()` (called from the window's timer) renders them.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QEvent, QPoint, QRect, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPen,
    QTextCharFormat,
    QTextCursor,
)
from PySide6.QtWidgets import QTextEdit, QToolTip, QWidget

from app.engine.records import ORIGIN_REPLACEMENT, StepRecord, TokenRecord
from ui import format as fmt
from ui.theme import LIGHT, REJECTED, Colours, token_format


@dataclass(frozen=True)
class TokenRef:
    step: int  # index into the view's steps
    record: int  # index into step.tokens, or -1 (bonus / plain token)
    origin: str  # an ORIGIN_* or REJECTED
    start: int  # character range in the document
    end: int


class TokenView(QTextEdit):
    step_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setUndoRedoEnabled(False)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.viewport().setMouseTracking(True)
        self.setLineWrapMode(QTextEdit.LineWrapMode.WidgetWidth)
        font = self.font()
        font.setFamily("monospace")
        font.setStyleHint(font.StyleHint.Monospace)
        self.setFont(font)
        self._colours = LIGHT
        self._formats: dict[str, QTextCharFormat] = {}
        self._show_rejected = True
        self.steps: list[StepRecord] = []
        self.refs: list[TokenRef] = []
        self._rendered = 0
        self._step_refs: list[tuple[int, int]] = []  # per rendered step: range into refs
        self._selected = -1
        self._prefix = ""
        self._update_formats()

    # --- content ------------------------------------------------------------------------
    def clear_run(self, prefix: str = "") -> None:
        """Forget the run; `prefix` (e.g. the prompt) is shown in the plain text colour."""
        self.steps = []
        self._prefix = prefix
        self._selected = -1
        self._rerender()

    def add_step(self, step: StepRecord) -> None:
        """Queue a step; it appears at the next flush()."""
        self.steps.append(step)

    def flush(self) -> None:
        """Render the steps queued since the last flush (appends only)."""
        if self._rendered == len(self.steps):
            return
        bar = self.verticalScrollBar()
        follow = bar.value() >= bar.maximum() - 4
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        for index in range(self._rendered, len(self.steps)):
            self._render_step(cursor, index)
        self._rendered = len(self.steps)
        if follow:
            bar.setValue(bar.maximum())

    def set_show_rejected(self, on: bool) -> None:
        if on != self._show_rejected:
            self._show_rejected = on
            self._rerender()

    @property
    def show_rejected(self) -> bool:
        return self._show_rejected

    def set_colours(self, colours: Colours) -> None:
        self._colours = colours
        self._update_formats()
        self._rerender()

    def _update_formats(self) -> None:
        origins = ("accepted", "replacement", "bonus", "plain", REJECTED)
        self._formats = {o: token_format(o, self._colours) for o in origins}

    def _rerender(self) -> None:
        self.document().clear()
        self.refs = []
        self._step_refs = []
        self._rendered = 0
        if self._prefix:
            cursor = QTextCursor(self.document())
            prompt = QTextCharFormat()
            prompt.setForeground(QColor(self._colours.muted))
            cursor.insertText(self._prefix, prompt)
        self.flush()
        self.viewport().update()

    def _render_step(self, cursor: QTextCursor, index: int) -> None:
        step = self.steps[index]
        first = len(self.refs)
        for j, (text, origin) in enumerate(zip(step.emitted_text, step.origins, strict=False)):
            if origin == ORIGIN_REPLACEMENT and self._show_rejected and j < len(step.tokens):
                self._insert(cursor, step.tokens[j].text, REJECTED, index, j)
            record = j if j < len(step.tokens) else -1
            self._insert(cursor, text, origin, index, record)
        self._step_refs.append((first, len(self.refs)))

    def _insert(self, cursor: QTextCursor, text: str, origin: str, step: int, record: int) -> None:
        if not text:
            return
        start = cursor.position()
        char_format = QTextCharFormat(self._formats.get(origin, self._formats["plain"]))
        char_format.setAnchor(True)
        char_format.setAnchorHref(str(len(self.refs)))
        cursor.insertText(text, char_format)
        self.refs.append(TokenRef(step, record, origin, start, cursor.position()))

    # --- what is under the mouse --------------------------------------------------------
    def ref_at(self, pos: QPoint) -> TokenRef | None:
        """The token under `pos` (viewport coordinates), if any."""
        href = self.anchorAt(pos)
        if not href.isdigit():
            return None
        index = int(href)
        return self.refs[index] if index < len(self.refs) else None

    def record_of(self, ref: TokenRef) -> TokenRecord | None:
        step = self.steps[ref.step]
        return step.tokens[ref.record] if 0 <= ref.record < len(step.tokens) else None

    def tooltip_for(self, ref: TokenRef) -> str:
        step = self.steps[ref.step]
        origin = "rejected draft" if ref.origin == REJECTED else ref.origin
        return fmt.token_tooltip(self.record_of(ref), origin, step)

    def viewportEvent(self, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.ToolTip:
            ref = self.ref_at(event.pos())
            if ref is None:
                QToolTip.hideText()
            else:
                QToolTip.showText(event.globalPos(), self.tooltip_for(ref), self.viewport())
            return True
        return super().viewportEvent(event)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt override
        super().mouseReleaseEvent(event)
        if event.button() == Qt.MouseButton.LeftButton and not self.textCursor().hasSelection():
            ref = self.ref_at(event.position().toPoint())
            if ref is not None:
                self.step_clicked.emit(ref.step)

    # --- the selected step --------------------------------------------------------------
    def select_step(self, index: int, scroll: bool = True) -> None:
        self._selected = index
        if scroll and 0 <= index < len(self._step_refs):
            first, _ = self._step_refs[index]
            if first < len(self.refs):
                cursor = QTextCursor(self.document())
                cursor.setPosition(self.refs[first].start)
                self.setTextCursor(cursor)
                self.ensureCursorVisible()
        self.viewport().update()

    def step_text_range(self, index: int) -> tuple[int, int]:
        first, last = self._step_refs[index]
        if first == last:
            return (0, 0)
        return self.refs[first].start, self.refs[last - 1].end

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        super().paintEvent(event)
        if not 0 <= self._selected < len(self._step_refs):
            return
        first, last = self._step_refs[self._selected]
        painter = QPainter(self.viewport())
        pen = QPen(QColor(self._colours.foreground))
        pen.setWidthF(2.0)
        painter.setPen(pen)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        for ref in self.refs[first:last]:
            for rect in self._token_rects(ref):
                painter.drawRoundedRect(rect.adjusted(0, 0, -1, -1), 3, 3)
        painter.end()

    def _token_rects(self, ref: TokenRef) -> list[QRect]:
        """Boxes around a token, one per line it spans."""
        rects: list[QRect] = []
        cursor = QTextCursor(self.document())
        cursor.setPosition(ref.start)
        line = previous = self.cursorRect(cursor)
        for position in range(ref.start + 1, ref.end + 1):
            cursor.setPosition(position)
            here = self.cursorRect(cursor)
            if here.top() != line.top():
                self._add_box(rects, line, previous)
                line = here
            previous = here
        self._add_box(rects, line, previous)
        return rects

    @staticmethod
    def _add_box(rects: list[QRect], start: QRect, end: QRect) -> None:
        if end.left() > start.left():
            width = end.left() - start.left()
            rects.append(QRect(start.left(), start.top(), width, start.height()))
