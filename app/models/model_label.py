"""A model's name as people say it, read without loading weights: "Qwen2.5-Coder 1.5B Instruct ·
Q4_K_M" from a GGUF file's metadata (general.basename, size_label, finetune or general.name,
and general.file_type), "Qwen2.5-0.5B-Instruct · bfloat16" from a transformers folder's
config.json (the name it was saved from, else the folder's). The window's model fields show it,
with the path in their tooltip; two files whose names end alike no longer read the same."""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import gguf

from app.errors import ModelFileError
from app.models.gguf_check import read_metadata

SEPARATOR = " · "
CONFIG = "config.json"  # a transformers folder's
_NAME_KEYS = ("general.basename", "general.size_label", "general.finetune", "general.name",
              "general.file_type")
_FILE_TYPE_PREFIXES = ("MOSTLY_", "ALL_")
_HF_CACHE_REPO = "models--"  # huggingface_hub's cache: models--org--name/snapshots/<commit>
# words for how a repository packed its weights, which converters copy from the repository's
# name into the finetune ("Instruct-GGUF", "Instruct-AWQ"): the file's own type says that
_PACKING = {"gguf", "awq", "gptq", "exl2", "mlx", "fp8", "int4", "int8", "bnb", "4bit", "8bit"}


def model_label(path: str | os.PathLike[str]) -> str:
    """The model's name and its weights' format, or "" where `path` is no model this can read
    (missing, neither a GGUF file nor a folder with a config.json, a corrupt header)."""
    where = Path(path).expanduser()
    try:  # a folder's name lives in its config.json
        stat = (where / CONFIG if where.is_dir() else where).stat()
    except OSError:
        return ""
    return _label(str(where), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=64)
def _label(path: str, mtime_ns: int, size: int) -> str:
    """Cached by the file's modification time and size: a file written anew is read anew."""
    where = Path(path)
    if where.is_dir():
        return folder_label(where)
    try:
        fields = read_metadata(where, _NAME_KEYS)
    except ModelFileError:
        return ""
    return gguf_label(fields, where)


def gguf_label(fields: dict[str, Any], path: Path) -> str:
    """From GGUF metadata: the converter's own parts where it wrote them (basename, size label,
    finetune), else general.name with the size label when the name lacks it; the file's stem
    when it has neither; then the quantization its file type names."""
    basename = _text(fields.get("general.basename"))
    size = _text(fields.get("general.size_label"))
    if basename:
        finetune = _unpacked(_text(fields.get("general.finetune")))
        name = " ".join(part for part in (basename, size, finetune) if part)
    else:
        name = _unpacked(_text(fields.get("general.name"))) or path.stem
        if size and size.lower() not in name.lower():
            name = f"{name} {size}"
    quant = file_type_name(fields.get("general.file_type"))
    return name + (SEPARATOR + quant if quant else "")


def _unpacked(text: str) -> str:
    """"Instruct-GGUF" -> "Instruct", "Coder 7B Instruct AWQ" -> "Coder 7B Instruct": the
    packing words at the end left out."""
    words = text.replace("-", " - ").split()
    while words and (words[-1].lower() in _PACKING or words[-1] == "-"):
        words.pop()
    return " ".join(words).replace(" - ", "-")


def file_type_name(value: Any) -> str:
    """llama.cpp's file type number as its quantization's name ("Q4_K_M", "F16"); "" for a
    number this gguf package does not know, or a missing one."""
    if isinstance(value, bool) or not isinstance(value, int):
        return ""
    try:
        name = str(gguf.LlamaFileType(value).name)
    except ValueError:
        return ""
    if name == "GUESSED":
        return ""
    for prefix in _FILE_TYPE_PREFIXES:
        name = name.removeprefix(prefix)
    return name


def folder_label(folder: Path) -> str:
    """A transformers folder: the hub name config.json says it was saved from, else the
    folder's own name (the repository's, for a snapshot in huggingface_hub's cache), with
    its quantization or its weights' dtype."""
    try:
        config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    if not isinstance(config, dict):
        return ""
    name = _hub_name(config.get("_name_or_path")) or _folder_name(folder)
    quant = config.get("quantization_config")
    if isinstance(quant, dict) and quant.get("quant_method"):
        bits = quant.get("bits")
        kind = f"{quant['quant_method']}" + (f" {bits}-bit" if isinstance(bits, int) else "")
    else:
        kind = _text(config.get("torch_dtype") or config.get("dtype"))
    return name + (SEPARATOR + kind if kind else "")


def _hub_name(value: Any) -> str:
    """"Qwen/Qwen2.5-0.5B-Instruct" -> "Qwen2.5-0.5B-Instruct"; a local path names no model."""
    text = _text(value)
    if (not text or text.startswith((".", "/", "~")) or "\\" in text or ":" in text
            or text.count("/") > 1):
        return ""
    return text.rsplit("/", 1)[-1]


def _folder_name(folder: Path) -> str:
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith(
            _HF_CACHE_REPO):
        return folder.parent.parent.name.split("--", 2)[-1]
    return folder.name


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""
