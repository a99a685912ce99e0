"""Self-speculative drafts for llama.cpp: a GGUF of a chosen set of the target's blocks.

llama.cpp cannot leave layers out of a model's graph, so the draft is a file of its own: the
target's metadata with `<arch>.block_count` set to the blocks kept, per-layer settings cut to
those, and the kept blocks' tensors renumbered 0, 1, ... in order; the embeddings, the final
norm and the output head are the target's. It is written once per (source file, skip set)
into the data folder and reused after that. The draft then loads as any model: its weights
are a second copy in memory (the kept blocks plus the embeddings and head), and it keeps its
own KV cache.

With `head_tokens` the draft's output head keeps only those of the target's tokens (FR-Spec,
arXiv 2502.14856): its vocabulary, embedding rows and head rows are cut to the tokens kept,
which on a 151,936-token target is most of what a kept-block draft reads beyond its blocks.
Its q is then zero outside them, which the verify pass handles exactly. The kept tokens are
the first `head_tokens` ids (byte-level BPE numbers its tokens in merge order, so the
earliest are the most common in the tokenizer's own training text) and every control token;
the draft reads its inputs as the target's embedding rows (backends.llamacpp_head_subset), so
it can read any token of the text.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

import gguf

from app.errors import ModelFileError
from app.paths import data_dir
from backends.llamacpp_head_subset import EMBEDDINGS_KEY, HEAD_IDS_KEY

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


def kept_blocks_path(source: Path, kept: list[int], head_tokens: int = 0) -> Path:
    name = hashlib.sha256(",".join(map(str, kept)).encode()).hexdigest()[:10]
    head = f".head{head_tokens}" if head_tokens else ""
    return (self_draft_dir()
            / f"{source.stem}.{source_key(source)}.keep{len(kept)}-{name}{head}.gguf")


def block_count(source: Path) -> int:
    from app.models.gguf_check import check_gguf

    n_layer = check_gguf(source).n_layer
    if not n_layer:
        raise ModelFileError(f"{source.name} does not say how many blocks it has "
                             "(no <arch>.block_count) — self-drafting needs a transformer GGUF")
    return n_layer


def kept_blocks_gguf(source: str | Path, skip: Iterable[int], head_tokens: int = 0) -> Path:
    """The cached GGUF of source without the `skip` blocks, written now if missing; with
    head_tokens > 0 its head keeps that many tokens and the control tokens (module doc)."""
    source = Path(source)
    total = block_count(source)
    skipped = set(skip)
    kept = [i for i in range(total) if i not in skipped]
    if not skipped or len(kept) < 1 or max(skipped) >= total:
        raise ModelFileError(f"{source.name} has {total} blocks; a self-draft skips some of "
                             f"blocks 0 to {total - 1} and keeps at least one "
                             f"(got {sorted(skipped)})")
    out = kept_blocks_path(source, kept, head_tokens)
    if out.exists():
        return out
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        _write_kept_blocks(source, tmp, kept, head_tokens)
        tmp.replace(out)
    except OSError as exc:
        raise ModelFileError(
            f"cannot write the self-draft file {out}: {exc.strerror or exc} — "
            "free some disk space in the data folder"
        ) from exc
    finally:
        tmp.unlink(missing_ok=True)
    return out


def head_subset_ids(source: str | Path, head_tokens: int) -> list[int]:
    """The target's ids of the tokens a head of `head_tokens` keeps (VocabSubset)."""
    return VocabSubset(gguf.GGUFReader(source), head_tokens).ids


def _write_kept_blocks(source: Path, out: Path, kept: list[int], head_tokens: int) -> None:
    """Copy source to out with every key kept (block_count and per-layer settings cut to the
    kept blocks) and the kept blocks' tensors renamed to their new numbers; tensor bytes are
    copied as they are (any quantisation). head_tokens > 0: the vocabulary, the embedding and
    head rows cut to the tokens kept (head_subset)."""
    reader = gguf.GGUFReader(source)
    arch_field = reader.fields[gguf.Keys.General.ARCHITECTURE]
    arch = str(arch_field.contents())
    count_key = gguf.Keys.LLM.BLOCK_COUNT.format(arch=arch)
    total = block_count_of(reader, count_key)
    subset = VocabSubset(reader, head_tokens) if head_tokens else None
    writer = gguf.GGUFWriter(out, arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if subset is not None and field.name.startswith("tokenizer."):
            value = subset.field(field.name, value)
            if value is None:
                continue
        elif field.name == count_key:
            value = len(kept)
        elif isinstance(value, list) and len(value) == total:
            value = [value[i] for i in kept]  # per-layer settings (head counts, windows)
        writer.add_key_value(field.name, value, value_type, sub_type=sub_type)
    if subset is not None:
        writer.add_key_value(HEAD_IDS_KEY, subset.ids, gguf.GGUFValueType.ARRAY,
                             sub_type=gguf.GGUFValueType.UINT32)
        writer.add_key_value(EMBEDDINGS_KEY, str(source.resolve()), gguf.GGUFValueType.STRING)
    number = {old: new for new, old in enumerate(kept)}
    tensors = []
    for tensor in reader.tensors:
        name = renamed(tensor.name, number)
        if name is None:
            continue
        data = tensor.data
        if subset is not None and name in _VOCAB_ROWS:
            data = data[subset.ids]  # one row per token; quantised rows are whole blocks
        tensors.append((name, tensor.tensor_type, data))
    for name, tensor_type, data in tensors:
        writer.add_tensor_info(name, data.shape, data.dtype, data.nbytes, tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, _, data in tensors:
        writer.write_tensor_data(data, tensor_endianess=reader.endianess)
    writer.close()


_VOCAB_ROWS = ("token_embd.weight", "output.weight")


class VocabSubset:
    """The tokens a head-subset draft keeps, in the target's numbering, and the tokenizer
    keys cut to them (their ids renumbered 0, 1, ... in order)."""

    def __init__(self, reader: gguf.GGUFReader, head_tokens: int) -> None:
        tokens = reader.fields[gguf.Keys.Tokenizer.LIST].contents()
        types_field = reader.fields.get(gguf.Keys.Tokenizer.TOKEN_TYPE)
        types = types_field.contents() if types_field is not None else [1] * len(tokens)
        self.n_vocab = len(tokens)
        # every token not a plain one too: control tokens end turns, and llama.cpp's loader
        # looks up a SentencePiece vocabulary's byte tokens (aborting where one is missing)
        normal = int(gguf.TokenType.NORMAL)
        self.ids = [i for i in range(self.n_vocab) if i < head_tokens or types[i] != normal]
        self.number = {old: new for new, old in enumerate(self.ids)}
        self._texts = {tokens[i] for i in self.ids}

    def field(self, name: str, value: object) -> object | None:
        """A tokenizer key's value in the subset, or None to leave it out."""
        if name == gguf.Keys.Tokenizer.MERGES and isinstance(value, list):
            return [m for m in value if self._merge_kept(m)]
        if isinstance(value, list) and len(value) == self.n_vocab:
            return [value[i] for i in self.ids]  # tokens, their types and scores
        if name.endswith("_token_id") and isinstance(value, int):
            return self.number.get(value)  # a special token outside the subset: left out
        return value

    def _merge_kept(self, merge: str) -> bool:
        left, _, right = merge.partition(" ")
        return left in self._texts and right in self._texts and left + right in self._texts


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
