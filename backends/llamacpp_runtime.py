"""The llama.cpp runtime as installed: whether it imports, what it is, whether it can put
layers on a GPU here, and its log output kept off stderr."""

from __future__ import annotations

import ctypes
import os

_quiet_logger = None


def llamacpp_available() -> tuple[bool, str]:
    try:
        import llama_cpp  # noqa: F401
    except ImportError as exc:
        return False, f"llama-cpp-python is not installed ({exc}) — run packaging/setup.sh"
    return True, ""


def describe_llamacpp() -> str:
    ok, why = llamacpp_available()
    if not ok:
        return "llama-cpp-python: not installed"
    import llama_cpp

    offload = "yes" if gpu_offload_supported() else "no (CPU build)"
    return f"llama-cpp-python {llama_cpp.__version__} · GPU offload {offload}"


def gpu_offload_supported() -> bool:
    """Whether this build can put layers on a GPU of this machine. llama.cpp also says yes
    for a CPU build with the RPC backend, whose devices are other machines."""
    import llama_cpp

    from backends.llamacpp_rpc import local_gpus

    return bool(llama_cpp.llama_supports_gpu_offload()) and bool(local_gpus())


def silence_logs() -> None:
    """llama.cpp prints a page per model load; keep stderr for our own messages."""
    global _quiet_logger
    import llama_cpp

    if _quiet_logger is not None or os.environ.get("DRAFTLENS_DEBUG"):
        return
    _quiet_logger = llama_cpp.llama_log_callback(lambda level, text, data: None)
    llama_cpp.llama_log_set(_quiet_logger, ctypes.c_void_p(0))
