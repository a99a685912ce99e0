"""Progress of a model download: throttled reports, measured rates and cancel checks."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from app.errors import DownloadCancelled

_REPORT_EVERY_S = 0.2


@dataclass(frozen=True)
class FetchProgress:
    """One progress report. Bytes count towards the final file (approximate while downloading)."""

    filename: str
    part: int
    n_parts: int
    phase: str
    bytes_done: int
    bytes_total: int
    bytes_per_second: float
    note: str = ""  # a message of its own (the demo pair falling back to the package index)

    @property
    def fraction(self) -> float:
        return self.bytes_done / self.bytes_total if self.bytes_total else 0.0

    def __str__(self) -> str:
        if self.note:
            return f"{self.filename}: {self.note}"
        mb = 1024 * 1024
        return (
            f"{self.filename}: {self.phase} part {self.part}/{self.n_parts}, "
            f"{self.bytes_done / mb:,.1f} of {self.bytes_total / mb:,.1f} MiB "
            f"({self.fraction:.0%}), {self.bytes_per_second / mb:,.1f} MiB/s"
        )


ProgressFn = Callable[[FetchProgress], None]
CancelFn = Callable[[], bool]


class FetchJob:
    """Progress bookkeeping for one file: throttled reports, measured rates, cancel checks."""

    def __init__(self, filename: str, size: int, n_parts: int, progress: ProgressFn | None,
                 cancel: CancelFn | None) -> None:
        self.filename = filename
        self.size = size
        self.n_parts = n_parts
        self.progress = progress
        self.cancel = cancel
        self.assembled = 0
        self._last_done = 0
        self._last_report = 0.0
        self._phase_start = time.monotonic()
        self._phase_bytes = 0

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel():
            raise DownloadCancelled(
                f"fetching {self.filename} was cancelled — run it again to resume"
            )

    def start_phase(self) -> None:
        self._phase_start = time.monotonic()
        self._phase_bytes = 0

    def report(
        self, part: int, phase: str, done: int, phase_bytes: int = 0, force: bool = False
    ) -> None:
        """Send a report (at most every _REPORT_EVERY_S unless forced); bytes never go back."""
        self._phase_bytes = phase_bytes
        if self.progress is None:
            return
        now = time.monotonic()
        if not force and now - self._last_report < _REPORT_EVERY_S:
            return
        self._last_report = now
        elapsed = now - self._phase_start
        rate = self._phase_bytes / elapsed if elapsed > 0 else 0.0
        self._last_done = max(self._last_done, min(done, self.size))
        self.progress(
            FetchProgress(
                filename=self.filename,
                part=part,
                n_parts=self.n_parts,
                phase=phase,
                bytes_done=self._last_done,
                bytes_total=self.size,
                bytes_per_second=rate,
            )
        )

    def note(self, text: str) -> None:
        """Send a message of its own (always delivered, never throttled)."""
        if self.progress is not None:
            self.progress(FetchProgress(self.filename, 0, self.n_parts, "note", self._last_done,
                                        self.size, 0.0, note=text))
