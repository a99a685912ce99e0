"""The app icon: assets/draftlens.svg (drawn by hand), rendered by Qt.

`python -m ui.icon` re-renders assets/draftlens.png from the SVG and copies both into ui/
so an installed package (package data *.svg / *.png) carries them.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QGuiApplication, QIcon, QImage, QPainter, QPixmap
from PySide6.QtSvg import QSvgRenderer

ICON_NAME = "draftlens"
_HERE = Path(__file__).resolve().parent
ASSETS = _HERE.parent / "assets"


def icon_file(suffix: str = ".svg") -> Path | None:
    for folder in (_HERE, ASSETS):
        path = folder / (ICON_NAME + suffix)
        if path.is_file():
            return path
    return None


def render(svg: Path, size: int) -> QImage:
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    QSvgRenderer(str(svg)).render(painter, QRectF(0, 0, size, size))
    painter.end()
    return image


def app_icon() -> QIcon:
    """The window icon at the usual sizes (empty icon if the files are missing)."""
    icon = QIcon()
    svg = icon_file(".svg")
    if svg is not None:
        for size in (16, 24, 32, 48, 64, 128, 256):
            icon.addPixmap(QPixmap.fromImage(render(svg, size)))
    else:
        png = icon_file(".png")
        if png is not None:
            icon.addFile(str(png))
    return icon


def main() -> int:
    app = QGuiApplication.instance() or QGuiApplication(sys.argv)  # noqa: F841 - needed by Qt
    svg = ASSETS / f"{ICON_NAME}.svg"
    png = ASSETS / f"{ICON_NAME}.png"
    if not render(svg, 256).save(str(png)):
        print(f"could not write {png}", file=sys.stderr)
        return 1
    for path in (svg, png):
        shutil.copyfile(path, _HERE / path.name)
    print(f"wrote {png} and copies in {_HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
