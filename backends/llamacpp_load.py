"""How a GGUF is loaded: where its layers go (the CPU, local GPUs, rpc-servers' devices),
whether its weights are mapped or read into memory, and the CPU kernels made batch-invariant
for --exact-kernels."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backends.base import BackendError
from backends.llamacpp_rpc import device_list, offload_devices
from backends.llamacpp_runtime import gpu_offload_supported


@dataclass
class LoadedWeights:
    """A loaded llama_model and where it went."""

    model: Any  # the llama_model pointer
    device: str  # "cpu", "gpu" or "rpc": where its offloaded layers are
    n_gpu_layers: int
    mmap: bool  # the file mapped (True) or the weights read into memory
    caveats: list[str] = field(default_factory=list)  # what --exact-kernels cannot promise


def load_weights(ll: Any, path: Path, n_gpu_layers: int | str, rpc: str, load_mtp: bool,
                 mmap: bool | None, memory_available: int | None,
                 batch_invariant: bool) -> LoadedWeights:
    """The model of `path`, its layers on the rpc-servers' devices (then local GPUs) with
    --rpc, on a local GPU where this build offloads, else on the CPU."""
    devices = offload_devices(rpc) if rpc else []
    offload = bool(devices) or gpu_offload_supported()
    if n_gpu_layers == "auto":
        layers = 999 if offload else 0
    else:
        layers = int(n_gpu_layers)
    device = ("rpc" if rpc else "gpu") if offload and layers > 0 else "cpu"

    model_params = ll.llama_model_default_params()
    model_params.n_gpu_layers = layers
    model_params.load_mtp = load_mtp
    if mmap is None:
        mmap = not weights_read_into_memory(device, path.stat().st_size, memory_available)
    if not mmap:  # else llama.cpp's auto: a map, save on devices that cannot use one
        model_params.load_mode = ll.LLAMA_LOAD_MODE_NONE
    device_array = device_list(devices) if devices else None  # alive until the load is done
    if device_array is not None:
        model_params.devices = ctypes.cast(device_array, ctypes.c_void_p)
    caveats: list[str] = []
    if batch_invariant:
        caveats = make_cpu_batch_invariant(model_params)
        if device != "cpu":
            caveats.append(
                f"--exact-kernels switches llama.cpp's CPU kernels only: with {layers} "
                f"layers on the {device} verify passes may still differ from plain "
                "decoding in the last bits — use -ngl 0 (no --rpc) for bit-identical "
                "greedy output")
    model = ll.llama_model_load_from_file(str(path).encode(), model_params)
    if not model:
        raise BackendError(
            f"llama.cpp could not load {path.name} — the file may be corrupt or of an "
            "architecture this llama.cpp build does not know"
        )
    return LoadedWeights(model, device, layers, mmap, caveats)


def weights_read_into_memory(device: str, file_bytes: int, memory_available: int | None
                             ) -> bool:
    """Read the weights into the process's memory rather than map the file, where they stay
    on the CPU and take at most half the memory free: plain decoding ran 1.00-1.09x as fast so
    in three runs here, 1.05-1.13x in llama-bench (docs/benchmarks-history.md), and the mapped
    file's pages no longer count twice in resident memory. A GPU reads its own copy either way,
    and a map lets the system page out a model that barely fits."""
    return (device == "cpu" and memory_available is not None
            and file_bytes <= memory_available // 2)


def make_cpu_batch_invariant(model_params: Any) -> list[str]:
    """Make a CPU verify pass over k+1 tokens give bit-identical logits to k+1 single steps.

    llama.cpp's CPU backend picks kernels by batch size: repacked weights (gemv for one row,
    gemm for several), a tiled K-quant matmul from 8 rows, llamafile's sgemm, and a flash
    attention that splits the cache across threads for one query once it holds 512 cells.
    Each sums in another order, so a verify pass and plain decoding disagree in the last
    bits and greedy output can flip at a near-tie. Without them every logit is the same dot
    products in the same order whatever the batch. Returns what could not be switched off.
    """
    import llama_cpp

    model_params.use_extra_bufts = False
    os.environ["GGML_CPU_TILED_MM"] = "0"  # read once per process, at the first matmul
    info = llama_cpp.llama_print_system_info().decode(errors="replace")
    if "LLAMAFILE = 1" in info:
        return ["this llama-cpp-python was built with llamafile's sgemm (GGML_LLAMAFILE=ON): "
                "verify passes may differ from plain decoding in the last bits; rebuild with "
                "packaging/setup.sh for exact greedy equality"]
    return []
