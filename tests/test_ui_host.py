"""The window survives its engine: the host aborted or killed in the middle of a pass, and a
pass that will not end when Stop is pressed (faults planted in the host by the `plant` fixture
(tests/conftest.py); real processes, real signals, tiny real llama.cpp models)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from app.engine.trace import read_trace  # noqa: E402
from tests.helpers import RUN_TIMEOUT_MS, choose_pair, run, set_decoding  # noqa: E402

STOP_WITHIN_S = 1.0


def last_trace(window) -> Path:
    assert window.run_control.trace_path is not None
    return window.run_control.trace_path


@pytest.mark.parametrize("fault, signal_name", [("abort", "SIGABRT"), ("kill", "SIGKILL")])
def test_the_window_survives_its_engine_dying_mid_pass_and_the_next_run_works(
    window, qtbot, gguf_files, dialogs, plant, monkeypatch, fault, signal_name
):
    choose_pair(window, qtbot, *gguf_files, backend="llamacpp")
    set_decoding(window, tokens=40, k=3, prompt="the cat")
    plant(fault)
    run(window, qtbot)
    assert len(dialogs) == 1, dialogs
    assert f"the engine process ended with {signal_name}" in dialogs[0]
    if fault == "abort":
        assert "GGML_ASSERT(planted) failed" in dialogs[0]
    assert not window.running and window.act_run.isEnabled()
    assert len(window.run.steps) == 2
    saved = read_trace(last_trace(window))
    assert len(saved.steps) == 2 and saved.summary is not None
    assert saved.summary["error"].startswith(
        f"cut off after step 2: the engine process ended with {signal_name}")
    assert window.run.summary == saved.summary

    monkeypatch.delenv("DRAFTLENS_TEST_FAULT")
    run(window, qtbot)
    assert len(dialogs) == 1
    assert window.run.stats.emitted == 40
    assert read_trace(last_trace(window)).summary["interrupted"] is False


def test_stop_during_a_pass_that_does_not_end_gives_control_back_within_a_second(
    window, qtbot, gguf_files, dialogs, plant, monkeypatch
):
    choose_pair(window, qtbot, *gguf_files, backend="llamacpp")
    set_decoding(window, tokens=40, k=3, prompt="the cat")
    plant("sleep")
    window.start_run()
    qtbot.waitUntil(lambda: bool(window.run and len(window.run.steps) == 2),
                    timeout=RUN_TIMEOUT_MS)
    with qtbot.waitSignal(window.run_done, timeout=10_000):
        pressed = time.monotonic()
        window.decode.stop_button.click()
    took = time.monotonic() - pressed
    print(f"Stop during a 60 s pass gave control back in {took:.3f} s")
    assert took < STOP_WITHIN_S
    assert dialogs == [], "a stop the user asked for is not an error"
    assert not window.running and len(window.run.steps) == 2
    lines = [json.loads(line) for line in last_trace(window).read_text().splitlines()]
    assert lines[-1]["type"] == "summary" and lines[-1]["interrupted"] is True

    monkeypatch.delenv("DRAFTLENS_TEST_FAULT")
    run(window, qtbot)
    assert dialogs == [] and window.run.stats.emitted == 40


def test_an_analysis_whose_engine_dies_is_one_dialog_and_the_window_stays_usable(
    window, qtbot, gguf_files, dialogs, plant, monkeypatch
):
    choose_pair(window, qtbot, *gguf_files, backend="llamacpp")
    set_decoding(window, tokens=12, k=3, prompt="the cat")
    plant("abort", after=0)  # the first pass that verifies a draft aborts
    panel = window.why.experiments
    panel.ks.setText("1,2")
    with qtbot.waitSignal(window.worker.job_done, timeout=RUN_TIMEOUT_MS) as done:
        panel.sweep_button.click()
    qtbot.waitUntil(lambda: not panel.busy_with, timeout=5000)  # job_done reached the panel
    assert done.args[1] is None
    assert len(dialogs) == 1 and "the engine process ended with SIGABRT" in dialogs[0]

    monkeypatch.delenv("DRAFTLENS_TEST_FAULT")
    with qtbot.waitSignal(window.worker.job_done, timeout=RUN_TIMEOUT_MS):
        panel.sweep_button.click()
    qtbot.waitUntil(lambda: not panel.busy_with, timeout=5000)
    assert len(dialogs) == 1 and [r.k for r in panel.sweep_rows] == [1, 2]


def test_a_load_over_a_memory_limit_is_one_dialog_and_the_next_run_works(
    window, qtbot, gguf_files, dialogs, plant, monkeypatch
):
    choose_pair(window, qtbot, *gguf_files, backend="llamacpp")
    set_decoding(window, tokens=12, k=3, prompt="the cat")
    plant("memory")  # the host's address space capped just before llama.cpp loads the target
    run(window, qtbot)
    assert len(dialogs) == 1 and "the engine process ended with" in dialogs[0], dialogs
    assert window.run is None and not window.running and window.act_run.isEnabled()

    monkeypatch.delenv("DRAFTLENS_TEST_FAULT")
    run(window, qtbot)
    assert len(dialogs) == 1 and window.run.stats.emitted == 12
