"""A llama.cpp model's text side: tokens to and from text, and its chat template."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import jinja2
import jinja2.sandbox

from backends.base import BackendError


class LlamaCppText:
    """Tokenizing, detokenizing and chat prompts of a loaded model (LlamaCppModel's)."""

    _ll: Any  # the llama_cpp module
    _model: Any  # the llama_model pointer
    _vocab: Any  # its llama_vocab pointer
    _text_cache: dict[int, str]
    name: str

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 16
        buf = (self._ll.llama_token * capacity)()
        n = self._ll.llama_tokenize(self._vocab, data, len(data), buf, capacity, add_special, True)
        if n < 0:
            capacity = -n
            buf = (self._ll.llama_token * capacity)()
            n = self._ll.llama_tokenize(
                self._vocab, data, len(data), buf, capacity, add_special, True
            )
        return list(buf[:n])

    def token_bytes(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(128)
        n = self._ll.llama_token_to_piece(self._vocab, token, buf, 128, 0, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self._ll.llama_token_to_piece(self._vocab, token, buf, -n, 0, True)
        return buf.raw[:n]

    def token_text(self, token: int) -> str:
        text = self._text_cache.get(token)
        if text is None:
            text = self.token_bytes(token).decode("utf-8", errors="replace")
            self._text_cache[token] = text
        return text

    def detokenize(self, ids: Sequence[int]) -> str:
        if not ids:
            return ""
        tokens = (self._ll.llama_token * len(ids))(*ids)
        size = 16 * len(ids) + 64
        buf = ctypes.create_string_buffer(size)
        n = self._ll.llama_detokenize(self._vocab, tokens, len(ids), buf, size, False, False)
        if n < 0:
            size = -n
            buf = ctypes.create_string_buffer(size)
            n = self._ll.llama_detokenize(self._vocab, tokens, len(ids), buf, size, False, False)
        return buf.raw[:n].decode("utf-8", errors="replace")

    def chat_prompt(self, user_text: str) -> str:
        template = self._ll.llama_model_chat_template(self._model, None)
        if not template:
            raise BackendError(f"{self.name} has no chat template — run without --chat")
        message = self._ll.llama_chat_message(role=b"user", content=user_text.encode())
        messages = (self._ll.llama_chat_message * 1)(message)
        size = 4 * len(user_text) + 1024
        buf = ctypes.create_string_buffer(size)
        n = self._ll.llama_chat_apply_template(template, messages, 1, True, buf, size)
        if n > size:
            buf = ctypes.create_string_buffer(n)
            n = self._ll.llama_chat_apply_template(template, messages, 1, True, buf, n)
        if n < 0:
            return self._render_jinja(template.decode("utf-8", errors="replace"), user_text)
        return buf.raw[:n].decode("utf-8", errors="replace")

    def _render_jinja(self, template: str, user_text: str) -> str:
        """Templates llama.cpp's built-in list does not recognise are rendered with Jinja."""
        try:
            env = jinja2.sandbox.ImmutableSandboxedEnvironment(
                trim_blocks=True, lstrip_blocks=True
            )
            return env.from_string(template).render(
                messages=[{"role": "user", "content": user_text}],
                add_generation_prompt=True,
                bos_token=self.token_text(self._ll.llama_vocab_bos(self._vocab)),
                eos_token=self.token_text(self._ll.llama_vocab_eos(self._vocab)),
            )
        except jinja2.TemplateError as exc:
            raise BackendError(
                f"cannot apply the chat template in {self.name} ({exc}) — "
                "run without --chat and write the prompt in the model's format"
            ) from exc
