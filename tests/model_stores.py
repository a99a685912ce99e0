"""Lay out model files as each store does, in a scratch home (a helper module for tests).

Each function copies a real GGUF (or transformers folder) into the place and shape its store
uses, so the discovery code reads exactly what it would find on a user's machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

OLLAMA_MODEL = "application/vnd.ollama.image.model"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def lmstudio(home: Path, source: Path, publisher: str, repo: str, name: str,
             cache_layout: bool = False) -> Path:
    """~/.lmstudio/models/PUBLISHER/REPO/FILE.gguf (or the older ~/.cache/lm-studio/models)."""
    root = home / (".cache/lm-studio/models" if cache_layout else ".lmstudio/models")
    dest = root / publisher / repo / name
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, dest)
    return dest


def ollama(root: Path, source: Path, model: str, tag: str, namespace: str = "library",
           registry: str = "registry.ollama.ai") -> Path:
    """manifests/REGISTRY/NAMESPACE/MODEL/TAG naming blobs/sha256-HEX, as `ollama pull` does:
    a model layer, plus the template and params layers and a config blob."""
    blobs = root / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    digest = _sha256(source)
    blob = blobs / f"sha256-{digest}"
    shutil.copyfile(source, blob)
    layers = [{"mediaType": OLLAMA_MODEL, "digest": f"sha256:{digest}",
               "size": source.stat().st_size}]
    for media, text in (("template", "{{ .Prompt }}"), ("params", '{"stop": ["</s>"]}')):
        data = text.encode()
        other = hashlib.sha256(data).hexdigest()
        (blobs / f"sha256-{other}").write_bytes(data)
        layers.append({"mediaType": f"application/vnd.ollama.image.{media}",
                       "digest": f"sha256:{other}", "size": len(data)})
    config = json.dumps({"model_format": "gguf", "model_family": "llama"}).encode()
    config_digest = hashlib.sha256(config).hexdigest()
    (blobs / f"sha256-{config_digest}").write_bytes(config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "digest": f"sha256:{config_digest}", "size": len(config)},
        "layers": layers,
    }
    path = root / "manifests" / registry / namespace / model / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest), encoding="utf-8")
    return blob


def hf_cache(cache: Path, repo_id: str, files: dict[str, Path], commit: str = "a" * 40) -> Path:
    """The hub cache as huggingface_hub writes it: blobs named by sha256 (git sha1 for small
    files does not matter to the scan), snapshots/COMMIT/FILE as relative symlinks, refs/main.
    A source folder is laid out file by file. Returns the snapshot folder."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit, encoding="utf-8")
    for name, source in files.items():
        sources = ({f"{name}/{p.name}" if name else p.name: p for p in source.iterdir()}
                   if source.is_dir() else {name: source})
        for relative, file in sources.items():
            blob = repo / "blobs" / _sha256(file)
            shutil.copyfile(file, blob)
            link = snapshot / relative
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(blob, link.parent))
    return snapshot


def llama_cache(root: Path, source: Path, name: str) -> Path:
    """llama.cpp's -hf cache: OWNER_REPO_FILE.gguf with its .json etag file beside it."""
    root.mkdir(parents=True, exist_ok=True)
    dest = root / name
    shutil.copyfile(source, dest)
    dest.with_suffix(".gguf.json").write_text('{"etag": "x"}', encoding="utf-8")
    return dest
