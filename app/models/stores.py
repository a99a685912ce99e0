"""Where people keep their models, and how each store lays them out.

  draftlens    DraftLens's own models folder (the demo pair, `draftlens models fetch`)
  lmstudio     ~/.lmstudio/models, ~/.cache/lm-studio/models: PUBLISHER/REPO/FILE.gguf
  ollama       $OLLAMA_MODELS or ~/.ollama/models: manifests/REGISTRY/NAMESPACE/MODEL/TAG (JSON)
               name the model layer's digest sha256:HEX, stored as blobs/sha256-HEX
  huggingface  the Hugging Face cache ($HF_HUB_CACHE, $HF_HOME/hub), read with huggingface_hub's
               scan_cache_dir: GGUF files in snapshots, and transformers snapshots
  llama.cpp    $LLAMA_CACHE or llama.cpp's cache folder (files from `llama-cli -hf`)
  folder       folders the user added (app settings)

Every function returns [] for a store that is not there; nothing here loads weights.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from app.models.found import (
    FoundModel,
    describe_folder,
    describe_gguf,
    gguf_entry,
    is_transformers_folder,
    starts_like_gguf,
)
from app.paths import models_dir

if TYPE_CHECKING:
    from huggingface_hub import CachedFileInfo

STORES = ("draftlens", "lmstudio", "ollama", "huggingface", "llama.cpp", "folder")
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_DEFAULT_REGISTRY = "registry.ollama.ai"
# the Linux installer runs Ollama as a service user, whose store is here
OLLAMA_SERVICE_STORE = Path("/usr/share/ollama/.ollama/models")


def _home() -> Path:
    return Path.home()


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name, "").strip()
    return Path(value).expanduser() if value else None


# --- where each store lives ---------------------------------------------------------------
def lmstudio_roots() -> list[Path]:
    return [_home() / ".lmstudio" / "models", _home() / ".cache" / "lm-studio" / "models"]


def ollama_roots() -> list[Path]:
    override = _env_path("OLLAMA_MODELS")
    if override is not None:
        return [override]
    return [_home() / ".ollama" / "models", OLLAMA_SERVICE_STORE]


def hf_cache_root() -> Path:
    """The Hugging Face hub cache, read from the environment now (as huggingface_hub would be
    at its import): HF_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub."""
    override = _env_path("HF_HUB_CACHE") or _env_path("HUGGINGFACE_HUB_CACHE")
    if override is not None:
        return override
    home = _env_path("HF_HOME") or (
        (_env_path("XDG_CACHE_HOME") or _home() / ".cache") / "huggingface")
    return home / "hub"


def llama_cache_root() -> Path:
    """llama.cpp's cache: LLAMA_CACHE, else the platform's cache folder + llama.cpp."""
    override = _env_path("LLAMA_CACHE")
    if override is not None:
        return override
    if sys.platform == "darwin":
        return _home() / "Library" / "Caches" / "llama.cpp"
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA", _home())) / "llama.cpp"
    return (_env_path("XDG_CACHE_HOME") or _home() / ".cache") / "llama.cpp"


# --- scanning ------------------------------------------------------------------------------
def scan_all(user_folders: Iterable[str | Path] = ()) -> list[FoundModel]:
    """Every model in every store, each path once (the first store to list it keeps it)."""
    found: list[FoundModel] = []
    seen: set[Path] = set()
    scans = [
        scan_folder(models_dir(), "draftlens"),
        *(scan_folder(root, "lmstudio") for root in lmstudio_roots()),
        *(scan_ollama(root) for root in ollama_roots()),
        scan_hf_cache(hf_cache_root(), "huggingface"),
        scan_llama_cache(llama_cache_root()),
        *(scan_folder(Path(folder).expanduser(), "folder") for folder in user_folders),
    ]
    for scan in scans:
        for model in scan:
            key = _real(model.path)
            if key not in seen:
                seen.add(key)
                found.append(model)
    return found


def scan_folder(root: Path, store: str) -> list[FoundModel]:
    """GGUF files and transformers folders anywhere below `root`, named by their path inside
    it (LM Studio's PUBLISHER/REPO/FILE.gguf reads as its own name)."""
    if not root.is_dir():
        return []
    found: list[FoundModel] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        folder = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if folder != root and is_transformers_folder(folder):
            found.append(describe_folder(folder, folder.relative_to(root).as_posix(), store))
            dirnames[:] = []
            continue
        for filename in sorted(filenames):
            if filename.lower().endswith(".gguf"):
                path = folder / filename
                entry = gguf_entry(path, path.relative_to(root).as_posix(), store)
                if entry is not None:
                    found.append(entry)
    return found


def scan_ollama(root: Path) -> list[FoundModel]:
    """Ollama's models by MODEL:TAG, each pointing at the blob that holds its GGUF weights."""
    manifests = root / "manifests"
    if not manifests.is_dir():
        return []
    found = []
    for manifest in sorted(p for p in manifests.rglob("*") if p.is_file()):
        parts = manifest.relative_to(manifests).parts
        if len(parts) != 4:
            continue
        digest = _ollama_model_digest(manifest)
        if digest is None:
            continue
        blob = root / "blobs" / digest.replace(":", "-")
        if blob.is_file() and starts_like_gguf(blob):
            found.append(describe_gguf(blob, ollama_name(*parts), "ollama"))
    return found


def ollama_name(registry: str, namespace: str, model: str, tag: str) -> str:
    """How `ollama list` shows a model: qwen2.5:0.5b, user/model:tag, hf.co/owner/repo:tag."""
    if registry == OLLAMA_DEFAULT_REGISTRY:
        return f"{model}:{tag}" if namespace == "library" else f"{namespace}/{model}:{tag}"
    return f"{registry}/{namespace}/{model}:{tag}"


def _ollama_model_digest(manifest: Path) -> str | None:
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    layers = data.get("layers") if isinstance(data, dict) else None
    for layer in layers if isinstance(layers, list) else []:
        if isinstance(layer, dict) and layer.get("mediaType") == OLLAMA_MODEL_LAYER:
            digest = layer.get("digest")
            if isinstance(digest, str) and digest.startswith("sha256:"):
                return digest
    return None


def scan_hf_cache(root: Path, store: str) -> list[FoundModel]:
    """GGUF files and transformers snapshots in a hub cache, through huggingface_hub's own scan
    (a corrupted repo is skipped, as scan_cache_dir reports it in its warnings)."""
    if not root.is_dir():
        return []
    from huggingface_hub import CacheNotFound, scan_cache_dir

    try:
        info = scan_cache_dir(root)
    except (CacheNotFound, OSError):
        return []
    found: list[FoundModel] = []
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model":
            continue
        revisions = sorted(repo.revisions, key=lambda r: (not r.refs, -r.last_modified))
        for revision in revisions:
            label = repo.repo_id if revision is revisions[0] else \
                f"{repo.repo_id}@{revision.commit_hash[:8]}"
            found.extend(_snapshot_models(revision.snapshot_path, revision.files, label, store))
    return found


def _snapshot_models(snapshot: Path, files: Iterable[CachedFileInfo], label: str, store: str
                     ) -> Iterator[FoundModel]:
    if is_transformers_folder(snapshot):
        model = describe_folder(snapshot, label, store)
        yield FoundModel(model.name, model.path, model.store, model.format,
                         sum(f.size_on_disk for f in files), model.architecture,
                         model.n_params, model.vocab_type, model.vocab_size, model.error)
    for file in sorted(files, key=lambda f: f.file_name):
        if file.file_path.name.lower().endswith(".gguf"):
            relative = file.file_path.relative_to(snapshot).as_posix()
            entry = gguf_entry(file.file_path, f"{label}/{relative}", store)
            if entry is not None:
                yield entry


def scan_llama_cache(root: Path) -> list[FoundModel]:
    """llama.cpp's cache: flat OWNER_REPO_FILE.gguf files (older builds) and a hub-style
    models--OWNER--REPO layout (newer builds)."""
    if not root.is_dir():
        return []
    found = scan_hf_cache(root, "llama.cpp") if any(root.glob("models--*")) else []
    for path in sorted(root.glob("*.gguf")):
        entry = gguf_entry(path, path.name, "llama.cpp")
        if entry is not None:
            found.append(entry)
    return found


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path
