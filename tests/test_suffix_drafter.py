"""The suffix drafter proposes chains and trees from the prompt, its output and a memory of
earlier runs, each token saying where it was copied from; fast enough to run every step."""

from __future__ import annotations

import time

import numpy as np

from app.engine.adaptive import DraftLengthController, PassOutcome
from app.engine.cost_curve import VerifyCostCurve
from app.engine.decode_config import TreeShape
from app.engine.drafters import Budget
from app.engine.drafters.lookup import NGRAM_COPY
from app.engine.drafters.lookup.edits import NGRAM_EDIT
from app.engine.drafters.suffix import (
    SUFFIX_COPY,
    SUFFIX_GUESS,
    RememberedRun,
    SuffixDrafter,
    memory_buffer,
)
from app.engine.records import COPIED_FROM_MEMORY, COPIED_FROM_OUTPUT, COPIED_FROM_PROMPT
from app.engine.sampling import SamplingParams

GREEDY = SamplingParams()
RNG = np.random.default_rng(0)


def test_drafts_say_whether_they_came_from_the_prompt_this_output_or_an_earlier_run():
    memory = memory_buffer([RememberedRun(41, [10, 11, 12, 13, 14])])
    drafter = SuffixDrafter(memory)
    prompt = [1, 2, 3, 4, 10, 11]
    drafter.begin(prompt)
    draft = drafter.propose(prompt, Budget(8), GREEDY, RNG)
    assert draft.tokens == [12, 13]
    assert draft.copied_from is not None
    assert {(s.kind, s.run) for s in draft.copied_from} == {(COPIED_FROM_MEMORY, 41)}
    # the output repeats the prompt: copied from the prompt, then from the output itself
    context = [*prompt, 1, 2, 3, 4, 10, 11, 1, 2]
    drafter.accept(context, None)
    draft = drafter.propose(context, Budget(8), GREEDY, RNG)
    kinds = [s.kind for s in draft.copied_from or []]
    assert draft.tokens[:2] == [3, 4] and kinds[0] in (COPIED_FROM_PROMPT, COPIED_FROM_OUTPUT)


def test_a_tree_draft_keeps_the_first_path_first_and_carries_each_branch_count():
    memory = memory_buffer([RememberedRun(1, [7, 8, 1, 2]), RememberedRun(2, [7, 8, 3]),
                            RememberedRun(3, [7, 8, 1, 5])])
    drafter = SuffixDrafter(memory)
    drafter.begin([0, 7, 8])
    tree = drafter.propose_tree([0, 7, 8], 2, TreeShape(2, 8), GREEDY, RNG)
    assert tree.tokens[0] == 1 and tree.parents[:2] == [-1, 0]
    assert tree.copied_from is not None
    assert tree.copied_from[0].count == 2 and tree.copied_from[0].of == 3
    assert 3 in tree.tokens and tree.parents[tree.tokens.index(3)] == -1


def test_a_new_prompt_after_begin_forgets_the_last_run_but_not_the_memory():
    memory = memory_buffer([RememberedRun(5, [20, 21, 22])])
    drafter = SuffixDrafter(memory)
    drafter.begin([1, 2, 3, 1, 2])
    assert drafter.propose([1, 2, 3, 1, 2], Budget(4), GREEDY, RNG).tokens == [3, 1]
    drafter.begin([9, 1, 2])
    assert drafter.propose([9, 1, 2], Budget(4), GREEDY, RNG).tokens == []
    drafter.begin([9, 20, 21])
    assert drafter.propose([9, 20, 21], Budget(4), GREEDY, RNG).tokens == [22]


def test_accepted_tokens_are_indexed_as_output_and_the_outlook_names_copy_or_guess():
    drafter = SuffixDrafter()
    prompt = [5, 6, 7, 8]
    drafter.begin(prompt)
    assert drafter.outlook(prompt).kind == SUFFIX_GUESS  # nothing to copy yet
    assert drafter.propose(prompt, Budget(4), GREEDY, RNG).tokens == []
    # the target wrote a run of its own and then the same run again: a long match of this
    # output, a suffix copy, whose evidence is the match
    run = [20, 21, 22, 23, 24, 25, 26, 27, 28]
    context = [*prompt, *run, 1, *run[:7]]
    drafter.accept(context, None)
    outlook = drafter.outlook(context)
    assert outlook.kind == SUFFIX_COPY and outlook.copied >= 6
    assert SUFFIX_COPY.free and SUFFIX_GUESS.free
    draft = drafter.propose(context, Budget(3), GREEDY, RNG)
    assert draft.tokens == [27, 28, 1]
    assert draft.copied_from is not None and draft.copied_from[0].kind == COPIED_FROM_OUTPUT


