"""The window says why, from the records (pytest-qt, offscreen, real widgets): a trace's
recorded decisions replayed into the one first-run notice and the step inspector; work after a
run (a compare's plain baseline) in the status bar with a progress bar and Cancel, while Run
stays available and says it cancels that work first; and a step table with no horizontal
scrollbar before data arrives, at 1366x768."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QRect  # noqa: E402

from app.analysis.reasons import (  # noqa: E402
    describe_decision,
    plain_run_reason,
    plain_run_summary,
)
from app.engine.records import RULE_NO_GAIN, RULE_PROBE  # noqa: E402
from app.engine.trace import TraceHeader, TraceWriter  # noqa: E402
from app.settings import Settings  # noqa: E402
from tests.helpers import choose_pair, cut_off, set_decoding  # noqa: E402
from tests.recorded_decisions import all_accepted_few_drafted  # noqa: E402
from ui.main_window import DEFAULT_SIZE, MainWindow  # noqa: E402
from ui.plain_notice import PlainRunNotice  # noqa: E402

RUN_TIMEOUT_MS = 120_000


@pytest.fixture
def small_window(qtbot, tmp_path, dialogs):
    """The window on the 1366x768 screen of the issue's first run."""
    win = MainWindow(Settings(), save_path=tmp_path / "settings.json")
    qtbot.addWidget(win)
    win.fit_to_screen(DEFAULT_SIZE, QRect(0, 0, 1366, 768))
    win.show_workspace()
    win.show()
    qtbot.waitExposed(win)
    yield win
    win.close()


def open_steps(window, steps, path, draft_max):
    """Write these steps as an adaptive run's trace and open it in the window."""
    with TraceWriter(path) as writer:
        writer.header(TraceHeader("target.gguf", "draft.gguf", "llamacpp", "cpu",
                                  {"adaptive": True, "draft_max": draft_max}, {}, "def f():"))
        for step in steps:
            writer.step(step)
        writer.summary({})
    window.open_trace(path)


def test_the_step_table_has_no_horizontal_scrollbar_before_data(small_window, qtbot):
    table = small_window.inspector.table
    qtbot.wait(100)  # laid out
    assert table.model().rowCount() == 0
    assert not table.horizontalScrollBar().isVisible()


def test_recorded_decisions_are_replayed_into_the_notice_and_the_inspector(
        small_window, qtbot, tmp_path):
    steps = all_accepted_few_drafted()
    open_steps(small_window, steps, tmp_path / "first-run.jsonl", draft_max=8)
    # one notice in the window, with the reason in full: the run's summary and the figures of
    # its last decision that no draft paid
    inspector = small_window.inspector
    notice = small_window.why.notice
    assert [n for n in small_window.findChildren(PlainRunNotice) if n.isVisible()] == [notice]
    assert notice.text.text() == plain_run_reason(steps)
    assert plain_run_reason(steps).startswith(plain_run_summary(steps) + " At its last")
    assert "all 10 draft tokens it tried were accepted" in notice.text.text()
    assert "too rarely" not in notice.text.text()
    assert notice.k == steps[-1].decision.alternative_k  # the k the controller priced best
    small_window.why.tabs.setCurrentWidget(small_window.charts)
    assert [n for n in small_window.findChildren(PlainRunNotice) if n.isVisible()] == [notice]
    for rule in (RULE_NO_GAIN, RULE_PROBE):
        shown = next(s for s in steps if s.decision.rule == rule)
        small_window.select_step(shown.index)
        assert inspector.reason.isVisible()
        assert inspector.reason.text() == "Why: " + describe_decision(shown.decision)
        # at 1366x768 the reason, the notice and the table all have their room, once laid
        # out (a word-wrapped label takes a second pass)
        qtbot.wait(50)
        assert cut_off(small_window, small_window) == []


def test_a_plain_run_at_1366x768_has_one_notice_with_its_whole_reason_in_view(
        small_window, qtbot, costly_draft_pair, dialogs):
    """A real adaptive run that no draft pays for (its reason lists several rules and the
    last decision's figures): the one notice shows all of it, nothing in the window cut off."""
    window = small_window
    choose_pair(window, qtbot, *costly_draft_pair, backend="llamacpp")
    set_decoding(window, tokens=120, k=4, adaptive=True)
    with qtbot.waitSignal(window.run_done, timeout=RUN_TIMEOUT_MS):
        window.start_run()
    window.flush()
    window.why.refresh()
    qtbot.wait(100)  # the wrapped labels laid out
    assert dialogs == []
    notice = window.why.notice
    assert [n for n in window.findChildren(PlainRunNotice) if n.isVisible()] == [notice]
    assert notice.text.text() == plain_run_reason(window.run.steps)
    assert "At its last such decision" in notice.text.text()
    assert notice.text.height() >= notice.text.heightForWidth(notice.text.width())
    assert cut_off(window, window) == []


