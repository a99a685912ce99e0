"""Whether a target and a draft can work together: the one owner of that rule.

The check compares vocabularies before anything is loaded (GGUF metadata, or the
transformers tokenizer of a folder), by llama.cpp's own rule (common_speculative_are_compatible
in common/speculative.cpp): the same vocabulary type; BOS and EOS agree where they are added;
sizes differ by at most 128 tokens (padding: Qwen2.5 7B+ GGUFs carry 152,064 tokens, the 0.5B
151,936); and every token both have, from id 5 on, has the same text. The engine then compares
p and q over a common width (app.engine.sampling.fit_width), so padding never breaks exactness.

A pair that fails that rule has a third answer: different vocabularies. When enough of the
draft's token texts are target tokens too (compared as bytes: app.models.token_bytes), the
draft drafts across vocabularies (app.engine.drafters.draft_model.cross_vocab): TLI for
sampling and greedy,
string-level drafting for greedy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from app.engine.drafters.draft_model.vocab_bridge import VocabBridge
from app.errors import IncompatiblePairError, ModelFileError

# llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE and SPEC_VOCAB_CHECK_START_TOKEN_ID
MAX_VOCAB_SIZE_DIFFERENCE = 128
FIRST_COMPARED_TOKEN_ID = 5
_SAME_FAMILY = "pick a draft from the same model family"
# llama.cpp's token types that stand for no text: unknown, control, unused
SPECIAL_TOKEN_TYPES = frozenset({2, 3, 5})
# fewer shared tokens than this (or than half a tiny vocabulary) and a draft from another
# vocabulary could hardly be accepted
MIN_SHARED_TOKENS = 64
CROSS_METHODS = ("tli", "string")


@dataclass(frozen=True)
class Vocab:
    kind: str
    tokens: tuple[str, ...]
    bos_id: int | None
    eos_id: int | None
    size_bytes: int
    # whether tokenizing adds BOS / EOS; a transformers folder does not say, so both ids count
    add_bos: bool = True
    add_eos: bool = True
    # ids of tokens that stand for no text (control, unknown, unused)
    special: frozenset[int] = frozenset()

    @property
    def size(self) -> int:
        return len(self.tokens)

    def as_bytes(self) -> list[bytes | None]:
        """Each token's text as the bytes it stands for (None: a special token)."""
        from app.models.token_bytes import vocab_bytes

        return vocab_bytes(self.kind, self.tokens, self.special)


@dataclass(frozen=True)
class CrossVocab:
    """Different vocabularies that share enough token texts to draft across them."""

    bridge: VocabBridge
    methods: tuple[str, ...] = CROSS_METHODS

    def describe(self) -> str:
        b = self.bridge
        return (f"{b.n_shared:,} of the draft's {b.draft_vocab:,} tokens "
                f"({b.share_of_draft:.0%}) are target tokens too")


@dataclass
class PairCheck:
    compatible: bool  # the same vocabulary, or the same but for padding
    message: str
    warnings: list[str] = field(default_factory=list)
    # the third answer: different vocabularies, and what they share
    cross: CrossVocab | None = None

    @property
    def usable(self) -> bool:
        """The pair can draft: with the same vocabulary or across vocabularies."""
        return self.compatible or self.cross is not None

    def raise_if_incompatible(self) -> None:
        """Refuse a pair that cannot draft at all (a cross-vocabulary pair can)."""
        if not self.usable:
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
        from app.models.gguf_check import check_gguf, read_vocab_and_types

        info = check_gguf(path)
        texts, types = read_vocab_and_types(path)
        special = frozenset(i for i, t in enumerate(types or ()) if t in SPECIAL_TOKEN_TYPES)
        return Vocab(info.vocab_type, tuple(texts), info.bos_id, info.eos_id,
                     info.file_size, info.add_bos, info.add_eos, special)
    return _tokenizer_vocab(path)


def _tokenizer_vocab(path: Path) -> Vocab:
    from backends.base import BackendError
    from backends.torch_runtime import read_tokenizer_vocab

    try:
        kind, tokens, bos_id, eos_id, special = read_tokenizer_vocab(path)
    except BackendError as exc:
        raise ModelFileError(str(exc)) from exc
    return Vocab(kind, tokens, bos_id, eos_id, model_size_bytes(path), special=special)


