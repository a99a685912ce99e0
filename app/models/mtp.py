"""Whether a model file carries its own multi-token-prediction (MTP / NextN) layers, which
llama.cpp can draft with (--draft-mtp): no second model needed."""

from __future__ import annotations

import os
from pathlib import Path

from app.engine.drafters.mtp import OWN_MTP_LABEL
from app.errors import ModelFileError, SettingsError
from app.models.pair_check import is_gguf


def mtp_layers(path: str | os.PathLike[str]) -> int:
    """The MTP blocks a GGUF's metadata declares (<arch>.nextn_predict_layers); 0 for a file
    without them, a transformers folder, or a file that does not read."""
    from app.models.gguf_check import check_gguf

    file = Path(path)
    if not file.is_file() or not is_gguf(str(file)):
        return 0
    try:
        return check_gguf(file).n_mtp_layers
    except ModelFileError:
        return 0


def mtp_offer(path: str | os.PathLike[str]) -> str:
    """How the window and `models list` offer a file's own MTP layers; "" where it has none."""
    n = mtp_layers(path)
    if n <= 0:
        return ""
    blocks = "block" if n == 1 else "blocks"
    return f"drafts with {OWN_MTP_LABEL} ({n} {blocks}) — no second model needed"


def require_mtp(path: str, backend: str) -> None:
    """Refuse --draft-mtp where it cannot run, saying why and what to do instead."""
    if backend != "llamacpp":
        raise SettingsError("--draft-mtp runs on the llama.cpp backend only — pick the model's "
                            ".gguf file (transformers does not expose MTP layers)")
    if mtp_layers(path) <= 0:
        raise SettingsError(f"{Path(path).name} has no MTP layers (its metadata has no "
                            "nextn_predict_layers) — use a draft model (-md), --ngram or "
                            "--suffix instead of --spec-type mtp")