def test_work_after_a_run_shows_in_the_status_bar_and_a_new_run_cancels_it(
        small_window, qtbot, hf_dirs, dialogs):
    window = small_window
    choose_pair(window, qtbot, *hf_dirs)
    set_decoding(window, tokens=120, k=3, compare=True)
    runs = window.run_control
    window.start_run()
    # (not waitSignal: its slot may run on the worker's thread and return before the window
    # has taken the queued signals)
    qtbot.waitUntil(lambda: bool(runs.finishing), timeout=RUN_TIMEOUT_MS)
    # the speculative run's steps are over; the host decodes the plain baseline
    status = runs.work_status
    assert runs.running and runs.finishing.startswith("comparing")
    assert status.isVisible() and status.cancel_button.isEnabled()
    assert status.label.text().startswith("comparing: decoding the plain baseline · ")
    assert " of 120 tokens" in status.label.text()  # how far it has come, in tokens
    assert status.bar.maximum() == len(window.run.output_ids)  # a fraction: tokens of the run
    assert window.act_run.isEnabled()  # Run stays available...
    ended = []
    window.run_done.connect(lambda: ended.append(window.run))
    window.start_run()  # ...and says it cancels the work first
    assert "the new run starts once" in window.status_label.text()
    assert "cancelling" in status.label.text()
    qtbot.waitUntil(lambda: len(ended) == 2, timeout=RUN_TIMEOUT_MS)
    window.flush()
    assert ended[1] is not ended[0]  # a new run, after the first ended
    assert dialogs == []
    assert not runs.running and not runs.finishing and not status.isVisible()
    assert window.run is not None and window.run.stats.emitted == 120  # the new run ran whole


def test_cancel_ends_the_work_and_keeps_the_run(small_window, qtbot, hf_dirs, dialogs):
    window = small_window
    choose_pair(window, qtbot, *hf_dirs)
    set_decoding(window, tokens=120, k=3, compare=True)
    window.start_run()
    qtbot.waitUntil(lambda: bool(window.run_control.finishing), timeout=RUN_TIMEOUT_MS)
    run = window.run
    with qtbot.waitSignal(window.run_done, timeout=RUN_TIMEOUT_MS):
        window.run_control.work_status.cancel_button.click()
    window.flush()
    assert dialogs == []
    assert window.run is run and run.stats.emitted == 120  # the run on show is kept
    assert not window.run_control.work_status.isVisible() and window.act_run.isEnabled()


def test_a_long_why_line_scrolls_in_its_area_and_a_short_one_fits_it(small_window, qtbot,
                                                                    tmp_path):
    """A copy priced at 60 positions and a padded pass make a Why line of many lines: at
    1366x768 its area stops at REASON_LINES lines and scrolls, the table keeps its room, and
    a short reason's area is no taller than its text."""
    from ui.step_inspector import REASON_LINES

    steps = all_accepted_few_drafted()
    long_step = next(s for s in steps if s.decision.rule == RULE_PROBE)
    long_step.decision.accept_at = [0.9 - 0.001 * i for i in range(60)]
    long_step.decision.k = 60
    long_step.decision.padded_to, long_step.decision.unpadded_seconds = 64, 0.5
    open_steps(small_window, steps, tmp_path / "long.jsonl", draft_max=64)
    inspector = small_window.inspector
    small_window.select_step(long_step.index)
    qtbot.wait(50)
    area, reason = inspector.reason_area, inspector.reason
    most = reason.fontMetrics().lineSpacing() * REASON_LINES
    assert "Priced as a pass of 64 tokens" in reason.text()
    assert reason.heightForWidth(reason.width()) > most
    assert area.height() == most and area.verticalScrollBar().maximum() > 0
    assert inspector.table.height() > 3 * inspector.table.verticalHeader().defaultSectionSize()
    short = next(s for s in steps if s.decision.rule == RULE_NO_GAIN)
    small_window.select_step(short.index)
    qtbot.wait(50)
    assert area.height() == reason.heightForWidth(area.viewport().width()) < most
    assert cut_off(small_window, small_window) == []
