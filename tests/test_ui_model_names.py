"""The model fields name the model (pytest-qt, offscreen, real widgets): at 1366x768 a target
and a draft whose file names end alike read as two models, each named from its GGUF metadata
in full, with the path in the tooltip; the field holds the path while it is edited."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QRect  # noqa: E402

from app.settings import Settings  # noqa: E402
from tests.helpers import choose_pair  # noqa: E402
from tests.tiny_gguf import write_tiny_gguf  # noqa: E402
from ui.main_window import DEFAULT_SIZE, MainWindow  # noqa: E402


def converter_parts(size: str) -> dict[str, str]:
    """What llama.cpp's converter writes for a model of this size."""
    return {"general.name": f"Tiny Coder {size} Instruct", "general.basename": "Tiny-Coder",
            "general.size_label": size, "general.finetune": "Instruct"}


@pytest.fixture
def alike_pair(tmp_path):
    """Two models in a deep folder whose file names share a long tail, as the demo pair's do
    ("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "...-0.5b-instruct-q4_k_m.gguf")."""
    folder = tmp_path / "a folder with a long name" / "models" / "tiny-coder"
    folder.mkdir(parents=True)
    target = write_tiny_gguf(folder / "tiny-coder-1.5b-instruct-q8_0.gguf", seed=0,
                             weight_type="Q8_0", metadata=converter_parts("1.5B"))
    draft = write_tiny_gguf(folder / "tiny-coder-0.5b-instruct-q8_0.gguf", seed=1,
                            weight_type="Q8_0", metadata=converter_parts("0.5B"))
    return target, draft


@pytest.fixture
def small_window(qtbot, tmp_path, dialogs):
    win = MainWindow(Settings(), save_path=tmp_path / "settings.json")
    qtbot.addWidget(win)
    win.fit_to_screen(DEFAULT_SIZE, QRect(0, 0, 1366, 768))
    win.show_workspace()
    win.show()
    qtbot.waitExposed(win)
    yield win
    win.close()


def visible_width(edit) -> int:
    """The pixels a line edit has for its text, as Qt 6 lays it out (qlineedit.cpp,
    qlineedit_p.cpp): the contents inside the frame, less the clear button's place (icon
    size + 6 and the icon margin) and 2 pixels each side."""
    from PySide6.QtWidgets import QStyle

    style = edit.style()
    metric = lambda m: style.pixelMetric(m, None, edit)  # noqa: E731
    frame = metric(QStyle.PixelMetric.PM_DefaultFrameWidth)
    clear = (metric(QStyle.PixelMetric.PM_LineEditIconSize) + 6
             + metric(QStyle.PixelMetric.PM_LineEditIconMargin))
    return edit.width() - 2 * frame - clear - 2 * 2


def test_the_model_fields_name_each_model_in_full_with_the_path_in_the_tooltip(
        small_window, qtbot, alike_pair):
    window = small_window
    picker = window.picker
    window.decode.prompt.setFocus()  # the fields away from the keyboard, as after a start
    choose_pair(window, qtbot, *alike_pair, backend="llamacpp")
    rows = {"1.5B": picker.target, "0.5B": picker.draft}
    qtbot.waitUntil(lambda: all(row.label for row in rows.values()), timeout=10_000)
    qtbot.wait(50)  # the form lays the rows out again for the names' width
    for size, row in rows.items():
        name = f"Tiny-Coder {size} Instruct · Q8_0"
        assert row.edit.text() == name
        assert str(row.path()) in row.edit.toolTip() and name in row.edit.toolTip()
        assert row.edit.fontMetrics().horizontalAdvance(name) <= visible_width(row.edit), (
            f"{name!r} is cut off in a field {visible_width(row.edit)} pixels wide")
    assert picker.target.path() == str(alike_pair[0])  # what runs is the path
    assert picker.current_pair().draft == str(alike_pair[1])


def test_a_model_field_holds_the_path_while_it_is_edited(small_window, qtbot, alike_pair,
                                                         tmp_path):
    window = small_window
    row = window.picker.target
    window.decode.prompt.setFocus()
    choose_pair(window, qtbot, *alike_pair, backend="llamacpp")
    qtbot.waitUntil(lambda: bool(row.label), timeout=10_000)
    row.edit.setFocus()
    qtbot.waitUntil(row.edit.hasFocus)
    assert row.edit.text() == str(alike_pair[0])
    other = write_tiny_gguf(tmp_path / "other.gguf", metadata={"general.name": "Other"})
    row.edit.selectAll()
    qtbot.keyClicks(row.edit, str(other))
    assert row.path() == str(other)
    window.decode.prompt.setFocus()
    qtbot.waitUntil(lambda: row.edit.text() == "Other · F32", timeout=10_000)
    assert row.path() == str(other)
    row.edit.clear()  # the clear button, without the focus
    assert row.path() == "" and row.edit.text() == ""
