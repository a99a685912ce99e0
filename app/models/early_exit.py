"""Self-speculative drafts for llama.cpp: a GGUF of a chosen set of the target's blocks.

llama.cpp cannot leave layers out of a model's graph, so the draft is a file of its own: the
target's metadata with `<arch>.block_count` set to the blocks kept, per-layer settings cut to
those, and the kept blocks' tensors renumbered 0, 1, ... in order; the embeddings, the final
norm and the output head are the target's. It is written once per (source file, skip set)
into the data folder and reused after that. The draft then loads as any model: its weights
are a second copy in memory (the kept blocks plus the embeddings and head), and it keeps its
own KV cache.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
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


def kept_blocks_path(source: Path, kept: list[int]) -> Path:
    name = hashlib.sha256(",".join(map(str, kept)).encode()).hexdigest()[:10]
    return self_draft_dir() / f"{source.stem}.{source_key(source)}.keep{len(kept)}-{name}.gguf"


def block_count(source: Path) -> int:
    from app.models.gguf_check import check_gguf

    n_layer = check_gguf(source).n_layer
    if not n_layer:
        raise ModelFileError(f"{source.name} does not say how many blocks it has "
                             "(no <arch>.block_count) — self-drafting needs a transformer GGUF")
    return n_layer


def kept_blocks_gguf(source: str | Path, skip: Iterable[int]) -> Path:
    """The cached GGUF of source without the `skip` blocks, written now if missing."""
    source = Path(source)
    total = block_count(source)
    skipped = set(skip)
    kept = [i for i in range(total) if i not in skipped]
    if not skipped or len(kept) < 1 or max(skipped) >= total:
        raise ModelFileError(f"{source.name} has {total} blocks; a self-draft skips some of "
                             f"blocks 0 to {total - 1} and keeps at least one "
                             f"(got {sorted(skipped)})")
    out = kept_blocks_path(source, kept)
    if out.exists():
        return out
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        _write_kept_blocks(source, tmp, kept)
        tmp.replace(out)
    except OSError as exc:
        raise ModelFileError(
            f"cannot write the self-draft file {out}: {exc.strerror or exc} — "
            "free some disk space in the data folder"
        ) from exc
    finally:
        tmp.unlink(missing_ok=True)
    return out


def _write_kept_blocks(source: Path, out: Path, kept: list[int]) -> None:
    """Copy source to out with every key kept (block_count and per-layer settings cut to the
    kept blocks) and the kept blocks' tensors renamed to their new numbers; tensor bytes are
    copied as they are (any quantisation)."""
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
            value = len(kept)
        elif isinstance(value, list) and len(value) == total:
            value = [value[i] for i in kept]  # per-layer settings (head counts, windows)
        writer.add_key_value(field.name, value, value_type, sub_type=sub_type)
    number = {old: new for new, old in enumerate(kept)}
    tensors = [(renamed(t.name, number), t) for t in reader.tensors]
    tensors = [(name, t) for name, t in tensors if name is not None]
    for name, tensor in tensors:
        writer.add_tensor_info(name, tensor.data.shape, tensor.data.dtype,
                               tensor.data.nbytes, tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, tensor in tensors:
        writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
    writer.close()


def renamed(name: str, number: dict[int, int]) -> str | None:
    """A tensor's name in the draft file: a kept block's renumbered, a skipped block's None,
    any other (embeddings, final norm, head) as it is."""
    match = _BLOCK.match(name)
    if match is None:
        return name
    new = number.get(int(match.group(1)))
    return None if new is None else f"blk.{new}.{name[match.end():]}"


def block_count_of(reader: gguf.GGUFReader, count_key: str) -> int:
    field = reader.fields.get(count_key)
    return int(field.contents()) if field is not None else -1
