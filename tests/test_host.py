"""The engine in its own process (app.host): real faults planted in the host's llama.cpp
backend (tests/host_faults/sitecustomize.py, on the host's PYTHONPATH only here) — an abort,
a SIGKILL, a pass that sleeps — and what the CLI and the window make of them: one message
naming the cause, a trace finalised with how it ended, and a next run that works."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app.cli.main import main
from app.engine.trace import read_trace
from app.host import protocol
from app.host.client import EngineHost
from app.models.loading import ModelSpec
from tests.helpers import lines_written


def summary_of(path: Path) -> dict:
    return json.loads(path.read_text().splitlines()[-1])


def events_until_done(host: EngineHost) -> list[dict]:
    events = []
    while not events or events[-1]["event"] not in (protocol.DONE, "exited"):
        event = host.next_event(60)
        assert event is not None, "the host went quiet"
        events.append(event)
    return events


# --- the host itself ----------------------------------------------------------------------


def test_the_host_reports_a_run_in_the_trace_format_and_keeps_the_pair(gguf_files):
    from app.engine.decode_config import DecodeConfig, DrafterChoice
    from app.engine.trace import step_from_dict

    spec = ModelSpec(str(gguf_files[0]), str(gguf_files[1]), n_ctx=512)
    host = EngineHost()
    host.start()
    try:
        for run in range(2):
            host.send(protocol.RUN, spec=protocol.spec_to_dict(spec), prompt="the cat",
                      config=protocol.config_to_dict(DecodeConfig(
                          n_predict=12, draft_max=3, drafter=DrafterChoice(("draft",)))))
            events = events_until_done(host)
            names = [e["event"] for e in events]
            assert names.count(protocol.LOADED) == (1 if run == 0 else 0), names
            steps = [step_from_dict(e["line"]) for e in events if e["event"] == protocol.STEP_DONE]
            assert sum(len(s.emitted) for s in steps) == 12
            assert any(s.k > 0 for s in steps), "the draft drafted"
            finished = next(e for e in events if e["event"] == protocol.FINISHED)
            assert finished["summary"]["emitted"] == 12
            assert finished["summary"]["interrupted"] is False
            assert names[-1] == protocol.DONE and protocol.ERROR not in names
    finally:
        host.close()
    assert not host.alive


# --- the CLI --------------------------------------------------------------------------------


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(code: int, err: str) -> str:
    assert code == 1, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("fault, signal_name", [("abort", "SIGABRT"), ("kill", "SIGKILL")])
def test_the_cli_survives_its_engine_dying_mid_pass(gguf_files, tmp_path, capsys, plant,
                                                   fault, signal_name):
    plant(fault)
    trace = tmp_path / "run.jsonl"
    code, out, err = run_cli(capsys, "run", "-m", str(gguf_files[0]), "-md", str(gguf_files[1]),
                             "-p", "the cat", "-n", "40", "--draft-max", "3",
                             "--trace", str(trace))
    line = one_error_line(code, err)
    assert f"the engine process ended with {signal_name}" in line
    if fault == "abort":
        assert "GGML_ASSERT(planted) failed" in line, "the engine's last words are named"
    saved = read_trace(trace)
    assert len(saved.steps) == 2 and saved.summary is not None
    assert saved.summary["interrupted"] is True
    assert saved.summary["error"].startswith(
        f"cut off after step 2: the engine process ended with {signal_name}")
    assert saved.summary["steps"] == 2
    assert out.strip(), "the text of the steps before the fault was printed"


def test_the_cli_runs_through_the_host_after_an_engine_death(gguf_files, capsys, plant,
                                                             monkeypatch):
    plant("abort")
    args = ["run", "-m", str(gguf_files[0]), "-md", str(gguf_files[1]), "-p", "the cat",
            "-n", "30"]
    code, _, _ = run_cli(capsys, *args)
    assert code == 1
    monkeypatch.delenv("DRAFTLENS_TEST_FAULT")
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    assert "30 tokens" in err


def test_ctrl_c_during_a_pass_that_does_not_end_stops_the_cli_within_a_second(
    gguf_files, tmp_path, plant
):
    import signal
    import subprocess
    import sys
    import time

    plant("sleep")
    trace = tmp_path / "run.jsonl"
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((str(root), os.environ["PYTHONPATH"])))
    proc = subprocess.Popen([sys.executable, "-m", "app.cli.main", "run", "-m", str(gguf_files[0]),
                             "-md", str(gguf_files[1]), "-p", "the cat", "-n", "40",
                             "--draft-max", "3", "--trace", str(trace)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while lines_written(trace) < 3:  # header + 2 steps
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run did not start writing steps"
        time.sleep(0.05)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    took = time.monotonic() - sent
    print(f"Ctrl+C during a 60 s pass: the CLI exited {took:.3f} s later")
    assert took < 1.5  # the 0.5 s grace, then the kill, then the summary and the exit
    assert proc.returncode == 130 and "Traceback" not in err, err
    saved = read_trace(trace)
    assert len(saved.steps) == 2 and saved.summary is not None
    assert saved.summary["interrupted"] is True


def test_the_cli_names_an_engine_that_died_loading_over_a_memory_limit(gguf_files, capsys,
                                                                       plant):
    plant("memory")
    code, _, err = run_cli(capsys, "run", "-m", str(gguf_files[0]), "-md", str(gguf_files[1]),
                           "-p", "the cat", "-n", "8")
    line = one_error_line(code, err)
    print(line)
    assert "the engine process ended with" in line
