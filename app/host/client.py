"""The parent's handle on an engine host: start it, send commands, read its events, and say
how it ended when it ends on its own (a signal, an abort, an out-of-memory kill).

Two reader threads: one turns the host's stdout into events on a queue, one keeps the last
lines the engine wrote to stderr (llama.cpp's log, a GGML_ASSERT, a Python traceback). When
the host's stdout closes, the queue gets one EXITED event with the exit status, after the
stderr reader has taken every line, so the message that names the cause has them all.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from app.allocator import huge_pages_env
from app.host import protocol as p
from backends.llamacpp_threads import engine_process_env

EXITED = "exited"  # the parent's own event: the host process has ended (`returncode`)
GRACE_S = 0.5  # after Stop, a host silent this long is in a pass that will not end: kill it
TAIL_LINES = 60
_PROJECT_ROOT = Path(__file__).resolve().parents[2]


def host_command() -> list[str]:
    """`python -m app.host`; a packaged (frozen) app has no `-m`, so it runs its own executable
    with the hidden first argument `--engine-host` (app.cli.main)."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "--engine-host"]
    return [sys.executable, "-m", "app.host"]


def engine_start_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What a process that decodes is started with on top of `environ` (the host, and the
    supervised bench/sweep/rank/check-exact): libgomp's short spin
    (backends.llamacpp_threads.engine_process_env) and glibc's malloc on transparent huge
    pages (app.allocator.huge_pages_env). Both are read only as a process starts."""
    extra = engine_process_env(environ)
    extra.update(huge_pages_env(environ))
    return extra


class EngineHost:
    """One host process. Not thread-safe except `send`, `stop` and `kill`, which the UI thread
    may call while the worker thread reads events."""

    def __init__(self) -> None:
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._proc: subprocess.Popen[str] | None = None
        self._send_lock = threading.Lock()
        self.killed_by_us = False
        self.stop_sent_at: float | None = None
        self.last_event_at = 0.0  # monotonic; written by the events reader
        self.rpc = ""  # the rpc-servers of the last pair sent, to name them if the host dies

    # --- life ----------------------------------------------------------------------------
    def start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            path for path in (str(_PROJECT_ROOT), env.get("PYTHONPATH", "")) if path)
        env["PYTHONUNBUFFERED"] = "1"
        # ggml's abort would start gdb for a backtrace: seconds, pages of output that push the
        # assert line out of the tail, and memory, at the worst moment
        env.setdefault("GGML_NO_BACKTRACE", "1")
        env.update(engine_start_env(env))
        self._proc = subprocess.Popen(
            host_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, encoding="utf-8", errors="replace", bufsize=1,
            env=env,  # and the parent's cwd: relative model and trace paths mean the same
            start_new_session=True,  # the terminal's Ctrl+C is the parent's to handle
        )
        stderr_done = threading.Event()
        threading.Thread(target=self._read_stderr, args=(self._proc.stderr, stderr_done),
                         name="engine-host-stderr", daemon=True).start()
        threading.Thread(target=self._read_events, args=(self._proc, stderr_done),
                         name="engine-host-events", daemon=True).start()

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def send(self, command: str, **data: Any) -> None:
        """Fire and forget: a host that is gone shows as an EXITED event, not here."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            return
        if isinstance(data.get("spec"), dict):
            self.rpc = str(data["spec"].get("rpc") or "")
        with self._send_lock:
            try:
                p.write_line(proc.stdin, {"cmd": command, **data})
            except (OSError, ValueError):
                pass

    def stop(self) -> None:
        """Ask the run to end after the step in progress; `overdue` says when to kill."""
        if self.stop_sent_at is None:
            self.stop_sent_at = time.monotonic()
        self.send(p.STOP)

    def overdue(self, grace_s: float = GRACE_S) -> bool:
        """Stop was sent and the host has said nothing for the grace period since: it is in a
        pass. (A host still sending the steps it made before the stop is not stuck.)"""
        if self.stop_sent_at is None:
            return False
        return time.monotonic() - max(self.stop_sent_at, self.last_event_at) > grace_s

    def ready_for_next(self) -> None:
        """A command has ended: a later Stop starts its own grace period."""
        self.stop_sent_at = None

    def kill(self) -> None:
        """End the host and every process it started (check-exact's exact-mode child)."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            self.killed_by_us = True
        end_process_group(proc)

    def close(self, timeout_s: float = 3.0) -> None:
        """Quit (the host closes its models), and kill it if it does not go in time."""
        proc = self._proc
        if proc is None:
            return
        self.send(p.QUIT)
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            proc.wait()
        # a host that quit mid-job (its stdin closed) leaves what it started: end that too
        end_process_group(proc)

    def next_event(self, timeout_s: float) -> dict[str, Any] | None:
        try:
            return self.events.get(timeout=timeout_s)
        except queue.Empty:
            return None

    # --- how it ended -------------------------------------------------------------------
    def last_lines(self, n: int = 3) -> list[str]:
        """The engine's last words on stderr, blank lines and bare progress dots left out."""
        return last_words(self.tail, n)

    # --- readers ------------------------------------------------------------------------
    def _read_stderr(self, stream: IO[str] | None, done: threading.Event) -> None:
        try:
            if stream is not None:
                # DRAFTLENS_DEBUG: the engine's own log (llama.cpp's included) shown as it
                # comes, as it was before the engine had a process of its own
                echo = bool(os.environ.get("DRAFTLENS_DEBUG"))
                for line in stream:
                    self.tail.append(line.rstrip("\n"))
                    if echo:
                        sys.stderr.write(line)
        finally:
            done.set()

    def _read_events(self, proc: subprocess.Popen[str], stderr_done: threading.Event) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                self.tail.append(line.rstrip("\n"))  # not ours: keep it with the log
                continue
            if isinstance(event, dict) and "event" in event:
                self.last_event_at = time.monotonic()
                self.events.put(event)
        returncode = proc.wait()
        stderr_done.wait(timeout=5)
        self.events.put({"event": EXITED, "returncode": returncode})


