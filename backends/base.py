"""What every backend shares: its error type and the device choice.

Backends know nothing of speculation; the engine's contract with them is
app.engine.protocol.LanguageModel (tokenize, detokenize, extend, truncate, ...).
"""

from __future__ import annotations


class BackendError(Exception):
    """A runtime failed to load or run a model; the message says what to do."""


def pick_device(requested: str, cuda: bool, mps: bool, metal: bool = False) -> str:
    """Resolve "auto" to the best available device; refuse one that is not there."""
    available = {"cpu": True, "cuda": cuda, "mps": mps, "metal": metal}
    if requested == "auto":
        for name in ("cuda", "metal", "mps"):
            if available[name]:
                return name
        return "cpu"
    if requested not in available:
        raise BackendError(f"unknown device '{requested}' — use auto, cpu, cuda, mps or metal")
    if not available[requested]:
        raise BackendError(
            f"device '{requested}' is not available on this machine — use --device auto or cpu"
        )
    return requested
