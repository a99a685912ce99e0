"""PyInstaller runtime hook: let llama.cpp find its CPU backend variants inside the bundle.

The Linux bundle's llama.cpp is built with GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS: one
libggml-cpu-<variant>.so per instruction set level (x64, sse42, ..., haswell, skylakex, zen4,
...), and ggml picks the best one the running CPU supports. ggml looks for them next to the
executable and in the current folder, but the bundle keeps them in <bundle>/_internal/llama_cpp/lib.
So, right after `llama_cpp.llama_cpp` has loaded libllama (and before anything calls
llama_backend_init), call ggml_backend_load_all_from_path(<that folder>) once. Lazy on purpose:
nothing native is loaded at start-up, only when the app first touches llama.cpp.

A build with one built-in CPU backend (macOS Metal) has no libggml-cpu-*.so files and this hook
does nothing. The Windows installer (packaging/windows/, not PyInstaller) imports this file as
_draftlens_ggml_backends for its cross-built ggml-cpu-*.dll variants.
"""

import importlib.abc
import os
import sys

_TRIGGER = "llama_cpp.llama_cpp"
_GGML_NAMES = ("libggml.so.0", "libggml.so", "libggml.0.dylib", "libggml.dylib", "ggml.dll")


def _load_backends(lib_dir: str) -> None:
    import ctypes

    try:
        names = os.listdir(lib_dir)
    except OSError:
        return
    if not any(n.startswith(("libggml-cpu-", "ggml-cpu-")) for n in names):
        return
    ggml_name = next((n for n in _GGML_NAMES if n in names), None)
    if ggml_name is None:
        return
    ggml = ctypes.CDLL(os.path.join(lib_dir, ggml_name))
    ggml.ggml_backend_reg_count.restype = ctypes.c_size_t
    if ggml.ggml_backend_reg_count() == 0:
        ggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
        ggml.ggml_backend_load_all_from_path.restype = None
        ggml.ggml_backend_load_all_from_path(os.fsencode(lib_dir))


class _ThenLoadBackends(importlib.abc.Loader):
    """Wraps the real loader of llama_cpp.llama_cpp; loads the backends once it has run."""

    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        # <bundle>/_internal/llama_cpp/lib (PyInstaller), <site-packages>/llama_cpp/lib (Windows)
        root = getattr(sys, "_MEIPASS", None) or os.path.dirname(os.path.dirname(module.__file__))
        _load_backends(os.path.join(root, "llama_cpp", "lib"))

    def __getattr__(self, name):  # get_code, get_source, get_resource_reader, ...
        return getattr(self._inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != _TRIGGER:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                sys.meta_path.remove(self)  # once is enough
                spec.loader = _ThenLoadBackends(spec.loader)
                return spec
        return None


sys.meta_path.insert(0, _Finder())
