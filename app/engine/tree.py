"""Tree speculation: several draft branches judged in one target pass.

A node's children are alternatives for the same position. Under greedy decoding the target
follows the child equal to its argmax. Under sampling the children of a node are tested in
turn with recursive rejection sampling (SpecInfer's multi-step speculative sampling; Jeon et
al. 2024 for siblings drawn without replacement):
  - sibling j was drawn from q_j: the draft's row with the earlier siblings removed and
    renormalised (or, for a deterministic guess such as a lookup, one-hot at its token);
  - it passes with probability min(1, p_j(x) / q_j(x));
  - after a rejection the target side becomes p_{j+1} = norm(max(0, p_j - q_j));
  - when every sibling fails, the token is drawn from what is left of p.
Each test is a standard speculative step against the distribution its sibling really came
from, so the emitted tokens are distributed exactly as the target's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from app.engine import acceptance
from app.engine.diagnostics import Judged
from app.engine.records import (
    ORIGIN_ACCEPTED,
    ORIGIN_BONUS,
    ORIGIN_REPLACEMENT,
    CopySource,
    TokenRecord,
    Translation,
)
from app.engine.sampling import SamplingParams, choose, fit_width
from app.engine.speculative import Rows, Verdict, token_record

TokenText = Callable[[int], str]

# A greedy decision read from a row the runtime may have computed in another summation
# order than plain decoding (see LanguageModel.extend_tree) is trusted only when the top two
# log-probabilities (= logits) are further apart than the kernels can move them: the measured
# bound where there is one (DecodeConfig.tie_bound, set from app.analysis.kernel_noise), else
# this default, which covers float rounding alone (~1e-6) and not a quantised kernel's noise.
NEAR_TIE = 1e-3


@dataclass
class DraftTree:
    """Draft nodes in an order where parents come first and the first path (each node's
    first child, from the root down) takes indexes 0, 1, 2, ...; siblings keep the order
    they were drawn in."""

    tokens: list[int]
    parents: list[int]  # index of the parent node; -1 for a child of the last committed token
    # the row node i's sibling group was drawn from (the same array for all of them), before
    # earlier siblings were removed; None: chosen deterministically (a lookup), q is one-hot
    q_rows: list[np.ndarray | None]
    # per node, where a copying drafter found it (app.engine.drafters.suffix); None for the others
    copied_from: list[CopySource] | None = None
    # per node, how a draft from another vocabulary became it
    # (app.engine.drafters.draft_model.cross_vocab)
    translated: list[Translation] | None = None

    def __post_init__(self) -> None:
        if not len(self.tokens) == len(self.parents) == len(self.q_rows):
            raise ValueError("a draft tree needs one parent and one q row per token")
        if self.copied_from is not None and len(self.copied_from) != len(self.tokens):
            raise ValueError("a draft tree's copy sources must be one per token")
        for i, parent in enumerate(self.parents):
            if not -1 <= parent < i:
                raise ValueError(f"node {i} has parent {parent}: parents must come first")

    def __len__(self) -> int:
        return len(self.tokens)

    def children(self, node: int) -> list[int]:
        return [i for i, parent in enumerate(self.parents) if parent == node]

    def depths(self) -> list[int]:
        depths: list[int] = []
        for parent in self.parents:
            depths.append(1 if parent < 0 else depths[parent] + 1)
        return depths

    def first_path_length(self) -> int:
        """How many leading nodes form a chain from the root (node i the parent of i + 1)."""
        n = 0
        while n < len(self.parents) and self.parents[n] == n - 1:
            n += 1
        return n

    def limited_to_depth(self, max_depth: int) -> DraftTree:
        """The nodes at most max_depth deep (the order, and so the first path, is kept)."""
        depths = self.depths()
        new_index: dict[int, int] = {-1: -1}
        tokens: list[int] = []
        parents: list[int] = []
        rows: list[np.ndarray | None] = []
        kept: list[int] = []
        for i, depth in enumerate(depths):
            if depth <= max_depth:
                new_index[i] = len(tokens)
                tokens.append(self.tokens[i])
                parents.append(new_index[self.parents[i]])
                rows.append(self.q_rows[i])
                kept.append(i)
        sources, translated = self.copied_from, self.translated
        return DraftTree(tokens, parents, rows,
                         None if sources is None else [sources[i] for i in kept],
                         None if translated is None else [translated[i] for i in kept])


class TreeBuilder:
    """Grows a DraftTree node by node within a node budget, keeping its order rules."""

    def __init__(self, width: int, max_nodes: int) -> None:
        self.width = width
        self.max_nodes = max_nodes
        self.tokens: list[int] = []
        self.parents: list[int] = []
        self.q_rows: list[np.ndarray | None] = []

    @property
    def full(self) -> bool:
        return len(self.tokens) >= self.max_nodes

    def n_children(self, parent: int) -> int:
        return sum(1 for p in self.parents if p == parent)

    def child(self, parent: int, token: int) -> int | None:
        for i, p in enumerate(self.parents):
            if p == parent and self.tokens[i] == token:
                return i
        return None

    def add(self, parent: int, token: int, q_row: np.ndarray | None) -> int | None:
        """Add a child unless the budget or the parent's width is spent; its index or None."""
        if self.full or self.n_children(parent) >= self.width:
            return None
        self.tokens.append(token)
        self.parents.append(parent)
        self.q_rows.append(q_row)
        return len(self.tokens) - 1

    def tree(self) -> DraftTree:
        return DraftTree(self.tokens, self.parents, self.q_rows)


