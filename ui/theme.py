"""Colours and styles: light and dark palettes, and how each token origin is drawn.

Origins are told apart by colour AND by style, so they read for colour-blind users too
(Okabe-Ito hues: blue / orange / reddish purple, never red against green alone):
accepted = blue tint, replacement = orange tint + bold + underline, bonus = purple tint +
italic + dotted underline, plain = no mark, rejected draft = grey + struck through.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QFont, QGuiApplication, QPalette, QTextCharFormat
from PySide6.QtWidgets import QApplication

from app.engine.records import ORIGIN_ACCEPTED, ORIGIN_BONUS, ORIGIN_PLAIN, ORIGIN_REPLACEMENT

REJECTED = "rejected"  # a draft token the target turned down (drawn struck through)

# Okabe-Ito, the palette made for colour-vision deficiencies
BLUE = "#0072B2"
SKY = "#56B4E9"
ORANGE = "#E69F00"
VERMILLION = "#D55E00"
PURPLE = "#CC79A7"
GREEN = "#009E73"
GREY = "#999999"

ORIGIN_LABELS = {
    ORIGIN_ACCEPTED: "draft accepted",
    ORIGIN_REPLACEMENT: "target replacement",
    ORIGIN_BONUS: "bonus token",
    ORIGIN_PLAIN: "plain decoding",
    REJECTED: "rejected draft",
}


@dataclass(frozen=True)
class Colours:
    dark: bool
    background: str
    foreground: str
    muted: str
    accepted_bg: str
    replacement_bg: str
    bonus_bg: str
    rejected_fg: str
    selection_bg: str
    speculative: str  # chart line of the speculative run
    plain: str  # chart line of the plain baseline
    p_bar: str
    q_bar: str
    residual_bar: str
    t_draft: str
    t_verify: str
    t_overhead: str
    good: str
    bad: str


LIGHT = Colours(
    dark=False, background="#ffffff", foreground="#202020", muted="#6b6b6b",
    accepted_bg="#cde4f6", replacement_bg="#fbd7a8", bonus_bg="#f2d0e3",
    rejected_fg="#8a8a8a", selection_bg="#fff3a0",
    speculative=BLUE, plain=ORANGE, p_bar=BLUE, q_bar=ORANGE, residual_bar=PURPLE,
    t_draft=SKY, t_verify=BLUE, t_overhead=ORANGE, good=BLUE, bad=VERMILLION,
)  # fmt: skip

DARK = Colours(
    dark=True, background="#1e1f22", foreground="#e6e6e6", muted="#a0a0a0",
    accepted_bg="#1d4e78", replacement_bg="#7a4b05", bonus_bg="#6a3457",
    rejected_fg="#8f8f8f", selection_bg="#5b5520",
    speculative=SKY, plain=ORANGE, p_bar=SKY, q_bar=ORANGE, residual_bar=PURPLE,
    t_draft=SKY, t_verify=BLUE, t_overhead=ORANGE, good=SKY, bad=ORANGE,
)  # fmt: skip


def system_prefers_dark() -> bool:
    hints = QGuiApplication.styleHints()
    scheme = getattr(hints, "colorScheme", None)
    if scheme is not None and scheme() == Qt.ColorScheme.Dark:
        return True
    window = QGuiApplication.palette().color(QPalette.ColorRole.Window)
    return window.lightness() < 128


def colours_for(theme: str) -> Colours:
    if theme == "dark":
        return DARK
    if theme == "light":
        return LIGHT
    return DARK if system_prefers_dark() else LIGHT


def apply_theme(app: QApplication, theme: str) -> Colours:
    """Fusion style with a light or dark palette; "system" follows the desktop's choice."""
    app.setStyle("Fusion")
    colours = colours_for(theme)
    app.setPalette(_dark_palette() if colours.dark else app.style().standardPalette())
    return colours


def _dark_palette() -> QPalette:
    palette = QPalette()
    roles = {
        QPalette.ColorRole.Window: "#2b2d30",
        QPalette.ColorRole.WindowText: "#e6e6e6",
        QPalette.ColorRole.Base: "#1e1f22",
        QPalette.ColorRole.AlternateBase: "#26282b",
        QPalette.ColorRole.ToolTipBase: "#3c3f41",
        QPalette.ColorRole.ToolTipText: "#e6e6e6",
        QPalette.ColorRole.Text: "#e6e6e6",
        QPalette.ColorRole.Button: "#3a3c40",
        QPalette.ColorRole.ButtonText: "#e6e6e6",
        QPalette.ColorRole.BrightText: "#ffffff",
        QPalette.ColorRole.Highlight: "#2f65ca",
        QPalette.ColorRole.HighlightedText: "#ffffff",
        QPalette.ColorRole.Link: SKY,
        QPalette.ColorRole.PlaceholderText: "#8a8a8a",
    }
    for role, colour in roles.items():
        palette.setColor(role, QColor(colour))
    for role in (QPalette.ColorRole.WindowText, QPalette.ColorRole.Text,
                 QPalette.ColorRole.ButtonText):
        palette.setColor(QPalette.ColorGroup.Disabled, role, QColor("#777777"))
    return palette


def token_format(origin: str, colours: Colours) -> QTextCharFormat:
    """How a token of this origin is drawn in the text view."""
    fmt = QTextCharFormat()
    fmt.setForeground(QColor(colours.foreground))
    if origin == ORIGIN_ACCEPTED:
        fmt.setBackground(QColor(colours.accepted_bg))
    elif origin == ORIGIN_REPLACEMENT:
        fmt.setBackground(QColor(colours.replacement_bg))
        fmt.setFontWeight(QFont.Weight.Bold)
        fmt.setFontUnderline(True)
    elif origin == ORIGIN_BONUS:
        fmt.setBackground(QColor(colours.bonus_bg))
        fmt.setFontItalic(True)
        fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.DotLine)
    elif origin == REJECTED:
        fmt.setForeground(QColor(colours.rejected_fg))
        fmt.setFontStrikeOut(True)
    return fmt


def legend_html(origin: str, colours: Colours) -> str:
    """A sample of the origin's style, as HTML for a QLabel."""
    style = f"color:{colours.foreground};"
    if origin == ORIGIN_ACCEPTED:
        style += f"background-color:{colours.accepted_bg};"
    elif origin == ORIGIN_REPLACEMENT:
        style += f"background-color:{colours.replacement_bg};font-weight:bold;"
        style += "text-decoration:underline;"
    elif origin == ORIGIN_BONUS:
        style += f"background-color:{colours.bonus_bg};font-style:italic;"
        style += "text-decoration:underline;"
    elif origin == REJECTED:
        style = f"color:{colours.rejected_fg};text-decoration:line-through;"
    return f'<span style="{style}">&nbsp;{ORIGIN_LABELS[origin]}&nbsp;</span>'
