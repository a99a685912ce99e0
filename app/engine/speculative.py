"""One verify step of speculative decoding (Leviathan et al. 2023; Chen et al. 2023).

Notation as in the papers: p is the target's processed distribution, q the draft's.
For draft token x_i drawn from q_i:
  - sampling: accept with probability min(1, p_i(x_i) / q_i(x_i)), using a uniform draw u;
    on the first rejection emit a token drawn from norm(max(0, p_i - q_i)) and stop;
    when all k pass, emit a bonus token drawn from p_{k+1}.
  - greedy: accept while x_i == argmax p_i; on the first mismatch emit argmax p_i;
    when all k pass, emit argmax p_{k+1} as the bonus.
Either way the emitted tokens are distributed exactly as the target alone would produce them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from app.engine import acceptance
from app.engine.acceptance import Judgement
from app.engine.diagnostics import Judged
from app.engine.records import (
    ORIGIN_ACCEPTED,
    ORIGIN_BONUS,
    ORIGIN_PLAIN,
    ORIGIN_REPLACEMENT,
    TokenRecord,
)
from app.engine.sampling import SamplingParams, choose, draw, process

TokenText = Callable[[int], str]


class Rows(Protocol):
    """Row i of a (k+1, V) table of distributions; the session computes rows on demand."""

    def __getitem__(self, i: int, /) -> np.ndarray: ...


class TargetRows:
    """p rows: the target's logits processed only when verify reads them (rows after a
    rejection never are)."""

    def __init__(self, logits: np.ndarray, params: SamplingParams) -> None:
        self._logits = logits  # (k+1, V)
        self._params = params
        self._rows: dict[int, np.ndarray] = {}

    def __getitem__(self, i: int, /) -> np.ndarray:
        if i not in self._rows:
            self._rows[i] = process(self._logits[i], self._params)
        return self._rows[i]


class DraftRows:
    """q rows of a draft, over the target's `vocab` logit rows (app.engine.drafters'
    Draft.q_row)."""

    def __init__(self, q_row: Callable[[int, int], np.ndarray], vocab: int) -> None:
        self._q_row = q_row
        self._vocab = vocab

    def __getitem__(self, i: int, /) -> np.ndarray:
        return self._q_row(i, self._vocab)


@dataclass
class Verdict:
    records: list[TokenRecord]
    emitted: list[int]
    origins: list[str]
    # each judged record with the p and q rows it was judged against, for the diagnostics
    # (app.engine.diagnostics.describe) where something will show them
    judged: list[Judged] = field(default_factory=list)

    def emit(self, token: int, origin: str) -> None:
        self.emitted.append(token)
        self.origins.append(origin)


def verify(
    draft: list[int],
    q_rows: Rows,
    p_rows: Rows,
    params: SamplingParams,
    rng: np.random.Generator,
    text_of: TokenText,
    start_pos: int = 0,
) -> Verdict:
    """Judge k draft tokens against k+1 target rows; returns the records and emitted tokens.

    q_rows[i] (V,) is the distribution draft[i] was drawn from; p_rows[i] (V,) the target's
    distribution at the same position; p_rows[k] gives the bonus token.
    """
    verdict = Verdict([], [], [])
    if not draft:
        verdict.emit(choose(p_rows[0], params, rng), ORIGIN_PLAIN)
        return verdict
    for i, token in enumerate(draft):
        p, q = p_rows[i], q_rows[i]
        judgement = acceptance.judge(token, p, q, params, rng)
        record = token_record(start_pos + i, token, p, q, judgement, text_of)
        verdict.records.append(record)
        verdict.judged.append((record, p, q))
        if judgement.accepted:
            verdict.emit(token, ORIGIN_ACCEPTED)
            continue
        if params.greedy:
            replacement = int(np.argmax(p))
        else:
            replacement = draw(acceptance.residual_distribution(p, q), rng)
            record.residual_used = True
        record.replacement = replacement
        record.replacement_text = text_of(replacement)
        verdict.emit(replacement, ORIGIN_REPLACEMENT)
        return verdict
    verdict.emit(choose(p_rows[len(draft)], params, rng), ORIGIN_BONUS)
    return verdict


def token_record(
    pos: int, token: int, p: np.ndarray, q: np.ndarray, judgement: Judgement, text_of: TokenText
) -> TokenRecord:
    """The record of a decision already made (diagnostics are added later, if shown)."""
    return TokenRecord(pos=pos, token=token, text=text_of(token), q=float(q[token]),
                       p=float(p[token]), u=judgement.u, accepted=judgement.accepted)