def without_earlier_siblings(q: np.ndarray, earlier: Sequence[int]) -> np.ndarray:
    """The row the next sibling is drawn from: q with the siblings drawn before removed."""
    if not earlier:
        return q
    rest = q.copy()
    rest[list(earlier)] = 0.0
    total = rest.sum()
    return np.asarray(rest / total) if total > 0 else rest


def one_hot(token: int, vocab: int) -> np.ndarray:
    row = np.zeros(vocab)
    row[token] = 1.0
    return row


def near_tie(p: np.ndarray, bound: float = NEAR_TIE) -> bool:
    """Whether the best two tokens of a row are too close (in log-probability, which for a
    greedy row is the logit gap) to trust its argmax."""
    top_two = np.partition(p, p.shape[0] - 2)[-2:]
    low, high = float(top_two.min()), float(top_two.max())
    return low > 0 and np.log(high) - np.log(low) < bound


@dataclass
class TreeVerdict(Verdict):
    path: list[int] = field(default_factory=list)  # accepted nodes, root side first


def verify_tree(
    tree: DraftTree,
    p_rows: Rows,
    params: SamplingParams,
    rng: np.random.Generator,
    text_of: TokenText,
    start_pos: int = 0,
    exact_rows: Sequence[bool] | None = None,
    tie_bound: float = NEAR_TIE,
) -> TreeVerdict:
    """Judge a draft tree against the target's rows: p_rows[0] follows the last committed
    token, p_rows[i + 1] follows node i. exact_rows[r] False means row r may differ from
    plain decoding in the last bits; a greedy near-tie there (top two within `tie_bound`
    logits) ends the step before it."""
    depths = tree.depths()
    records: list[TokenRecord | None] = [None] * len(tree)
    verdict = TreeVerdict([], [], [])
    node = -1
    while True:
        p = p_rows[node + 1]
        if (verdict.path and params.greedy and exact_rows is not None
                and not exact_rows[node + 1] and near_tie(p, tie_bound)):
            break
        children = tree.children(node)
        pos = start_pos + len(verdict.path)
        chosen, final_p, judged = _judge_children(tree, children, p, params, rng, text_of, pos)
        for child, (record, _, _) in zip(children, judged, strict=False):  # tested in order
            records[child] = record
        verdict.judged.extend(judged)
        if chosen is None:
            token = choose(final_p, params, rng)
            if judged:
                last = judged[-1][0]
                last.replacement, last.replacement_text = token, text_of(token)
                last.residual_used = not params.greedy
            verdict.emit(token, ORIGIN_REPLACEMENT if children else ORIGIN_BONUS)
            break
        verdict.path.append(chosen)
        verdict.emit(tree.tokens[chosen], ORIGIN_ACCEPTED)
        node = chosen
    for i, tested in enumerate(records):
        record = tested or _untested_record(tree, i, start_pos + depths[i] - 1, text_of)
        record.parent, record.depth = tree.parents[i], depths[i]
        verdict.records.append(record)
    return verdict


def _judge_children(
    tree: DraftTree,
    children: list[int],
    p: np.ndarray,
    params: SamplingParams,
    rng: np.random.Generator,
    text_of: TokenText,
    pos: int,
) -> tuple[int | None, np.ndarray, list[Judged]]:
    """Test a node's children in order; returns the one that passed (or None), the target
    distribution left for the replacement, and each tested child's record with its rows."""
    judged: list[Judged] = []
    drawn: list[int] = []
    for child in children:
        token = tree.tokens[child]
        base = tree.q_rows[child]
        if base is None:
            q = one_hot(token, p.shape[0])
        else:  # over the target's width when the vocabularies differ by padding
            q = without_earlier_siblings(fit_width(base, p.shape[0]), drawn)
        judgement = acceptance.judge(token, p, q, params, rng)
        judged.append((token_record(pos, token, p, q, judgement, text_of), p, q))
        if judgement.accepted:
            return child, p, judged
        if not params.greedy:
            p = acceptance.residual_distribution(p, q)
        drawn.append(token)
    return None, p, judged


def _untested_record(tree: DraftTree, node: int, pos: int, text_of: TokenText) -> TokenRecord:
    """A node the verdict never reached: the draft's guess, with no target probability."""
    token, q = tree.tokens[node], tree.q_rows[node]
    return TokenRecord(pos=pos, token=token, text=text_of(token),
                       q=1.0 if q is None else float(q[token]), p=0.0, u=None, accepted=None)
