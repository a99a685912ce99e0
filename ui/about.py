"""Help > About: the versions of everything that decodes, and the devices this machine has."""

from __future__ import annotations

import platform

import pyqtgraph
import PySide6
from PySide6.QtCore import qVersion
from PySide6.QtWidgets import QMessageBox, QWidget

from app import __version__


def version_lines() -> list[str]:
    lines = [
        f"DraftLens {__version__}",
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}",
        f"Qt {qVersion()} · PySide6 {PySide6.__version__} · pyqtgraph {pyqtgraph.__version__}",
    ]
    try:
        import llama_cpp

        offload = bool(llama_cpp.llama_supports_gpu_offload())
        lines.append(f"llama-cpp-python {llama_cpp.__version__} · GPU offload "
                     f"{'yes' if offload else 'no (CPU build)'}")
    except ImportError:
        lines.append("llama-cpp-python: not installed")
    try:
        import torch
        import transformers

        devices = ["cpu"]
        if torch.cuda.is_available():
            devices.append(f"cuda ({torch.cuda.get_device_name(0)})")
        if torch.backends.mps.is_available():
            devices.append("mps")
        lines.append(f"torch {torch.__version__} · transformers {transformers.__version__} · "
                     f"devices: {', '.join(devices)}")
    except ImportError:
        lines.append("PyTorch backend: not installed")
    return lines


def show_about(parent: QWidget) -> None:
    text = (
        "<h3>DraftLens</h3>"
        "<p>See speculative decoding: every draft token's p, q, acceptance and replacement, "
        "live.</p><p>" + "<br>".join(version_lines()) + "</p>"
    )
    QMessageBox.about(parent, "About DraftLens", text)
