"""Measurements kept per model file and machine (the verify-cost curve, the kernel noise):
one JSON file per kind in the cache folder, keyed by what the figures depend on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.engine.protocol import LanguageModel
from app.paths import cache_dir, write_atomically


def model_key(model: LanguageModel) -> str:
    """The model file (path, size, mtime), its runtime, device and kernels."""
    path = Path(model.path)
    stamp = ""
    if path.exists():
        stat = path.stat()
        stamp = f"{stat.st_size}:{int(stat.st_mtime)}"
    return f"{model.backend}|{path.resolve()}|{stamp}|{model.device}|{model.speed_key}"


def read_store(name: str) -> dict[str, Any]:
    """The cache file `name`; empty when missing or unreadable (it is rebuilt by measuring)."""
    try:
        store = json.loads((cache_dir() / name).read_text())
    except (OSError, ValueError):
        return {}
    return store if isinstance(store, dict) else {}


def write_store(name: str, store: dict[str, Any]) -> None:
    write_atomically(cache_dir() / name, json.dumps(store, indent=1))
