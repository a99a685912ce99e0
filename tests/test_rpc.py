"""The target over llama.cpp RPC (--rpc): a real rpc-server on 127.0.0.1 holds the target's
layers, and greedy output must equal the local run token for token; every way it can go wrong
gives one clear line.

The tests that need rpc-server run when DRAFTLENS_RPC_SERVER names one; packaging/test.sh (and
so CI) builds it and sets it, and then a llama-cpp-python without RPC fails them, loudly.
Elsewhere they skip and say how to run them.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli.main import main
from app.engine.decode_config import DecodeConfig
from app.engine.drafters.draft_model import ModelDrafter
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from app.engine.trace import read_trace
from app.models.loading import ModelSpec, rpc_problem
from app.settings import RecentPair
from backends.base import BackendError
from backends.llamacpp_rpc import (
    RPC_PROTO_MAJOR_VERSION,
    RpcServer,
    greet,
    parse_rpc_servers,
    rpc_supported,
)
from tests.helpers import assert_drafted, lines_written

RPC_SERVER_ENV = "DRAFTLENS_RPC_SERVER"
PROMPT = "the cat sat on the mat. the cat"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def one_line_error(capsys, *argv: str) -> str:
    code = main(list(argv))
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code != 0 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def start_rpc_server() -> tuple[subprocess.Popen[bytes], str]:
    """A real rpc-server on a free local port, answering; returns it and its HOST:PORT."""
    binary = os.environ.get(RPC_SERVER_ENV)
    if not binary:
        pytest.skip(f"{RPC_SERVER_ENV} is not set — build rpc-server with "
                    "`bash packaging/build_llama_tools.sh rpc-server` and point it at "
                    "packaging/.build/llama-tools/bin/rpc-server (packaging/test.sh does both)")
    assert Path(binary).is_file(), f"{RPC_SERVER_ENV}={binary} does not exist"
    assert rpc_supported(), ("this llama-cpp-python was built without RPC — rebuild it with "
                             "`bash packaging/setup.sh` (-DGGML_RPC=ON)")
    port = free_port()
    # the server's CPU backend then sums in the same order for one row and for many, as the
    # local backend does under batch_invariant (see backends/llamacpp.py)
    # and one thread: on a busy 2-core CI machine a spinning thread pool stalls each pass
    env = {**os.environ, "GGML_CPU_TILED_MM": "0"}
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"rpc-server-{port}.log"
    with open(log, "wb") as out:
        server = subprocess.Popen([binary, "-H", "127.0.0.1", "-p", str(port), "-t", "1"],
                                  stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 30
    while True:
        try:
            greet(RpcServer("127.0.0.1", port))
            return server, f"127.0.0.1:{port}"
        except BackendError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail(f"rpc-server did not start: {log.read_text(errors='replace')}")
            time.sleep(0.2)


def end(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    server.wait(timeout=10)


@pytest.fixture(scope="module")
def rpc_server() -> Iterator[str]:
    server, endpoint = start_rpc_server()
    yield endpoint
    end(server)


@pytest.fixture
def doomed_rpc_server() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A server of its own, for a test that kills it mid-run."""
    server, endpoint = start_rpc_server()
    yield server, endpoint
    if server.poll() is None:
        end(server)


def greedy(target, draft, n_predict: int = 40) -> list[int]:
    config = DecodeConfig(n_predict=n_predict, draft_max=4,
                          sampling=SamplingParams(temperature=0.0))
    session = Session(target, ModelDrafter(draft) if draft is not None else None, config)
    steps = list(session.steps(target.tokenize(PROMPT)))
    if draft is not None:
        assert_drafted(steps)
    return session.output_ids


def test_greedy_with_the_target_over_rpc_equals_the_local_run(rpc_server, gguf_files, gguf_pair):
    from backends.llamacpp import LlamaCppModel

    local_target, draft = gguf_pair
    expected = greedy(local_target, None)
    remote = LlamaCppModel(gguf_files[0], n_ctx=512, rpc=rpc_server)
    try:
        assert remote.device == "rpc" and remote.n_gpu_layers > 0
        assert greedy(remote, None) == expected
        assert greedy(remote, draft) == expected  # speculative: draft here, target there
    finally:
        remote.close()


