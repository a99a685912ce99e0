"""Cancelling check-exact ends every process it started: its exact-mode child (a second
`draftlens check-exact --greedy-only` run) must not go on decoding after the window's Stop,
after the engine host is killed, or after a second Ctrl+C. Real processes, run as a user runs
them (not in the test's process), found in /proc by their command lines; the child's first
pass is made to take a minute without a word (tests/planted_bugs.py, `silent-child`), as the
demo pair's checks do, so that a child left behind is seen running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from app.cli.supervisor import _wait_forwarding_signals
from app.engine.decode_config import DrafterChoice, choice_to_dict
from app.host import protocol, wire
from app.host.client import EngineHost
from app.models.loading import ModelSpec
from tests.planted_bugs import plant_in_children

pytestmark = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(),
                                reason="finds processes in /proc")

ROOT = Path(__file__).resolve().parent.parent
CHILD_FLAG = "--greedy-only"  # only the exact-mode child runs check-exact with it
# the fast-mode suite before the child: seconds on an idle machine, minutes at a load of 15
APPEARS_S = 600.0
GONE_S = 5.0  # a killed child is gone in milliseconds; a child left behind sleeps a minute


@pytest.fixture
def as_a_user_runs_it(monkeypatch, tmp_path):
    monkeypatch.delenv("DRAFTLENS_IN_PROCESS", raising=False)  # commands supervised
    plant_in_children(tmp_path / "planted", monkeypatch, bug="silent-child")


def running(*words: str) -> list[int]:
    """Processes (not zombies) whose command line holds every word."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:  # ended while we looked
            continue
        args = [a.decode(errors="replace") for a in argv]
        if state != "Z" and all(any(w == a or w in a for a in args) for w in words):
            found.append(int(entry.name))
    return found


def wait_for(condition, timeout_s: float, what: str):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"{what} within {timeout_s:g} s")


def no_error_from(host: EngineHost) -> bool:
    """False while the host works; an error or the job's end before the child is a failure."""
    event = host.next_event(0.0)
    if event is not None and event["event"] in (protocol.ERROR, protocol.DONE):
        raise AssertionError(f"the job ended before its exact-mode child started: {event}")
    return False


def exact_child(target: str) -> list[int]:
    return running(CHILD_FLAG, target)


def assert_child_ends(target: str) -> None:
    end = time.monotonic() + GONE_S
    while exact_child(target) and time.monotonic() < end:
        time.sleep(0.05)
    left = exact_child(target)
    for pid in left:  # do not leave it running for the tests after this one
        os.kill(pid, signal.SIGKILL)
    assert not left, f"the exact-mode child {left} was still running {GONE_S:g} s later"


def test_stop_in_the_window_during_check_exact_ends_its_exact_child(
        as_a_user_runs_it, window, qtbot, gguf_files, dialogs):
    from tests.helpers import choose_pair, set_decoding

    target, draft = map(str, gguf_files)
    choose_pair(window, qtbot, target, draft, backend="llamacpp")
    set_decoding(window, tokens=12, k=3)
    panel = window.why.experiments
    panel.samples.setValue(20)
    with qtbot.waitSignal(window.worker.job_done, timeout=int(APPEARS_S * 1000) + 30_000) as done:
        panel.exact_button.click()
        qtbot.waitUntil(lambda: bool(exact_child(target)), timeout=int(APPEARS_S * 1000))
        window.decode.stop_button.click()
    assert done.args[1] is None  # stopped: no report
    assert_child_ends(target)
    assert dialogs == [], "a stop the user asked for is not an error"


def test_killing_the_engine_host_ends_the_exact_child_it_started(as_a_user_runs_it, gguf_files):
    target, draft = map(str, gguf_files)
    host = EngineHost()
    host.start()
    try:
        choice = DrafterChoice(("draft",))
        host.send(protocol.JOB, spec=protocol.spec_to_dict(ModelSpec(target, draft, n_ctx=512)),
                  drafter=choice_to_dict(choice), job="exactness",
                  settings=wire.encode({"samples": 20, "choice": choice}))
        wait_for(lambda: exact_child(target) or no_error_from(host), APPEARS_S,
                 "no exact-mode child started")
        host.kill()  # what the window does to a host that does not answer Stop
        assert_child_ends(target)
    finally:
        host.kill()


def test_ctrl_c_on_check_exact_ends_its_exact_child(as_a_user_runs_it, gguf_files, tmp_path):
    target, draft = map(str, gguf_files)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    command = [sys.executable, "-m", "app.cli.main", "check-exact", "-m", target, "-md", draft,
               "--samples", "20", "-n", "8", "-p", "the cat sat on the mat. the cat"]
    with subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as supervisor:
        try:
            wait_for(lambda: exact_child(target), APPEARS_S, "no exact-mode child started")
            supervisor.send_signal(signal.SIGINT)
            _, err = supervisor.communicate(timeout=30)
            assert supervisor.returncode == 130 and "interrupted" in err
            assert_child_ends(target)
        finally:
            if supervisor.poll() is None:
                supervisor.kill()


def test_a_second_ctrl_c_ends_an_unanswering_engine_with_what_it_started(tmp_path):
    """The engine does not answer the first Ctrl+C (a pass in native code that does not
    end); the second kills it, and the processes it started with it."""
    child = str(tmp_path / "started-by-the-engine")  # in the child's command line only
    engine = subprocess.Popen(
        [sys.executable, "-c",
         "import signal, subprocess, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
         "subprocess.run([sys.executable, '-c', 'import time; time.sleep(60)', "
         "sys.argv[1] + '-by-the-engine'])", str(tmp_path / "started")],
        start_new_session=True)
    try:
        wait_for(lambda: running(child), 30, "the engine started nothing")
        for delay in (0.1, 0.4):  # both while the supervisor waits
            threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT)).start()
        assert _wait_forwarding_signals(engine) == -signal.SIGKILL
        time.sleep(0.1)
        assert running(child) == []
    finally:
        engine.kill()
        for pid in running(child):
            os.kill(pid, signal.SIGKILL)
