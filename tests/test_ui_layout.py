"""The window on common laptop and desktop screens (pytest-qt, offscreen, tiny real models): it
opens within the screen's available geometry, nothing in it is cut off at 1366x768, 1600x900 and
1920x1080, Run / Stop / Step and Prev / Next stay in view, and the charts say they are waiting
until a run's first step instead of drawing empty axes."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QPoint, QRect  # noqa: E402
from PySide6.QtWidgets import (  # noqa: E402
    QWidget,
)

from app.settings import Settings  # noqa: E402
from tests.helpers import choose_pair, cut_off, run, set_decoding  # noqa: E402
from ui.charts import EMPTY_TEXT, WAITING_TEXT  # noqa: E402
from ui.fit import fitted_geometry, window_frame  # noqa: E402
from ui.main_window import DEFAULT_SIZE, MainWindow  # noqa: E402

SCREENS = [(1366, 768), (1600, 900), (1920, 1080)]


@pytest.fixture
def window(qtbot, tmp_path, dialogs):
    win = MainWindow(Settings(), save_path=tmp_path / "settings.json")
    qtbot.addWidget(win)
    win.show_workspace()
    yield win
    win.close()


def show_on_screen(window, qtbot, width, height):
    """The window as it opens on a screen of this size (whole screen available)."""
    window.fit_to_screen(DEFAULT_SIZE, QRect(0, 0, width, height))
    window.show()
    qtbot.waitExposed(window)
    qtbot.wait(50)  # let the layouts settle (word-wrapped labels take a second pass)


def inside(widget: QWidget, window: QWidget) -> bool:
    top_left = widget.mapTo(window, QPoint(0, 0))
    return window.rect().contains(QRect(top_left, widget.size()))


def test_the_window_opens_within_a_1366x768_screen(window):
    available = QRect(0, 0, 1366, 768)
    window.fit_to_screen(DEFAULT_SIZE, available)
    frame = window_frame(window)
    assert window.width() + frame.width() <= 1366 and window.height() + frame.height() <= 768
    minimum = window.minimumSizeHint()
    assert minimum.width() + frame.width() <= 1366 and minimum.height() + frame.height() <= 768
    # a large screen keeps the default size, centred
    big = fitted_geometry(DEFAULT_SIZE, QRect(0, 0, 2560, 1440), frame)
    assert big.size() == DEFAULT_SIZE and big.x() > 0 and big.y() > 0


@pytest.mark.parametrize(("width", "height"), SCREENS)
def test_nothing_is_cut_off_on_common_screens(window, qtbot, width, height):
    show_on_screen(window, qtbot, width, height)
    assert cut_off(window, window) == []
    left = window.picker.parentWidget()  # the panels inside the left scroll area
    assert left.width() >= left.minimumSizeHint().width()
    for button in (window.decode.run_button, window.decode.stop_button,
                   window.decode.step_button, window.inspector.prev_button,
                   window.inspector.next_button):
        assert inside(button, window), button.text()


def test_after_a_run_at_1366x768_the_step_table_and_notices_fit(window, qtbot, hf_dirs,
                                                                 dialogs):
    show_on_screen(window, qtbot, 1366, 768)
    choose_pair(window, qtbot, *hf_dirs)
    set_decoding(window, tokens=16, k=3)
    run(window, qtbot)
    window.why.refresh()
    qtbot.wait(100)
    assert dialogs == []
    table = window.inspector.table
    header = table.horizontalHeader()
    widths = [header.sectionSize(i) for i in range(header.count())]
    assert sum(widths) <= table.viewport().width(), (widths, table.viewport().width())
    assert cut_off(window, window) == []


def test_the_charts_wait_for_the_first_step_instead_of_drawing_empty_axes(window, qtbot,
                                                                          hf_dirs,
                                                                          dialogs):
    show_on_screen(window, qtbot, 1366, 768)
    charts = window.charts
    assert charts.showing_placeholder and charts.placeholder.text() == EMPTY_TEXT
    choose_pair(window, qtbot, *hf_dirs)
    set_decoding(window, tokens=8, k=2)
    with qtbot.waitSignal(window.run_done, timeout=60_000):
        window.start_run()
        window.flush(force=True)  # the pair is still loading: no step yet
        assert window.run is None or window.run.columns.n == 0
        assert charts.showing_placeholder and charts.placeholder.text() == WAITING_TEXT
    window.flush()
    assert not charts.showing_placeholder and charts.point_counts()["tok_s"] > 0
    # the p/q chart shows no axes until a draft token is selected
    window.inspector.table.clearSelection()
    window.inspector.bars.show_record(None, None)
    assert not window.inspector.bars.getPlotItem().getAxis("left").isVisible()


def test_a_copied_step_at_1366x768_shows_several_rows_and_where_each_came_from(
        window, qtbot, gguf_files, dialogs):
    """A retried prompt copies the earlier answer: the step's rows and their drafted-from
    column fit the inspector on a laptop screen, no row wraps to two lines, and the cell's
    tooltip says in a sentence where its token came from."""
    from PySide6.QtCore import Qt

    from app.engine.records import COPIED_ON_RETRY
    from app.settings import RecentPair
    from ui.step_inspector import MIN_ROWS_SHOWN
    from ui.step_table import COL_DRAFTED_FROM

    show_on_screen(window, qtbot, 1366, 768)
    window.picker.set_pair(RecentPair(str(gguf_files[0]), "", suffix=True, backend="llamacpp",
                                      device="cpu"))
    qtbot.waitUntil(lambda: not window.picker.checking, timeout=30_000)
    set_decoding(window, tokens=40, k=6, prompt="def add(x, y):\n    return x + y\n\n")
    run(window, qtbot)
    run(window, qtbot)
    assert dialogs == []
    steps = window.run.steps
    index = next(i for i, s in enumerate(steps) if len(s.tokens) >= 6 and any(
        t.copied_from is not None and t.copied_from.kind == COPIED_ON_RETRY for t in s.tokens))
    window.select_step(index)
    qtbot.wait(50)
    table = window.inspector.table
    assert not table.isColumnHidden(COL_DRAFTED_FROM)
    selected = table.selectionModel().selectedRows()[0]
    assert table.viewport().rect().contains(table.visualRect(selected)), "selected row hidden"
    header = table.horizontalHeader()
    widths = [header.sectionSize(i) for i in range(header.count())]
    assert sum(widths) <= table.viewport().width(), f"{widths} > {table.viewport().width()}"
    third = 2
    assert table.rowViewportPosition(third) + table.rowHeight(third) \
        <= table.viewport().height(), ([table.rowHeight(r) for r in range(3)],
                                       table.viewport().height())
    assert table.rowHeight(0) <= table.fontMetrics().height() * 1.8
    model = window.inspector.model
    row = next(r for r, t in enumerate(steps[index].tokens)
               if t.copied_from is not None and t.copied_from.kind == COPIED_ON_RETRY)
    cell = model.index(row, COL_DRAFTED_FROM)
    text = model.data(cell)
    assert text.startswith("retry of run ")
    assert widths[COL_DRAFTED_FROM] >= table.fontMetrics().horizontalAdvance(text)
    assert "answer to this same prompt (a retry)" in model.data(cell, Qt.ItemDataRole.ToolTipRole)
    # a source too long for the room left is cut short, whole in its tooltip
    from dataclasses import replace

    from app.engine.records import COPIED_FROM_MEMORY, CopySource
    long_source = CopySource(kind=COPIED_FROM_MEMORY, run=123456, count=4321, of=98765)
    step = steps[index]
    tokens = [replace(t, copied_from=long_source) for t in step.tokens]
    tokens[-1] = replace(tokens[-1], accepted=False)  # the row shown first: scrolled to
    window.inspector.steps[index] = replace(step, tokens=tokens)
    window.inspector.show_step(index)
    selected = table.selectionModel().selectedRows()[0]
    assert selected.row() == len(tokens) - 1 > MIN_ROWS_SHOWN
    assert table.viewport().rect().contains(table.visualRect(selected)), "selected row hidden"
    widths = [header.sectionSize(i) for i in range(header.count())]
    text = model.data(model.index(0, COL_DRAFTED_FROM))
    assert widths[COL_DRAFTED_FROM] < table.fontMetrics().horizontalAdvance(text)
    assert sum(widths) <= table.viewport().width(), f"{widths} > {table.viewport().width()}"
    assert "run 123456: 4321 of the 98765" in model.data(model.index(0, COL_DRAFTED_FROM),
                                                         Qt.ItemDataRole.ToolTipRole)
    assert cut_off(window, window) == []
