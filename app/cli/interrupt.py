"""Ctrl+C and SIGTERM stop a command between steps, with its trace finalised.

The handler raises KeyboardInterrupt where Python happens to be, and also remembers the
request: where that place is a callback from native code (llama.cpp's log callback runs
during a decode), ctypes swallows the exception, so loops also check `requested()` after
each step and stop there.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_requested = False


def requested() -> bool:
    return _requested


def check() -> None:
    """Raise KeyboardInterrupt if a stop was asked for since the handlers were installed."""
    if _requested:
        raise KeyboardInterrupt


def _stop(signum: int, frame: object) -> None:
    global _requested
    _requested = True
    raise KeyboardInterrupt


@contextmanager
def stop_between_steps() -> Iterator[None]:
    global _requested
    _requested = False
    signals = (signal.SIGINT, signal.SIGTERM)
    previous: dict[int, Callable[[int, Any], Any] | int | None] = {
        s: signal.signal(s, _stop) for s in signals}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _note(signum: int, frame: object) -> None:
    global _requested
    _requested = True


@contextmanager
def noted_only() -> Iterator[None]:
    """A stop is only noted (`requested()`), never raised: for a loop that waits on another
    thread's queue, where an exception raised inside the queue's lock would leave it held."""
    signals = (signal.SIGINT, signal.SIGTERM)
    previous: dict[int, Callable[[int, Any], Any] | int | None] = {
        s: signal.signal(s, _note) for s in signals}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
