"""Where a speculative run's greedy text first differs from plain decoding, and why.

With llama.cpp's fast CPU kernels a verify pass over k+1 tokens sums in another order than a
single-token step, so logits differ in the last bits and greedy output can flip where the
target's two best tokens are nearly tied. MarginTap wraps the target and notes, for every
position it scores, the top two tokens and their logits; explain_divergence compares two runs
at their first differing position, against the kernels' disagreement measured on the same
model (app.analysis.kernel_noise).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from app.engine.protocol import (
    HiddenStateModel,
    LanguageModel,
    LayerSkipModel,
    MtpHeads,
    MtpModel,
    OutputHeadModel,
    ReferenceGenerator,
    SkipDraftModel,
    SkipScorer,
)

# the best tokens noted per position: with three or more nearly tied, the kernels can make
# each run emit a token that is not the other run's runner-up, and the flip is still theirs
LEADERS = 4


@dataclass
class TopTwo:
    first: int
    second: int
    first_logit: float
    second_logit: float
    prob_gap: float  # p(first) - p(second) after a plain softmax
    # the LEADERS best tokens' logits (first and second among them)
    leaders: dict[int, float] = field(default_factory=dict)

    @property
    def logit_gap(self) -> float:
        return self.first_logit - self.second_logit

    def logit(self, token: int) -> float | None:
        """The token's logit where it was among the best noted, else None."""
        known = {self.first: self.first_logit, self.second: self.second_logit, **self.leaders}
        return known.get(token)


def top_two(logits: np.ndarray) -> TopTwo:
    n = min(LEADERS, logits.shape[0])
    # n argmax calls on a copy: a quarter of argpartition's time on a 150k vocabulary, best
    # first, and equal logits by token id, as argmax breaks ties
    rest = np.array(logits, dtype=float, copy=True) if logits.dtype.kind != "f" else logits.copy()
    best_n = np.empty(n, dtype=np.int64)
    for i in range(n):
        best_n[i] = int(rest.argmax())
        rest[best_n[i]] = -np.inf
    first, second = int(best_n[0]), int(best_n[min(1, n - 1)])
    best, runner = float(logits[first]), float(logits[second])
    total = float(np.exp(logits - best).sum())
    return TopTwo(first, second, best, runner, (1.0 - float(np.exp(runner - best))) / total,
                  {int(t): float(logits[t]) for t in best_n})


class MarginTap:
    """A LanguageModel that passes everything to `model` and records, for each cache
    position it returns logits for, the top two tokens (the last pass over a position wins,
    which is the one whose token was kept).

    The model's optional capabilities (app.engine.protocol: hidden states, output rows, early
    exit, its own generate, MTP layers) pass through as methods of the tap's own class, built
    for the model it wraps: from Python 3.12 isinstance() against a protocol looks attributes
    up statically and never asks __getattr__, so a capability passed only there is lost."""

    def __new__(cls, model: LanguageModel, *args: Any, **kwargs: Any) -> MarginTap:
        if cls is MarginTap:  # a subclass (a test's noisy model) keeps its own class
            cls = _tap_class(tuple(mixin for protocol, mixin in _CAPABILITIES
                                   if isinstance(model, protocol)))
        return super().__new__(cls)

    def __init__(self, model: LanguageModel) -> None:
        self.model = model
        self.backend = model.backend
        self.device = model.device
        self.name = model.name
        self.path = model.path
        self.n_vocab = model.n_vocab
        self.n_ctx = model.n_ctx
        self.eos_ids = model.eos_ids
        self.caveats = model.caveats
        self.sampler_order = model.sampler_order
        self.top: dict[int, TopTwo] = {}
        # the last tree pass until its path is kept: (cache length before it, n_skip, rows)
        self._tree: tuple[int, int, np.ndarray] | None = None

    @property
    def n_cached(self) -> int:
        return self.model.n_cached

    @property
    def speed_key(self) -> str:
        return self.model.speed_key

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        return self.model.tokenize(text, add_special)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.model.detokenize(ids)

    def token_text(self, token: int) -> str:
        return self.model.token_text(token)

    def chat_prompt(self, user_text: str) -> str:
        return self.model.chat_prompt(user_text)

    def extend(self, ids: Sequence[int], n_logits: int) -> np.ndarray:
        end = self.model.n_cached + len(ids)
        logits = self.model.extend(ids, n_logits)
        self._note(end, logits)
        return logits

    def _note(self, end: int, logits: np.ndarray) -> None:
        """The top two of each returned row; the pass ended at cache position `end`, so row
        r of n predicts the token at position end - n + r + 1."""
        n = logits.shape[0]
        for row in range(n):
            self.top[end - n + row + 1] = top_two(logits[row])

    def __getattr__(self, name: str) -> Any:
        # anything else the model has (a backend's own extras) passes through too
        if name == "model":
            raise AttributeError(name)
        return getattr(self.model, name)

    def extend_tree(
        self, ids: Sequence[int], parents: Sequence[int], n_skip: int
    ) -> tuple[np.ndarray, list[bool]]:
        start = self.model.n_cached
        rows, exact = self.model.extend_tree(ids, parents, n_skip)
        self._tree = (start, n_skip, rows)
        return rows, exact

    def keep_path(self, path: Sequence[int]) -> None:
        """A tree row's position is known once its path is kept: path node j sits at cache
        position start + j, and its row predicts the token after it."""
        self.model.keep_path(path)
        if self._tree is not None:
            start, n_skip, rows = self._tree
            self._tree = None
            for j, node in enumerate(path):
                if node >= n_skip:
                    self.top[start + j + 1] = top_two(rows[node - n_skip])

    def truncate(self, n: int) -> None:
        self.model.truncate(n)

    def close(self) -> None:
        self.model.close()


