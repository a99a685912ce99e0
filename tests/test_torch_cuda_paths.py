"""The torch backend's CUDA-only choices, checked where CI runs (no GPU): which attention
kernels a forward pass may use."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from backends.torch_runtime import attention_kernels  # noqa: E402


def _enabled() -> dict[str, bool]:
    cuda = torch.backends.cuda
    return {"cudnn": cuda.cudnn_sdp_enabled(), "flash": cuda.flash_sdp_enabled(),
            "efficient": cuda.mem_efficient_sdp_enabled(), "math": cuda.math_sdp_enabled()}


def test_cuda_passes_leave_out_cudnn_attention_and_restore_the_choice_after():
    # cuDNN attention builds a plan per (query, cache) length, and a decode meets a new one
    # at every step (measured on an H100: 99-104 ms per token at new lengths instead of 21)
    before = _enabled()
    with attention_kernels("cuda"):
        inside = _enabled()
    assert inside == {"cudnn": False, "flash": True, "efficient": True, "math": True}
    assert _enabled() == before


@pytest.mark.parametrize("device", ["cpu", "mps"])
def test_other_devices_change_nothing(device):
    before = _enabled()
    with attention_kernels(device):
        assert _enabled() == before
