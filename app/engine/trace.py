"""The JSONL trace file that keeps what the engine reports (app.engine.records).

The trace format is a public interface: a header line, one line per verify step, a summary
line. Inside the app these are dataclasses; dicts appear only at the file boundary.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from app.engine.records import Alternative, StepRecord, TokenRecord
from app.errors import DraftLensError
from app.paths import write_atomically

TRACE_VERSION = 1
# a trace's header says which of these it holds
MODE_SPECULATIVE = "speculative"
MODE_PLAIN = "plain"


@dataclass
class TraceHeader:
    target: str
    draft: str
    backend: str
    device: str
    settings: dict[str, Any]
    versions: dict[str, str]
    prompt: str = ""
    prompt_tokens: int = 0
    mode: str = MODE_SPECULATIVE


def step_to_dict(step: StepRecord) -> dict[str, Any]:
    tokens = []
    for t in step.tokens:
        row = asdict(t)
        row["top"] = [asdict(a) for a in t.top]
        tokens.append(row)
    return {
        "type": "step",
        "index": step.index,
        "k": step.k,
        "drafter": step.drafter,
        "tokens": tokens,
        "emitted": step.emitted,
        "emitted_text": step.emitted_text,
        "origins": step.origins,
        "t_draft": step.t_draft,
        "t_verify": step.t_verify,
        "t_overhead": step.t_overhead,
    }


def step_from_dict(data: dict[str, Any]) -> StepRecord:
    tokens = []
    for row in data["tokens"]:
        row = dict(row)
        row["top"] = [Alternative(**a) for a in row.get("top", [])]
        tokens.append(TokenRecord(**row))
    return StepRecord(
        index=data.get("index", 0),
        k=data["k"],
        tokens=tokens,
        emitted=list(data["emitted"]),
        emitted_text=list(data.get("emitted_text", [])),
        origins=list(data.get("origins", [])),
        t_draft=data["t_draft"],
        t_verify=data["t_verify"],
        t_overhead=data["t_overhead"],
        drafter=data.get("drafter", ""),
    )


class TraceWriter:
    """Appends records to a JSONL file, flushed per line so a crash loses at most one step."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file: IO[str] | None = open(self.path, "w", encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            raise DraftLensError(
                f"cannot write the trace file {self.path}: {exc.strerror or exc} "
                "— choose a folder you can write to"
            ) from exc

    def _write(self, data: dict[str, Any]) -> None:
        if self._file is None:
            return
        self._file.write(json.dumps(data, ensure_ascii=False) + "\n")
        self._file.flush()

    def header(self, header: TraceHeader) -> None:
        self._write({"type": "header", "version": TRACE_VERSION, **asdict(header)})

    def step(self, step: StepRecord) -> None:
        self._write(step_to_dict(step))

    def summary(self, summary: dict[str, Any]) -> None:
        self._write({"type": "summary", **summary})

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Trace:
    header: TraceHeader | None
    steps: list[StepRecord]
    summary: dict[str, Any] | None


def read_trace(path: str | os.PathLike[str]) -> Trace:
    """Load a trace; a cut-off last line (a crash mid-write) is skipped, not fatal."""
    header = None
    summary = None
    steps: list[StepRecord] = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DraftLensError(f"{path} is not a text file — open a .jsonl DraftLens trace") from exc
    except OSError as exc:
        raise DraftLensError(f"cannot read trace {path}: {exc.strerror or exc}") from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):
                break
            raise DraftLensError(
                f"trace {path} line {number} is not JSON — is this a DraftLens trace?"
            ) from exc
        if not isinstance(data, dict):
            raise DraftLensError(f"trace {path} line {number} is not a DraftLens record")
        kind = data.get("type")
        try:
            if kind == "header":
                data.pop("type")
                data.pop("version", None)
                header = TraceHeader(**data)
            elif kind == "step":
                steps.append(step_from_dict(data))
            elif kind == "summary":
                data.pop("type")
                summary = data
        except (KeyError, TypeError, ValueError) as exc:
            raise DraftLensError(
                f"trace {path} line {number} is not a valid DraftLens {kind} record ({exc})"
            ) from exc
    if header is None and not steps:
        raise DraftLensError(f"{path} holds no DraftLens records — open a .jsonl trace file")
    return Trace(header, steps, summary)


def iter_token_rows(steps: list[StepRecord]) -> Iterator[dict[str, Any]]:
    for step in steps:
        for t in step.tokens:
            yield {
                "step": step.index,
                "k": step.k,
                "pos": t.pos,
                "token": t.token,
                "text": t.text,
                "q": t.q,
                "p": t.p,
                "p_over_q": t.ratio,
                "u": "" if t.u is None else t.u,
                "accepted": int(t.accepted),
                "replacement": "" if t.replacement is None else t.replacement,
                "replacement_text": t.replacement_text or "",
                "t_draft": step.t_draft,
                "t_verify": step.t_verify,
                "t_overhead": step.t_overhead,
            }


def export_csv(steps: list[StepRecord], path: str | os.PathLike[str]) -> None:
    """One row per draft token, with its step's timings."""
    rows = list(iter_token_rows(steps))
    fields = list(rows[0]) if rows else ["step", "k", "pos", "token", "text", "q", "p"]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
    write_atomically(path, buffer.getvalue(), newline="")
