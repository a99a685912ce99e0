"""What drafts, by name (llama.cpp's `--spec-type NAME[,NAME...]`): each drafter module
declares one Entry (its name, its factory, its label) and this map lists them. A run's
DecodeConfig.drafter is a DrafterChoice (plain data, app.engine.decode_config): the names, in
order of preference, and their options; check() checks one and build_drafter() builds it.

  draft    a draft model file (-md); one of another vocabulary drafts across it (TLI, or
           string-level per the `cross_vocab` option)
  ngram    prompt lookup with the edit layer: copies what followed the context's last tokens
  suffix   suffix decoding over the prompt, the output and (option `memory`) earlier runs
  mtp      the target's own multi-token-prediction layers (its GGUF's NextN blocks)
  heads    draft heads trained on the target's hidden states (option `heads`: the file)
  self     the target with a set of its layers skipped (option `skip`: ranges, or auto:
           chosen on the run's text; `skip_cost`: the cost the choice aims for)

A list chains them: the first that has a draft for the context drafts (`ngram,draft`: the
lookup where the context repeats itself, the draft model elsewhere). A drafter that always
drafts (a model) ends a chain: nothing after it would ever be asked.
"""

from __future__ import annotations

from app.engine.decode_config import DrafterChoice, StopRule
from app.engine.drafters import Drafter, Entry
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


def entry(name: str) -> Entry:
    found = DRAFTERS.get(name)
    if found is None:
        raise SettingsError(f"unknown drafter {name!r} — use one of {', '.join(DRAFTERS)} (a "
                            "comma list chains them)")
    return found


def copies(choice: DrafterChoice) -> bool:
    """Whether a lookup leads the choice (its drafts are long: draft-max defaults higher)."""
    return any(entry(n).free for n in choice.names)


def check(choice: DrafterChoice) -> None:
    """That the choice can run: known names, each once, a drafter that always drafts last,
    what each needs given, and no option for a drafter it leaves out. Called once, where the
    choice is made from what a user gave (the command line)."""
    entries = [entry(name) for name in choice.names]
    if len(set(choice.names)) != len(choice.names):
        raise SettingsError(f"{','.join(choice.names)} names a drafter twice — name each once")
    for name, found in zip(choice.names[:-1], entries, strict=False):
        if not found.free:
            raise SettingsError(
                f"{name} always drafts, so what follows it in {','.join(choice.names)} "
                f"would never run — put {name} last")
    for found in entries:
        missing = found.needs(choice.options)
        if missing:
            raise SettingsError(missing)
    o = choice.options
    if o.memory and not choice.uses("suffix"):
        raise SettingsError("--draft-memory is the memory of suffix decoding — add it: "
                            "--spec-type suffix (or --suffix)")
    if o.cross_vocab != "auto" and not choice.uses("draft"):
        raise SettingsError(f"--cross-vocab {o.cross_vocab} is for a draft model — add "
                            "draft (--spec-type draft, -md FILE)")


def label(choice: DrafterChoice, draft_file: str = "") -> str:
    """What drafts, as the trace header names it (`draft_file`: the draft model's)."""
    return " + ".join(entry(n).label(choice.options, draft_file) for n in choice.names)


def parse_names(text: str) -> tuple[str, ...]:
    """`ngram,draft` as names (llama.cpp's words accepted too); checked by check()."""
    names = tuple(SYNONYMS.get(part.strip(), part.strip()) for part in text.split(","))
    if not all(names):
        raise SettingsError(f"--spec-type takes names like ngram or ngram,draft (got {text!r})")
    return names


def build_drafter(choice: DrafterChoice, sources: object, rule: StopRule) -> Drafter | None:
    """A fresh drafter for one run (drafters keep per-run state), or None for plain decoding."""
    if not choice.names:
        return None
    last = len(choice.names) - 1
    drafters = [entry(name).build(sources, choice.options, rule, i < last)
                for i, name in enumerate(choice.names)]
    return drafters[0] if len(drafters) == 1 else ChainDrafter(drafters)
