"""Run a short blocking call (a file check, a device probe) off the UI thread.

The result comes back through a queued signal, so the callback runs on the UI thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import shiboken6
from PySide6.QtCore import QObject, Signal


class _Relay(QObject):
    # one tuple (result, exception): a bare None through a Signal(object) upsets PySide6's
    # reference counting on Python 3.11 (a crash at exit)
    finished = Signal(object)


_live: set[_Relay] = set()


def run_in_thread(
    call: Callable[[], Any], done: Callable[[Any, BaseException | None], None],
    owner: QObject | None = None,
) -> None:
    """Run `call()` on a daemon thread; then `done(result, error)` on the UI thread, unless
    `owner` (the widget that asked) was deleted meanwhile, e.g. a window closed mid-probe."""
    relay = _Relay()
    _live.add(relay)

    def finish(outcome: tuple[Any, BaseException | None]) -> None:
        _live.discard(relay)
        if owner is None or shiboken6.isValid(owner):
            done(*outcome)
        relay.deleteLater()

    relay.finished.connect(finish)

    def target() -> None:
        try:
            result = call()
        except Exception as exc:  # noqa: BLE001 - handed to the callback
            relay.finished.emit((None, exc))
        else:
            relay.finished.emit((result, None))

    threading.Thread(target=target, daemon=True, name="draftlens-check").start()
