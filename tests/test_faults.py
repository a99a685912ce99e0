"""Faults in the middle of a run: each ends in a one-line error or a clean stop, never in a
traceback, and the trace written so far stays readable with a final summary where one can
still be written. Real processes, real signals, real file-size limits, real models."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.cli.main import main
from app.engine.trace import read_trace
from tests.helpers import lines_written
from tests.tiny_gguf import write_tiny_gguf

ROOT = Path(__file__).resolve().parent.parent


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(code: int, err: str) -> str:
    assert code != 0
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


def trace_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def cli_process(args: list[str], limit_file_bytes: int | None = None) -> subprocess.Popen:
    """`draftlens ...` in its own process, as a user starts it."""

    def limits() -> None:
        if limit_file_bytes is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit: EFBIG
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file_bytes, limit_file_bytes))

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "app.cli.main", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=limits)


@pytest.fixture(scope="module")
def long_pair(tmp_path_factory):
    """A tiny GGUF pair with room for thousands of tokens, so a run lasts long enough to be
    interrupted."""
    root = tmp_path_factory.mktemp("long")
    target = write_tiny_gguf(root / "target.gguf", seed=0, n_ctx=8192)
    draft = write_tiny_gguf(root / "draft.gguf", seed=1, noise_from=target, noise=0.15,
                            n_ctx=8192)
    return target, draft


# --- the trace cannot be written ---------------------------------------------------------


def test_a_trace_on_a_full_disk_is_a_one_line_error(gguf_files, capsys):
    target, draft = gguf_files
    code, _, err = run_cli(capsys, "run", "-m", str(target), "-md", str(draft), "-p", "the cat",
                           "-n", "8", "--trace", "/dev/full")
    line = one_error_line(code, err)
    assert "/dev/full" in line and "No space left on device" in line


def test_a_disk_filling_up_mid_run_stops_it_and_keeps_the_steps_written(long_pair, tmp_path):
    target, draft = long_pair
    trace = tmp_path / "run.jsonl"
    proc = cli_process(["run", "-m", str(target), "-md", str(draft), "-p", "the cat",
                        "-n", "2000", "-c", "4096", "--trace", str(trace)],
                       limit_file_bytes=60_000)
    _, err = proc.communicate(timeout=300)
    line = one_error_line(proc.returncode, err)
    assert "cannot write the trace file" in line and "File too large" in line
    saved = read_trace(trace)
    assert saved.header is not None and len(saved.steps) > 3
    assert any("cut off" in note for note in saved.notes), saved.notes


def test_a_trace_whose_folder_vanishes_mid_run_stops_the_run(long_pair, tmp_path, capsys,
                                                             monkeypatch):
    from app.engine import trace as trace_module

    target, draft = long_pair
    folder = tmp_path / "traces"
    folder.mkdir()
    written = {"steps": 0}
    real_step = trace_module.TraceWriter.step

    def step_then_remove_the_folder(self, step):  # the user deletes the folder mid-run
        written["steps"] += 1
        real_step(self, step)
        if written["steps"] == 3:
            shutil.rmtree(folder)

    monkeypatch.setattr(trace_module.TraceWriter, "step", step_then_remove_the_folder)
    code, _, err = run_cli(capsys, "run", "-m", str(target), "-md", str(draft), "-p", "the",
                           "-n", "200", "--trace", str(folder / "run.jsonl"))
    line = one_error_line(code, err)
    assert "was deleted (or its folder removed)" in line
    assert written["steps"] == 4, "the run stops at the first write after the folder vanished"


# --- interrupted runs ----------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl+C"])
def test_an_interrupted_run_ends_its_trace_with_an_interrupted_summary(long_pair, tmp_path,
                                                                      signum):
    target, draft = long_pair
    trace = tmp_path / "run.jsonl"
    proc = cli_process(["run", "-m", str(target), "-md", str(draft), "--draft-max", "1",
                        "-p", "the cat", "-n", "6000", "-c", "8192", "--trace", str(trace)])
    deadline = time.monotonic() + 120
    while lines_written(trace) < 10:
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "the run did not start writing steps"
        time.sleep(0.05)
    sent = time.monotonic()
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 10
    assert proc.returncode == 130 and "Traceback" not in err, err
    lines = trace_lines(trace)
    assert lines[-1]["type"] == "summary" and lines[-1]["interrupted"] is True
    steps = [line for line in lines if line["type"] == "step"]
    assert sum(len(s["emitted"]) for s in steps) < 6000
    assert read_trace(trace).notes == ["the run was interrupted before it ended"]


def test_a_finished_run_says_it_was_not_interrupted(gguf_files, tmp_path, capsys):
    trace = tmp_path / "run.jsonl"
    code, _, _ = run_cli(capsys, "run", "-m", str(gguf_files[0]), "-md", str(gguf_files[1]),
                         "-p", "the cat", "-n", "6", "--trace", str(trace))
    assert code == 0
    assert trace_lines(trace)[-1]["interrupted"] is False
    assert read_trace(trace).notes == []


# --- reading damaged traces ----------------------------------------------------------------


@pytest.fixture
def finished_trace(gguf_files, tmp_path, capsys) -> Path:
    trace = tmp_path / "run.jsonl"
    code, _, _ = run_cli(capsys, "run", "-m", str(gguf_files[0]), "-md", str(gguf_files[1]),
                         "-p", "the cat", "-n", "16", "--trace", str(trace))
    assert code == 0
    return trace


def cut_mid_line(trace: Path) -> int:
    """Drop the summary and cut the last step line in half, as a kill mid-write leaves it;
    returns the number of complete steps left."""
    lines = trace.read_bytes().splitlines(keepends=True)
    steps = lines[1:-1]
    trace.write_bytes(b"".join(lines[:-2]) + steps[-1][: len(steps[-1]) // 2])
    return len(steps) - 1


def test_draftlens_trace_opens_a_cut_trace_with_its_complete_steps_and_a_note(
    finished_trace, capsys
):
    complete = cut_mid_line(finished_trace)
    assert len(read_trace(finished_trace).steps) == complete
    code, out, err = run_cli(capsys, "trace", str(finished_trace))
    assert code == 0 and "Traceback" not in err
    assert f"steps {complete}," in out
    assert "note: the last line was cut off mid-write" in out
    assert "note: the trace has no summary line" in out


def test_draftlens_trace_refuses_a_garbage_file_in_one_line(tmp_path, capsys):
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(bytes(range(256)) * 4 + b"\n{not json}\nmore\n")
    code, _, err = run_cli(capsys, "trace", str(garbage))
    assert "is not JSON" in one_error_line(code, err)


# --- a model that returns garbage ------------------------------------------------------------


@pytest.fixture(scope="module")
def nan_model(tmp_path_factory):
    """A real transformers model whose final norm holds NaN: every logit it returns is NaN."""
    from safetensors.torch import load_file, save_file

    from tests.tiny_hf import write_tiny_hf

    folder = write_tiny_hf(tmp_path_factory.mktemp("nan") / "model", seed=3)
    weights_file = folder / "model.safetensors"
    weights = load_file(weights_file)
    weights["model.norm.weight"][:] = float("nan")
    save_file(weights, weights_file, metadata={"format": "pt"})
    return folder


def test_nan_logits_stop_the_run_with_an_error_naming_the_model(nan_model, tmp_path, capsys):
    trace = tmp_path / "run.jsonl"
    code, out, err = run_cli(capsys, "run", "-m", str(nan_model), "--ngram", "--backend",
                             "torch", "--device", "cpu", "-p", "a b", "-n", "8", "--trace",
                             str(trace))
    line = one_error_line(code, err)
    assert "model returned NaN or infinite logits" in line
    lines = trace_lines(trace)
    assert lines[0]["type"] == "header" and lines[-1]["type"] == "summary"
    assert lines[-1]["interrupted"] is True and "NaN" in lines[-1]["error"]
    assert not [line for line in lines if line["type"] == "step"], "no garbage step is kept"


def test_the_finiteness_check_passes_masked_tokens_and_catches_nan_and_inf():
    import numpy as np

    from app.engine.sampling import finite_logits
    from app.errors import ModelOutputError

    row = np.array([[0.5, -np.inf, 2.0]], dtype=np.float32)
    assert finite_logits(row, "m") is row
    for bad in (np.nan, np.inf):
        broken = row.copy()
        broken[0, 0] = bad
        with pytest.raises(ModelOutputError, match="m returned NaN or infinite logits"):
            finite_logits(broken, "m")


# --- a model file that disappears ------------------------------------------------------------


def test_a_model_deleted_after_it_was_chosen_is_a_one_line_error(gguf_files, tmp_path,
                                                                 capsys):
    chosen = tmp_path / "chosen.gguf"
    shutil.copy(gguf_files[0], chosen)
    code, _, err = run_cli(capsys, "models", "check", str(chosen), str(gguf_files[1]))
    assert code == 0
    chosen.unlink()
    code, _, err = run_cli(capsys, "run", "-m", str(chosen), "--ngram", "-p", "x")
    assert "model not found" in one_error_line(code, err)


# --- the window's platform plugin --------------------------------------------------------


def test_a_missing_platform_library_is_named_with_the_package_to_install(tmp_path):
    """A real shared object that needs a library which is then removed, read by the real ldd:
    the message names the library and the Debian package to install."""
    from ui.qt_platform import debian_package, platform_problem

    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None or shutil.which("ldd") is None:
        pytest.skip("needs a C compiler and ldd")
    (tmp_path / "dep.c").write_text("int gone_dep(void) { return 1; }\n")
    (tmp_path / "plugin.c").write_text("int gone_dep(void);\nint plugin(void) "
                                       "{ return gone_dep(); }\n")
    subprocess.run([gcc, "-shared", "-fPIC", "-Wl,-soname,libdraftlens-gone.so.7", "-o",
                    str(tmp_path / "libdraftlens-gone.so.7"), str(tmp_path / "dep.c")],
                   check=True)
    plugin = tmp_path / "libqxcb.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(plugin), str(tmp_path / "plugin.c"),
                    str(tmp_path / "libdraftlens-gone.so.7"), "-Wl,-rpath,$ORIGIN"],
                   check=True)
    assert platform_problem(plugin) is None, "with its library present the plugin can load"
    (tmp_path / "libdraftlens-gone.so.7").unlink()
    problem = platform_problem(plugin)
    assert problem is not None and "libdraftlens-gone.so.7" in problem
    assert "sudo apt-get install libdraftlens-gone7" in problem
    assert debian_package("libxcb-icccm.so.4") == "libxcb-icccm4"
    assert debian_package("libxkbcommon-x11.so.0") == "libxkbcommon-x11-0"
    assert debian_package("libGL.so.1") == "libgl1"


# --- out of memory while loading -------------------------------------------------------------

_LOAD_UNDER_A_LIMIT = """
import resource, sys
from pathlib import Path
from app.errors import DraftLensError
from app.models.loading import ModelSpec, load_model
# the app has its runtimes imported before it loads a model: a small model of the same kind
# first, so transformers' lazily imported modules are in memory before the limit is set
load_model(sys.argv[2], ModelSpec(sys.argv[2], backend="torch", device="cpu")).close()
used = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
limit = used + 60 * 2**20  # 60 MiB more than now: less than the model needs
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
try:
    load_model(sys.argv[1], ModelSpec(sys.argv[1], backend="torch", device="cpu"))
    print("loaded")
except DraftLensError as exc:
    print(f"error: {exc}")
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs Linux /proc")
def test_out_of_memory_while_loading_names_the_model_size_and_the_memory_left(tmp_path):
    from tests.tiny_hf import write_tiny_hf

    folder = write_tiny_hf(tmp_path / "big-model", hidden=768, n_layer=4)  # about 110 MB
    small = write_tiny_hf(tmp_path / "small-model")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", _LOAD_UNDER_A_LIMIT, str(folder), str(small)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in done.stderr, done.stderr
    line = done.stdout.strip().splitlines()[-1]
    expected = (r"error: out of memory loading big-model: the model is 0\.\d\d GB on disk and "
                r"0\.0[5-7] GB of memory is available — close other .*")
    assert re.fullmatch(expected, line), line
