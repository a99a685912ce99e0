"""bench, sweep, rank and check-exact in a supervised child (app.cli.supervisor): their
output passes through unchanged, and a real fault planted in the child's llama.cpp verify
pass (tests/host_faults/sitecustomize.py) ends the command with one line naming the cause
and exit code 1, with the engine's last words."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app.cli.main import main
from app.cli.supervisor import IN_PROCESS

FAULTS = Path(__file__).resolve().parent / "host_faults"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def supervised(monkeypatch):
    """The commands run as a user runs them: in a child of the test's process."""
    monkeypatch.delenv(IN_PROCESS, raising=False)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    monkeypatch.setenv("PYTHONPATH", path)


@pytest.fixture
def plant(monkeypatch, supervised):
    def plant_fault(fault: str, passes: int = 3) -> None:
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join((str(FAULTS), os.environ["PYTHONPATH"])))
        monkeypatch.setenv("DRAFTLENS_TEST_FAULT", fault)
        monkeypatch.setenv("DRAFTLENS_TEST_FAULT_PASSES", str(passes))

    return plant_fault


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_supervised_bench_passes_its_report_and_exit_code_through(gguf_files, capsys,
                                                                   supervised):
    target, draft = gguf_files
    code, out, err = run_cli(capsys, "bench", "-m", target, "-md", draft, "-n", 12,
                             "-p", "the cat", "--json", "--exact-kernels")
    assert code == 0, err
    report = json.loads(out)
    assert report["identical"] is True and report["spec_tok_s"] > 0
    code, _, err = run_cli(capsys, "sweep", "-m", target, "-md", draft, "--k", "two")
    assert code == 1 and "like 1,2,4,8" in err, "an error keeps its exit code and message"


COMMANDS = {
    "bench": ["bench", "-n", 24, "-p", "the cat", "--draft-max", 3, "--json"],
    "sweep": ["sweep", "-n", 24, "-p", "the cat", "--k", "2,3"],
    "check-exact": ["check-exact", "--samples", 40, "--greedy-only"],
}


@pytest.mark.parametrize("command, fault, signal_name", [
    ("bench", "abort", "SIGABRT"), ("sweep", "kill", "SIGKILL"),
    ("check-exact", "abort", "SIGABRT")])
def test_a_command_whose_engine_dies_mid_pass_ends_with_one_line(gguf_files, capsys, plant,
                                                                 command, fault, signal_name):
    plant(fault)
    target, draft = gguf_files
    argv = COMMANDS[command]
    code, out, err = run_cli(capsys, argv[0], "-m", target, "-md", draft, *argv[1:])
    assert code == 1, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    assert f"the engine process ended with {signal_name}" in lines[0]
    if fault == "abort":
        assert "GGML_ASSERT(planted) failed" in lines[0], "the engine's last words are named"


def test_ctrl_c_reaches_the_supervised_child_and_its_exit_code_comes_back(
    gguf_files, plant, tmp_path, monkeypatch
):
    import signal
    import subprocess
    import sys
    import time

    plant("sleep", passes=2)
    mark = tmp_path / "sleeping"
    monkeypatch.setenv("DRAFTLENS_TEST_FAULT_MARK", str(mark))
    target, draft = gguf_files
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli.main", "bench", "-m", str(target), "-md", str(draft),
         "-n", "24", "-p", "the cat", "--draft-max", "3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    deadline = time.monotonic() + 120
    while not mark.exists():  # the child is in the planted 60 s pass
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the child never reached its second verify pass"
        time.sleep(0.05)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 5, "Ctrl+C did not stop the child's pass"
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err, err
