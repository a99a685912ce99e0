"""Benchmarks that time DraftLens in their own process start it as the app starts its engine
processes (app.host.client.engine_start_env): libgomp's short spin and glibc's malloc on
transparent huge pages. Both are read once, as a process starts, so a script calls
run_as_engine_process() first and is started again with them. The programs it starts
(llama.cpp's tools) inherit them too, so both sides decode the same way."""

from __future__ import annotations

import os
import sys

from app.host.client import engine_start_env


def run_as_engine_process() -> None:
    """Start this script again with the engine processes' environment, unless it has it."""
    extra = engine_start_env(os.environ)
    if extra:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **extra})
