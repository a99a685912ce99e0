"""When the controller says plain decoding wins, draft now and then anyway: an acceptance
estimate that fell too low is only corrected by drafting. Probes of a kind space out, the
gap doubling each time one does not pay (up to a bound), so a wrong guess costs little."""

from __future__ import annotations

from dataclasses import dataclass, field

FIRST_PROBE_GAP = 8
MAX_PROBE_GAP = 128


@dataclass
class ProbePolicy:
    """Per kind: plain steps since it last drafted, and the gap before its next probe (a
    lookup that found nothing this step must not reset the probes of one that did)."""

    first_gap: int = FIRST_PROBE_GAP
    max_gap: int = MAX_PROBE_GAP
    _streak: dict[str, int] = field(default_factory=dict)
    _gap: dict[str, int] = field(default_factory=dict)

    def drafted(self, kind: str) -> None:
        """The controller chose to draft this kind: its probes start over."""
        self._streak[kind] = 0
        self._gap[kind] = self.first_gap

    def probe_now(self, kind: str) -> bool:
        """Another step in which plain decoding wins for this kind: whether to probe it."""
        streak = self._streak.get(kind, 0) + 1
        gap = self._gap.get(kind, self.first_gap)
        if streak < gap:
            self._streak[kind] = streak
            return False
        self._streak[kind] = 0
        self._gap[kind] = min(2 * gap, self.max_gap)
        return True
