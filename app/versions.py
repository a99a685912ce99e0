"""Versions of DraftLens and the runtimes it uses, for traces and `--version`."""

from __future__ import annotations

import platform
from importlib import metadata
from importlib.util import find_spec

import app


def versions() -> dict[str, str]:
    found = {"draftlens": app.__version__, "python": platform.python_version(),
             "numpy": _installed_version("numpy", "numpy")}
    for module, distribution in (("llama_cpp", "llama_cpp_python"), ("torch", "torch"),
                                 ("transformers", "transformers")):
        found[module] = _installed_version(module, distribution)
    return found


def _installed_version(module: str, distribution: str) -> str:
    """Read from package metadata, so asking for versions does not import torch."""
    if find_spec(module) is None:
        return "not installed"
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:  # a frozen bundle may drop the metadata
        return str(getattr(__import__(module), "__version__", "unknown"))
