"""Help > About: the versions of everything that decodes, and the devices this machine has."""

from __future__ import annotations

import platform

import pyqtgraph
import PySide6
from PySide6.QtCore import qVersion
from PySide6.QtWidgets import QMessageBox, QWidget

from app import __version__
from app.models.runtimes import runtime_lines


def version_lines() -> list[str]:
    lines = [
        f"DraftLens {__version__}",
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}",
        f"Qt {qVersion()} · PySide6 {PySide6.__version__} · pyqtgraph {pyqtgraph.__version__}",
    ]
    lines.extend(runtime_lines())
    return lines


def show_about(parent: QWidget) -> None:
    text = (
        "<h3>DraftLens</h3>"
        "<p>See speculative decoding: every draft token's p, q, acceptance and replacement, "
        "live.</p><p>" + "<br>".join(version_lines()) + "</p>"
    )
    QMessageBox.about(parent, "About DraftLens", text)
