"""One verify step drawn as a tree: the last committed token on the left, draft nodes by
depth to the right, each with its token, q, p and verdict; the accepted path is drawn bold,
rejected siblings and untested nodes muted, and what the target wrote at the end (the
replacement drawn from the residual, or the bonus token) hangs off the last accepted node.

A chain step is the same picture with one node per depth. Clicking a node selects it.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QPainter, QPen
from PySide6.QtWidgets import (
    QGraphicsItem,
    QGraphicsRectItem,
    QGraphicsScene,
    QGraphicsSimpleTextItem,
    QGraphicsView,
    QWidget,
)

from app.engine.records import ORIGIN_ACCEPTED, ORIGIN_BONUS, StepRecord, TokenRecord
from ui import format as fmt
from ui.theme import LIGHT, Colours

NODE_W, NODE_H = 112, 40
GAP_X, GAP_Y = 26, 8
MIN_SCALE = 0.55  # below this the labels are unreadable: scroll instead
ROOT = -1
END = -2  # the target's own token at the end of the step


@dataclass
class Placed:
    """Where one node of the picture sits: its column (depth) and row."""

    node: int  # index in step.tokens, ROOT or END
    column: int
    row: int


def layout(step: StepRecord) -> list[Placed]:
    """Columns by depth; rows so each subtree occupies its own band, first child on top."""
    parents = tree_parents(step)
    children: dict[int, list[int]] = {ROOT: []}
    for i, parent in enumerate(parents):
        children.setdefault(parent, []).append(i)
    placed: list[Placed] = []
    next_row = 0

    def place(node: int, column: int) -> int:
        nonlocal next_row
        kids = children.get(node, [])
        if not kids:
            row = next_row
            next_row += 1
        else:
            rows = [place(kid, column + 1) for kid in kids]
            row = rows[0]
        placed.append(Placed(node, column, row))
        return row

    place(ROOT, 0)
    end = end_anchor(step)
    if end is not None:
        anchor = next(p for p in placed if p.node == end)
        band_free = all(not (p.column == anchor.column + 1 and p.row == anchor.row)
                        for p in placed)
        row = anchor.row if band_free else next_row
        placed.append(Placed(END, anchor.column + 1, row))
    return placed


def tree_parents(step: StepRecord) -> list[int]:
    """Each node's parent (a chain step's tokens form a chain)."""
    if step.is_tree:
        return [t.parent if t.parent is not None else ROOT for t in step.tokens]
    return [i - 1 for i in range(len(step.tokens))]


def accepted_path(step: StepRecord) -> list[int]:
    return [i for i, t in enumerate(step.tokens) if t.accepted]


def end_anchor(step: StepRecord) -> int | None:
    """The node the target's final token follows, or None when the step ended on a draft
    token (a near-tie it left for the next pass) or emitted nothing."""
    if not step.emitted or step.origins[-1] == ORIGIN_ACCEPTED:
        return None
    path = accepted_path(step)
    return path[-1] if path else ROOT


class TreeView(QGraphicsView):
    node_clicked = Signal(int)  # index in step.tokens

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setScene(QGraphicsScene(self))
        self.setRenderHint(QPainter.RenderHint.Antialiasing)
        self.setDragMode(QGraphicsView.DragMode.ScrollHandDrag)
        self.colours: Colours = LIGHT
        self.step: StepRecord | None = None
        self.selected: int | None = None
        self.boxes: dict[int, QGraphicsRectItem] = {}
        self.setToolTip("the selected step as a tree: bold = the accepted path; click a node")

    def set_colours(self, colours: Colours) -> None:
        self.colours = colours
        self.show_step(self.step, self.selected)

    def show_step(self, step: StepRecord | None, selected: int | None = None) -> None:
        self.step, self.selected = step, selected
        scene = self.scene()
        scene.clear()
        self.boxes = {}
        self.setBackgroundBrush(QBrush(QColor(self.colours.background)))
        if step is None:
            return
        placed = layout(step)
        where = {p.node: p for p in placed}
        path = set(accepted_path(step))
        parents = tree_parents(step)
        for i, parent in enumerate(parents):
            self._edge(where[parent], where[i], on_path=i in path)
        end = end_anchor(step)
        if end is not None:
            self._edge(where[end], where[END], on_path=True)
        for p in placed:
            self._node(p, step, path)
        scene.setSceneRect(scene.itemsBoundingRect().adjusted(-8, -8, 8, 8))
        self.fit()

    def fit(self) -> None:
        """Show the whole tree when it fits at a readable size, else as much as fits."""
        rect = self.scene().sceneRect()
        view = self.viewport().rect()
        if rect.isEmpty() or view.isEmpty():
            return
        scale = min(1.0, view.width() / rect.width(), view.height() / rect.height())
        self.resetTransform()
        self.scale(max(scale, MIN_SCALE), max(scale, MIN_SCALE))
        self.ensureVisible(QRectF(rect.left(), rect.top(), 1, 1))

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        self.fit()

    def _centre(self, p: Placed) -> tuple[float, float]:
        return p.column * (NODE_W + GAP_X) + NODE_W / 2, p.row * (NODE_H + GAP_Y) + NODE_H / 2

    def _edge(self, a: Placed, b: Placed, on_path: bool) -> None:
        (ax, ay), (bx, by) = self._centre(a), self._centre(b)
        pen = QPen(QColor(self.colours.good if on_path else self.colours.muted))
        pen.setWidthF(3.0 if on_path else 1.2)
        line = self.scene().addLine(ax + NODE_W / 2, ay, bx - NODE_W / 2, by, pen)
        line.setZValue(-1)

    def _node(self, p: Placed, step: StepRecord, path: set[int]) -> None:
        c = self.colours
        x, y = p.column * (NODE_W + GAP_X), p.row * (NODE_H + GAP_Y)
        fill, title, detail = self._describe(p.node, step, path)
        box = self.scene().addRect(QRectF(x, y, NODE_W, NODE_H), QPen(QColor(c.muted)),
                                   QBrush(QColor(fill)))
        if p.node >= 0:
            box.setPen(QPen(QColor(c.foreground), 2.5 if p.node == self.selected else 1.0))
            box.setData(0, p.node)
            box.setFlag(QGraphicsItem.GraphicsItemFlag.ItemIsSelectable)
            box.setCursor(Qt.CursorShape.PointingHandCursor)
            self.boxes[p.node] = box
        for text, dy, bold in ((title, 3, True), (detail, 21, False)):
            item = QGraphicsSimpleTextItem(text, box)
            font = QFont()
            font.setBold(bold)
            font.setPointSizeF(8.5)
            item.setFont(font)
            item.setBrush(QBrush(QColor(c.foreground)))
            item.setPos(x + 5, y + dy)

    def _describe(self, node: int, step: StepRecord, path: set[int]) -> tuple[str, str, str]:
        c = self.colours
        if node == ROOT:
            return c.background, "last token", "committed"
        if node == END:
            token = fmt.token(step.emitted_text[-1])
            kind = "bonus" if step.origins[-1] == ORIGIN_BONUS else "target's pick"
            residual = any(t.residual_used for t in step.tokens)
            return c.bonus_bg, _clip(token), kind + (" (residual)" if residual else "")
        r: TokenRecord = step.tokens[node]
        token = _clip(fmt.token(r.text))
        # a copied token's q is one-hot: its branch count says more
        drafted = (f"{r.copied_from.count}/{r.copied_from.of}" if r.copied_from is not None
                   else f"q {r.q:.3f}")
        if r.accepted is None:
            return c.background, token, f"{drafted} · untested"
        mark = "✓" if r.accepted else "✗"
        fill = c.accepted_bg if node in path else c.replacement_bg
        return fill, f"{mark} {token}", f"{drafted}  p {r.p:.3f}"


    def mousePressEvent(self, event) -> None:  # noqa: N802 - Qt API
        item = self.itemAt(event.position().toPoint())
        while item is not None and item.data(0) is None:
            item = item.parentItem()
        if item is not None:
            self.node_clicked.emit(int(item.data(0)))
        super().mousePressEvent(event)


def _clip(text: str, width: int = 12) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
