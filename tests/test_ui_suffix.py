"""Suffix decoding in the window: the picker's choice and its draft memory (on by default, in
the data folder), the inspector naming where each draft was copied from, and Forget."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from app.draft_memory import DraftMemory, default_memory_path  # noqa: E402
from app.engine.records import COPIED_FROM_MEMORY, COPIED_ON_RETRY  # noqa: E402
from app.settings import RecentPair  # noqa: E402
from tests.helpers import run, set_decoding  # noqa: E402
from ui.step_table import COLUMNS  # noqa: E402

PROMPT = "def add(x, y):\n    return x + y\n\ndef sum(data):\n"


def choose_suffix(window, qtbot, target) -> None:
    window.picker.set_pair(RecentPair(str(target), "", suffix=True, backend="llamacpp",
                                      device="cpu"))
    qtbot.waitUntil(lambda: not window.picker.checking, timeout=30_000)


def test_the_picker_offers_suffix_decoding_with_a_remembered_memory_by_default(qtbot,
                                                                                gguf_files):
    from ui.pair_picker import PairPicker

    picker = PairPicker()
    qtbot.addWidget(picker)
    picker.set_pair(RecentPair(str(gguf_files[0]), str(gguf_files[1]), backend="llamacpp",
                               device="cpu"))
    picker.suffix.setChecked(True)
    spec, choice = picker.model_spec(), picker.drafter_choice()
    assert choice.names == ("suffix",) and spec.draft is None
    assert choice.options.memory == str(default_memory_path())
    assert not picker.draft.isEnabled() and not picker.memory_row.isHidden()
    assert picker.current_pair().label.endswith("+ suffix decoding")
    picker.ngram.setChecked(True)  # the two draftless kinds exclude each other
    assert not picker.suffix.isChecked() and picker.drafter_choice().names == ("ngram",)
    assert picker.memory_row.isHidden()
    picker.suffix.setChecked(True)
    assert not picker.ngram.isChecked()
    picker.remember.setChecked(False)
    choice = picker.drafter_choice()
    assert choice.names == ("suffix",) and choice.options.memory == ""


def test_a_second_run_drafts_from_the_first_and_the_inspector_says_so_until_forgotten(
    window, qtbot, gguf_files, dialogs, monkeypatch
):
    from PySide6.QtWidgets import QMessageBox

    asked: list[str] = []
    monkeypatch.setattr(QMessageBox, "question", lambda parent, title, text, *a, **k: (
        asked.append(text) or QMessageBox.StandardButton.Yes))
    choose_suffix(window, qtbot, gguf_files[0])
    set_decoding(window, tokens=40, k=4, prompt=PROMPT)
    run(window, qtbot)
    assert not dialogs, dialogs
    memory = DraftMemory.load(default_memory_path())
    assert len(memory.outputs) == 1, "the window keeps each suffix-decoded output"
    first_text = window.run.text

    run(window, qtbot)
    assert window.run.text == first_text
    steps = window.run.steps
    # the same prompt again is a retry: it copies the first run's answer to it
    copied = [(i, j) for i, s in enumerate(steps) for j, t in enumerate(s.tokens)
              if t.copied_from is not None and t.copied_from.kind == COPIED_ON_RETRY]
    assert copied, "the second run copied nothing from the first"
    index, row = copied[0]
    window.select_step(index)
    table = window.inspector.model
    cell = table.data(table.index(row, COLUMNS.index("drafted from")))
    assert cell == f"retry of run {memory.outputs[0].run}"

    window.picker.forget_button.click()
    assert len(asked) == 1 and str(default_memory_path()) in asked[0]
    assert "forgotten: 2 earlier outputs" in window.status_label.text()  # both runs
    assert DraftMemory.load(default_memory_path()).outputs == []
    run(window, qtbot)  # a new host: it must not write the forgotten output back
    after = DraftMemory.load(default_memory_path())
    assert len(after.outputs) == 1 and after.outputs[0].run > memory.outputs[0].run
    assert not any(t.copied_from is not None
                   and t.copied_from.kind in (COPIED_FROM_MEMORY, COPIED_ON_RETRY)
                   for s in window.run.steps for t in s.tokens)
