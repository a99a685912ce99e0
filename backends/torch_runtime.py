"""The PyTorch runtime as installed: whether torch and transformers import, what they are,
which devices they can use here, the dtype and attention kernels a pass runs with, and a
model folder's tokenizer read without its weights."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from backends.base import BackendError


def torch_available() -> tuple[bool, str]:
    """Whether this install can use the PyTorch backend, and why not."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        return False, (
            f"PyTorch backend not installed ({exc.name} missing) — install the full build or "
            "run: pip install 'draftlens[torch]'"
        )
    return True, ""


def describe_torch() -> str:
    ok, _why = torch_available()
    if not ok:
        return "PyTorch backend: not installed"
    import torch
    import transformers

    cuda, mps = torch_devices()
    devices = ["cpu"]
    if cuda:
        devices.append(f"cuda ({torch.cuda.get_device_name(0)})")
    if mps:
        devices.append("mps")
    return (f"torch {torch.__version__} · transformers {transformers.__version__} · "
            f"devices: {', '.join(devices)}")


def torch_devices() -> tuple[bool, bool]:
    """(CUDA, MPS): which GPUs PyTorch can use here."""
    import torch

    return torch.cuda.is_available(), torch.backends.mps.is_available()


def read_tokenizer_vocab(
    path: Path,
) -> tuple[str, tuple[str, ...], int | None, int | None, frozenset[int]]:
    """(kind, token texts, BOS id, EOS id, special token ids) of a transformers folder's (or
    GGUF's) tokenizer, without loading weights; kind is "gpt2" for byte-level BPE, else
    "sentencepiece"."""
    ok, _why = torch_available()
    if not ok:
        raise BackendError(
            f"{path} is a transformers folder but the PyTorch backend is not installed — "
            "install draftlens[torch] or use a GGUF file"
        )
    from transformers import AutoTokenizer

    folder, gguf_file = (path.parent, path.name) if path.is_file() else (path, None)
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
    except (OSError, ValueError) as exc:
        raise BackendError(
            f"cannot read a tokenizer from {path} — is it a transformers model folder?"
        ) from exc
    texts = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    kind = "gpt2" if any("Ġ" in (t or "") for t in texts[:2000]) else "sentencepiece"
    special = {int(i) for i in tokenizer.all_special_ids}
    special |= {int(i) for i, added in tokenizer.added_tokens_decoder.items() if added.special}
    return (kind, tuple(t or "" for t in texts), tokenizer.bos_token_id,
            tokenizer.eos_token_id, frozenset(special))


def cpu_has_bf16() -> bool:
    """Whether this CPU computes in bfloat16 natively (x86: AVX512-BF16 or AMX); elsewhere
    bfloat16 would be emulated and slower than float32."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


def dtype_for(device: str) -> Any:  # a torch.dtype; torch is imported lazily
    """The dtype a user would pick: bfloat16 on CUDA that has it (float16 otherwise) and on
    CPUs with native bfloat16, float16 on MPS, float32 on other CPUs."""
    import torch

    if device == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device == "mps":
        return torch.float16
    if os.environ.get("DRAFTLENS_TORCH_CPU_DTYPE"):
        return getattr(torch, os.environ["DRAFTLENS_TORCH_CPU_DTYPE"])
    return torch.bfloat16 if cpu_has_bf16() else torch.float32


def attention_kernels(device: str) -> contextlib.AbstractContextManager[Any]:
    """The scaled-dot-product-attention backends a forward pass may use: on CUDA all but
    cuDNN's. torch 2.11 on an H100 picks cuDNN attention for bfloat16, which builds an
    execution plan for every new (query length, cache length) shape it meets; a decode meets
    a new cache length at every step, so every step paid for a plan: plain decoding of a
    1.1B model took 99-104 ms per token at cache lengths not met before and 21 ms at the same
    lengths again; without cuDNN, 24-31 ms either way (measured 2026-11-25, docs/benchmarks.md
    "On CUDA"). Flash and memory-efficient attention need no per-shape plan. On other devices
    nothing changes."""
    if device != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kernels: contextlib.AbstractContextManager[Any] = sdpa_kernel(
        [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])
    return kernels
