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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from app.engine.records import (
    Alternative,
    CopySource,
    Decision,
    StepRecord,
    ThreadSwitch,
    TokenRecord,
    Translation,
)
from app.errors import DraftLensError, TraceWriteError
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
        "source": step.source,
        "tokens": tokens,
        "emitted": step.emitted,
        "emitted_text": step.emitted_text,
        "origins": step.origins,
        "t_draft": step.t_draft,
        "t_verify": step.t_verify,
        "t_overhead": step.t_overhead,
        "pass_tokens": step.pass_tokens,
        "pads": step.pads,
        "stop_chance": step.stop_chance,
        "decision": asdict(step.decision) if step.decision is not None else None,
        "timing": step.timing,
        "busy": step.busy,
        "threads": asdict(step.threads) if step.threads is not None else None,
        "t_draft_first": step.t_draft_first,
    }


def step_from_dict(data: dict[str, Any]) -> StepRecord:
    tokens = []
    for row in data["tokens"]:
        row = dict(row)
        row["top"] = [Alternative(**a) for a in row.get("top", [])]
        if row.get("copied_from") is not None:
            row["copied_from"] = CopySource(**row["copied_from"])
        if row.get("translated") is not None:
            row["translated"] = Translation(**row["translated"])
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
        source=data.get("source", ""),
        pass_tokens=data.get("pass_tokens", 0),
        pads=data.get("pads", 0),
        stop_chance=data.get("stop_chance"),
        decision=Decision(**data["decision"]) if data.get("decision") else None,
        timing=data.get("timing", ""),
        busy=data.get("busy", False),
        threads=ThreadSwitch(**data["threads"]) if data.get("threads") else None,
        t_draft_first=data.get("t_draft_first"),
    )


class TraceWriter:
    """Appends records to a JSONL file, flushed per line so a crash loses at most one step.

    A write that fails (disk full, the file or its folder deleted) raises TraceWriteError
    once and closes the file; the lines written before it stay a valid trace."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.steps_written = 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file: IO[str] | None = open(self.path, "w", encoding="utf-8")  # noqa: SIM115
            self._closed = False
        except OSError as exc:
            raise DraftLensError(
                f"cannot write the trace file {self.path}: {exc.strerror or exc} "
                "— choose a folder you can write to"
            ) from exc

    def _write(self, data: dict[str, Any]) -> None:
        if self._file is None:
            return
        try:
            self._file.write(json.dumps(data, ensure_ascii=False) + "\n")
            self._file.flush()
            deleted = os.fstat(self._file.fileno()).st_nlink == 0
        except OSError as exc:
            self._abandon()
            raise TraceWriteError(
                f"cannot write the trace file {self.path}: {exc.strerror or exc} — free some "
                f"space or choose another folder; the {self.steps_written} steps written "
                "before are kept"
            ) from exc
        if deleted:
            self._abandon()
            raise TraceWriteError(
                f"the trace file {self.path} was deleted (or its folder removed) while the run "
                "was writing it — choose a folder that stays"
            )

    def _abandon(self) -> None:
        """Close after a failed write without flushing again (the flush would fail too)."""
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()
            except OSError:
                pass

    def header(self, header: TraceHeader) -> None:
        self._write({"type": "header", "version": TRACE_VERSION, **asdict(header)})

    def step(self, step: StepRecord) -> None:
        self._write(step_to_dict(step))
        self.steps_written += 1

    def summary(self, summary: dict[str, Any]) -> None:
        self._write({"type": "summary", **summary})

    @property
    def failed(self) -> bool:
        """True once a write failed; later writes are ignored."""
        return self._file is None and not self._closed

    def close(self) -> None:
        self._closed = True
        self._abandon()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Trace:
    header: TraceHeader | None
    steps: list[StepRecord]
    summary: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)  # how the run ended, if not normally


def read_trace(path: str | os.PathLike[str]) -> Trace:
    """Load a trace; a cut-off last line (a crash mid-write) is skipped with a note."""
    header = None
    summary = None
    steps: list[StepRecord] = []
    notes: list[str] = []
    try:
        # a line cut mid-character must not make the whole file unreadable
        text = Path(path).read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise DraftLensError(f"cannot read trace {path}: {exc.strerror or exc}") from exc
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines) and number > 1:
                notes.append(f"the last line was cut off mid-write; the {len(steps)} complete "
                             "steps before it are shown")
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
    notes.extend(_ending_notes(summary))
    return Trace(header, steps, summary, notes)


def _ending_notes(summary: dict[str, Any] | None) -> list[str]:
    if summary is None:
        return ["the trace has no summary line: the run was cut off (a crash or a kill) "
                "before it ended"]
    notes = []
    if summary.get("interrupted"):
        notes.append("the run was interrupted before it ended")
    if summary.get("error"):
        notes.append(f"the run stopped on an error: {summary['error']}")
    return notes


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
                "accepted": "" if t.accepted is None else int(t.accepted),
                "replacement": "" if t.replacement is None else t.replacement,
                "replacement_text": t.replacement_text or "",
                "head": "" if t.head is None else t.head,
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
