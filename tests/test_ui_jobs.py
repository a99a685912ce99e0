"""Run stays available during every window job (pytest-qt, offscreen, a real engine host and
tiny real llama.cpp models): pressing it cancels the sweep, the ranking or the exactness check,
the status bar and the experiments panel say so, the run then runs whole, and the cancelled
job leaves no engine process behind."""

from __future__ import annotations

import psutil
import pytest

pytest.importorskip("pytestqt")

from tests.helpers import RUN_TIMEOUT_MS, choose_pair, set_decoding  # noqa: E402

TOKENS = 24


def engine_hosts() -> list[psutil.Process]:
    """This process's engine hosts (python -m app.host), zombies included."""
    return [child for child in psutil.Process().children()
            if "app.host" in " ".join(child.cmdline())]


def status_lines(window) -> list[str]:
    """Every text the status line is given from now on (a spy: the label still shows it)."""
    said: list[str] = []
    label = window.status_label
    show = label.setText

    def spy(text: str) -> None:
        said.append(text)
        show(text)

    label.setText = spy
    return said


def long_job(panel, job: str):
    """The job's button, set up to run well past the moment Run is pressed."""
    if job == "sweep":
        panel.ks.setText("1,2,3,4,5,6,7,8")
        return panel.sweep_button
    if job == "rank":
        panel.self_layers.setText("1")
        return panel.rank_button
    panel.samples.setValue(5000)
    return panel.exact_button


@pytest.mark.parametrize("job", ["sweep", "rank", "exactness check"])
def test_run_during_a_window_job_cancels_it_says_so_and_runs(window, qtbot, gguf_files, dialogs,
                                                             job):
    choose_pair(window, qtbot, *gguf_files, backend="llamacpp")
    set_decoding(window, tokens=150, k=3, prompt="the cat")
    panel, runs = window.why.experiments, window.run_control
    long_job(panel, job).click()
    # the host is inside the job: it has reported its work
    qtbot.waitUntil(runs.work_status.isVisible, timeout=RUN_TIMEOUT_MS)
    assert runs.running and runs.job == job
    assert window.act_run.isEnabled() and window.decode.run_button.isEnabled()
    window.decode.max_new.setValue(TOKENS)
    said = status_lines(window)
    with qtbot.waitSignal(window.run_done, timeout=RUN_TIMEOUT_MS):
        window.decode.run_button.click()
        assert said[-1] == f"Run: cancelling the {job} — the new run starts once it has stopped"
        qtbot.waitUntil(lambda: not panel.busy_with, timeout=RUN_TIMEOUT_MS)
        # (a job that stops at its next check returns what it finished: shown after this)
        assert panel.status.text().startswith(f"{job}: cancelled to start a run")
    window.flush()
    assert f"The {job} was cancelled · starting the new run…" in said
    assert dialogs == []
    assert window.run is not None and window.run.stats.emitted == TOKENS  # the run ran whole
    assert not runs.running and not runs.job and window.act_run.isEnabled()
    hosts = engine_hosts()
    assert len(hosts) == 1 and hosts[0].status() != psutil.STATUS_ZOMBIE, hosts
    assert hosts[0].pid == window.worker._host.pid  # the one the window holds
