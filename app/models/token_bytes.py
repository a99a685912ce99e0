"""Each token's text as the bytes it stands for, whatever the tokenizer's notation, so that
vocabularies of different families can be compared token by token
(app.engine.drafters.draft_model.vocab_bridge).

  - byte-level BPE ("gpt2": GPT-2, Qwen, Llama 3, SmolLM): each byte is written as one
    printable character (GPT-2's bytes_to_unicode table; a space is "Ġ");
  - SentencePiece ("llama" in a GGUF, "sentencepiece" from a transformers folder; Gemma,
    Llama 2, Mistral): a word-start space is "▁", a byte-fallback token is "<0xNN>".
Special tokens (control, unknown, unused) stand for no text: None.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

BYTE_LEVEL_KINDS = frozenset({"gpt2"})
SPM_SPACE = "\u2581"
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's bytes_to_unicode table, reversed: printable character -> byte."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def byte_level_bytes(text: str) -> bytes:
    """A byte-level BPE token's bytes; a token with a character outside the table is an
    added token written in plain text: its UTF-8."""
    table = _byte_decoder()
    try:
        return bytes(table[c] for c in text)
    except KeyError:
        return text.encode("utf-8")


def sentencepiece_bytes(text: str) -> bytes:
    match = _BYTE_TOKEN.fullmatch(text)
    if match:
        return bytes([int(match.group(1), 16)])
    return text.replace(SPM_SPACE, " ").encode("utf-8")


def vocab_bytes(kind: str, tokens: Sequence[str], special: frozenset[int]) -> list[bytes | None]:
    """Per token id of a vocabulary of this kind ("gpt2", "llama", "sentencepiece", ...), the
    bytes it stands for; None for special tokens and empty texts."""
    decode = byte_level_bytes if kind in BYTE_LEVEL_KINDS else sentencepiece_bytes
    return [None if i in special or not text else decode(text) for i, text in enumerate(tokens)]
