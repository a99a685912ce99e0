"""A deliberately wrong verify pass for power checks, in this process and in child processes.

`flips_near_ties` makes the llama.cpp backend's multi-row passes (the verify pass asks for k+1
rows; plain steps ask for one) swap the target's two best logits wherever they are within
`bound` of each other. Speculative output then parts from plain decoding exactly at near-ties,
and the margins recorded at the divergence are small: a noise-bound judgement cannot tell this
from kernel noise. Only the run with batch-invariant kernels, where any difference is a
failure, catches it. A child process (check-exact's exact-kernels run) gets it through the
sitecustomize.py that `plant_in_children` writes.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

BOUND_VARIABLE = "DRAFTLENS_TEST_NEAR_TIE_BOUND"


def swap_near_ties(rows: np.ndarray, bound: float) -> np.ndarray:
    """Each row's top two logits swapped where they are within `bound`."""
    rows = np.array(rows, copy=True)
    for row in rows:
        first, second = np.argsort(-row, kind="stable")[:2]
        if row[first] - row[second] < bound:
            row[first], row[second] = row[second], row[first]
    return rows


def flips_near_ties(extend, bound: float):
    def planted(self, ids, n_logits):
        rows = extend(self, ids, n_logits)
        return swap_near_ties(rows, bound) if n_logits > 1 else rows

    return planted


def plant(monkeypatch, bound: float) -> None:
    from backends.llamacpp import LlamaCppModel

    monkeypatch.setattr(LlamaCppModel, "extend", flips_near_ties(LlamaCppModel.extend, bound))


def plant_in_children(folder: Path, monkeypatch, bound: float) -> None:
    """Child processes started from now on carry the same bug."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import os\n"
        f"if os.environ.get({BOUND_VARIABLE!r}):\n"
        "    from backends.llamacpp import LlamaCppModel\n"
        "    from tests.planted_bugs import flips_near_ties\n"
        "    LlamaCppModel.extend = flips_near_ties(LlamaCppModel.extend, "
        f"float(os.environ[{BOUND_VARIABLE!r}]))\n", encoding="utf-8")
    root = str(Path(__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), root]))
    monkeypatch.setenv(BOUND_VARIABLE, str(bound))
