"""Which models are on this machine, and which of them can draft for a given target.

The stores are scanned by app.models.stores; whether a draft fits a target is decided by
app.models.pair_check (the one owner of that rule), from vocabularies read without weights.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from app.errors import DraftLensError, ModelFileError
from app.models.found import FoundModel
from app.models.pair_check import PairCheck, Vocab, check_vocabs, read_model_vocab
from app.models.stores import scan_all


@dataclass
class KnownPair:
    name: str
    target: Path
    draft: Path | None
    installed: bool


@dataclass(frozen=True)
class DraftVerdict:
    """A candidate draft and the pair check's verdict on it for one target."""

    model: FoundModel
    check: PairCheck

    @property
    def compatible(self) -> bool:
        return self.check.compatible

    @property
    def usable(self) -> bool:
        """It can draft: with the target's vocabulary or across vocabularies."""
        return self.check.usable

    @property
    def label(self) -> str:
        """How it drafts for the target, in a few words."""
        if self.compatible:
            return "same vocabulary"
        if self.check.cross is not None:
            return f"other vocabulary: {self.check.cross.describe()}"
        return "incompatible"


def known_pairs() -> list[KnownPair]:
    """The demo pair (installed or not)."""
    from app.models.demo import demo_installed, demo_paths

    target, draft = demo_paths()
    return [KnownPair("demo: Qwen2.5-Coder 1.5B + 0.5B", target, draft, demo_installed())]


def discover_models(user_folders: Iterable[str | Path] | None = None) -> list[FoundModel]:
    """Every model in every store; `user_folders` defaults to those saved in the settings."""
    if user_folders is None:
        from app.settings import load_settings

        user_folders = load_settings().model_folders
    return scan_all(user_folders)


def find_model(name_or_path: str, models: list[FoundModel]) -> Path:
    """A path given as is, or the path of the listed model with that name."""
    path = Path(name_or_path).expanduser()
    if path.exists():
        return path
    for model in models:
        if model.name == name_or_path:
            return model.path
    matches = [m for m in models if m.name.endswith("/" + name_or_path)]
    if len(matches) == 1:
        return matches[0].path
    raise ModelFileError(
        f"no model file or listed model called {name_or_path!r} — give a path, or a name "
        "from `draftlens models list`"
    )


def drafts_for(target: str | os.PathLike[str], models: list[FoundModel]) -> list[DraftVerdict]:
    """Every other usable model with the pair check's verdict as a draft for `target`:
    compatible ones first (smallest first: the draft should be the fast one), then those of
    another vocabulary that can draft across it, then the rest."""
    target_vocab = vocab_of(Path(target))
    target_key = _identity(Path(target))
    verdicts = []
    for model in models:
        if model.error or _identity(model.path) == target_key:
            continue
        try:
            check = check_vocabs(target_vocab, vocab_of(model.path))
        except DraftLensError as exc:
            check = PairCheck(False, str(exc))
        verdicts.append(DraftVerdict(model, check))
    verdicts.sort(key=lambda v: (not v.compatible, not v.usable, v.model.size_bytes,
                                 v.model.name))
    return verdicts


def vocab_of(path: Path) -> Vocab:
    """The model's vocabulary, read once per version of the file (path, size, mtime)."""
    stat = path.stat() if path.exists() else None
    return _cached_vocab(path, stat.st_size if stat else -1, stat.st_mtime_ns if stat else -1)


@lru_cache(maxsize=16)
def _cached_vocab(path: Path, size: int, mtime_ns: int) -> Vocab:
    return read_model_vocab(path)


def _identity(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path
