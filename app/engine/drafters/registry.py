"""What drafts, by name (llama.cpp's `--spec-type NAME[,NAME...]`): each drafter module
declares one Entry (its name, its factory, its label) and this map lists them. A run's
DecodeConfig.drafter is a DrafterChoice: the names, in order of preference, and their options.

  draft    a draft model file (-md); one of another vocabulary drafts across it (TLI, or
           string-level per the `cross_vocab` option)
  ngram    prompt lookup with the edit layer: copies what followed the context's last tokens
  suffix   suffix decoding over the prompt, the output and (option `memory`) earlier runs
  mtp      the target's own multi-token-prediction layers (its GGUF's NextN blocks)
  heads    draft heads trained on the target's hidden states (option `heads`: the file)
  self     the target's own first N layers (option `layers`)

A list chains them: the first that has a draft for the context drafts (`ngram,draft`: the
lookup where the context repeats itself, the draft model elsewhere). A drafter that always
drafts (a model) ends a chain: nothing after it would ever be asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from app.engine.drafters import Drafter, DrafterOptions, Entry, StopRule
from app.engine.drafters.chain import ChainDrafter
from app.engine.drafters.draft_model.cross_vocab import ENTRY as DRAFT
from app.engine.drafters.heads import ENTRY as HEADS
from app.engine.drafters.lookup.edits import ENTRY as NGRAM
from app.engine.drafters.mtp import ENTRY as MTP
from app.engine.drafters.self_draft import ENTRY as SELF
from app.engine.drafters.suffix import ENTRY as SUFFIX
from app.errors import SettingsError

DRAFTERS: dict[str, Entry] = {e.name: e for e in (DRAFT, NGRAM, SUFFIX, MTP, HEADS, SELF)}
# llama.cpp's own words for the same drafters
SYNONYMS = {"draft-simple": "draft", "draft-mtp": "mtp"}


@dataclass(frozen=True)
class DrafterChoice:
    """What drafts: registry names in order of preference (empty: plain decoding), and
    their options."""

    names: tuple[str, ...] = ()
    options: DrafterOptions = field(default_factory=DrafterOptions)

    def __bool__(self) -> bool:
        return bool(self.names)

    def uses(self, name: str) -> bool:
        return name in self.names

    @property
    def copies(self) -> bool:
        """Whether a lookup leads it (its drafts are long: draft-max defaults higher)."""
        return any(DRAFTERS[n].free for n in self.names)

    def validate(self) -> None:
        for name in self.names:
            if name not in DRAFTERS:
                raise SettingsError(f"unknown drafter {name!r} — use one of "
                                    f"{', '.join(DRAFTERS)} (a comma list chains them)")
        if len(set(self.names)) != len(self.names):
            raise SettingsError(f"{','.join(self.names)} names a drafter twice — name each "
                                "once")
        for name in self.names[:-1]:
            if not DRAFTERS[name].free:
                raise SettingsError(
                    f"{name} always drafts, so what follows it in {','.join(self.names)} "
                    f"would never run — put {name} last")
        for entry in (DRAFTERS[n] for n in self.names):
            missing = entry.needs(self.options)
            if missing:
                raise SettingsError(missing)
        o = self.options
        if o.memory and not self.uses("suffix"):
            raise SettingsError("--draft-memory is the memory of suffix decoding — add it: "
                                "--spec-type suffix (or --suffix)")
        if o.cross_vocab != "auto" and not self.uses("draft"):
            raise SettingsError(f"--cross-vocab {o.cross_vocab} is for a draft model — add "
                                "draft (--spec-type draft, -md FILE)")

    def label(self, draft_file: str = "") -> str:
        """What drafts, as the trace header names it (`draft_file`: the draft model's)."""
        return " + ".join(DRAFTERS[n].label(self.options, draft_file) for n in self.names)


def parse_names(text: str) -> tuple[str, ...]:
    """`ngram,draft` as names (llama.cpp's words accepted too); checked by validate()."""
    names = tuple(SYNONYMS.get(part.strip(), part.strip()) for part in text.split(","))
    if not all(names):
        raise SettingsError(f"--spec-type takes names like ngram or ngram,draft (got {text!r})")
    return names


def build_drafter(choice: DrafterChoice, sources: object, rule: StopRule) -> Drafter | None:
    """A fresh drafter for one run (drafters keep per-run state), or None for plain decoding."""
    if not choice:
        return None
    choice.validate()
    last = len(choice.names) - 1
    drafters = [DRAFTERS[name].build(sources, choice.options, rule, i < last)
                for i, name in enumerate(choice.names)]
    return drafters[0] if len(drafters) == 1 else ChainDrafter(drafters)


def choice_to_dict(choice: DrafterChoice) -> dict[str, Any]:
    return {"names": list(choice.names),
            "options": {f.name: getattr(choice.options, f.name) for f in fields(DrafterOptions)}}


def choice_from_dict(data: dict[str, Any]) -> DrafterChoice:
    known = {f.name for f in fields(DrafterOptions)}
    options = DrafterOptions(**{k: v for k, v in data.get("options", {}).items() if k in known})
    return DrafterChoice(tuple(data.get("names", ())), options)
