"""The window's model lists (real widgets, offscreen): found models, drafts that fit the target
first and the others greyed with the reason, the model-folders dialog, and the download dialog
against the local hub."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.models.discovery import discover_models, find_model
from app.paths import models_dir
from app.settings import load_settings
from tests.helpers import HUB_REPO
from ui.hub_download import HubDownloadDialog
from ui.model_browser import FoldersDialog
from ui.pair_picker import PairPicker


def test_picker_lists_found_models_and_compatible_drafts_first(qtbot, every_store):
    picker = PairPicker()
    qtbot.addWidget(picker)
    picker.set_model_folders(load_settings().model_folders)
    picker.rescan_models()
    qtbot.waitUntil(lambda: not picker.browser.scanning, timeout=30000)
    targets = [text for text, _ in picker.found_targets.entries()]
    assert len(targets) == 8 and any(t.startswith("tinydraft:latest") for t in targets)
    target = find_model("own-target.gguf", discover_models())
    picker.target.set_path(str(target))
    qtbot.waitUntil(lambda: "compatible draft" in picker.found_drafts.itemText(0),
                    timeout=30000)
    entries = picker.found_drafts.entries()
    marks = [text[0] for text, _ in entries]
    order = {"✓": 0, "⇄": 1, "✗": 2}
    assert marks == sorted(marks, key=order.__getitem__) and "✓" in marks
    for text, enabled in entries:
        assert enabled == (text[0] in "✓⇄")
    # another vocabulary that shares tokens drafts across vocabularies, and says what it shares
    [foreign] = [text for text, _ in entries if "foreign" in text]
    assert foreign.startswith("⇄") and "other vocabulary" in foreign
    first = picker.found_drafts.itemData(1)
    picker.found_drafts.activated.emit(1)
    assert picker.draft.path() == first
    qtbot.waitUntil(lambda: not picker.checking, timeout=30000)
    assert picker.blocking_reason() == ""


def test_a_target_chosen_while_the_scan_runs_keeps_the_scan(qtbot, every_store):
    """As at start-up, where the last pair is set while the machine is being scanned: the
    scan's models still fill the list, and the target's drafts are judged among them."""
    picker = PairPicker()
    qtbot.addWidget(picker)
    picker.set_model_folders(load_settings().model_folders)
    target = find_model("own-target.gguf", discover_models())
    picker.rescan_models()
    picker.target.set_path(str(target))  # before the scan's result can arrive
    qtbot.waitUntil(lambda: not picker.browser.scanning, timeout=30000)
    assert len(picker.found_targets.entries()) == 8
    qtbot.waitUntil(lambda: "compatible draft" in picker.found_drafts.itemText(0),
                    timeout=30000)
    assert any(text.startswith("✓") for text, _ in picker.found_drafts.entries())


def test_folders_dialog_adds_and_removes(qtbot, tmp_path):
    dialog = FoldersDialog(["/models/a"])
    qtbot.addWidget(dialog)
    dialog.add_folder(str(tmp_path))
    dialog.add_folder(str(tmp_path))
    assert dialog.folders() == ["/models/a", str(tmp_path)]
    dialog.list.setCurrentRow(0)
    dialog.remove_selected()
    assert dialog.folders() == [str(tmp_path)]


def test_download_dialog_lists_picks_q4_k_m_and_downloads(qtbot, hub, hub_files):
    dialog = HubDownloadDialog()
    qtbot.addWidget(dialog)
    dialog.repo.setText(HUB_REPO)
    dialog.list_files()
    qtbot.waitUntil(lambda: dialog.files.count() == 2, timeout=10000)
    assert dialog.files.currentItem().data(Qt.ItemDataRole.UserRole) == "tiny-Q4_K_M.gguf"
    with qtbot.waitSignal(dialog.downloaded, timeout=30000) as got:
        dialog.start_download()
    path = models_dir() / HUB_REPO / "tiny-Q4_K_M.gguf"
    assert got.args == [str(path)] and path.read_bytes() == hub_files["tiny-Q4_K_M.gguf"]
    assert dialog.progress.value() == 1000 and dialog.status.text().startswith("✓")


def test_download_dialog_names_a_missing_repo(qtbot, hub):
    dialog = HubDownloadDialog()
    qtbot.addWidget(dialog)
    dialog.repo.setText("nobody/nothing")
    dialog.list_files()
    qtbot.waitUntil(lambda: dialog.status.text().startswith("⚠"), timeout=10000)
    assert "repository not found" in dialog.status.text()
    assert not dialog.download_button.isEnabled()
