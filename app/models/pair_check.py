"""Whether a target and a draft can work together.

The check compares vocabularies before anything is loaded (GGUF metadata, or the
transformers tokenizer of a folder): type, size, every token text, BOS/EOS.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from app.errors import IncompatiblePairError, ModelFileError


@dataclass(frozen=True)
class Vocab:
    kind: str
    tokens: tuple[str, ...]
    bos_id: int | None
    eos_id: int | None
    size_bytes: int

    @property
    def size(self) -> int:
        return len(self.tokens)


@dataclass
class PairCheck:
    compatible: bool
    message: str
    warnings: list[str] = field(default_factory=list)

    def raise_if_incompatible(self) -> None:
        if not self.compatible:
            raise IncompatiblePairError(self.message)


def is_gguf(path: str | os.PathLike[str]) -> bool:
    """A .gguf name, or a file that starts like one (Ollama's blobs have no suffix)."""
    from app.models.found import starts_like_gguf

    path = Path(path)
    return path.suffix.lower() == ".gguf" or (path.is_file() and starts_like_gguf(path))


def model_size_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.glob("*.safetensors")) or sum(
        f.stat().st_size for f in path.iterdir() if f.is_file()
    )


def read_model_vocab(path: str | os.PathLike[str]) -> Vocab:
    """Vocabulary of a GGUF file or a transformers folder, without loading weights."""
    path = Path(path)
    if not path.exists():
        raise ModelFileError(f"model not found: {path} — check the path")
    if is_gguf(path):
        from app.models.gguf_check import check_gguf, read_vocab

        info = check_gguf(path)
        return Vocab(info.vocab_type, tuple(read_vocab(path)), info.bos_id, info.eos_id,
                     info.file_size)
    return _tokenizer_vocab(path)


def _tokenizer_vocab(path: Path) -> Vocab:
    from backends.base import BackendError
    from backends.torch_hf import read_tokenizer_vocab

    try:
        kind, tokens, bos_id, eos_id = read_tokenizer_vocab(path)
    except BackendError as exc:
        raise ModelFileError(str(exc)) from exc
    return Vocab(kind, tokens, bos_id, eos_id, model_size_bytes(path))


def check_vocabs(target: Vocab, draft: Vocab) -> PairCheck:
    if target.kind != draft.kind:
        return PairCheck(False, f"vocabulary types differ (target {target.kind}, draft "
                                f"{draft.kind}) — pick a draft from the same model family")
    if target.size != draft.size:
        return PairCheck(False, f"vocabulary sizes differ (target {target.size}, draft "
                                f"{draft.size}) — pick a draft from the same model family")
    for token_id, (a, b) in enumerate(zip(target.tokens, draft.tokens, strict=True)):
        if a != b:
            return PairCheck(False, f"token {token_id} differs (target {a!r}, draft {b!r}) — "
                                    "the draft must share the target's tokenizer")
    if (target.bos_id, target.eos_id) != (draft.bos_id, draft.eos_id):
        return PairCheck(False, f"special tokens differ (target BOS/EOS {target.bos_id}/"
                                f"{target.eos_id}, draft {draft.bos_id}/{draft.eos_id}) — "
                                "pick a draft from the same model family")
    warnings = []
    if draft.size_bytes > target.size_bytes:
        warnings.append("the draft is larger than the target — did you swap them? "
                        "The draft should be the small, fast model")
    return PairCheck(True, f"compatible: same {target.kind} vocabulary of {target.size} tokens",
                     warnings)


def check_pair_files(target: str | os.PathLike[str], draft: str | os.PathLike[str]) -> PairCheck:
    return check_vocabs(read_model_vocab(target), read_model_vocab(draft))