def test_a_copy_of_the_prompt_follows_the_targets_rename_as_the_edit_aware_lookup_does():
    # code asked back with `total` (7) renamed `subtotal` (70, 71): a suffix match breaks at
    # each renamed use; the prompt copy keeps its place and applies the rename again
    code = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 7, 12, 13, 14, 15, 16, 7, 17]
    drafter = SuffixDrafter()
    prompt = [90, 91, *code, 92]
    drafter.begin(prompt)
    context = [*prompt, 1, 2, 3, 4, 5, 6, 70, 71]
    drafter.accept(context, None)
    outlook = drafter.outlook(context)
    assert outlook.kind is NGRAM_EDIT  # a copy resumed past the target's edit
    draft = drafter.propose(context, Budget(12), GREEDY, RNG)
    assert draft.tokens == [8, 9, 10, 11, 70, 71, 12, 13, 14, 15, 16, 70]
    # once the copy goes on past the edit, it is a copy again
    context += [8, 9, 10, 11]
    drafter.accept(context, None)
    assert drafter.outlook(context).kind is NGRAM_COPY
    assert draft.copied_from is not None
    assert {source.kind for source in draft.copied_from} == {COPIED_FROM_PROMPT}
    tree = drafter.propose_tree(context, 6, TreeShape(2, 8), GREEDY, RNG)
    assert tree.tokens[:4] == [70, 71, 12, 13]
    assert tree.copied_from is not None and tree.copied_from[0].kind == COPIED_FROM_PROMPT
    # a copy of the prompt is the lookup's kind, learnt apart from the suffix copies
    assert NGRAM_COPY is not SUFFIX_COPY and NGRAM_EDIT is not SUFFIX_COPY


def test_the_outlook_says_how_long_a_draft_would_be_and_the_pass_is_priced_at_that_size():
    # a match of 7 tokens whose source goes on for 3 more: a draft holds 3 however many are
    # asked, so the controller must price a pass of 4, not of the 32 it may draft
    source = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    drafter = SuffixDrafter(memory_buffer([RememberedRun(1, source)]))
    context = [1, *source[:7]]
    drafter.begin(context)
    outlook = drafter.outlook(context)
    assert outlook.kind == SUFFIX_COPY and outlook.available == 3
    assert drafter.propose(context, Budget(32), GREEDY, RNG).tokens == [12, 13, 14]
    assert drafter.propose(context, Budget(2), GREEDY, RNG).tokens == [12, 13]
    controller = DraftLengthController(32, adaptive=True, curve=VerifyCostCurve(
        {1: .041, 4: .143, 5: .139, 32: .570, 33: .692}))
    controller.decide(100, SUFFIX_COPY)
    # this kind's copies have kept passing
    controller.observe(PassOutcome(SUFFIX_COPY, [True] * 8))
    k = controller.decide(100, outlook.kind, outlook.copied, outlook.available).k
    assert 0 < k <= 3
    # nothing to copy: no draft, and no probe spent on it
    drafter.begin([1, 2, 3])
    nothing = drafter.outlook([1, 2, 3])
    assert nothing.available == 0
    assert controller.decide(100, nothing.kind, 0, nothing.available).k == 0


def test_a_suffix_match_is_no_evidence_only_the_copies_verdicts_count():
    """A match recalled from an earlier answer often runs 16 tokens and goes on for 4; the
    kind's verdicts (shadow checks give them for free) say how far its copies go on."""
    controller = DraftLengthController(32, adaptive=True, curve=VerifyCostCurve(
        {1: .041, 4: .143, 5: .139, 16: .393, 17: .399, 32: .570, 33: .692}))
    controller.decide(100, SUFFIX_COPY)
    # a recalled copy that went on for 3
    controller.observe(PassOutcome(SUFFIX_COPY, [True] * 3 + [False]))
    own = controller.estimate(SUFFIX_COPY)
    counts = (own.pool_hits, own.pool_seen)
    verdicts_only = own.pooled_from(*counts)
    unmatched = controller.decide(100, SUFFIX_COPY).k
    k = controller.decide(100, SUFFIX_COPY, copied=16).k  # a 16-token match
    assert own.pooled() == verdicts_only and (own.pool_hits, own.pool_seen) == counts
    assert k == unmatched < 16  # not a 17-token pass as if the match were sure to go on
    # a copy of the prompt is another matter: code quoted back goes on as long as it agreed
    controller.decide(100, NGRAM_COPY)
    controller.observe(PassOutcome(NGRAM_COPY, [True] * 3 + [False]))
    before = controller.decide(100, NGRAM_COPY).k
    assert controller.decide(100, NGRAM_COPY, copied=16).k > before


def test_a_query_on_a_ten_thousand_token_history_takes_well_under_a_target_step():
    rng = np.random.default_rng(1)
    phrases = [rng.integers(0, 2000, size=int(rng.integers(5, 30))).tolist()
               for _ in range(200)]
    history: list[int] = []
    while len(history) < 10_200:
        history.extend(phrases[int(rng.integers(0, 200))])
    drafter = SuffixDrafter(memory_buffer([RememberedRun(1, history[:5000])]))
    drafter.begin(history[5000:9000])
    drafter.propose(history[5000:9000], Budget(16), GREEDY, RNG)
    start = time.perf_counter()
    for end in range(9000, 9200):
        drafter.accept(history[5000:end], None)
        drafter.propose_tree(history[5000:end], 16, TreeShape(3, 16), GREEDY, RNG)
    per_query = (time.perf_counter() - start) / 200
    assert per_query < 0.005  # a CPU target step is tens of milliseconds
