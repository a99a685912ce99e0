"""A stop asked for while Python runs inside a callback from native code (llama.cpp's log
callback runs during a decode) is swallowed there by ctypes; the command must still stop at
the next step boundary. Real signals, a real ctypes callback."""

from __future__ import annotations

import ctypes
import os
import signal
import time

import pytest

from app.cli import interrupt


@ctypes.CFUNCTYPE(None)
def _native_callback() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)  # the handler runs here, inside the callback


# the swallowed KeyboardInterrupt is reported by pytest as unraisable: that is the point
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_stop_swallowed_inside_a_native_callback_is_still_seen():
    with interrupt.stop_between_steps():
        _native_callback()  # ctypes prints "Exception ignored" and returns normally
        assert interrupt.requested()
        with pytest.raises(KeyboardInterrupt):
            interrupt.check()


def test_outside_a_command_the_old_handlers_come_back_and_nothing_is_pending():
    before = signal.getsignal(signal.SIGINT)
    with interrupt.stop_between_steps():
        assert signal.getsignal(signal.SIGINT) is not before
        interrupt.check()  # nothing asked for yet
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_bench_stops_at_the_next_run_after_a_swallowed_stop(gguf_files, capsys, monkeypatch):
    import app.analysis.measure as measure
    from tests.helpers import run_cli

    runs = []
    real_timed_run = measure.timed_run

    def run_then_stop(*args, **kwargs):
        real_timed_run(*args, **kwargs)
        runs.append(1)
        if len(runs) == 1:
            _native_callback()  # Ctrl+C lands inside llama.cpp's log callback: swallowed

    monkeypatch.setattr(measure, "timed_run", run_then_stop)
    target, draft = gguf_files
    code, _, err = run_cli(capsys, "bench", "-m", str(target), "-md", str(draft), "-n", "8",
                           "-p", "the cat", "--rounds", "3", "--json")
    assert code == 130 and "interrupted" in err
    assert len(runs) == 1  # not the 6 runs asked for, and no report of a partial bench
