"""Deliberate defects for power checks, in this process and in child processes.

Each is a bug check-exact once let through; the tests plant it and assert the check fails
with a message that names it:
- `near-ties`: the llama.cpp backend's multi-row passes (the verify pass asks for k+1 rows;
  plain steps ask for one) swap the target's two best logits wherever they are within
  `bound` of each other. Speculative output then parts from plain decoding exactly at
  near-ties, with small margins: a noise-bound judgement cannot tell it from kernel noise;
  only the exact mode, where any difference is a failure, catches it.
- `tree-mask`: torch's batched tree pass takes each node's parent to be the node before it
  (parents[i] -> i - 1, an off-by-one in the parent index), so a sibling attends to its elder
  sibling's branch and sits one position too deep. One-token-per-pass runs never build the
  mask.
- `position`: torch's batched passes on a non-empty cache place their tokens one position
  too far (RoPE at past + 1 + i). Single steps and the prompt's first pass are right.
- `no-drafts`: the exact-mode child's greedy suite decodes plainly: identical, and empty.
- `tree-rows`: llama.cpp's tree pass hands each node off the first path the row of the node
  before it (an off-by-one in the row index). The first path's rows are right; the rows off
  it are the ones the runtime does not call exact, which the greedy tie guard distrusts by
  their measured drift, so one-token decisions there can hide the bug.
- `ends-early`: a speculative session drops its last token: the texts differ only in length.
- `sampled-plain`: the sampled test's runs decode plainly: they follow the target's
  distribution, and show nothing about the accept/reject rule.
- `silent-child`: not a bug but a stretch of time: in check-exact's exact-mode child only,
  the target's first pass takes SILENT_S seconds and writes nothing, as the demo pair's
  checks do for minutes (a child left behind ends only at its next write to its dead parent).

A child process (check-exact's exact-mode run) gets the same bug through the
sitecustomize.py that `plant_in_children` writes.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

BUG_VARIABLE = "DRAFTLENS_TEST_PLANTED_BUG"
SILENT_S = 60.0
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


def tree_mask_off_by_one(extend_tree):
    def planted(self, ids, parents, n_skip):
        if not self.batch_invariant:
            parents = [-1, *range(len(ids) - 1)]
        return extend_tree(self, ids, parents, n_skip)

    return planted


def wrong_position(forward_pass):
    def planted(self, ids, n_logits, hidden):
        past = self.n_cached
        if len(ids) < 2 or past == 0:
            return forward_pass(self, ids, n_logits, hidden)
        torch = self._torch
        forward = self.model.forward

        def shifted(*args, **kwargs):
            kwargs["position_ids"] = torch.arange(past + 1, past + 1 + len(ids),
                                                  device=self.device).unsqueeze(0)
            return forward(*args, **kwargs)

        self.model.forward = shifted
        try:
            return forward_pass(self, ids, n_logits, hidden)
        finally:
            del self.model.forward

    return planted


def ends_early(steps):
    def planted(self, prompt_ids):
        yield from steps(self, prompt_ids)
        if self.drafter is not None and self.output_ids:
            self.output_ids.pop()

    return planted


def silent_first_pass(extend):
    slept = []

    def planted(self, ids, n_logits):
        if not slept:
            slept.append(True)
            time.sleep(SILENT_S)
        return extend(self, ids, n_logits)

    return planted


def rows_off_the_first_path_one_early(extend_tree):
    def planted(self, ids, parents, n_skip):
        rows, exact = extend_tree(self, ids, parents, n_skip)
        first_path = 1
        while first_path < len(ids) and parents[first_path] == first_path - 1:
            first_path += 1
        shifted = np.array(rows, copy=True)
        for node in range(max(first_path, n_skip + 1), len(ids)):
            shifted[node - n_skip] = rows[node - n_skip - 1]
        return shifted, exact

    return planted


def _targets(bug: str, bound: float) -> list[tuple[object, str, object]]:
    """(owner, attribute, planted value) for each bug."""
    if bug == "silent-child":
        if "--greedy-only" not in sys.argv:  # only check-exact's exact-mode child
            return []
        from backends.llamacpp import LlamaCppModel

        return [(LlamaCppModel, "extend", silent_first_pass(LlamaCppModel.extend))]
    if bug == "near-ties":
        from backends.llamacpp import LlamaCppModel

        return [(LlamaCppModel, "extend", flips_near_ties(LlamaCppModel.extend, bound))]
    if bug == "tree-rows":
        from backends.llamacpp import LlamaCppModel

        return [(LlamaCppModel, "extend_tree",
                 rows_off_the_first_path_one_early(LlamaCppModel.extend_tree))]
    if bug == "tree-mask":
        from backends.torch_hf import TorchModel

        return [(TorchModel, "extend_tree", tree_mask_off_by_one(TorchModel.extend_tree))]
    if bug == "position":
        from backends.torch_hf import TorchModel

        return [(TorchModel, "_pass", wrong_position(TorchModel._pass))]
    if bug == "no-drafts":
        import app.analysis.exactness as exactness

        build = exactness.build_session
        return [(exactness, "build_session",
                 lambda pair, config, plain=False: build(pair, config, plain=True))]
    if bug == "sampled-plain":
        import app.analysis.exact_sampled as exact_sampled

        build = exact_sampled.build_session
        return [(exact_sampled, "build_session",
                 lambda pair, config, plain=False: build(pair, config, plain=True))]
    if bug == "ends-early":
        from app.engine.session import Session

        return [(Session, "steps", ends_early(Session.steps))]
    raise ValueError(f"no planted bug named {bug}")


def plant(monkeypatch, bound: float, bug: str = "near-ties") -> None:
    """The bug in this process (undone with the test)."""
    for owner, name, value in _targets(bug, bound):
        monkeypatch.setattr(owner, name, value)


def plant_here_for_child() -> None:
    """What a child's sitecustomize runs: the bug named in the environment, if any."""
    bug = os.environ.get(BUG_VARIABLE)
    if bug:
        for owner, name, value in _targets(bug, float(os.environ.get(BOUND_VARIABLE, "0"))):
            setattr(owner, name, value)


def plant_in_children(folder: Path, monkeypatch, bound: float = 0.0,
                      bug: str = "near-ties") -> None:
    """Child processes started from now on carry the same bug."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import os\n"
        f"if os.environ.get({BUG_VARIABLE!r}):\n"
        "    from tests.planted_bugs import plant_here_for_child\n"
        "    plant_here_for_child()\n", encoding="utf-8")
    root = str(Path(__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), root]))
    monkeypatch.setenv(BUG_VARIABLE, bug)
    monkeypatch.setenv(BOUND_VARIABLE, str(bound))
