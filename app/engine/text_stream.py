"""Output ids to text increments, for streaming to a terminal or a window."""

from __future__ import annotations

from app.engine.protocol import LanguageModel


class TextStream:
    """Turns the growing list of output ids into text increments, holding back a partial
    UTF-8 character until its last byte arrives."""

    def __init__(self, model: LanguageModel) -> None:
        self.model = model
        self.ids: list[int] = []
        self.shown = 0

    def push(self, ids: list[int]) -> str:
        self.ids.extend(ids)
        text = self.model.detokenize(self.ids)
        ready = len(text)
        while ready > self.shown and text[ready - 1] == "\ufffd":
            ready -= 1
        piece = text[self.shown : ready]
        self.shown = ready
        return piece

    def text(self) -> str:
        return self.model.detokenize(self.ids)
