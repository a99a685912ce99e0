"""Render assets/draftlens.svg into the icon files the installers need, with Qt only.

    python packaging/make_icons.py [OUT_DIR]     (default packaging/.build/icons)

Writes draftlens.ico (Windows: 16-256 px, 32-bit BMP entries, for the .exe and the NSIS
installer), draftlens.icns (macOS: 16-1024 px PNG entries, for the .app) and draftlens-NNN.png.
Needs PySide6 (the build venv has it); no Pillow, no ImageMagick, no iconutil.
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SVG = ROOT / "assets" / "draftlens.svg"
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
# (type, size) of the PNG-based ICNS entries macOS reads (10.7+)
ICNS_TYPES = ((b"icp4", 16), (b"icp5", 32), (b"icp6", 64), (b"ic07", 128), (b"ic08", 256),
              (b"ic09", 512), (b"ic10", 1024), (b"ic11", 32), (b"ic12", 64), (b"ic13", 256),
              (b"ic14", 512))  # fmt: skip


def render(size: int):  # noqa: ANN201 - a QImage
    from PySide6.QtCore import QRectF, Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    QSvgRenderer(str(SVG)).render(painter, QRectF(0, 0, size, size))
    painter.end()
    return image


def png_bytes(image) -> bytes:  # noqa: ANN001 - a QImage
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice

    data = QByteArray()
    buf = QBuffer(data)
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buf, "PNG"):
        raise RuntimeError("Qt could not encode a PNG")
    buf.close()
    return bytes(data)


def bmp_entry(image) -> bytes:  # noqa: ANN001 - a QImage
    """An ICO image entry: BITMAPINFOHEADER, BGRA rows bottom-up, then the 1-bit AND mask."""
    size = image.width()
    rows = []
    for y in range(size - 1, -1, -1):
        line = bytearray()
        for x in range(size):
            argb = image.pixel(x, y)
            line += struct.pack("<I", argb)  # little-endian 0xAARRGGBB = B, G, R, A
        rows.append(bytes(line))
    mask_row = ((size + 31) // 32) * 4
    header = struct.pack("<IiiHHIIiiII", 40, size, size * 2, 1, 32, 0,
                         size * size * 4 + mask_row * size, 0, 0, 0, 0)
    return header + b"".join(rows) + b"\0" * (mask_row * size)


def write_ico(path: Path) -> None:
    entries = [(s, bmp_entry(render(s))) for s in ICO_SIZES]
    offset = 6 + 16 * len(entries)
    out = bytearray(struct.pack("<HHH", 0, 1, len(entries)))
    for size, data in entries:
        out += struct.pack("<BBBBHHII", size % 256, size % 256, 0, 0, 1, 32, len(data), offset)
        offset += len(data)
    for _, data in entries:
        out += data
    path.write_bytes(bytes(out))


def write_icns(path: Path) -> None:
    cache: dict[int, bytes] = {}
    body = bytearray()
    for kind, size in ICNS_TYPES:
        if size not in cache:
            cache[size] = png_bytes(render(size))
        body += kind + struct.pack(">I", 8 + len(cache[size])) + cache[size]
    path.write_bytes(b"icns" + struct.pack(">I", 8 + len(body)) + bytes(body))


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else ROOT / "packaging" / ".build" / "icons"
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication.instance() or QGuiApplication([sys.argv[0]])  # noqa: F841 - for Qt
    write_ico(out / "draftlens.ico")
    write_icns(out / "draftlens.icns")
    for size in (256, 512):
        (out / f"draftlens-{size}.png").write_bytes(png_bytes(render(size)))
    print(f"icons in {out}: " + ", ".join(sorted(p.name for p in out.iterdir())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