def test_cli_run_with_rpc_prints_the_local_text_and_records_the_servers(rpc_server, gguf_files,
                                                                        capsys, tmp_path):
    target, draft = (str(p) for p in gguf_files)
    args = ["run", "-m", target, "-md", draft, "-p", PROMPT, "-n", "24"]
    assert main(args) == 0
    local = capsys.readouterr().out
    trace = tmp_path / "rpc.jsonl"
    # a child process, so llama.cpp's own log (DRAFTLENS_DEBUG) can say where the layers went
    remote = subprocess.run(
        [sys.executable, "-m", "ui.launcher", *args, "--rpc", rpc_server, "--trace", str(trace)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "DRAFTLENS_DEBUG": "1"})
    assert remote.returncode == 0, remote.stderr[-2000:]
    assert remote.stdout == local
    assert re.search(rf"RPC\d+\[{re.escape(rpc_server)}\] model buffer size", remote.stderr)
    assert re.search(r"offloaded (\d+)/\1 layers", remote.stderr), "not all layers went remote"
    header = json.loads(trace.read_text().splitlines()[0])
    assert header["settings"]["rpc"] == rpc_server and header["device"] == "rpc"


def test_setup_sh_builds_have_rpc():
    """A venv that packaging/setup.sh built with -DGGML_RPC=ON must have it (CI's does)."""
    stamp = Path(sys.prefix) / ".llama-cpp-cmake-args"
    if not stamp.is_file() or "-DGGML_RPC=ON" not in stamp.read_text():
        pytest.skip("this venv's llama-cpp-python was not built by packaging/setup.sh with RPC")
    assert rpc_supported()


# --- faults: one line each, naming the fix ---------------------------------------------


def test_nothing_listening_is_one_clear_line(gguf_files, capsys):
    port = free_port()
    line = one_line_error(capsys, "run", "-m", str(gguf_files[0]), "-md", str(gguf_files[1]),
                          "-p", "x", "-n", "2", "--rpc", f"127.0.0.1:{port}")
    if rpc_supported():
        assert f"nothing listens on 127.0.0.1:{port}" in line
        assert "rpc-server -H 0.0.0.0" in line and "build_llama_tools.sh" in line
    else:
        assert "built without" in line and "packaging/setup.sh" in line


@pytest.mark.parametrize("value, needle", [
    ("localhost", "is not HOST:PORT"),
    ("10.0.0.2:port", "no valid port"),
    ("10.0.0.2:70000", "no valid port"),
    ("10.0.0.2:50052,", "is not HOST:PORT"),
])
def test_a_malformed_server_list_is_refused(gguf_files, capsys, value, needle):
    line = one_line_error(capsys, "run", "-m", str(gguf_files[0]), "--ngram", "-p", "x",
                          "--rpc", value)
    assert needle in line


def test_rpc_needs_the_llama_cpp_backend(hf_dirs, capsys):
    line = one_line_error(capsys, "run", "-m", str(hf_dirs[0]), "--ngram", "-p", "x",
                          "--rpc", "127.0.0.1:50052")
    assert "llama.cpp backend only" in line


def test_server_list_parsing():
    assert parse_rpc_servers("10.0.0.2:50052, gpu-box:50053,10.0.0.2:50052") == [
        RpcServer("10.0.0.2", 50052), RpcServer("gpu-box", 50053)]
    assert rpc_problem("") == "" and rpc_problem("a:1") == ""
    assert "HOST:PORT" in rpc_problem("a")


def serve_once(reply: bytes | None) -> tuple[int, threading.Event]:
    """A listener that answers the first connection with `reply` (None: never answers)."""
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            with conn:
                conn.recv(64)
                if reply is not None:
                    conn.sendall(reply)
                done.wait(5)

    threading.Thread(target=serve, daemon=True).start()
    return int(listener.getsockname()[1]), done


def hello_reply(major: int, minor: int) -> bytes:
    body = bytes([major, minor, 0, 0]) + bytes(24)
    return len(body).to_bytes(8, "little") + body


@pytest.mark.parametrize("reply, needle", [
    (hello_reply(RPC_PROTO_MAJOR_VERSION - 1, 0), "speaks RPC protocol"),
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", "does not answer as an rpc-server"),
    (None, "serves one client at a time"),
])
def test_a_server_that_is_not_our_rpc_server_is_refused(reply, needle):
    port, done = serve_once(reply)
    try:
        with pytest.raises(BackendError, match=needle) as caught:
            greet(RpcServer("127.0.0.1", port), timeout=1.0)
        assert f"127.0.0.1:{port}" in str(caught.value)
    finally:
        done.set()


