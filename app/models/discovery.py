"""Which models are on this machine: the demo pair, GGUF files in the app's models folder and
LM Studio's, and transformers snapshots in the Hugging Face cache."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from app.paths import models_dir


@dataclass
class KnownPair:
    name: str
    target: Path
    draft: Path | None
    installed: bool


def known_pairs() -> list[KnownPair]:
    """The demo pair, plus GGUF files found in the app's models folder and LM Studio's."""
    from app.models.demo import demo_installed, demo_paths

    target, draft = demo_paths()
    pairs = [KnownPair("demo: Qwen2.5-Coder 1.5B + 0.5B", target, draft, demo_installed())]
    for folder in model_folders():
        for file in sorted(folder.rglob("*.gguf")):
            if file not in (target, draft):
                pairs.append(KnownPair(f"file: {file.name}", file, None, True))
    for snapshot in hf_cache_models():
        pairs.append(KnownPair(f"transformers: {snapshot.parent.parent.name[8:]}", snapshot,
                               None, True))
    return pairs


def hf_cache_models() -> list[Path]:
    """Model snapshots in the Hugging Face cache that hold a config and safetensors."""
    root = Path(os.environ.get("HF_HUB_CACHE") or
                Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub")
    if not root.is_dir():
        return []
    found = []
    for snapshot in sorted(root.glob("models--*/snapshots/*")):
        if (snapshot / "config.json").exists() and any(snapshot.glob("*.safetensors")):
            found.append(snapshot)
    return found


def model_folders() -> list[Path]:
    folders = [models_dir(), Path.home() / ".lmstudio" / "models",
               Path.home() / ".cache" / "lm-studio" / "models"]
    return [f for f in folders if f.is_dir()]
