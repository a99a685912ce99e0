"""The app's remembered settings (app.settings, no Qt) and the window restoring them."""

from __future__ import annotations

import json
import os

import pytest

from app.settings import (
    MAX_RECENT,
    DecodeChoices,
    RecentPair,
    Settings,
    load_settings,
    save_settings,
    settings_path,
)


def test_settings_survive_a_save_and_a_load(tmp_path):
    settings = Settings(theme="dark", show_rejected=False, window_geometry="AAEC",
                        splitters={"main": "AQID"},
                        decode=DecodeChoices(prompt="def f():", draft_max=5, temperature=0.7,
                                             seed=3, compare=True))  # fmt: skip
    settings.remember_pair(RecentPair("/m/target.gguf", "/m/draft.gguf", device="cpu"))
    path = save_settings(settings, tmp_path / "settings.json")
    assert load_settings(path) == settings


def test_the_default_file_lives_in_the_config_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTLENS_HOME", str(tmp_path))
    save_settings(Settings(theme="light"))
    assert settings_path() == tmp_path / "config" / "settings.json"
    assert load_settings().theme == "light"


@pytest.mark.parametrize("content", ["", "{not json", "[1, 2]", '{"theme": "purple"}'])
def test_a_missing_or_unreadable_file_gives_the_defaults(tmp_path, content):
    assert load_settings(tmp_path / "absent.json") == Settings()
    path = tmp_path / "settings.json"
    path.write_text(content)
    assert load_settings(path) == Settings()


def test_unknown_keys_are_ignored_and_known_ones_kept(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"theme": "dark", "from_the_future": 1,
                                "decode": {"draft_max": 3, "new_knob": True},
                                "recent_pairs": [{"target": "/t.gguf", "colour": "red"}, 7]}))
    settings = load_settings(path)
    assert settings.theme == "dark"
    assert settings.decode.draft_max == 3
    assert settings.recent_pairs == [RecentPair("/t.gguf")]


def test_a_failed_write_leaves_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "settings.json"
    save_settings(Settings(theme="dark"), path)

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        save_settings(Settings(theme="light"), path)
    assert load_settings(path).theme == "dark"
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]


def test_recent_pairs_put_the_latest_first_once_and_keep_a_few():
    settings = Settings()
    for i in range(MAX_RECENT + 3):
        settings.remember_pair(RecentPair(f"/t{i}.gguf", "/d.gguf"))
    settings.remember_pair(RecentPair("/t5.gguf", "/d.gguf", device="cpu"))
    targets = [p.target for p in settings.recent_pairs]
    assert len(targets) == MAX_RECENT
    assert targets[0] == "/t5.gguf" and targets.count("/t5.gguf") == 1
    assert settings.recent_pairs[0].device == "cpu"


def test_settings_module_does_not_import_qt():
    import subprocess
    import sys

    code = "import sys, app.settings; print(any(m.startswith('PySide6') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_window_remembers_its_layout_theme_and_decode_settings(qtbot, tmp_path):
    from ui.main_window import MainWindow

    path = tmp_path / "settings.json"
    first = MainWindow(Settings(), save_path=path)
    qtbot.addWidget(first)
    first.resize(780, 700)  # within the offscreen screen, where restoreGeometry clamps
    first.show_workspace()
    first.show()
    first.main_split.setSizes([360, 400])
    first.decode.prompt.setPlainText("print('hi')")
    first.decode.draft_max.setValue(11)
    first.set_theme("dark")
    sizes = first.main_split.sizes()
    first.close()

    second = MainWindow(save_path=path)
    qtbot.addWidget(second)
    second.show_workspace()
    second.show()
    assert second.main_split.sizes() == sizes
    assert second.size() == first.size()
    assert second.decode.prompt.toPlainText() == "print('hi')"
    assert second.decode.draft_max.value() == 11
    assert second.settings.theme == "dark" and second.theme_actions["dark"].isChecked()
    second.set_theme("light")
    second.close()


def test_only_the_newest_automatic_traces_are_kept(tmp_path):
    from ui.worker import plain_trace_path, prune_traces

    for i in range(5):
        (tmp_path / f"run-2026010{i}.jsonl").write_text("{}\n")
        plain_trace_path(tmp_path / f"run-2026010{i}.jsonl").write_text("{}\n")
    (tmp_path / "mine.jsonl").write_text("{}\n")
    prune_traces(tmp_path, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "mine.jsonl", "run-20260103.jsonl", "run-20260103.plain.jsonl",
        "run-20260104.jsonl", "run-20260104.plain.jsonl",
    ]  # fmt: skip