def check_vocabs(target: Vocab, draft: Vocab) -> PairCheck:
    """Same vocabulary (maybe padded), else different vocabularies that share enough tokens
    to draft across, else refused."""
    check = check_same_vocab(target, draft)
    if check.compatible:
        return check
    cross = cross_vocab(target, draft)
    if cross is None:
        return check
    reason = check.message.split(" — ")[0]
    return PairCheck(False, f"{reason}: different vocabularies — {cross.describe()}; the "
                            "draft drafts across vocabularies (TLI; string-level for greedy)",
                     _size_warning(target, draft), cross)


def cross_vocab(target: Vocab, draft: Vocab) -> CrossVocab | None:
    """What two vocabularies share by token text, where that is enough to draft across."""
    from app.engine.drafters.draft_model.vocab_bridge import build_bridge

    bridge = build_bridge(target.as_bytes(), draft.as_bytes())
    enough = min(MIN_SHARED_TOKENS, draft.size // 2)
    return CrossVocab(bridge) if bridge.n_shared >= max(1, enough) else None


def _size_warning(target: Vocab, draft: Vocab) -> list[str]:
    if draft.size_bytes > target.size_bytes:
        return ["the draft is larger than the target — did you swap them? "
                "The draft should be the small, fast model"]
    return []


def check_same_vocab(target: Vocab, draft: Vocab) -> PairCheck:
    if target.kind != draft.kind:
        return PairCheck(False, f"vocabulary types differ (target {target.kind}, draft "
                                f"{draft.kind}) — {_SAME_FAMILY}")
    special = _special_tokens_differ(target, draft)
    if special:
        return PairCheck(False, f"{special} — {_SAME_FAMILY}")
    difference = abs(target.size - draft.size)
    if difference > MAX_VOCAB_SIZE_DIFFERENCE:
        return PairCheck(False, f"vocabulary sizes differ by {difference} tokens (target "
                                f"{target.size}, draft {draft.size}); at most "
                                f"{MAX_VOCAB_SIZE_DIFFERENCE} of padding are allowed, as in "
                                f"llama.cpp — {_SAME_FAMILY}")
    token_id = _first_differing_token(target.tokens, draft.tokens)
    if token_id is not None:
        a, b = target.tokens[token_id], draft.tokens[token_id]
        sizes = f"; sizes {target.size} and {draft.size}" if difference else ""
        return PairCheck(False, f"token {token_id} differs (target {a!r}, draft {b!r}{sizes})"
                                f" — the draft must share the target's tokenizer; "
                                f"{_SAME_FAMILY}")
    warnings = _size_warning(target, draft)
    if difference == 0:
        return PairCheck(True, f"compatible: same {target.kind} vocabulary of {target.size} "
                               "tokens", warnings)
    larger = "target" if target.size > draft.size else "draft"
    return PairCheck(True, f"compatible: same {target.kind} vocabulary; the {larger} has "
                           f"{difference} extra tokens ({target.size} vs {draft.size}), within "
                           f"llama.cpp's {MAX_VOCAB_SIZE_DIFFERENCE}", warnings)


def _special_tokens_differ(target: Vocab, draft: Vocab) -> str:
    """What differs in BOS/EOS, or "": whether each is added, and its id where it is."""
    for name, t_add, d_add, t_id, d_id in (
        ("BOS", target.add_bos, draft.add_bos, target.bos_id, draft.bos_id),
        ("EOS", target.add_eos, draft.add_eos, target.eos_id, draft.eos_id),
    ):
        if t_add != d_add:
            adds = "target" if t_add else "draft"
            return f"{name} handling differs (only the {adds} adds {name} to a prompt)"
        if t_add and t_id != d_id:
            return f"{name} token differs (target id {t_id}, draft id {d_id})"
    return ""


def _first_differing_token(target: tuple[str, ...], draft: tuple[str, ...]) -> int | None:
    """The first id both vocabularies have whose texts differ (from id 5, as llama.cpp)."""
    n = min(len(target), len(draft))
    if target[FIRST_COMPARED_TOKEN_ID:n] == draft[FIRST_COMPARED_TOKEN_ID:n]:
        return None
    for token_id in range(FIRST_COMPARED_TOKEN_ID, n):
        if target[token_id] != draft[token_id]:
            return token_id
    return None


def check_pair_files(target: str | os.PathLike[str], draft: str | os.PathLike[str]) -> PairCheck:
    return check_vocabs(read_model_vocab(target), read_model_vocab(draft))
