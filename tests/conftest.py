"""Shared fixtures: tiny real models for both backends, built once per test session."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# torch on CPU: float32, where greedy identity is a bit-for-bit check; the bfloat16 default of
# CPUs that have it is tested on its own (test_divergence_and_copy_runs)
os.environ.setdefault("DRAFTLENS_TORCH_CPU_DTYPE", "float32")
# bench, sweep, rank and check-exact run in this process, where a test's monkeypatches apply
# (app.cli.supervisor; tests/test_supervisor.py clears it to test the child process)
os.environ.setdefault("DRAFTLENS_IN_PROCESS", "1")


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    """Settings, caches and downloads go to a temp folder, never the user's."""
    monkeypatch.setenv("DRAFTLENS_HOME", str(tmp_path_factory.mktemp("home")))


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """Tiny models run faster on one thread than fighting over two shared cores."""
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def hf_dirs(tmp_path_factory):
    from tests.tiny_hf import write_tiny_hf

    root = tmp_path_factory.mktemp("hf")
    target = write_tiny_hf(root / "target", seed=0)
    draft = write_tiny_hf(root / "draft", seed=0, noise=0.3)
    return target, draft


@pytest.fixture(scope="session")
def hf_pair(hf_dirs):
    from backends.torch_hf import TorchModel

    target, draft = (TorchModel(path, device="cpu") for path in hf_dirs)
    yield target, draft
    target.close()
    draft.close()


@pytest.fixture(scope="session")
def hf_exact_pair(hf_dirs):
    """The torch pair with the target in the exact mode (one token per pass): where greedy
    identity with plain decoding is guaranteed, as gguf_pair's exact kernels guarantee it."""
    from backends.torch_hf import TorchModel

    target = TorchModel(hf_dirs[0], device="cpu", batch_invariant=True)
    draft = TorchModel(hf_dirs[1], device="cpu")
    yield target, draft
    target.close()
    draft.close()


@pytest.fixture(scope="session")
def mtp_file(tmp_path_factory):
    """A tiny GGUF with its own MTP (NextN) layers, in the real layout; small residual updates:
    a near-bigram target whose MTP block agrees often, not always."""
    from tests.tiny_mtp_gguf import write_tiny_mtp_gguf

    return write_tiny_mtp_gguf(tmp_path_factory.mktemp("mtp") / "tiny-mtp.gguf", mix=0.15)


@pytest.fixture(scope="session")
def gguf_files(tmp_path_factory):
    from tests.tiny_gguf import write_tiny_gguf

    root = tmp_path_factory.mktemp("gguf")
    target = write_tiny_gguf(root / "target.gguf", seed=0)
    draft = write_tiny_gguf(root / "draft.gguf", seed=1, noise_from=target, noise=0.15)
    return target, draft


@pytest.fixture(scope="session")
def gguf_pair(gguf_files):
    from backends.llamacpp import LlamaCppModel

    target, draft = (LlamaCppModel(path, n_gpu_layers=0, n_ctx=512) for path in gguf_files)
    yield target, draft
    target.close()
    draft.close()
