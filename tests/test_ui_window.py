"""The desktop window on tiny real models (pytest-qt, offscreen): runs, Step, Stop, compare,
traces, errors, and the numbers it shows against the records they come from."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, Qt  # noqa: E402
from PySide6.QtGui import QTextCursor  # noqa: E402

from app.engine.records import ORIGIN_ACCEPTED
from app.engine.trace import read_trace  # noqa: E402
from app.settings import Settings  # noqa: E402
from tests.helpers import (  # noqa: E402
    PROMPT,
    RUN_TIMEOUT_MS,
    choose_pair,
    run,
    set_decoding,
)
from ui import format as fmt  # noqa: E402
from ui.main_window import MainWindow  # noqa: E402
from ui.step_table import COL_P, COL_Q  # noqa: E402
from ui.theme import REJECTED, token_format  # noqa: E402


@pytest.fixture
def ran(window, qtbot, hf_dirs, dialogs):
    """A finished greedy run on the tiny transformers pair."""
    choose_pair(window, qtbot, *hf_dirs)
    set_decoding(window)
    run(window, qtbot)
    assert dialogs == []
    return window


def test_a_run_fills_the_text_the_step_table_and_every_chart(window, qtbot, hf_dirs, dialogs):
    choose_pair(window, qtbot, *hf_dirs)
    set_decoding(window, compare=True)
    run(window, qtbot)
    assert dialogs == []
    result = window.run
    assert result is not None and result.stats.emitted == 24
    window.act_rejected.setChecked(False)
    window._toggle_rejected(False)
    assert window.text_view.toPlainText() == PROMPT + result.text
    assert window.inspector.model.rowCount() > 0
    empty = {name: n for name, n in window.charts.point_counts().items() if n == 0}
    assert empty == {}


def test_every_token_is_drawn_in_the_style_of_its_origin(ran):
    view = ran.text_view
    origins = {ref.origin for ref in view.refs}
    assert ORIGIN_ACCEPTED in origins and len(origins) >= 2
    for ref in view.refs:
        cursor = QTextCursor(view.document())
        cursor.setPosition(ref.start)
        cursor.setPosition(ref.start + 1, QTextCursor.MoveMode.KeepAnchor)
        got = cursor.charFormat()
        want = token_format(ref.origin, view._colours)
        assert got.background() == want.background(), ref
        assert got.fontStrikeOut() == (ref.origin == REJECTED)


def test_step_mode_advances_exactly_one_step_per_click(window, qtbot, hf_dirs, dialogs):
    choose_pair(window, qtbot, *hf_dirs)
    set_decoding(window, tokens=40)
    with qtbot.waitSignal(window.paused, timeout=RUN_TIMEOUT_MS):
        window.decode.step_button.click()
    assert len(window.run.steps) == 1
    assert window.worker.steps_emitted == 1
    for expected in (2, 3):
        with qtbot.waitSignal(window.paused, timeout=RUN_TIMEOUT_MS):
            window.decode.step_button.click()
        assert len(window.run.steps) == expected
        assert window.worker.steps_emitted == expected
        assert window.inspector.index == expected - 1
    with qtbot.waitSignal(window.run_done, timeout=RUN_TIMEOUT_MS):
        window.decode.stop_button.click()
    assert len(window.run.steps) == 3
    assert dialogs == []


def test_stop_ends_a_run_within_one_step(window, qtbot, hf_dirs, dialogs):
    """Started with Ctrl+Enter from the prompt box, stopped with Esc."""
    choose_pair(window, qtbot, *hf_dirs)
    set_decoding(window, tokens=400, k=2)
    window.decode.prompt.setFocus()
    qtbot.keyClick(window.decode.prompt, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert window.running and window.decode.prompt.toPlainText() == PROMPT
    qtbot.waitUntil(lambda: bool(window.run and window.run.steps), timeout=RUN_TIMEOUT_MS)
    with qtbot.waitSignal(window.run_done, timeout=RUN_TIMEOUT_MS):
        produced_when_stopped = window.worker.steps_emitted
        qtbot.keyClick(window.text_view, Qt.Key.Key_Escape)
    window.flush()
    assert window.worker.steps_emitted <= produced_when_stopped + 1
    assert len(window.run.steps) == window.worker.steps_emitted
    assert window.run.stats.emitted < 400
    assert not window.running and window.act_run.isEnabled()
    assert dialogs == []


def test_compare_mode_reports_identical_greedy_texts(window, qtbot, hf_dirs, dialogs):
    choose_pair(window, qtbot, *hf_dirs)
    set_decoding(window, tokens=30, compare=True)
    run(window, qtbot)
    assert dialogs == []
    result = window.compare_result
    assert result is not None and result.greedy and result.identical
    assert "texts identical" in window.compare_label.text()
    assert window.baseline.text == window.run.text
    assert all(step.k == 0 for step in window.baseline.steps)
    assert window.plain_view.toPlainText().endswith(window.run.text)


def table_rows(window):
    rows = []
    for i in range(len(window.run.steps)):
        window.inspector.show_step(i)
        rows.append(window.inspector.row_texts())
    return rows


def test_saving_then_opening_a_trace_reproduces_the_same_rows(ran, tmp_path):
    live_rows = table_rows(ran)
    live_text = ran.text_view.toPlainText()
    copy = tmp_path / "saved.jsonl"
    ran.save_trace(copy)
    assert len(read_trace(copy).steps) == len(ran.run.steps)
    ran.open_trace(copy)
    assert table_rows(ran) == live_rows
    assert ran.text_view.toPlainText() == live_text


def test_a_bad_model_path_shows_the_error_and_the_window_stays_usable(
    window, qtbot, hf_dirs, dialogs, tmp_path
):
    choose_pair(window, qtbot, tmp_path / "no-such-model")
    set_decoding(window)
    run(window, qtbot)
    assert len(dialogs) == 1 and "not found" in dialogs[0]
    assert window.run is None and not window.running
    choose_pair(window, qtbot, *hf_dirs)
    run(window, qtbot)
    assert len(dialogs) == 1
    assert window.run.stats.emitted == 24


def test_a_model_deleted_after_it_was_chosen_shows_the_error_and_the_window_stays_usable(
    window, qtbot, gguf_files, dialogs, tmp_path
):
    import shutil

    chosen = tmp_path / "chosen.gguf"
    shutil.copy(gguf_files[0], chosen)
    choose_pair(window, qtbot, chosen, gguf_files[1], backend="llamacpp")
    assert "compatible" in window.picker.verdict.text()
    chosen.unlink()
    set_decoding(window)
    run(window, qtbot)
    assert len(dialogs) == 1 and "not found" in dialogs[0] and "chosen.gguf" in dialogs[0]
    choose_pair(window, qtbot, *gguf_files, backend="llamacpp")
    run(window, qtbot)
    assert len(dialogs) == 1 and window.run.stats.emitted == 24


def test_a_trace_cut_mid_line_opens_with_its_complete_steps_and_a_note(ran, tmp_path):
    copy = tmp_path / "cut.jsonl"
    ran.save_trace(copy)
    lines = copy.read_bytes().splitlines(keepends=True)
    copy.write_bytes(b"".join(lines[:-2]) + lines[-2][: len(lines[-2]) // 2])
    ran.open_trace(copy)
    assert len(ran.run.steps) == len(lines) - 3
    assert "the last line was cut off mid-write" in ran.status_label.text()


def test_a_garbage_trace_is_one_error_and_the_window_keeps_its_run(ran, tmp_path, dialogs,
                                                                   monkeypatch):
    from PySide6.QtWidgets import QFileDialog

    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(bytes(range(256)) * 8 + b"\nstill not json\n")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(garbage), ""))
    steps_before = len(ran.run.steps)
    ran.open_trace_dialog()
    assert len(dialogs) == 1 and "is not JSON" in dialogs[0]
    assert len(ran.run.steps) == steps_before


def test_the_displayed_p_and_q_equal_the_record_values(ran):
    checked = 0
    for i, step in enumerate(ran.run.steps):
        ran.inspector.show_step(i)
        model = ran.inspector.model
        for row, record in enumerate(step.tokens):
            for column, value in ((COL_P, record.p), (COL_Q, record.q)):
                cell = model.index(row, column)
                assert cell.data(Qt.ItemDataRole.UserRole) == value
                assert cell.data() == fmt.prob(value)
            checked += 1
    assert checked > 0
    ref = next(r for r in ran.text_view.refs if r.record >= 0)
    record = ran.text_view.record_of(ref)
    tooltip = ran.text_view.tooltip_for(ref)
    assert f"p (target) = {fmt.prob(record.p)}" in tooltip
    assert f"q (draft) = {fmt.prob(record.q)}" in tooltip


def test_clicking_a_token_selects_its_step_and_arrows_move_between_steps(ran, qtbot):
    view = ran.text_view
    ref = next(r for r in reversed(view.refs) if r.step > 0 and r.end - r.start >= 1)
    ran.inspector.show_step(0)
    cursor = QTextCursor(view.document())
    cursor.setPosition(ref.start)
    view.setTextCursor(cursor)
    view.ensureCursorVisible()
    rect = view.cursorRect(cursor)
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton,
                     pos=QPoint(rect.left() + 3, rect.center().y()))
    assert ran.inspector.index == ref.step
    ran.inspector.table.setFocus()
    qtbot.keyClick(ran.inspector.table, Qt.Key.Key_Left)
    assert ran.inspector.index == ref.step - 1
    qtbot.keyClick(ran.inspector.table, Qt.Key.Key_PageDown)
    assert ran.inspector.index == ref.step


def test_the_llama_cpp_backend_runs_in_the_window(window, qtbot, gguf_files, dialogs):
    choose_pair(window, qtbot, *gguf_files, backend="llamacpp")
    assert window.picker.blocking_reason() == ""
    set_decoding(window, tokens=16, prompt="def add")
    run(window, qtbot)
    assert dialogs == []
    assert window.run.stats.emitted == 16
    assert window.run.header.backend == "llamacpp"


def test_closing_the_window_during_a_run_stops_the_worker_cleanly(qtbot, tmp_path, hf_dirs,
                                                                  dialogs):  # fmt: skip
    from app.paths import data_dir

    win = MainWindow(Settings(), save_path=tmp_path / "settings.json")
    win.show_workspace()
    win.show()
    choose_pair(win, qtbot, *hf_dirs)
    set_decoding(win, tokens=400, k=2)
    win.start_run()
    qtbot.waitUntil(lambda: bool(win.run and win.run.steps), timeout=RUN_TIMEOUT_MS)
    win.close()
    assert not win.thread.isRunning()
    assert (tmp_path / "settings.json").exists()
    traces = sorted((data_dir() / "traces").glob("run-*.jsonl"))
    assert len(traces) == 1
    trace = read_trace(traces[0])
    assert 0 < sum(len(s.emitted) for s in trace.steps) < 400
    assert trace.summary is not None and trace.summary["interrupted"] is True, \
        "the worker finalises the trace before the window goes"
    assert dialogs == []


def test_csv_and_chart_exports_write_their_files(ran, tmp_path, monkeypatch):
    from PySide6.QtGui import QImage
    from PySide6.QtWidgets import QFileDialog

    targets = iter([str(tmp_path / "run.csv"), str(tmp_path / "charts.png")])
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (next(targets), ""))
    ran.export_csv_dialog()
    ran.export_charts_dialog()
    rows = (tmp_path / "run.csv").read_text().splitlines()
    assert rows[0].startswith("step,k,pos,token,text,q,p")
    assert len(rows) - 1 == sum(len(s.tokens) for s in ran.run.steps)
    image = QImage(str(tmp_path / "charts.png"))
    assert image.width() > 100 and image.height() > 100


def test_about_names_the_versions_of_what_decodes():
    from app import __version__
    from ui.about import version_lines

    text = "\n".join(version_lines())
    assert f"DraftLens {__version__}" in text
    assert "PySide6" in text and "llama-cpp-python" in text and "torch" in text


def test_a_sampled_rejection_shows_p_q_and_the_residual_drawn_from(window, qtbot, hf_dirs,
                                                                   dialogs):  # fmt: skip
    choose_pair(window, qtbot, *hf_dirs)
    set_decoding(window, tokens=40, k=4)
    window.decode.temperature.setValue(1.0)
    window.decode.seed.setValue(7)
    run(window, qtbot)
    assert dialogs == []
    step = next(s for s in window.run.steps if any(t.residual_used for t in s.tokens))
    row = next(i for i, t in enumerate(step.tokens) if t.residual_used)
    record = step.tokens[row]
    assert record.u is not None and not record.accepted
    window.inspector.show_step(step.index)
    window.inspector.table.selectRow(row)
    p, q, residual = window.inspector.bars.series_heights()
    top = record.top + ([] if record.token in {a.token for a in record.top} else [record])
    assert p == [a.p for a in top] and q == [a.q for a in top]
    assert residual == [max(0.0, a.p - a.q) for a in top]
    assert window.inspector.model.index(row, 5).data() == fmt.prob(record.u)


def test_compare_view_names_the_first_difference_its_margins_and_the_bound(window, gguf_pair):
    from app.analysis.divergence import explain_divergence
    from app.analysis.kernel_noise import measure_kernel_noise
    from tests.helpers import SwappingVerifier, greedy_runs
    from ui.run_data import CompareResult

    target, draft = gguf_pair
    bound = measure_kernel_noise(target, 48).bound
    prompt, plain, plain_top, spec, spec_top = greedy_runs(target, draft, SwappingVerifier)
    d = explain_divergence(len(prompt), plain, spec, plain_top, spec_top, target.token_text,
                           bound)
    assert d is not None
    window.run_control.show_comparison(CompareResult(30.0, 25.0, False, True, len(spec),
                                                     len(plain), d))
    text = window.compare_label.text()
    assert f"first difference at generated token {d.position}:" in text
    assert repr(d.plain_text) in text and repr(d.other_text) in text
    assert f"{d.plain_logit_gap:.4f}" in text and f"{d.other_logit_gap:.4f}" in text
    assert f"up to {bound:.4f}" in text and "NOT a near-tie" in text and "please report" in text


def test_the_inspector_says_when_a_draft_ended_on_its_confidence(window, hf_pair, tmp_path):
    from app.engine.trace import TraceHeader, TraceWriter
    from tests.helpers import adaptive_session

    target, draft = hf_pair
    session = adaptive_session(target, draft, n_predict=16)
    path = tmp_path / "adaptive.jsonl"
    writer = TraceWriter(path)
    writer.header(TraceHeader(target.path, draft.path, "torch", "cpu", {}, {}, PROMPT))
    steps = []
    for step in session.steps(target.tokenize(PROMPT)):
        writer.step(step)
        steps.append(step)
    writer.close()
    ended = next(s for s in steps if s.stop_chance is not None)
    window.open_trace(path)
    window.select_step(ended.index)
    header = window.inspector.header.text()
    assert f"ended on the draft's confidence (all pass: {fmt.prob(ended.stop_chance)}" in header
