"""Where a speculative run's greedy text first differs from plain decoding, and why.

With llama.cpp's fast CPU kernels a verify pass over k+1 tokens sums in another order than a
single-token step, so logits differ in the last bits and greedy output can flip where the
target's two best tokens are nearly tied. MarginTap wraps the target and notes, for every
position it scores, the top two tokens and their logits; explain_divergence compares two runs
at their first differing position.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from app.engine.protocol import LanguageModel

# a flip is explained as a near-tie when the top-two logit gap is below this in either run
# (fp32 sums of ~1500 products in another order move logits by ~1e-3 here)
NEAR_TIE_LOGIT_GAP = 0.05


@dataclass
class TopTwo:
    first: int
    second: int
    first_logit: float
    second_logit: float
    prob_gap: float  # p(first) - p(second) after a plain softmax

    @property
    def logit_gap(self) -> float:
        return self.first_logit - self.second_logit


def top_two(logits: np.ndarray) -> TopTwo:
    first = int(np.argmax(logits))
    best = float(logits[first])
    masked = logits.copy()
    masked[first] = -np.inf
    second = int(np.argmax(masked))
    runner = float(logits[second])
    total = float(np.exp(logits - best).sum())
    return TopTwo(first, second, best, runner, (1.0 - float(np.exp(runner - best))) / total)


class MarginTap:
    """A LanguageModel that passes everything to `model` and records, for each cache
    position it returns logits for, the top two tokens (the last pass over a position wins,
    which is the one whose token was kept)."""

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

    def extend_hidden(self, ids: Sequence[int], n_logits: int) -> tuple[np.ndarray, np.ndarray]:
        end = self.model.n_cached + len(ids)
        logits, hidden = self.model.extend_hidden(ids, n_logits)  # type: ignore[attr-defined]
        self._note(end, logits)
        return logits, hidden

    def _note(self, end: int, logits: np.ndarray) -> None:
        """The top two of each returned row; the pass ended at cache position `end`, so row
        r of n predicts the token at position end - n + r + 1."""
        n = logits.shape[0]
        for row in range(n):
            self.top[end - n + row + 1] = top_two(logits[row])

    def __getattr__(self, name: str) -> Any:
        # the model's optional capabilities (hidden states, output rows, early exit, its own
        # generate) pass through, so wrapping it changes nothing a run can do
        if name == "model":
            raise AttributeError(name)
        return getattr(self.model, name)

    def extend_tree(
        self, ids: Sequence[int], parents: Sequence[int], n_skip: int
    ) -> tuple[np.ndarray, list[bool]]:
        # tree rows are not noted: their positions depend on the path kept (they say
        # themselves whether they match plain decoding bit for bit)
        return self.model.extend_tree(ids, parents, n_skip)

    def keep_path(self, path: Sequence[int]) -> None:
        self.model.keep_path(path)

    def truncate(self, n: int) -> None:
        self.model.truncate(n)

    def close(self) -> None:
        self.model.close()


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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        def gap(logit: float | None, prob: float | None) -> str:
            return "not recorded" if logit is None else f"{logit:.4f} (p gap {prob:.4f})"

        verdict = "a near-tie" if self.near_tie else "NOT a near-tie"
        return (f"first difference at generated token {self.position}: plain "
                f"{self.plain_text!r}, speculative {self.other_text!r}; top-two logit gap "
                f"{gap(self.plain_logit_gap, self.plain_prob_gap)} plain, "
                f"{gap(self.other_logit_gap, self.other_prob_gap)} speculative: {verdict}")


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def explain_divergence(
    prompt_len: int,
    plain: Sequence[int],
    other: Sequence[int],
    plain_top: dict[int, TopTwo],
    other_top: dict[int, TopTwo],
    text_of: Any,
) -> Divergence | None:
    """None when the texts agree; else the first differing position and the target's
    top-two margins there in both runs (a flip between two nearly tied tokens is the
    kernels' rounding, not a wrong verify rule)."""
    i = first_difference(plain, other)
    if i is None or i >= len(plain) or i >= len(other):
        return None
    pos = prompt_len + i
    p, o = plain_top.get(pos), other_top.get(pos)
    gaps = [t.logit_gap for t in (p, o) if t is not None]
    near = bool(gaps) and min(gaps) < NEAR_TIE_LOGIT_GAP and (
        {plain[i], other[i]} <= {t for x in (p, o) if x for t in (x.first, x.second)})
    return Divergence(
        position=i, plain_token=int(plain[i]), other_token=int(other[i]),
        plain_text=text_of(int(plain[i])), other_text=text_of(int(other[i])),
        plain_logit_gap=p.logit_gap if p else None, other_logit_gap=o.logit_gap if o else None,
        plain_prob_gap=p.prob_gap if p else None, other_prob_gap=o.prob_gap if o else None,
        near_tie=near,
    )
