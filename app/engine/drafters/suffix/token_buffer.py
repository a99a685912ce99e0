"""Where copied tokens came from, and the separator between token sequences laid end to end.

`Label` names a sequence's source for the inspector (the prompt, this run's output, an
earlier run); suffix decoding's index (app.engine.drafters.suffix.index) labels each drafted token
with one. SEPARATOR is never a token id, so a match or continuation found in sequences
joined with it never crosses from one into the next (the copy bound and the replays join
remembered runs so).
"""

from __future__ import annotations

from dataclasses import dataclass

SEPARATOR = -1  # between sequences; never a token


@dataclass(frozen=True)
class Label:
    """Where a sequence came from: app.engine.records' COPIED_FROM_PROMPT, _OUTPUT or
    _MEMORY; `run` names the earlier run of a memory sequence."""

    kind: str
    run: int | None = None
