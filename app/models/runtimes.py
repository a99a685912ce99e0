"""Which runtimes (backends) and devices this machine can use, and why not (the window shows
the unusable ones greyed with the reason); and what each runtime reports of itself."""

from __future__ import annotations

import platform
from dataclasses import dataclass

BACKEND_LABELS = {"auto": "Auto (by file type)", "llamacpp": "llama.cpp", "torch": "PyTorch"}
DEVICE_LABELS = {"auto": "Auto", "cpu": "CPU", "cuda": "CUDA", "metal": "Metal", "mps": "MPS"}


@dataclass(frozen=True)
class Option:
    key: str
    label: str
    available: bool
    reason: str = ""


@dataclass(frozen=True)
class Capabilities:
    backends: tuple[Option, ...]
    devices: dict[str, tuple[Option, ...]]  # resolved backend -> device options

    def backend_ok(self, key: str) -> bool:
        return any(o.key == key and o.available for o in self.backends)


def _llamacpp_devices(ok: bool) -> tuple[Option, ...]:
    mac = platform.system() == "Darwin"
    offload = False
    if ok:
        from backends.llamacpp_runtime import gpu_offload_supported

        offload = gpu_offload_supported()
    no_gpu = "this llama-cpp-python build has no GPU offload — rebuild it with CUDA or Metal"
    cuda_ok = offload and not mac
    metal_ok = offload and mac
    return (
        Option("auto", "Auto", True),
        Option("cpu", "CPU", True),
        Option("cuda", "CUDA", cuda_ok, "" if cuda_ok else
               ("llama.cpp uses Metal on macOS" if mac else no_gpu)),
        Option("metal", "Metal", metal_ok, "" if metal_ok else
               ("Metal exists only on macOS" if not mac else no_gpu)),
        Option("mps", "MPS", False, "MPS is PyTorch's Apple GPU path; llama.cpp uses Metal"),
    )


def _torch_devices(ok: bool) -> tuple[Option, ...]:
    cuda = mps = False
    if ok:
        from backends.torch_runtime import torch_devices

        cuda, mps = torch_devices()
    missing = "the PyTorch backend is not installed"
    return (
        Option("auto", "Auto", True),
        Option("cpu", "CPU", True),
        Option("cuda", "CUDA", cuda, "" if cuda else
               (missing if not ok else "no CUDA GPU visible to PyTorch (CPU build or no driver)")),
        Option("metal", "Metal", False, "Metal is llama.cpp's; with PyTorch on a Mac pick MPS"),
        Option("mps", "MPS", mps, "" if mps else
               (missing if not ok else "MPS needs PyTorch on an Apple Silicon Mac")),
    )


def probe() -> Capabilities:
    """Slow (imports torch): call it off the UI thread."""
    from backends.llamacpp_runtime import llamacpp_available
    from backends.torch_runtime import torch_available

    llama_ok, llama_why = llamacpp_available()
    torch_ok, torch_why = torch_available()
    backends = (
        Option("auto", BACKEND_LABELS["auto"], True),
        Option("llamacpp", BACKEND_LABELS["llamacpp"], llama_ok, llama_why),
        Option("torch", BACKEND_LABELS["torch"], torch_ok, torch_why),
    )
    return Capabilities(backends, {"llamacpp": _llamacpp_devices(llama_ok),
                                   "torch": _torch_devices(torch_ok)})


def unknown() -> Capabilities:
    """What to show until the probe answers: everything selectable, nothing promised."""
    backends = tuple(Option(k, v, True) for k, v in BACKEND_LABELS.items())
    devices = tuple(Option(k, v, True) for k, v in DEVICE_LABELS.items())
    return Capabilities(backends, {"llamacpp": devices, "torch": devices})


def runtime_lines() -> list[str]:
    """One line per runtime: its version and the devices it can use here, or why it cannot."""
    from backends.llamacpp_runtime import describe_llamacpp
    from backends.torch_runtime import describe_torch

    return [describe_llamacpp(), describe_torch()]
