"""The settings of one generation, as plain data: what drafts (registry names and each
drafter's options), how many tokens, how long a draft, chain or tree, and how tokens are
sampled; numbers validated with messages a user can act on. Nothing here imports a drafter:
the registry (app.engine.drafters.registry) checks a choice's names once and builds it."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from app.engine.sampling import SamplingParams
from app.engine.tree import NEAR_TIE
from app.errors import SettingsError

MAX_DRAFT = 256
MAX_TREE_NODES = 32
MAX_TREE_WIDTH = 8



@dataclass(frozen=True)
class StopRule:
    """Where a model's draft ends before its budget (llama.cpp's --draft-p-min and
    --draft-min): not before draft_min tokens, then where its best candidate is below p_min."""

    p_min: float = 0.0
    draft_min: int = 0


NO_EARLY_STOP = StopRule()  # a draft runs to its budget (or its end of text)


@dataclass(frozen=True)
class TreeShape:
    """How wide a draft tree may grow: children per node, nodes per pass, and (for a draft
    model) how likely a further candidate must be to get a branch (llama.cpp's p-split)."""

    width: int = 1
    max_nodes: int = 16
    p_split: float = 0.1


@dataclass(frozen=True)
class SuffixOptions:
    """How far suffix decoding drafts, with SuffixDecoding's defaults (ArcticInference and
    vLLM: max_spec_factor 1.0, max_spec_offset 0, min_token_prob 0.1, tree depth 64)."""

    factor: float = 1.0  # a match of m tokens drafts at most factor * m + offset tokens
    offset: float = 0.0
    min_prob: float = 0.1  # a token whose estimated probability is lower is not drafted
    max_depth: int = 64  # the trees' depth: a match and its draft are this long at most

    def validate(self) -> None:
        if not self.factor > 0:
            raise SettingsError(f"--spec-factor must be > 0 (got {self.factor}); the "
                                "paper's 1.0 drafts as many tokens as the match is long")
        if self.offset < 0:
            raise SettingsError(f"--spec-offset must be 0 or more (got {self.offset})")
        if not 0.0 <= self.min_prob < 1.0:
            raise SettingsError(f"--spec-min-prob must be in [0, 1) (got {self.min_prob})")


@dataclass(frozen=True)
class DrafterOptions:
    """Each drafter's own settings, in its own section (a drafter that grows a setting adds
    it here); those of drafters not chosen keep their defaults."""

    # draft: a draft model of another vocabulary drafts by tli, string or auto (tli)
    cross_vocab: str = "auto"
    # self: the target's layers it skips, as ranges ("6-11,15-20"), or "auto" (also ""):
    # chosen by measurement on the run's text (app.engine.drafters.self_skip)
    skip: str = ""
    # self: the draft's estimated cost in target steps the search aims for. On the demo
    # target (docs/benchmarks.md, "Self-speculation") 0.75 kept 19 of 28 layers, measured
    # at 0.68-0.71 of a step, accepting 0.66-0.70 of its tokens at k = 3; 0.6 kept 14 and
    # accepted 0.30, 0.7 kept 17 and accepted 0.47 (llama.cpp)
    skip_cost: float = 0.75
    # heads: the heads file (draftlens heads train)
    heads: str = ""
    # suffix: a file of earlier outputs to draft from, updated after each run ("" = none),
    # and how far it drafts
    memory: str = ""
    suffix: SuffixOptions = field(default_factory=SuffixOptions)


@dataclass(frozen=True)
class DrafterChoice:
    """What drafts: registry names in order of preference (empty: plain decoding), and
    their options. Checked by the registry (check), once, where it is made from user input."""

    names: tuple[str, ...] = ()
    options: DrafterOptions = field(default_factory=DrafterOptions)

    def __bool__(self) -> bool:
        return bool(self.names)

    def uses(self, name: str) -> bool:
        return name in self.names


def choice_to_dict(choice: DrafterChoice) -> dict[str, Any]:
    options = {f.name: getattr(choice.options, f.name) for f in fields(DrafterOptions)}
    options["suffix"] = {f.name: getattr(choice.options.suffix, f.name)
                         for f in fields(SuffixOptions)}
    return {"names": list(choice.names), "options": options}


def choice_from_dict(data: dict[str, Any]) -> DrafterChoice:
    known = {f.name for f in fields(DrafterOptions)}
    given = {k: v for k, v in data.get("options", {}).items() if k in known}
    if isinstance(given.get("suffix"), dict):
        given["suffix"] = SuffixOptions(**given["suffix"])
    return DrafterChoice(tuple(data.get("names", ())), DrafterOptions(**given))


@dataclass
class DecodeConfig:
    n_predict: int = 128
    draft_max: int = 8
    draft_min: int = 0
    draft_p_min: float = 0.0
    adaptive: bool = False
    # fixed k: take a plain step now and then to price plain decoding beside the draft (the
    # window's inspect mode); adaptive k prices plain steps by itself
    price_plain: bool = False
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop_at_eos: bool = True
    tree_width: int = 1  # children a draft node may have; 1 drafts a chain
    tree_nodes: int = 16  # draft nodes per pass at most, in a tree
    draft_p_split: float = 0.1  # a draft model branches where another candidate has this
    # what drafts (--spec-type): names from app.engine.drafters.registry and their options;
    # empty: plain decoding
    drafter: DrafterChoice = field(default_factory=DrafterChoice)
    # logits: a greedy tree row the runtime says may be inexact is not trusted when its top
    # two are closer than this (check-exact sets the bound it measured on the tree rows)
    tie_bound: float = NEAR_TIE

    @property
    def stop_rule(self) -> StopRule:
        return StopRule(self.draft_p_min, self.draft_min)

    @property
    def tree_shape(self) -> TreeShape:
        return TreeShape(self.tree_width, self.tree_nodes, self.draft_p_split)

    def validate(self) -> None:
        """The numbers; what drafts is the registry's to check (registry.check)."""
        if self.n_predict <= 0:
            raise SettingsError(f"n-predict must be > 0 (got {self.n_predict})")
        if not 1 <= self.draft_max <= MAX_DRAFT:
            raise SettingsError(
                f"draft-max must be between 1 and {MAX_DRAFT} (got {self.draft_max}); "
                "typical values are 2-16 for a draft model, up to 64 for n-gram lookup"
            )
        if not 0 <= self.draft_min <= self.draft_max:
            raise SettingsError(
                f"draft-min must be between 0 and draft-max ({self.draft_max}), "
                f"got {self.draft_min}"
            )
        if not 0.0 <= self.draft_p_min < 1.0:
            raise SettingsError(f"draft-p-min must be in [0, 1) (got {self.draft_p_min})")
        if not 1 <= self.tree_width <= MAX_TREE_WIDTH:
            raise SettingsError(
                f"tree-width must be between 1 (a chain) and {MAX_TREE_WIDTH} "
                f"(got {self.tree_width}); 2-3 is typical"
            )
        if not 1 <= self.tree_nodes <= MAX_TREE_NODES:
            raise SettingsError(
                f"tree-nodes must be between 1 and {MAX_TREE_NODES} (got {self.tree_nodes})"
            )
        if not 0.0 <= self.draft_p_split < 1.0:
            raise SettingsError(f"draft-p-split must be in [0, 1) (got {self.draft_p_split})")
        self.drafter.options.suffix.validate()
        self.sampling.validate()
