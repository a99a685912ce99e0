"""The desktop app's remembered choices: window layout, theme, last decode settings, recent pairs.

Plain data, no Qt: the UI turns its geometry and splitter states into strings before they land
here. The file is JSON in the config folder (app.paths), written atomically (a temp file in the
same folder, then os.replace), so a crash mid-write never leaves a half-written file. A missing
or unreadable file gives the defaults; unknown keys are ignored, so older and newer versions of
the app can share one file.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from app.paths import config_dir, write_atomically

SETTINGS_FILE = "settings.json"
MAX_RECENT = 10
THEMES = ("system", "light", "dark")


@dataclass
class RecentPair:
    """One model pair the user ran; `draft` is empty for n-gram lookup or plain decoding."""

    target: str
    draft: str = ""
    ngram: bool = False
    backend: str = "auto"
    device: str = "auto"
    n_gpu_layers: int = -1  # -1: automatic
    rpc: str = ""  # llama.cpp rpc-servers for the target: HOST:PORT[,HOST:PORT...]
    suffix: bool = False  # suffix decoding (draftless, like ngram; the two exclude each other)
    # the target drafts for itself with these layers skipped ("auto": chosen on the prompt;
    # "": it does not), down to this estimated cost (None: the engine's default)
    self_skip: str = ""
    self_cost: float | None = None

    @property
    def label(self) -> str:
        target = Path(self.target).name
        if self.ngram:
            return f"{target} + n-gram lookup"
        if self.suffix:
            return f"{target} + suffix decoding"
        if self.self_skip:
            return f"{target} + self-draft" + (f" skipping {self.self_skip}"
                                               if self.self_skip != "auto" else "")
        return f"{target} + {Path(self.draft).name}" if self.draft else target


# The first run's prompt: a code completion (the demo pair is a coder pair, and code is where a
# small draft agrees with its target most), long enough to ask for a real method, whose drafts
# are mostly accepted with some rejections (on the demo pair at k = 3: alpha 0.92 over 64
# tokens, against 1.00 for `def fibonacci(n):`, which shows no rejection at all)
FIRST_PROMPT = (
    "from dataclasses import dataclass\n\n\n@dataclass\nclass Point:\n    x: float\n"
    "    y: float\n\n    def distance_to(self, other: \"Point\") -> float:\n"
)


# The window's named modes: what a first run is for, and what a user picks for speed.
# Inspect drafts a few tokens every step, so the first run on any machine has draft tokens, p,
# q and verdicts to show (on 2 cores adaptive k with the demo pair drafted in 0 of 57 steps);
# Fastest is adaptive k, which decodes plainly wherever drafting is priced not to pay.
MODE_INSPECT, MODE_FASTEST, MODE_CUSTOM = "inspect", "fastest", "custom"
INSPECT_K = 3  # short enough to cost little, long enough to show rejections mid-draft
FASTEST_K = 8  # adaptive k's ceiling


@dataclass
class DecodeChoices:
    """The decode panel's values, as the user left them (the defaults are the first run's)."""

    prompt: str = FIRST_PROMPT
    chat: bool = False  # a completion shows the prompt and its continuation as one text
    mode: str = MODE_INSPECT
    draft_max: int = INSPECT_K
    draft_min: int = 0
    adaptive: bool = False
    tree_width: int = 1
    tree_nodes: int = 16
    p_min: float = 0.0
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = -1  # -1: no fixed seed
    max_new_tokens: int = 128
    # the first run answers "is it faster here, and is it the same text?" with measured
    # figures; the plain baseline costs a few seconds more on a laptop
    compare: bool = True


@dataclass
class Settings:
    theme: str = "system"
    show_rejected: bool = True
    window_geometry: str = ""  # base64 of QWidget.saveGeometry()
    splitters: dict[str, str] = field(default_factory=dict)  # name -> base64 of saveState()
    decode: DecodeChoices = field(default_factory=DecodeChoices)
    recent_pairs: list[RecentPair] = field(default_factory=list)
    last_trace_dir: str = ""
    model_folders: list[str] = field(default_factory=list)  # user-added model folders
    # suffix decoding in the window drafts from earlier outputs too, kept in the data folder
    # (app.draft_memory.default_memory_path) until the user forgets them
    remember_drafts: bool = True

    def remember_pair(self, pair: RecentPair) -> None:
        """Put `pair` first in the recent list (once), keeping at most MAX_RECENT."""
        key = (pair.target, pair.draft, pair.ngram, pair.suffix, pair.self_skip)
        rest = [p for p in self.recent_pairs
                 if (p.target, p.draft, p.ngram, p.suffix, p.self_skip) != key]
        self.recent_pairs = [pair, *rest][:MAX_RECENT]


def settings_path() -> Path:
    return config_dir() / SETTINGS_FILE


def load_settings(path: str | os.PathLike[str] | None = None) -> Settings:
    """The saved settings, or the defaults when the file is missing or unreadable."""
    file = Path(path) if path is not None else settings_path()
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return Settings()
    if not isinstance(data, dict):
        return Settings()
    return _settings_from_dict(data)


def save_settings(settings: Settings, path: str | os.PathLike[str] | None = None) -> Path:
    """Write the settings atomically; returns the file written."""
    file = Path(path) if path is not None else settings_path()
    file.parent.mkdir(parents=True, exist_ok=True)
    return write_atomically(file, json.dumps(asdict(settings), indent=2, ensure_ascii=False))


def _known(cls: type, data: Any) -> dict[str, Any]:
    """The entries of `data` that are fields of dataclass `cls` (ignores unknown keys)."""
    if not isinstance(data, dict):
        return {}
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _settings_from_dict(data: dict[str, Any]) -> Settings:
    values = _known(Settings, data)
    defaults = Settings()
    try:
        values["decode"] = DecodeChoices(**_known(DecodeChoices, data.get("decode")))
    except TypeError:
        values["decode"] = DecodeChoices()
    pairs = []
    for item in data.get("recent_pairs") or []:
        entry = _known(RecentPair, item)
        if isinstance(entry.get("target"), str):
            pairs.append(RecentPair(**entry))
    values["recent_pairs"] = pairs[:MAX_RECENT]
    folders = data.get("model_folders")
    values["model_folders"] = [f for f in folders if isinstance(f, str)] \
        if isinstance(folders, list) else []
    if not isinstance(values.get("splitters"), dict):
        values["splitters"] = {}
    if values.get("theme") not in THEMES:
        values["theme"] = defaults.theme
    return Settings(**values)