class _PassesHiddenStates:
    model: Any
    _note: Any

    @property
    def n_embd(self) -> int:
        return int(self.model.n_embd)

    def extend_hidden(self, ids: Sequence[int], n_logits: int) -> tuple[np.ndarray, np.ndarray]:
        end = self.model.n_cached + len(ids)
        logits, hidden = self.model.extend_hidden(ids, n_logits)
        self._note(end, logits)
        return logits, hidden


class _PassesOutputRows:
    model: Any

    def output_rows(self, ids: Sequence[int]) -> np.ndarray:
        rows: np.ndarray = self.model.output_rows(ids)
        return rows


class _PassesLayerSkip:
    model: Any

    @property
    def n_layers(self) -> int:
        return int(self.model.n_layers)

    def skip_scorer(self) -> SkipScorer:
        scorer: SkipScorer = self.model.skip_scorer()
        return scorer


class _PassesSkipDraft:
    model: Any

    def skip_draft(self, skip: frozenset[int], borrow: bool = True) -> LanguageModel:
        draft: LanguageModel = self.model.skip_draft(skip, borrow)
        return draft


class _PassesReferenceGenerate:
    model: Any

    @property
    def reference_passes(self) -> int:
        return int(self.model.reference_passes)

    def reference_generate(self, prompt_ids: Sequence[int], n_new: int,
                           assistant: object | None = None) -> list[int]:
        out: list[int] = self.model.reference_generate(prompt_ids, n_new, assistant)
        return out


class _PassesMtp:
    model: Any

    @property
    def n_mtp_heads(self) -> int:
        return int(self.model.n_mtp_heads)

    def mtp_heads(self) -> MtpHeads:
        heads: MtpHeads = self.model.mtp_heads()
        return heads


_CAPABILITIES: tuple[tuple[type, type], ...] = (
    (HiddenStateModel, _PassesHiddenStates), (OutputHeadModel, _PassesOutputRows),
    (LayerSkipModel, _PassesLayerSkip), (SkipDraftModel, _PassesSkipDraft),
    (ReferenceGenerator, _PassesReferenceGenerate),
    (MtpModel, _PassesMtp))


@functools.cache
def _tap_class(mixins: tuple[type, ...]) -> type[MarginTap]:
    """MarginTap with these capabilities' methods (one class per combination)."""
    if not mixins:
        return MarginTap
    name = "MarginTap+" + "+".join(m.__name__.removeprefix("_Passes") for m in mixins)
    return type(name, (MarginTap, *mixins), {})


