"""The window says when the machine is busy (pytest-qt, offscreen, real widgets): a run whose
records say its passes got too little of their cores, and on how many threads it then
decoded, says so in the status bar; a run that got its cores back does not."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from app.analysis.reasons import machine_note  # noqa: E402
from app.engine.records import (  # noqa: E402
    ORIGIN_PLAIN,
    THREADS_BUSY,
    THREADS_TRY,
    StepRecord,
    ThreadSwitch,
)
from app.engine.trace import TraceHeader, TraceWriter  # noqa: E402
from app.settings import Settings  # noqa: E402
from ui.main_window import MainWindow  # noqa: E402


def plain_step(index: int, busy: bool, threads: ThreadSwitch | None = None) -> StepRecord:
    return StepRecord(index=index, k=0, tokens=[], emitted=[5], emitted_text=["x"],
                      origins=[ORIGIN_PLAIN], t_draft=0.0, t_verify=0.1, t_overhead=0.0,
                      busy=busy, threads=threads)


BUSY_RUN = [plain_step(0, False), plain_step(1, False),
            plain_step(2, True, ThreadSwitch(1, 2, 0.14, THREADS_BUSY)), plain_step(3, True)]
FREED_RUN = [*BUSY_RUN, plain_step(4, True, ThreadSwitch(2, 2, 0.97, THREADS_TRY)),
             plain_step(5, False)]


def test_the_note_comes_from_the_records():
    assert machine_note(BUSY_RUN) == "machine busy: decoding on 1 of 2 threads"
    assert machine_note(FREED_RUN) == ""
    assert machine_note([plain_step(0, True)]) == "machine busy"  # threads the user set
    assert machine_note([]) == ""


@pytest.mark.parametrize("steps, busy", [(BUSY_RUN, True), (FREED_RUN, False)])
def test_the_status_bar_says_the_machine_is_busy(qtbot, tmp_path, dialogs, steps, busy):
    window = MainWindow(Settings(), save_path=tmp_path / "settings.json")
    qtbot.addWidget(window)
    path = tmp_path / "busy.jsonl"
    with TraceWriter(path) as writer:
        writer.header(TraceHeader("target.gguf", "", "llamacpp", "cpu", {}, {}, "def f():",
                                  mode="plain"))
        for step in steps:
            writer.step(step)
        writer.summary({})
    window.open_trace(path)
    text = window.status_label.text()
    assert ("machine busy: decoding on 1 of 2 threads" in text) == busy, text
    assert ("machine busy" in text) == busy, text
    window.close()
