"""The draft memory: earlier outputs of each target, kept in a file between runs so suffix
decoding (app.engine.drafters.suffix) can draft from them (--draft-memory PATH).

It holds generated text (as token ids), so it is the user's to clear. Each remembered run
belongs to one target (token ids mean nothing to another tokenizer) and carries a
fingerprint of its prompt, so a benchmark can keep a prompt from drafting from its own
earlier answer; a run holding ids outside the target's vocabulary is never read back. The
file is capped: past `cap_tokens` tokens in all, the oldest runs go, down to _KEEP_AFTER_CAP
of the cap, so the suffix tree built from it (app.runs) is rebuilt once per quarter of the
cap written, not after every run once the memory is full.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.errors import DraftMemoryError
from app.paths import data_dir, write_atomically

FORMAT = "draftlens-draft-memory"
VERSION = 1
DEFAULT_CAP_TOKENS = 65536
_KEEP_AFTER_CAP = 0.75
MEMORY_FILE = "draft-memory.json"


def default_memory_path() -> Path:
    """Where the window keeps the draft memory: the data folder (the user's, not a cache)."""
    return data_dir() / MEMORY_FILE


@dataclass
class RememberedOutput:
    run: int  # ids grow with every run kept, across targets
    target: str  # the target's identity (app.runs.memory_key)
    prompt: str  # prompt_fingerprint of the prompt it answered
    tokens: list[int]  # the last tokens of the prompt (a short lead), then the output


def prompt_fingerprint(prompt_ids: Sequence[int]) -> str:
    return hashlib.sha256(json.dumps(list(prompt_ids)).encode()).hexdigest()[:16]


class DraftMemory:
    """Earlier outputs per target, oldest first; `version` changes with every change."""

    def __init__(self, path: str | os.PathLike[str] | None = None,
                 cap_tokens: int = DEFAULT_CAP_TOKENS) -> None:
        self.path = Path(path) if path is not None else None
        self.cap_tokens = cap_tokens
        self.outputs: list[RememberedOutput] = []
        self.next_run = 1
        self.version = 0

    @classmethod
    def load(cls, path: str | os.PathLike[str],
             cap_tokens: int = DEFAULT_CAP_TOKENS) -> DraftMemory:
        """The memory in `path`, or an empty one when the file does not exist yet."""
        memory = cls(path, cap_tokens)
        assert memory.path is not None
        try:
            text = memory.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return memory
        except (OSError, UnicodeDecodeError) as exc:
            raise DraftMemoryError(
                f"cannot read the draft memory file {memory.path}: "
                f"{getattr(exc, 'strerror', None) or exc} — pass another --draft-memory "
                "file, or delete this one (it holds only text generated earlier)") from exc
        memory._read(text)
        memory._drop_oldest()
        return memory

    def _read(self, text: str) -> None:
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                raise ValueError("not a DraftLens draft memory")
            if data.get("version") != VERSION:
                raise ValueError(f"format version {data.get('version')}, this DraftLens "
                                 f"reads {VERSION}")
            self.outputs = [_output(row) for row in data["outputs"]]
            self.next_run = max([int(data["next_run"]), *(o.run + 1 for o in self.outputs)])
        except (ValueError, KeyError, TypeError) as exc:
            raise DraftMemoryError(
                f"the draft memory file {self.path} is damaged or not a draft memory "
                f"({exc}) — start it afresh with --forget-draft-memory (it holds only text "
                "generated earlier), or pass another --draft-memory file") from exc

    def runs(self, target: str, avoid_prompt: str = "",
             n_vocab: int | None = None) -> list[RememberedOutput]:
        """This target's outputs, oldest first, less those that answered `avoid_prompt`. An
        id of this target's outputs outside a vocabulary of `n_vocab` tokens (a file edited
        by hand, or a target replaced by another of the same name and size) is an error:
        none of the file is read back, as none of it can be trusted."""
        mine = [o for o in self.outputs if o.target == target]
        if n_vocab is not None:
            for output in mine:
                if (largest := max(output.tokens, default=0)) >= n_vocab:
                    where = f"file {self.path}" if self.path else "memory"
                    raise DraftMemoryError(
                        f"the draft {where} holds token id {largest} (run {output.run}), "
                        f"outside the target's vocabulary of {n_vocab} tokens — it was written "
                        "for another model or edited: pass another --draft-memory file, or "
                        "start this one afresh with --forget-draft-memory")
        return [o for o in mine if not avoid_prompt or o.prompt != avoid_prompt]

    @property
    def total_tokens(self) -> int:
        return sum(len(o.tokens) for o in self.outputs)

    def add(self, target: str, prompt: str, tokens: Sequence[int]) -> RememberedOutput:
        """Keep an output; the oldest outputs go while the memory is over its cap."""
        output = RememberedOutput(self.next_run, target, prompt, list(tokens))
        self.next_run += 1
        self.outputs.append(output)
        self._drop_oldest()
        self.version += 1
        return output

    def clear(self, target: str | None = None) -> None:
        """Forget every output (of one target, when given)."""
        self.outputs = [] if target is None else [o for o in self.outputs
                                                 if o.target != target]
        self.version += 1

    def _drop_oldest(self) -> None:
        total = self.total_tokens
        if total <= self.cap_tokens:
            return
        drop = 0
        while total > self.cap_tokens * _KEEP_AFTER_CAP and drop < len(self.outputs):
            total -= len(self.outputs[drop].tokens)
            drop += 1
        if drop:
            del self.outputs[:drop]

    def save(self) -> None:
        """Write the memory to its file (atomically: a crash never leaves half a file)."""
        if self.path is None:
            return
        data: dict[str, Any] = {"format": FORMAT, "version": VERSION,
                                "next_run": self.next_run,
                                "outputs": [asdict(o) for o in self.outputs]}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self.path, json.dumps(data, separators=(",", ":")))
        except OSError as exc:
            raise DraftMemoryError(
                f"cannot write the draft memory file {self.path}: {exc.strerror or exc} — "
                "choose a folder you can write to") from exc


def _output(row: Any) -> RememberedOutput:
    if not isinstance(row, dict):
        raise ValueError("an output is not an object")
    tokens = row["tokens"]
    if not isinstance(tokens, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in tokens):
        raise ValueError(f"run {row.get('run')} has tokens that are not token ids")
    return RememberedOutput(int(row["run"]), str(row["target"]), str(row["prompt"]), tokens)


def forget(path: str | os.PathLike[str]) -> tuple[int, int]:
    """Empty the memory in `path` (a damaged file too); returns the (runs, tokens) forgotten."""
    try:
        memory = DraftMemory.load(path)
        forgotten = (len(memory.outputs), memory.total_tokens)
    except DraftMemoryError:
        memory, forgotten = DraftMemory(path), (0, 0)  # unreadable: nothing left to keep
    if Path(path).exists():
        memory.clear()
        memory.save()
    return forgotten
