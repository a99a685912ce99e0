"""Where DraftLens keeps its files.

The platform's usual folders (through platformdirs), or, when the environment variable
DRAFTLENS_HOME is set, everything under that one folder (data/, cache/, config/), so tests and
a packaged app can redirect all of it. Each function creates its folder on demand.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import platformdirs

APP_NAME = "DraftLens"
HOME_ENV = "DRAFTLENS_HOME"


def home_override() -> Path | None:
    """The folder named by DRAFTLENS_HOME, or None when it is unset or empty."""
    value = os.environ.get(HOME_ENV, "").strip()
    return Path(value).expanduser().absolute() if value else None


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def data_dir() -> Path:
    """User data (models live below it)."""
    home = home_override()
    if home is not None:
        return _ensure(home / "data")
    return _ensure(Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)))


def cache_dir() -> Path:
    """Things that can be rebuilt: downloaded wheels, preflight results."""
    home = home_override()
    if home is not None:
        return _ensure(home / "cache")
    return _ensure(Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False)))


def config_dir() -> Path:
    """Settings and recent model pairs."""
    home = home_override()
    if home is not None:
        return _ensure(home / "config")
    return _ensure(Path(platformdirs.user_config_dir(APP_NAME, appauthor=False)))


def models_dir() -> Path:
    """Model files DraftLens installs itself (the demo pair)."""
    return _ensure(data_dir() / "models")


def write_atomically(path: str | os.PathLike[str], text: str, newline: str | None = None) -> Path:
    """Write text to a temp file in the same folder, then rename it over `path`, so a crash
    mid-write never leaves a half-written file."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}-", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def read_cache(name: str, version: int) -> dict[str, dict[str, Any]]:
    """The entries of the cache file `name` (in cache_dir()), or none where it is missing,
    damaged or written by another version."""
    try:
        data = json.loads((cache_dir() / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != version:
        return {}
    entries = data.get("entries")
    return entries if isinstance(entries, dict) else {}


def write_cache(name: str, version: int, entries: dict[str, dict[str, Any]],
                keep: int) -> None:
    """Write the cache file `name` atomically, with the last `keep` entries (in order)."""
    kept = dict(list(entries.items())[-keep:])
    write_atomically(cache_dir() / name, json.dumps({"version": version, "entries": kept},
                                                    indent=1))
