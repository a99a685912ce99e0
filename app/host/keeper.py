"""A run's trace on the parent's side: the host reports, the parent writes. So when the host
is stopped or dies, the parent still has every step it showed and finalises the trace itself:
"cut off after step N: the engine process ended with SIGABRT"."""

from __future__ import annotations

import os
from typing import Any

from app.engine.metrics import RunStats
from app.engine.records import StepRecord
from app.engine.trace import TraceHeader, TraceWriter, step_from_dict
from app.host.client import EngineHost, ending


class TraceKeeper:
    """The header, steps and summary of one run as the host reported them; written to `path`
    when one is given, and counted either way (the summary of a run cut off comes from here)."""

    def __init__(self, path: str | os.PathLike[str] | None, header_line: dict[str, Any],
                 t_target: float | None = None) -> None:
        self.header = TraceHeader(**header_line)
        self.t_target = t_target
        self.stats = RunStats()
        self.summary: dict[str, Any] | None = None
        self.writer = TraceWriter(path) if path is not None else None
        if self.writer is not None:
            self.writer.header(self.header)

    @property
    def steps(self) -> int:
        return self.stats.steps

    def add(self, line: dict[str, Any]) -> StepRecord:
        """One step line from the host; raises TraceWriteError when it cannot be written."""
        step = step_from_dict(line)
        self.stats.add(step)
        if self.writer is not None:
            self.writer.step(step)
        return step

    def finish(self, summary: dict[str, Any]) -> dict[str, Any]:
        """The summary as the last line (unless the trace can no longer be written)."""
        if self.summary is None:
            self.summary = summary
            if self.writer is not None:
                if not self.writer.failed:
                    self.writer.summary(summary)
                self.writer.close()
        return self.summary

    def cut_off(self, error: str = "") -> dict[str, Any]:
        """The summary of the steps kept here, for a run stopped here or ended by its host."""
        summary = self.stats.summary(self.t_target)
        summary["interrupted"] = True
        if error:
            summary["error"] = error
        return self.finish(summary)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def death_message(host: EngineHost, returncode: int) -> str:
    """"the engine process ended with SIGABRT — last output: ..." for a dialog or an error line."""
    text = f"the engine process {ending(returncode, host.killed_by_us)}"
    last = host.last_lines()
    if host.rpc and any("rpc" in line.lower() for line in last):
        servers = host.rpc.replace(",", ", ")
        text += (f": the connection to rpc-server {servers} (the target's layers) broke — "
                 "check that the server is still running and reachable, then run again")
    return f"{text} — its last output: {' | '.join(last)}" if last else text


def cut_off_note(steps: int, returncode: int, host: EngineHost) -> str:
    """What the summary's "error" says of a run its host took down; nothing when the parent
    ended the host itself after Stop (the run was interrupted, as asked, a pass early)."""
    if host.killed_by_us:
        return ""
    return f"cut off after step {steps}: the engine process {ending(returncode)}"
