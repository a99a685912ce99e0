"""The status bar says how far waiting work has come and about how long it has left where its
size is known (pytest-qt, offscreen, real widgets; time given by a clock the test turns): the
host's work after a run (ui.work_status) and loading's steps (ui.run_control), from the pace
the work has kept since its first report."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from app.host.protocol import PERCENT  # noqa: E402
from ui.work_status import MIN_PACE_S, WorkStatus  # noqa: E402

BASELINE = "comparing: decoding the plain baseline"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_work_of_a_known_size_says_how_far_it_is_and_its_time_left(qtbot):
    clock = Clock()
    status = WorkStatus(clock=clock)
    qtbot.addWidget(status)
    status.show_work(BASELINE, 0, 120, "tokens")
    assert status.label.text() == f"{BASELINE} · 0 of 120 tokens"  # no pace yet
    assert (status.bar.maximum(), status.bar.value()) == (120, 0)
    clock.now += MIN_PACE_S / 2
    status.show_work(BASELINE, 10, 120, "tokens")
    assert status.label.text() == f"{BASELINE} · 10 of 120 tokens"  # too soon to say
    clock.now += 1.5  # 40 tokens in 2 s: 80 more take 4 s
    status.show_work(BASELINE, 40, 120, "tokens")
    assert status.label.text() == f"{BASELINE} · 40 of 120 tokens · about 4 s left"
    assert status.bar.value() == 40
    # other work (a new total) has a pace of its own: none yet
    status.show_work("measuring", 5, 100, PERCENT)
    assert status.label.text() == "measuring · 5%"
    clock.now += 30.0  # 10 hundredths in 30 s: 85 more take 255 s
    status.show_work("measuring", 15, 100, PERCENT)
    assert status.label.text() == "measuring · 15% · about 4 min left"
    status.show_work("texts differ: explaining", 0, 0)  # no size known: its words, busy
    assert status.label.text() == "texts differ: explaining…"
    assert (status.bar.minimum(), status.bar.maximum()) == (0, 0)


def test_loading_steps_of_a_known_size_show_their_count_time_left_and_fraction(window, qtbot):
    clock = Clock()
    runs = window.run_control
    runs._loading.clock = clock
    timing = "timing a target step and a draft step side by side"
    runs.worker.progress.emit(timing, 2, 8, "passes")
    qtbot.waitUntil(lambda: window.status_label.text() != "ready")
    assert window.status_label.text() == f"loading: {timing} · 2 of 8 passes"
    assert (window.busy.maximum(), window.busy.value()) == (8, 2)
    clock.now += 4.0  # 4 passes in 4 s: 2 more take 2 s
    runs.worker.progress.emit(timing, 6, 8, "passes")
    qtbot.waitUntil(lambda: "left" in window.status_label.text())
    assert window.status_label.text() == f"loading: {timing} · 6 of 8 passes · about 2 s left"
    runs.worker.progress.emit("reading the draft", 0, 0, "")
    qtbot.waitUntil(lambda: "draft" in window.status_label.text())
    assert window.status_label.text() == "loading: reading the draft…"
    assert window.busy.maximum() == 0  # busy: a step of no known size