def test_the_pair_picker_passes_the_servers_and_blocks_a_malformed_list(qtbot, gguf_files):
    from ui.pair_picker import PairPicker

    picker = PairPicker()
    qtbot.addWidget(picker)
    picker.set_pair(RecentPair(str(gguf_files[0]), "", ngram=True, backend="llamacpp",
                               device="cpu", rpc="10.0.0.2:50052"))
    spec = picker.model_spec()
    assert spec.rpc == "10.0.0.2:50052" and spec.n_gpu_layers == "auto"
    assert picker.current_pair().rpc == "10.0.0.2:50052" and picker.gpu_layers.isEnabled()
    picker.rpc.setText("10.0.0.2")
    assert "HOST:PORT" in picker.blocking_reason()
    picker.rpc.clear()
    assert picker.blocking_reason() == "" and picker.model_spec() == ModelSpec(
        str(gguf_files[0]), None, backend="llamacpp", device="auto", n_gpu_layers=0)
    assert picker.drafter_choice().names == ("ngram",)


# --- an rpc-server that dies mid-run (the engine host takes the abort) -----------------------


def test_an_rpc_server_killed_mid_run_ends_the_cli_with_one_line_and_a_finished_trace(
    doomed_rpc_server, gguf_files, tmp_path
):
    server, endpoint = doomed_rpc_server
    target, draft = (str(p) for p in gguf_files)
    trace = tmp_path / "cut.jsonl"
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (
        str(root), os.environ.get("PYTHONPATH", ""))))}
    cli = subprocess.Popen(
        [sys.executable, "-m", "app.cli.main", "run", "-m", target, "-md", draft, "-p", PROMPT,
         "-n", "200", "--draft-max", "3", "--rpc", endpoint, "--trace", str(trace)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while lines_written(trace) < 3:  # header + 2 steps
        assert cli.poll() is None, cli.communicate()
        assert time.monotonic() < deadline, "the run did not start writing steps"
        time.sleep(0.02)
    server.kill()
    _, err = cli.communicate(timeout=120)
    assert cli.returncode == 1 and "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    assert f"rpc-server {endpoint}" in lines[0] and "ended with SIGABRT" in lines[0]
    saved = read_trace(trace)
    assert saved.summary is not None and len(saved.steps) >= 2
    assert saved.summary["steps"] == len(saved.steps) and saved.summary["interrupted"] is True
    assert saved.summary["error"].startswith(
        f"cut off after step {len(saved.steps)}: the engine process ended with SIGABRT")


def test_an_rpc_server_killed_mid_run_leaves_the_window_up_with_one_dialog(
    doomed_rpc_server, gguf_files, qtbot, tmp_path, monkeypatch
):
    from PySide6.QtWidgets import QMessageBox

    from app.settings import Settings
    from tests.helpers import RUN_TIMEOUT_MS, set_decoding
    from ui.main_window import MainWindow

    dialogs: list[str] = []
    monkeypatch.setattr(QMessageBox, "critical",
                        lambda parent, title, text, *a, **k: dialogs.append(text))
    window = MainWindow(Settings(), save_path=tmp_path / "settings.json")
    qtbot.addWidget(window)
    window.trace_folder = tmp_path / "traces"
    window.show_workspace()
    server, endpoint = doomed_rpc_server
    window.picker.set_pair(RecentPair(str(gguf_files[0]), str(gguf_files[1]),
                                      backend="llamacpp", device="cpu", rpc=endpoint))
    qtbot.waitUntil(lambda: not window.picker.checking, timeout=30_000)
    set_decoding(window, tokens=200, k=3, prompt=PROMPT)
    with qtbot.waitSignal(window.run_done, timeout=RUN_TIMEOUT_MS):
        window.start_run()
        qtbot.waitUntil(lambda: bool(window.run and len(window.run.steps) >= 2),
                        timeout=RUN_TIMEOUT_MS)
        server.kill()
    window.flush()
    assert len(dialogs) == 1, dialogs
    assert f"rpc-server {endpoint}" in dialogs[0] and "SIGABRT" in dialogs[0]
    assert not window.running and window.act_run.isEnabled()
    path = window.run_control.trace_path
    assert path is not None
    saved = read_trace(path)
    assert saved.summary is not None and saved.summary["error"].startswith(
        f"cut off after step {len(saved.steps)}: the engine process ended with SIGABRT")
