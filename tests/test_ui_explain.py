"""The explanation phase after a compare run, in the window (pytest-qt, offscreen, a real
engine host and tiny real llama.cpp models): where the greedy texts differ, the host measures
the target's kernel noise before it explains the difference; the status bar shows that work
with how far it has come, about how long it has left, and Cancel; Cancel ends it, the run and
its comparison stay, and the next run works. (The difference is planted in the host by the
`plant` fixture: its verify passes swap each row's two best logits, and are slowed so the
measurement lasts; tests/host_faults/sitecustomize.py.)"""

from __future__ import annotations

import re
import time

import pytest

pytest.importorskip("pytestqt")

from tests.helpers import RUN_TIMEOUT_MS, choose_pair, run, set_decoding  # noqa: E402

TOKENS = 16
CANCEL_WITHIN_S = 2.0  # the measurement asks for a cancel between passes of ~0.05 s


def test_explaining_a_difference_shows_its_work_and_cancel_ends_it(
        window, qtbot, gguf_files, dialogs, plant, monkeypatch):
    choose_pair(window, qtbot, *gguf_files, backend="llamacpp")
    set_decoding(window, tokens=TOKENS, k=3, prompt="the cat", compare=True)
    monkeypatch.setenv("DRAFTLENS_TEST_FAULT_SECONDS", "0.05")
    plant("differ")
    runs, status = window.run_control, window.run_control.work_status
    window.start_run()
    qtbot.waitUntil(lambda: window.compare_result is not None, timeout=RUN_TIMEOUT_MS)
    result = window.compare_result
    assert not result.identical and result.explaining
    assert "texts differ — working out where and why (see the status bar)" in (
        window.compare_label.text())
    # the kernel noise is being measured: a fraction, and once its pace is known, the time left
    shown = re.compile(r" · (\d+)% · about \d+ (s|min) left$")
    qtbot.waitUntil(lambda: shown.search(status.label.text()) is not None,
                    timeout=RUN_TIMEOUT_MS)
    assert status.isVisible() and status.cancel_button.isEnabled()
    assert status.bar.maximum() == 100 and 0 < status.bar.value() < 100
    assert runs.running and runs.finishing and window.act_run.isEnabled()
    run_before = window.run
    with qtbot.waitSignal(window.run_done, timeout=10_000):
        pressed = time.monotonic()
        status.cancel_button.click()
        assert status.label.text().startswith("cancelling: ")
    took = time.monotonic() - pressed
    window.flush()
    assert took < CANCEL_WITHIN_S, f"Cancel took {took:.2f} s"
    assert dialogs == []
    assert result.explanation_cancelled and not result.explaining
    assert "explaining why was cancelled" in window.compare_label.text()
    assert window.run is run_before and window.run.stats.emitted == TOKENS  # the run stays
    assert not status.isVisible() and not runs.running and window.act_run.isEnabled()
    # the window stays usable: the next run, on the same host, runs whole
    host = window.worker._host
    window.decode.compare.setChecked(False)
    run(window, qtbot)
    assert dialogs == [] and window.run is not run_before
    assert window.run.stats.emitted == TOKENS and window.worker._host is host
