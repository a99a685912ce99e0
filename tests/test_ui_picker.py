"""Choosing a pair: the compatibility verdict, greyed-out devices, and the first-run screen."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.models import runtimes
from app.settings import RecentPair, Settings
from ui.first_run import describe_progress
from ui.main_window import MainWindow
from ui.pair_picker import PairPicker


def wait_checked(qtbot, picker):
    qtbot.waitUntil(lambda: not picker.checking, timeout=30_000)


def test_an_incompatible_pair_cannot_run_and_the_verdict_says_why(qtbot, tmp_path, hf_dirs,
                                                                  gguf_files):  # fmt: skip
    window = MainWindow(Settings(), save_path=tmp_path / "s.json")
    qtbot.addWidget(window)
    window.show_workspace()
    window.picker.set_pair(RecentPair(str(hf_dirs[0]), str(gguf_files[1])))
    wait_checked(qtbot, window.picker)
    assert "incompatible" in window.picker.verdict.text()
    assert "vocabular" in window.picker.blocking_reason()
    assert not window.act_run.isEnabled() and not window.decode.run_button.isEnabled()
    assert window.picker.blocking_reason() in window.decode.run_button.toolTip()

    window.picker.set_pair(RecentPair(str(hf_dirs[0]), str(hf_dirs[1])))
    wait_checked(qtbot, window.picker)
    assert window.picker.verdict.text().startswith("✓ compatible")
    assert window.act_run.isEnabled()
    window.close()


def test_ngram_lookup_needs_no_draft_and_no_check(qtbot, hf_dirs):
    picker = PairPicker()
    qtbot.addWidget(picker)
    picker.set_pair(RecentPair(str(hf_dirs[0]), "", ngram=True))
    assert not picker.checking and picker.blocking_reason() == ""
    spec = picker.model_spec()
    assert picker.drafter_choice().names == ("ngram",)
    assert spec.draft is None and spec.backend == "torch"
    assert not picker.draft.isEnabled()


def test_unavailable_backends_and_devices_are_greyed_with_the_reason(qtbot):
    picker = PairPicker()
    qtbot.addWidget(picker)
    caps = runtimes.probe()
    picker.set_capabilities(caps)
    for key in ("llamacpp", "torch"):
        index = picker.backend.findData(key)
        if not caps.backend_ok(key):
            continue
        picker.backend.setCurrentIndex(index)
        options = caps.devices[key]
        assert picker.device.count() == len(options)
        for i, option in enumerate(options):
            item = picker.device.model().item(i)
            assert item.isEnabled() == option.available
            if not option.available:
                assert option.reason
                assert picker.device.itemData(i, Qt.ItemDataRole.ToolTipRole) == option.reason
    picker.backend.setCurrentIndex(picker.backend.findData("llamacpp"))
    mps = picker.device.findData("mps")
    assert not picker.device.model().item(mps).isEnabled()  # MPS is PyTorch's, never llama.cpp's


def test_llama_cpp_on_cpu_offloads_no_layers(qtbot, gguf_files):
    picker = PairPicker()
    qtbot.addWidget(picker)
    picker.set_pair(RecentPair(str(gguf_files[0]), str(gguf_files[1]), backend="llamacpp",
                               device="cpu", n_gpu_layers=20))  # fmt: skip
    spec = picker.model_spec()
    assert spec.backend == "llamacpp" and spec.n_gpu_layers == 0
    assert not picker.gpu_layers.isEnabled()


def test_without_models_the_first_screen_offers_the_demo_pair(qtbot, tmp_path):
    window = MainWindow(Settings(), save_path=tmp_path / "s.json")
    qtbot.addWidget(window)
    assert window.stack.currentWidget() is window.first_run
    assert "Download the demo pair" in window.first_run.download_button.text()
    window._demo_ready(str(tmp_path / "t.gguf"), str(tmp_path / "d.gguf"))
    assert window.stack.currentWidget() is window.main_split
    assert window.picker.target.path().endswith("t.gguf")
    window.close()


def test_download_progress_reads_size_and_speed():
    from app.models.fetch_progress import FetchProgress

    mib = 1024 * 1024
    text = describe_progress(FetchProgress("t.gguf", 3, 22, "download", 120 * mib, 1000 * mib,
                                           8.5 * mib), 1)  # fmt: skip
    assert "part 3/22" in text and "120.0 of 1,000.0 MiB" in text and "8.5 MiB/s" in text
