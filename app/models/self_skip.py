"""The skip set a self-draft uses on a loaded pair: chosen by measurement on the run's own
text (app.engine.drafters.self_skip's search) or given by hand, the draft loaded and its cost
measured beside the target's; the choice remembered per model file and text, so a search
runs once.

The text searched: each prompt's last PROMPT_TAIL tokens and the target's greedy
continuation of it, CONTINUATION tokens (what the draft will be asked to guess).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from app.engine.cost_curve import measure_step_costs
from app.engine.decode_config import DecodeConfig
from app.engine.drafters.self_draft import is_auto
from app.engine.drafters.self_skip import (
    DraftHead,
    SearchProgress,
    SkipChoice,
    given_skip,
    parse_skip,
    search_skip,
)
from app.engine.protocol import LanguageModel, LayerSkipModel
from app.errors import SettingsError
from app.models.loading import LoadedPair, head_tokens
from app.paths import read_cache, write_cache

PROMPT_TAIL = 96  # the last tokens of each prompt searched on
CONTINUATION = 32  # tokens of the target's own continuation searched on, per prompt
CACHE_NAME = "self-skip.json"
CACHE_VERSION = 1  # raise when the search or its texts change
MAX_CACHE_ENTRIES = 200

Progress = Callable[[str], None]
Searching = Callable[[SearchProgress], None]


def settle_self_skip(pair: LoadedPair, config: DecodeConfig, prompts: Sequence[Sequence[int]],
                     progress: Progress | None = None, searching: Searching | None = None
                     ) -> tuple[DecodeConfig, SkipChoice | None]:
    """Where the run drafts with `self`: its skip set chosen now (on `prompts`, or as given),
    the draft built and its cost measured; the config then names the set. Else as it was.
    `progress` hears what is being done; `searching`, where given, every set the search
    scores (else `progress` hears of each layer it drops)."""
    choice_of = config.drafter
    if not choice_of.uses("self"):
        return config, None
    say = progress or (lambda message: None)
    choice = choose_skip(pair, choice_of.options.skip, choice_of.options.skip_cost, prompts,
                         say, searching)
    say(f"loading the target without layers {choice.skip} as its draft")
    pair.load_self_draft(choice.skip)
    timed = pair.skip_choices.get(choice.skip)
    if timed is not None:  # timed on this loaded pair before
        choice = replace(choice, measured_cost=timed.measured_cost, file_bytes=timed.file_bytes)
    else:
        say(f"timing the self-draft (skips {choice.skip}) against the target")
        choice = replace(choice, measured_cost=measured_cost(pair, choice.skip),
                         file_bytes=draft_file_bytes(pair, choice.skip))
    pair.skip_choices[choice.skip] = choice
    options = replace(choice_of.options, skip=choice.skip)
    say(choice.label() + (f"; draft file {choice.file_bytes / 1e6:.0f} MB"
                          if choice.file_bytes else ""))
    return replace(config, drafter=replace(choice_of, options=options)), choice


def choose_skip(pair: LoadedPair, skip: str, cost: float, prompts: Sequence[Sequence[int]],
                say: Progress, searching: Searching | None = None) -> SkipChoice:
    """The set and its figures: searched down to `cost` where skip is auto, else the given
    set's agreement measured; remembered per target file and prompts."""
    target = pair.target
    if not isinstance(target, LayerSkipModel):
        raise SettingsError(f"the {target.backend} backend cannot leave layers out — use a "
                            "draft model or --ngram")
    what = f"cost={cost}" if is_auto(skip) else f"skip={skip}"
    key = _cache_key(target, prompts, f"{what}|head={head_tokens(pair.spec, target)}")
    cached = _load_cache().get(key)
    if cached is not None:
        say("the self-draft's layers were chosen on this text before (cached)")
        return SkipChoice.from_dict(cached)
    given = None if is_auto(skip) else parse_skip(skip, target.n_layers)
    say("the target continues the prompt, to choose the layers its self-draft skips")
    texts = search_texts(target, prompts)
    head = draft_head(pair)
    scorer = target.skip_scorer()
    try:
        if given is None:
            say(f"searching which of {target.n_layers} layers to skip (cost target {cost})")
            choice = search_skip(scorer, texts, cost, searching or _each_layer_dropped(say),
                                 head)
        else:
            choice = given_skip(scorer, texts, given, head)
    finally:
        scorer.close()
    entries = _load_cache()
    entries[key] = choice.to_dict()
    _save_cache(entries)
    return choice


