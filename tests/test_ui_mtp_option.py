"""The pair picker offers a target's own MTP layers as its draft, only where its file has
them; ticking the option makes a --draft-mtp spec with no draft model."""

from __future__ import annotations

from app.settings import RecentPair
from tests.tiny_mtp_gguf import write_tiny_mtp_gguf
from ui.pair_picker import PairPicker


def test_the_picker_offers_own_mtp_layers_only_for_a_target_with_them(qtbot, tmp_path):
    with_mtp = write_tiny_mtp_gguf(tmp_path / "mtp.gguf")
    without = write_tiny_mtp_gguf(tmp_path / "plain.gguf", nextn=0)
    picker = PairPicker()
    qtbot.addWidget(picker)
    picker.show()
    picker.set_pair(RecentPair(str(without)))
    assert not picker.own_mtp.isVisible() and not picker.own_mtp_chosen()
    assert not picker.model_spec().with_mtp and not picker.drafter_choice().uses("mtp")

    picker.set_pair(RecentPair(str(with_mtp)))
    assert picker.own_mtp.isVisible()
    assert "its own MTP layers" in picker.verdict.text()
    picker.own_mtp.setChecked(True)
    spec = picker.model_spec()
    assert spec.with_mtp and spec.draft is None and picker.drafter_choice().names == ("mtp",)
    assert not picker.draft.isEnabled() and picker.blocking_reason() == ""
    picker.ngram.setChecked(True)  # one draft at a time
    assert not picker.own_mtp.isChecked() and not picker.model_spec().with_mtp
    assert picker.drafter_choice().names == ("ngram",)

    picker.own_mtp.setChecked(True)
    picker.set_pair(RecentPair(str(without)))  # the option goes with the target
    assert not picker.own_mtp_chosen() and not picker.model_spec().with_mtp


def test_the_window_runs_mtp_drafts_and_the_inspector_names_the_head(qtbot, tmp_path,
                                                                      monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    from app.settings import Settings
    from tests.helpers import run, set_decoding
    from ui.main_window import MainWindow
    from ui.step_table import COLUMNS

    errors: list[str] = []
    monkeypatch.setattr(QMessageBox, "critical",
                        lambda parent, title, text, *a, **k: errors.append(text))
    window = MainWindow(Settings(), save_path=tmp_path / "settings.json")
    qtbot.addWidget(window)
    window.show_workspace()
    window.picker.set_pair(RecentPair(str(write_tiny_mtp_gguf(tmp_path / "mtp.gguf", mix=0.15)),
                                      backend="llamacpp", device="cpu"))
    window.picker.own_mtp.setChecked(True)
    set_decoding(window, tokens=24, k=3, prompt="the cat")
    run(window, qtbot)
    assert not errors, errors
    drafted = [s for s in window.run.steps if s.tokens]
    assert drafted, "the MTP layers drafted nothing"
    assert all(t.head == 0 for s in drafted for t in s.tokens)
    window.select_step(drafted[0].index)
    table = window.inspector.model
    assert table.data(table.index(0, COLUMNS.index("drafted from"))) == "MTP head 1"
