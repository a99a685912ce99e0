"""The settings of one generation: what drafts, how many tokens, how long a draft, chain or
tree, and how tokens are sampled; validated with messages a user can act on."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.engine.drafters import StopRule, TreeShape
from app.engine.drafters.registry import DrafterChoice
from app.engine.drafters.suffix import SuffixOptions
from app.engine.sampling import SamplingParams
from app.engine.tree import NEAR_TIE
from app.errors import SettingsError

MAX_DRAFT = 256
MAX_TREE_NODES = 32
MAX_TREE_WIDTH = 8


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
    # what drafts (--spec-type): names from app.engine.drafters.registry and their options; empty:
    # plain decoding
    drafter: DrafterChoice = field(default_factory=DrafterChoice)
    suffix: SuffixOptions = field(default_factory=SuffixOptions)  # suffix decoding's reach
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
        self.drafter.validate()
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
        self.sampling.validate()
        self.suffix.validate()
