"""Self-speculative drafts for llama.cpp: a GGUF of the target's first N blocks.

llama.cpp has no way to stop a model after N layers, so the draft is a file of its own: the
target's metadata with `<arch>.block_count` set to N and the tensors of blocks >= N dropped;
the embeddings, the final norm and the output head are the target's. It is written once per
(source file, N) into the data folder and reused after that. The draft then loads as any
model: its weights are a second copy in memory (N/L of the target's blocks plus the
embeddings and head), and it keeps its own KV cache.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import gguf

from app.errors import ModelFileError
from app.paths import data_dir

_BLOCK = re.compile(r"^blk\.(\d+)\.")


def self_draft_dir() -> Path:
    folder = data_dir() / "self-drafts"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def source_key(source: Path) -> str:
    """Identifies a model file by path, size and modification time (hashing gigabytes
    would cost more than writing the draft)."""
    stat = source.stat()
    text = f"{source.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def truncated_gguf_path(source: Path, n_layers: int) -> Path:
    return self_draft_dir() / f"{source.stem}.{source_key(source)}.first{n_layers}.gguf"


def block_count(source: Path) -> int:
    from app.models.gguf_check import check_gguf

    n_layer = check_gguf(source).n_layer
    if not n_layer:
        raise ModelFileError(f"{source.name} does not say how many blocks it has "
                             "(no <arch>.block_count) — self-drafting needs a transformer GGUF")
    return n_layer


def check_layers(n_layers: int, total: int, name: str) -> None:
    if not 1 <= n_layers < total:
        raise ModelFileError(
            f"{name} has {total} layers; --self-draft-layers must be 1 to {total - 1} "
            f"(got {n_layers})"
        )


def truncated_gguf(source: str | Path, n_layers: int) -> Path:
    """The cached GGUF of source's first n_layers blocks, written now if missing."""
    source = Path(source)
    check_layers(n_layers, block_count(source), source.name)
    out = truncated_gguf_path(source, n_layers)
    if out.exists():
        return out
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        _write_first_blocks(source, tmp, n_layers)
        tmp.replace(out)
    except OSError as exc:
        raise ModelFileError(
            f"cannot write the self-draft file {out}: {exc.strerror or exc} — "
            "free some disk space in the data folder"
        ) from exc
    finally:
        tmp.unlink(missing_ok=True)
    return out


def _write_first_blocks(source: Path, out: Path, n_layers: int) -> None:
    """Copy source to out with every key kept (block_count rewritten) and the tensors of
    blocks >= n_layers left out; tensor bytes are copied as they are (any quantisation)."""
    reader = gguf.GGUFReader(source)
    arch_field = reader.fields[gguf.Keys.General.ARCHITECTURE]
    arch = str(arch_field.contents())
    count_key = gguf.Keys.LLM.BLOCK_COUNT.format(arch=arch)
    total = block_count_of(reader, count_key)
    writer = gguf.GGUFWriter(out, arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if field.name == count_key:
            value = n_layers
        elif isinstance(value, list) and len(value) == total:
            value = value[:n_layers]  # per-layer settings (head counts, sliding windows)
        writer.add_key_value(field.name, value, value_type, sub_type=sub_type)
    kept = [t for t in reader.tensors if _keeps(t.name, n_layers)]
    for tensor in kept:
        writer.add_tensor_info(tensor.name, tensor.data.shape, tensor.data.dtype,
                               tensor.data.nbytes, tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in kept:
        writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
    writer.close()


def block_count_of(reader: gguf.GGUFReader, count_key: str) -> int:
    field = reader.fields.get(count_key)
    return int(field.contents()) if field is not None else -1


def _keeps(name: str, n_layers: int) -> bool:
    match = _BLOCK.match(name)
    return match is None or int(match.group(1)) < n_layers
