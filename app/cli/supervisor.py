"""`bench`, `sweep`, `rank` and `check-exact` run their engine in a child process.

These commands load the pair in the process that measures, so their timings stay free of
any message passing: the engine host (app.host), built for streaming one run's steps, would
put a pipe between the engine and the clock. A thin supervisor gives them what the host
gives `run`: llama.cpp can end a process where no `except` reaches (a GGML_ASSERT, an RPC
server that closes the connection mid-pass, the out-of-memory killer), and then the user
gets one line naming the cause and exit code 1, not a bare "Aborted".

The child is this same command line with IN_PROCESS set; its stdout and stderr are pumped
through this process's own streams as they come, and the last lines of stderr are kept to
name the cause. Tests set IN_PROCESS themselves, so the commands they call run in the test's
process where its monkeypatches apply; tests/test_supervisor.py covers this path.
"""

from __future__ import annotations

import codecs
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Sequence
from typing import IO

from app.host.client import end_process_group, ending, engine_start_env, last_words

IN_PROCESS = "DRAFTLENS_IN_PROCESS"
SUPERVISED_COMMANDS = frozenset({"bench", "sweep", "rank", "check-exact"})
_TAIL_LINES = 20


def wants_supervisor(argv: Sequence[str]) -> bool:
    command = next((a for a in argv if not a.startswith("-")), None)
    return command in SUPERVISED_COMMANDS and not os.environ.get(IN_PROCESS)


def child_command(argv: Sequence[str]) -> list[str]:
    """This command again; a packaged (frozen) app has no `-m`, so it runs its executable."""
    if getattr(sys, "frozen", False):
        return [sys.executable, *argv]
    return [sys.executable, "-m", "app.cli.main", *argv]


def supervise(argv: Sequence[str]) -> int:
    env = dict(os.environ, **{IN_PROCESS: "1"})
    env.setdefault("GGML_NO_BACKTRACE", "1")  # gdb's backtrace would bury the assert line
    env.update(engine_start_env(env))
    env.setdefault("PYTHONUNBUFFERED", "1")
    proc = subprocess.Popen(
        child_command(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        start_new_session=True,  # Ctrl+C reaches the child once: forwarded by this process
    )
    tail: deque[str] = deque(maxlen=_TAIL_LINES)
    pumps = [
        threading.Thread(target=_pump, args=(proc.stdout, sys.stdout, None), daemon=True),
        threading.Thread(target=_pump, args=(proc.stderr, sys.stderr, tail), daemon=True),
    ]
    for pump in pumps:
        pump.start()
    returncode = _wait_forwarding_signals(proc)
    for pump in pumps:
        pump.join(timeout=5)
    if returncode >= 0:
        return returncode
    cause = f"error: the engine process {ending(returncode)}"
    last = "".join(last_words(tail))
    print(f"{cause}; its last words: {last}" if last else cause, file=sys.stderr)
    return 1


def _wait_forwarding_signals(proc: subprocess.Popen[bytes]) -> int:
    """The child stops between steps on SIGINT/SIGTERM and says so itself; a second Ctrl+C
    while it is in a pass that does not end kills it."""
    asked = 0

    def forward(signum: int, frame: object) -> None:
        nonlocal asked
        asked += 1
        if proc.poll() is not None:
            return
        if asked > 1:
            end_process_group(proc)  # check-exact's exact-mode child goes with it
        elif os.name != "nt":  # Windows' console gives Ctrl+C to the child itself
            proc.send_signal(signum)

    signals = (signal.SIGINT, signal.SIGTERM)
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, forward) for s in signals} if on_main_thread else {}
    try:
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:  # a handler installed before ours
                forward(signal.SIGINT, None)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _pump(source: IO[bytes] | None, sink: IO[str], tail: deque[str] | None) -> None:
    """Copy as it comes (progress lines end in \\r, not \\n), keeping whole lines for `tail`."""
    if source is None:
        return
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    partial = ""
    fd = source.fileno()
    while chunk := os.read(fd, 65536):
        text = decoder.decode(chunk)
        try:
            sink.write(text)
            sink.flush()
        except (OSError, ValueError):
            pass
        if tail is not None:
            *lines, partial = (partial + text).split("\n")
            tail.extend(lines)


