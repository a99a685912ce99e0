"""Shared fixtures: tiny real models for both backends, built once per test session, and the
fixtures several test modules use (the window, the host's faults, the local hub, the stores)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

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


@pytest.fixture(scope="module")
def costly_draft_pair(gguf_files, tmp_path_factory):
    """The tiny target with a draft many times its cost (same vocabulary, other weights):
    no draft length can pay, as for the demo pair on a 2-core CPU."""
    from tests.tiny_gguf import write_tiny_gguf

    target, _ = gguf_files
    draft = write_tiny_gguf(tmp_path_factory.mktemp("costly") / "draft.gguf", seed=1,
                            n_layer=8, hidden=256)
    return target, draft


@pytest.fixture(scope="session")
def gguf_pair(gguf_files):
    from backends.llamacpp import LlamaCppModel

    target, draft = (LlamaCppModel(path, n_gpu_layers=0, n_ctx=512) for path in gguf_files)
    yield target, draft
    target.close()
    draft.close()


# --- the window (pytest-qt, offscreen); Qt is imported only by the tests that use these ---


@pytest.fixture
def dialogs(monkeypatch):
    """Error dialogs are recorded instead of blocking the offscreen test."""
    from PySide6.QtWidgets import QMessageBox

    shown: list[str] = []

    def critical(parent, title, text, *args, **kwargs):
        shown.append(text)
        return QMessageBox.StandardButton.Ok

    monkeypatch.setattr(QMessageBox, "critical", critical)
    return shown


@pytest.fixture
def window(qtbot, tmp_path, dialogs):
    from app.settings import Settings
    from ui.main_window import MainWindow

    win = MainWindow(Settings(), save_path=tmp_path / "settings.json")
    qtbot.addWidget(win)
    win.resize(1400, 900)
    win.show_workspace()
    win.show()
    qtbot.waitExposed(win)
    win.activateWindow()
    qtbot.waitUntil(win.isActiveWindow)  # window shortcuts need the active window
    yield win
    win.close()


# --- the engine host ------------------------------------------------------------------

HOST_FAULTS = Path(__file__).resolve().parent / "host_faults"


@pytest.fixture
def plant(monkeypatch):
    """plant("abort") makes every host started from now on fail that way after 2 steps."""

    def plant_fault(fault: str, after: int = 2) -> None:
        path = os.pathsep.join(p for p in (str(HOST_FAULTS), os.environ.get("PYTHONPATH", ""))
                               if p)
        monkeypatch.setenv("PYTHONPATH", path)
        monkeypatch.setenv("DRAFTLENS_TEST_FAULT", fault)
        monkeypatch.setenv("DRAFTLENS_TEST_FAULT_AFTER", str(after))

    return plant_fault


# --- model files, the local hub and the model stores -------------------------------------


@pytest.fixture
def no_pip(monkeypatch):
    from app.models import demo

    def boom(*args, **kwargs):
        raise AssertionError("pip must not run when the wheels are in the cache")

    monkeypatch.setattr(demo, "download_wheel", boom)


@pytest.fixture(scope="module")
def hub_files(tmp_path_factory):
    """The files of the local hub's repos: file name -> bytes."""
    from tests.tiny_gguf import write_tiny_gguf

    root = tmp_path_factory.mktemp("hubsrc")
    q4 = write_tiny_gguf(root / "q4.gguf", seed=0).read_bytes()
    q8 = write_tiny_gguf(root / "q8.gguf", seed=1).read_bytes()
    return {"tiny-Q8_0.gguf": q8, "tiny-Q4_K_M.gguf": q4, "README.md": b"# tiny\n"}


@pytest.fixture
def hub(hub_files, monkeypatch, tmp_path):
    """The local hub, with offline mode lifted for this test only."""
    import huggingface_hub.constants

    from tests.helpers import HUB_REPO
    from tests.hub_server import FakeHub

    fake = FakeHub(repos={HUB_REPO: dict(hub_files), "tiny/Gated-GGUF": dict(hub_files)},
                   gated={"tiny/Gated-GGUF"})
    monkeypatch.setenv("HF_ENDPOINT", fake.start())
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "DOWNLOAD_CHUNK_SIZE", 64 * 1024)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def store_ggufs(tmp_path_factory):
    """A target, a draft that fits it and a draft with another tokenizer altogether."""
    from tests.tiny_gguf import DEFAULT_WORDS, write_tiny_gguf

    other_words = tuple(w + "z" for w in DEFAULT_WORDS)
    root = tmp_path_factory.mktemp("store-src")
    target = write_tiny_gguf(root / "target.gguf", seed=0, n_layer=2)
    draft = write_tiny_gguf(root / "draft.gguf", seed=1, n_layer=1)
    foreign = write_tiny_gguf(root / "foreign.gguf", seed=2, n_layer=1, words=other_words)
    return target, draft, foreign


@pytest.fixture
def scratch_home(tmp_path, monkeypatch):
    """A user home with no stores in it yet; every store's variable unset or pointed inside."""
    from app.models import stores

    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("OLLAMA_MODELS", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME",
                 "XDG_CACHE_HOME", "LLAMA_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(stores, "OLLAMA_SERVICE_STORE", home / "no-ollama-service")
    return home


@pytest.fixture
def every_store(scratch_home, store_ggufs, hf_dirs):
    """store_ggufs and the tiny HF draft laid out in every store the app searches."""
    from app.paths import models_dir
    from app.settings import load_settings, save_settings
    from tests import model_stores

    target, draft, foreign = store_ggufs
    home = scratch_home
    shutil.copyfile(target, models_dir() / "own-target.gguf")
    model_stores.lmstudio(home, draft, "lmstudio-community", "Tiny-Draft-GGUF",
                          "tiny-draft-Q4_K_M.gguf")
    model_stores.lmstudio(home, foreign, "someone", "Foreign-GGUF", "foreign.gguf",
                          cache_layout=True)
    model_stores.ollama(home / ".ollama" / "models", draft, "tinydraft", "latest")
    cache = home / ".cache" / "huggingface" / "hub"
    model_stores.hf_cache(cache, "tiny/Tiny-Target-GGUF", {"tiny-target-f32.gguf": target})
    model_stores.hf_cache(cache, "tiny/tiny-hf", {"": hf_dirs[1]}, commit="b" * 40)
    model_stores.llama_cache(home / ".cache" / "llama.cpp", draft,
                             "tiny_Tiny-Draft-GGUF_tiny-draft.gguf")
    folder = home / "my-models"
    folder.mkdir()
    shutil.copyfile(draft, folder / "mine.gguf")
    settings = load_settings()
    settings.model_folders = [str(folder)]
    save_settings(settings)
    return home