@dataclass
class Divergence:
    position: int  # index in the generated text (0 = first generated token)
    plain_token: int
    other_token: int
    plain_text: str
    other_text: str
    plain_logit_gap: float | None  # the target's top-two gap there, in the plain run
    other_logit_gap: float | None  # and in the other (speculative) run
    plain_prob_gap: float | None
    other_prob_gap: float | None
    near_tie: bool
    # how far logit(plain token) - logit(other token) moved between the runs: the two
    # margins added, known when the two tokens are the target's top two in both runs
    gap_moved: float | None = None
    # the most the kernels moved a top-two gap between one-token and multi-token passes on
    # this model and machine (app.analysis.kernel_noise); None where not measured
    noise_bound: float | None = None
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        def gap(logit: float | None, prob: float | None) -> str:
            return "not recorded" if logit is None else f"{logit:.4f} (p gap {prob:.4f})"

        verdict = "a near-tie" if self.near_tie else "NOT a near-tie"
        return (f"first difference at generated token {self.position}: plain "
                f"{self.plain_text!r}, speculative {self.other_text!r}; top-two logit gap "
                f"{gap(self.plain_logit_gap, self.plain_prob_gap)} plain, "
                f"{gap(self.other_logit_gap, self.other_prob_gap)} speculative; "
                f"{self.reason}: {verdict}")


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def judge_flip(plain_token: int, other_token: int, plain: TopTwo | None,
               other: TopTwo | None, noise_bound: float,
               text_of: Any = str) -> tuple[bool, float | None, str]:
    """Whether the kernels alone can have flipped plain_token to other_token: (near-tie,
    how far the gap between the two moved, why).

    Each run chose its token by argmax, so logit(plain) - logit(other) was +plain gap in the
    plain run and -other gap in the speculative one: it moved by the two margins added. The
    kernels can move a top-two gap by at most the measured bound, so the flip is theirs only
    if both margins together fit within it. Judging one run's margin alone would call a flip
    a near-tie whenever either run happened to be close, however far the other was.
    """
    if plain is None or other is None:
        return False, None, "the target's margins were not recorded there"
    if other.first != other_token:
        return False, None, (f"the target's own best token in the speculative run was "
                             f"{text_of(other.first)!r}, not the one emitted: the verify rule "
                             "chose it")
    if plain.first != plain_token:
        return False, None, "the plain run's target did not prefer the token it emitted"
    logits = (plain.logit(other_token), other.logit(plain_token))
    if logits[0] is None or logits[1] is None:
        return False, None, (f"the two tokens are not among the target's {LEADERS} best in "
                             "both runs")
    # each run's margin of its own token over the other run's, added (the two best of both
    # runs: the two top-two gaps)
    moved = (plain.first_logit - logits[0]) + (other.first_logit - logits[1])
    near = moved <= noise_bound
    return near, moved, (f"their gap moved {moved:.4f} between the runs; passes move a gap by "
                         f"up to {noise_bound:.4f} on this model (measured)")


def explain_divergence(
    prompt_len: int,
    plain: Sequence[int],
    other: Sequence[int],
    plain_top: dict[int, TopTwo],
    other_top: dict[int, TopTwo],
    text_of: Any,
    noise_bound: float,
) -> Divergence | None:
    """None when the texts agree; else the first differing position, the target's top-two
    margins there in both runs, and whether the kernels' measured disagreement between a
    one-token step and a verify pass (`noise_bound`, app.analysis.kernel_noise) explains it."""
    i = first_difference(plain, other)
    if i is None:
        return None
    if i >= len(plain) or i >= len(other):
        return length_difference(i, plain, other, text_of, noise_bound)
    pos = prompt_len + i
    p, o = plain_top.get(pos), other_top.get(pos)
    near, moved, reason = judge_flip(int(plain[i]), int(other[i]), p, o, noise_bound, text_of)
    return Divergence(
        position=i, plain_token=int(plain[i]), other_token=int(other[i]),
        plain_text=text_of(int(plain[i])), other_text=text_of(int(other[i])),
        plain_logit_gap=p.logit_gap if p else None, other_logit_gap=o.logit_gap if o else None,
        plain_prob_gap=p.prob_gap if p else None, other_prob_gap=o.prob_gap if o else None,
        near_tie=near, gap_moved=moved, noise_bound=noise_bound, reason=reason,
    )


END_OF_TEXT = -1  # the token id a Divergence names for the run that had already ended


def is_length_only(plain: Sequence[int], other: Sequence[int]) -> bool:
    """One text is a proper prefix of the other: they part only where one ends."""
    i = first_difference(plain, other)
    return i is not None and (i >= len(plain) or i >= len(other))


def length_difference(i: int, plain: Sequence[int], other: Sequence[int], text_of: Any,
                      noise_bound: float) -> Divergence:
    """The runs agree token for token until one ends (an end-of-text token, a stop, a
    shorter budget) while the other goes on. No kernel noise explains that: not a
    near-tie (a speculative run that stops early, or emits past the end, is a bug)."""
    def token(ids: Sequence[int]) -> tuple[int, str]:
        return (int(ids[i]), text_of(int(ids[i]))) if i < len(ids) else (END_OF_TEXT, "")

    (plain_token, plain_text), (other_token, other_text) = token(plain), token(other)
    ended = "speculative" if i >= len(other) else "plain"
    return Divergence(
        position=i, plain_token=plain_token, other_token=other_token,
        plain_text=plain_text, other_text=other_text, plain_logit_gap=None,
        other_logit_gap=None, plain_prob_gap=None, other_prob_gap=None, near_tie=False,
        noise_bound=noise_bound,
        reason=(f"the {ended} run ends after {i} tokens where the other goes on "
                f"({len(plain)} plain, {len(other)} speculative tokens): a difference in "
                "length is not kernel noise"))