def draft_head(pair: LoadedPair) -> DraftHead | None:
    """The tokens the self-draft's head keeps, where it keeps some only (llama.cpp)."""
    from app.models.early_exit import head_subset_ids

    tokens = head_tokens(pair.spec, pair.target)
    if not tokens:
        return None
    ids = np.asarray(head_subset_ids(pair.target.path, tokens), dtype=np.int64)
    return DraftHead(ids, pair.target.n_vocab)


def _each_layer_dropped(say: Progress) -> Searching:
    """The search's progress in words, once per layer it drops."""
    return lambda at: say(at.describe()) if at.settled else None


def search_texts(target: LanguageModel, prompts: Sequence[Sequence[int]]) -> list[list[int]]:
    """Each prompt's last PROMPT_TAIL tokens and the target's greedy continuation of it."""
    texts = []
    for prompt in prompts:
        target.truncate(0)
        logits = target.extend(list(prompt), 1)
        written: list[int] = []
        while len(written) < CONTINUATION:
            token = int(np.argmax(logits[-1]))
            written.append(token)
            if token in target.eos_ids:
                break
            logits = target.extend([token], 1)
        texts.append([*list(prompt)[-PROMPT_TAIL:], *written])
    target.truncate(0)
    return texts


def measured_cost(pair: LoadedPair, skip: str) -> float:
    """One draft step over one target step, timed in turns (medians; measure_step_costs)."""
    target_step, draft_step = measure_step_costs(pair.target,
                                                 pair.load_self_draft(skip, borrow=False))
    return draft_step / target_step if target_step > 0 else 0.0


def draft_file_bytes(pair: LoadedPair, skip: str) -> int:
    """The size of the draft's own file (llama.cpp); 0 where it shares the target's."""
    model = pair.self_draft(skip)
    path = Path(model.path)
    if model.path == pair.target.path or not path.is_file():
        return 0
    return path.stat().st_size


def _cache_key(target: LanguageModel, prompts: Sequence[Sequence[int]], what: str) -> str:
    path = Path(target.path)
    stat = path.stat()
    text = hashlib.sha256(json.dumps([list(p)[-PROMPT_TAIL:] for p in prompts]).encode())
    return json.dumps([CACHE_VERSION, target.backend, str(path.resolve()), stat.st_size,
                       stat.st_mtime_ns, text.hexdigest()[:16], CONTINUATION, what])


def _load_cache() -> dict[str, dict[str, Any]]:
    return read_cache(CACHE_NAME, CACHE_VERSION)


def _save_cache(entries: dict[str, dict[str, Any]]) -> None:
    write_cache(CACHE_NAME, CACHE_VERSION, entries, MAX_CACHE_ENTRIES)  # the newest


def layer_count(path: str) -> int | None:
    """How many layers a target has, read from its file without loading it (a GGUF's
    <arch>.block_count, a transformers folder's config.json), to check a skip set against
    before a run; None where the file does not say or does not read."""
    from app.errors import ModelFileError
    from app.models.gguf_check import read_metadata

    file = Path(path)
    try:
        if file.is_dir():
            config = json.loads((file / "config.json").read_text(encoding="utf-8"))
            count = next((config.get(k) for k in ("num_hidden_layers", "n_layer", "num_layers")
                          if isinstance(config.get(k), int)), None)
        elif file.is_file():
            arch = read_metadata(file, {"general.architecture"}).get("general.architecture")
            key = f"{arch}.block_count"
            count = read_metadata(file, {key}).get(key) if arch else None
        else:
            return None
    except (OSError, ValueError, ModelFileError):
        return None
    return count if isinstance(count, int) and count > 0 else None
