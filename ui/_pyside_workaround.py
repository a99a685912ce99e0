"""Work around a PySide6 6.12.0 bug on Python < 3.12: every call of a Qt method that returns
void (label.setText, item.setData, ...) drops one reference to None, so a busy window soon
frees None and the interpreter aborts ("Fatal Python error: none_dealloc"). PySide6 6.11.x is
not affected; on Python 3.12+ None is immortal and the lost references do no harm.

`protect_none` gives None a very large reference count once, so it can never reach zero. None
is a static singleton that is never freed anyway; only the counter changes.
"""

from __future__ import annotations

import ctypes
import sys

_BALLAST = 1 << 48
_done = False


def affected() -> bool:
    if sys.version_info >= (3, 12):
        return False
    try:
        from importlib.metadata import version

        return version("shiboken6").startswith("6.12.")
    except Exception:  # noqa: BLE001 - unknown install: protecting costs nothing
        return True


def protect_none() -> None:
    global _done
    if _done or not affected():
        return
    refcount = ctypes.c_ssize_t.from_address(id(None))  # ob_refcnt is the first field
    refcount.value += _BALLAST
    _done = True
