"""One model found on disk, described from its metadata alone (no weights are read).

A GGUF file is described from its header (app.models.gguf_check), a transformers folder from
its config.json. Whether two models can pair is not decided here: app.models.pair_check owns
that rule, and app.models.discovery asks it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.errors import ModelFileError

FORMAT_GGUF = "gguf"
FORMAT_TRANSFORMERS = "transformers"
GGUF_MAGIC = b"GGUF"
# llama.cpp's split files: NAME-00001-of-00003.gguf; it loads the set from the first one.
_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class FoundModel:
    """A model in one of the stores. The keys of `as_json` are a public interface."""

    name: str
    path: Path
    store: str
    format: str
    size_bytes: int
    architecture: str = ""
    n_params: int | None = None
    vocab_type: str = ""
    vocab_size: int | None = None
    error: str = ""  # why the model cannot be used, when its metadata did not read
    # its own trained MTP (NextN) layers, which can draft for it with no second model
    mtp_layers: int = 0

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["path"] = str(self.path)
        return data


def starts_like_gguf(path: Path) -> bool:
    """True for a file whose first bytes are GGUF's magic (Ollama's blobs have no suffix)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


def is_transformers_folder(path: Path) -> bool:
    return (path / "config.json").is_file() and any(path.glob("*.safetensors"))


def describe_gguf(path: Path, name: str, store: str, size: int | None = None) -> FoundModel:
    """A GGUF file's entry; a file that does not read still appears, with the reason."""
    from app.models.gguf_check import check_gguf

    size = size if size is not None else _size(path)
    try:
        info = check_gguf(path)
    except ModelFileError as exc:
        return FoundModel(name, path, store, FORMAT_GGUF, size, error=str(exc))
    return FoundModel(name, path, store, FORMAT_GGUF, size, info.architecture, info.n_params,
                      info.vocab_type, info.vocab_size, mtp_layers=info.n_mtp_layers)


def describe_folder(path: Path, name: str, store: str) -> FoundModel:
    """A transformers folder's entry, from config.json (the tokenizer is read only to pair)."""
    size = sum(_size(f) for f in path.glob("*.safetensors"))
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return FoundModel(name, path, store, FORMAT_TRANSFORMERS, size,
                          error=f"unreadable config.json ({exc}) — download the model again")
    if not isinstance(config, dict):
        config = {}
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    vocab = text.get("vocab_size") if isinstance(text, dict) else None
    arch = config.get("model_type")
    return FoundModel(name, path, store, FORMAT_TRANSFORMERS, size,
                      arch if isinstance(arch, str) else "", None, "",
                      vocab if isinstance(vocab, int) else None)


def gguf_entry(path: Path, name: str, store: str) -> FoundModel | None:
    """The entry for a .gguf file, or None for a file that is not a model of its own: a
    vision projector (mmproj) or a later part of a split model (the first part stands for
    the whole set, with the set's total size)."""
    if path.name.lower().startswith("mmproj"):
        return None
    split = _SPLIT.match(path.name)
    if split is None:
        return describe_gguf(path, name, store)
    if int(split["part"]) != 1:
        return None
    parts = path.parent.glob(f"{split['stem']}-*-of-{split['count']}.gguf")
    return describe_gguf(path, name, store, size=sum(_size(p) for p in parts))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
