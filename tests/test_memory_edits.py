"""Copies from the draft memory go on across the renames the target made to them in this
request (app.engine.drafters.suffix.memory_edits), and unlearn a rename the target did not make
again."""

from __future__ import annotations

import numpy as np

from app.engine.drafters import Budget
from app.engine.drafters.suffix import RememberedRun, SuffixDrafter, memory_buffer
from app.engine.records import COPIED_FROM_MEMORY
from app.engine.sampling import SamplingParams

GREEDY = SamplingParams()
RNG = np.random.default_rng(0)
OLD, NEW = 100, 200  # an identifier in the remembered answer, and the target's name for it
LINE_1, LINE_2, LINE_3 = [10, 11, 12, 13, 14, 15, 16, 17], [20, 21, 22, 23, 24, 25, 26, 27], \
    [30, 31, 32, 33, 34, 35]
REMEMBERED = [*LINE_1, OLD, *LINE_2, OLD, *LINE_3]
PROMPT = [1, 2, 3]


def drafter_after(output: list[int]) -> tuple[SuffixDrafter, list[int]]:
    drafter = SuffixDrafter(memory_buffer([RememberedRun(9, REMEMBERED)]))
    drafter.begin(PROMPT)
    context = list(PROMPT)
    for token in output:  # the target's tokens one pass at a time, as a session gives them
        context.append(token)
        drafter.accept(context, None)
    return drafter, context


def test_a_rename_learnt_at_its_first_occurrence_drafts_past_the_next_one():
    drafter, context = drafter_after([*LINE_1, NEW, *LINE_2, NEW])
    assert drafter._cache.edits.renames == {(OLD,): (NEW,)}
    draft = drafter.propose(context, Budget(8), GREEDY, RNG)
    assert draft.tokens[:4] == LINE_3[:4]
    assert {s.kind for s in draft.copied_from or []} == {COPIED_FROM_MEMORY}
    # and a copy that reaches the renamed token drafts the target's name for it
    drafter, context = drafter_after([*LINE_1, NEW, *LINE_2[:6]])
    assert drafter.propose(context, Budget(8), GREEDY, RNG).tokens[:3] == [26, 27, NEW]


def test_without_the_rename_the_memory_has_no_match_past_the_renamed_token():
    # the power check: the same context with the renames forgotten drafts nothing past NEW
    drafter, context = drafter_after([*LINE_1, NEW, *LINE_2, NEW])
    drafter._cache.edits.reset()
    assert drafter.propose(context, Budget(8), GREEDY, RNG).tokens[:4] != LINE_3[:4]


def test_the_target_keeping_the_old_token_unlearns_the_rename():
    drafter, context = drafter_after([*LINE_1, NEW, *LINE_2, OLD])
    assert drafter._cache.edits.renames == {}
    assert drafter.propose(context, Budget(8), GREEDY, RNG).tokens[:4] == LINE_3[:4]


def test_a_token_the_target_added_is_no_rename():
    # an insertion (the memory's tokens go on one later) replaces nothing: nothing is learnt
    drafter, _ = drafter_after([*LINE_1, 99, OLD, *LINE_2])
    assert drafter._cache.edits.renames == {}
    drafter, _ = drafter_after([*LINE_1, OLD, 99, *LINE_2])
    assert drafter._cache.edits.renames == {}
