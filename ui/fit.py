"""Fitting the window to small screens: check boxes whose text wraps, a scroll area as wide as
what it holds, and a window size within the screen's available geometry (1366x768 laptops)."""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QStyle,
    QWidget,
)


class _ToggleLabel(QLabel):
    """A word-wrapped label that toggles its check box when clicked, as the box's text would."""

    def __init__(self, text: str, box: QCheckBox) -> None:
        super().__init__(text)
        self.box = box
        self.setWordWrap(True)
        self.setBuddy(box)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt override
        if event.button() == Qt.MouseButton.LeftButton and self.box.isEnabled():
            self.box.toggle()
        super().mouseReleaseEvent(event)


def wrapping_check(box: QCheckBox, text: str) -> QWidget:
    """`box` with `text` beside it, wrapping at the panel's width rather than widening it."""
    row = QWidget()
    layout = QHBoxLayout(row)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.setSpacing(4)
    layout.addWidget(box, 0, Qt.AlignmentFlag.AlignTop)
    label = _ToggleLabel(text, box)
    label.setToolTip(box.toolTip())
    box.setAccessibleName(text)
    layout.addWidget(label, 1)
    row.label = label  # type: ignore[attr-defined]
    return row


class FittingScrollArea(QScrollArea):
    """A vertical scroll area whose minimum width is its widget's, plus the scroll bar: a
    narrower one would cut its widget's right edge off (there is no horizontal scroll bar)."""

    def __init__(self, widget: QWidget) -> None:
        super().__init__()
        self.setWidget(widget)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        inner = self.widget().minimumSizeHint()
        bar = self.style().pixelMetric(QStyle.PixelMetric.PM_ScrollBarExtent)
        return QSize(inner.width() + bar + 2 * self.frameWidth(), 80)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        hint = self.minimumSizeHint()
        return QSize(hint.width(), max(hint.height(), self.widget().sizeHint().height()))


def window_frame(widget: QWidget) -> QSize:
    """What the window manager adds around the window: measured once shown, else the style's
    title bar and frame (Xvfb without a window manager adds nothing; then this overestimates
    by a title bar, which is harmless)."""
    frame = widget.frameGeometry().size() - widget.geometry().size()
    if widget.isVisible() and (frame.width() > 0 or frame.height() > 0):
        return frame
    style = widget.style()
    border = style.pixelMetric(QStyle.PixelMetric.PM_DefaultFrameWidth)
    return QSize(2 * border, style.pixelMetric(QStyle.PixelMetric.PM_TitleBarHeight) + 2 * border)


def fitted_geometry(preferred: QSize, available: QRect, frame: QSize) -> QRect:
    """Where the window goes: its size (without the frame) is `preferred`, shrunk to what fits
    in `available` once the frame is added; its top-left is where the frame's top-left goes
    (QWidget.move places the frame), centred in `available`."""
    width = min(preferred.width(), available.width() - frame.width())
    height = min(preferred.height(), available.height() - frame.height())
    x = available.x() + (available.width() - frame.width() - width) // 2
    y = available.y() + (available.height() - frame.height() - height) // 2
    return QRect(x, y, width, height)


def fit_window(window: QWidget, preferred: QSize, available: QRect) -> None:
    """Resize and place `window` within the screen's `available` geometry."""
    rect = fitted_geometry(preferred, available, window_frame(window))
    window.resize(rect.size())
    window.move(rect.topLeft())