def end_process_group(proc: subprocess.Popen[Any]) -> None:
    """Kill `proc` and whatever it started that is still running. `proc` must have been
    started with start_new_session=True, so that it leads a process group its children
    join (a child that made a session of its own is not reached). On POSIX the whole group
    goes at once, also after `proc` itself has ended (a group's id is not given to another
    process while a member lives); Windows has no such groups, so taskkill ends the tree
    while `proc` is alive."""
    if os.name == "nt":
        if proc.poll() is None:
            subprocess.run(["taskkill", "/F", "/T", "/PID", str(proc.pid)],
                           capture_output=True, check=False)
            proc.kill()
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # the group is gone: nothing is left
        pass


def last_words(tail: Iterable[str], n: int = 1) -> list[str]:
    """The last n lines of an engine's log worth quoting: each tidied, blank lines and bare
    progress dots left out; a line redrawn with carriage returns counts as what it showed last."""
    lines = [tidy_line(line.rsplit("\r", 1)[-1]) for line in tail]
    return [line for line in lines if line.strip(". ")][-n:]


def tidy_line(line: str, limit: int = 240) -> str:
    """One line of the engine's log for a message: spaces collapsed, a build folder's path
    cut to the source file's place in llama.cpp, clipped."""
    line = " ".join(line.split())
    line = re.sub(r"\S*/vendor/llama\.cpp/", "llama.cpp/", line)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def ending(returncode: int, killed_by_us: bool = False) -> str:
    """How a host process ended, as the end of "the engine process ...": "ended with SIGABRT"."""
    if killed_by_us:
        return "was ended by DraftLens after Stop (a pass outlasted the grace period)"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        if -returncode == getattr(signal, "SIGKILL", 9):
            return (f"ended with {name} (killed from outside — often the system's "
                    "out-of-memory killer)")
        return f"ended with {name}"
    if returncode > 255:  # Windows reports crashes as NTSTATUS codes
        return f"ended with exit code 0x{returncode & 0xFFFFFFFF:08X}"
    return f"ended with exit code {returncode}"
