"""A ggml CPU threadpool attached to a llama.cpp context, as llama-bench and llama-cli attach
one (ggml_threadpool_new, llama_attach_threadpool): exported by the libraries that
llama-cpp-python installs, not bound by it, so bound here with ctypes.

Without one, each decode's graph runs on the threads ggml starts for it (or its OpenMP
team); with one, the same threads live for the context and poll for the next graph a while
before they sleep (`poll`: 0 sleeps at once, 100 spins longest; llama-bench's default 50).
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

GGML_MAX_N_THREADS = 512  # ggml.h
DEFAULT_POLL = 50  # llama-bench's --poll default


class ThreadpoolParams(ctypes.Structure):
    """ggml.h's struct ggml_threadpool_params."""

    _fields_ = [
        ("cpumask", ctypes.c_bool * GGML_MAX_N_THREADS),
        ("n_threads", ctypes.c_int),
        ("prio", ctypes.c_int),  # enum ggml_sched_priority
        ("poll", ctypes.c_uint32),
        ("strict_cpu", ctypes.c_bool),
        ("paused", ctypes.c_bool),
    ]


class _Bindings:
    def __init__(self, libraries: list[ctypes.CDLL]) -> None:
        def find(name: str) -> Any:
            for library in libraries:
                if hasattr(library, name):
                    return getattr(library, name)
            raise OSError(f"{name} is not exported by llama-cpp-python's libraries")

        self.params_default = find("ggml_threadpool_params_default")
        self.params_default.argtypes = [ctypes.c_int]
        self.params_default.restype = ThreadpoolParams
        self.new = find("ggml_threadpool_new")
        self.new.argtypes = [ctypes.POINTER(ThreadpoolParams)]
        self.new.restype = ctypes.c_void_p
        self.free = find("ggml_threadpool_free")
        self.free.argtypes = [ctypes.c_void_p]
        self.free.restype = None
        self.attach = find("llama_attach_threadpool")
        self.attach.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self.attach.restype = None
        self.detach = find("llama_detach_threadpool")
        self.detach.argtypes = [ctypes.c_void_p]
        self.detach.restype = None


_bindings: _Bindings | None = None


def bindings() -> _Bindings:
    """The functions, from the libraries llama-cpp-python loaded (found once)."""
    global _bindings
    if _bindings is None:
        import llama_cpp

        folder = Path(llama_cpp.__file__).parent / "lib"
        names = ("libllama", "libggml-cpu", "libggml-base", "libggml", "llama", "ggml-cpu",
                 "ggml-base", "ggml")
        paths = [p for name in names for p in sorted(folder.glob(f"{name}.*"))
                 if p.suffix in (".so", ".dylib", ".dll")]
        _bindings = _Bindings([ctypes.CDLL(str(p)) for p in paths])
    return _bindings


class Threadpool:
    """A threadpool of `n_threads` for one context: attach() after the context is made,
    close() after it is freed (or detach() first)."""

    def __init__(self, n_threads: int, poll: int = DEFAULT_POLL) -> None:
        self._api = bindings()
        params = self._api.params_default(n_threads)
        params.poll = poll
        self.n_threads, self.poll = n_threads, poll
        self._pool = self._api.new(ctypes.byref(params))
        if not self._pool:
            raise OSError(f"ggml could not start a threadpool of {n_threads} threads")
        self._ctx: Any = None

    def attach(self, ctx: Any) -> None:
        self._api.attach(ctx, self._pool, self._pool)
        self._ctx = ctx

    def detach(self) -> None:
        if self._ctx is not None:
            self._api.detach(self._ctx)
            self._ctx = None

    def close(self) -> None:
        """Free the pool; its context must be freed or detached first."""
        if self._pool:
            self._api.free(self._pool)
            self._pool = None
