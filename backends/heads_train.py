"""Training draft heads with torch on CPU (the heads' maths is in app.engine.drafters.heads).

Head i maps the target's final hidden state h to h + W2·SiLU(W1·h), scored by the target's
frozen output rows. To keep the softmax affordable on a CPU, the loss is a cross-entropy over
a candidate vocabulary (the tokens the target generated plus its top-k at every position),
not the full vocabulary; the heads later draft over the same candidates.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class TrainReport:
    step: int
    loss: float  # mean cross-entropy of the last training batch, over all heads
    heldout_loss: float
    train_loss: float  # over every training position, after the step
    heldout_top1: list[float]  # per head: top-1 accuracy on held-out positions


@dataclass
class TrainedHeads:
    w1: np.ndarray  # the weights of the report with the lowest held-out loss
    w2: np.ndarray
    history: list[TrainReport] = field(default_factory=list)


def train_heads(
    hidden: np.ndarray,
    labels: np.ndarray,
    output_rows: np.ndarray,
    rank: int,
    seconds: float,
    progress: Callable[[TrainReport], None] | None = None,
    batch: int = 64,
    lr: float = 2e-3,
    seed: int = 0,
    heldout: float = 0.1,
) -> TrainedHeads:
    """hidden (N, d) float32; labels (N, H) indexes into the candidate rows, -1 where the
    text ended before that position; output_rows (m, d). Trains until `seconds` pass (at
    least one step), reporting on held-out positions every second; returns the weights that
    did best on those (the heads overfit a small text quickly)."""
    import torch

    torch.manual_seed(seed)
    n, d = hidden.shape
    n_heads = labels.shape[1]
    h_all = torch.from_numpy(np.ascontiguousarray(hidden, dtype=np.float32))
    y_all = torch.from_numpy(labels.astype(np.int64))
    out = torch.from_numpy(np.ascontiguousarray(output_rows, dtype=np.float32))
    order = torch.randperm(n)
    n_held = max(1, int(n * heldout)) if n > 1 else 0
    held, train = order[:n_held], order[n_held:] if n > n_held else order
    w1 = torch.nn.Parameter(torch.randn(n_heads, rank, d) / d ** 0.5)
    w2 = torch.nn.Parameter(torch.zeros(n_heads, d, rank))  # starts as the identity block
    optimiser = torch.optim.Adam([w1, w2], lr=lr)
    generator = torch.Generator().manual_seed(seed)

    def forward(h: torch.Tensor) -> torch.Tensor:
        a = torch.einsum("hrd,nd->hnr", w1, h)
        z = h.unsqueeze(0) + torch.einsum("hdr,hnr->hnd", w2, torch.nn.functional.silu(a))
        return z @ out.T  # (heads, n, m)

    def loss_of(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), y.T.reshape(-1), ignore_index=-1)

    def evaluate(step: int, last_loss: float) -> TrainReport:
        with torch.no_grad():
            logits = forward(h_all[held])
            y = y_all[held]
            top1 = []
            for i in range(n_heads):
                valid = y[:, i] >= 0
                hits = (logits[i].argmax(-1) == y[:, i]) & valid
                top1.append(float(hits.sum()) / max(1, int(valid.sum())))
            train_loss = float(loss_of(forward(h_all[train]), y_all[train]))
            report = TrainReport(step, last_loss, float(loss_of(logits, y)), train_loss, top1)
            if report.heldout_loss < best[0]:
                best[:] = [report.heldout_loss, w1.detach().clone(), w2.detach().clone()]
        return report

    best: list[Any] = [float("inf"), None, None]
    history = [evaluate(0, float("nan"))]
    if progress:
        progress(history[-1])
    deadline = time.monotonic() + seconds
    step, last_report, loss = 0, time.monotonic(), float("nan")
    while step == 0 or time.monotonic() < deadline:
        pick = train[torch.randint(len(train), (min(batch, len(train)),), generator=generator)]
        batch_loss = loss_of(forward(h_all[pick]), y_all[pick])
        optimiser.zero_grad()
        batch_loss.backward()
        loss = float(batch_loss.detach())
        optimiser.step()
        step += 1
        if time.monotonic() - last_report > 1.0:
            history.append(evaluate(step, loss))
            last_report = time.monotonic()
            if progress:
                progress(history[-1])
    history.append(evaluate(step, loss))
    if progress:
        progress(history[-1])
    return TrainedHeads(best[1].numpy().copy(), best[2].numpy().copy(), history)
