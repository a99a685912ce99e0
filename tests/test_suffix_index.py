"""Suffix decoding's index: every match length is tried in the local tree (prompt and
output) and the global one (earlier runs), each candidate scored by the continuation
frequencies it follows, the best one taken; drafts reach factor * match + offset tokens and
stop below min_prob; the index sits behind start_request / add_active_response / speculate /
stop_request."""

from __future__ import annotations

from app.engine.drafters.suffix import RememberedRun, memory_buffer
from app.engine.drafters.suffix.index import SuffixCache, TreeBudget
from app.engine.records import COPIED_FROM_MEMORY, COPIED_FROM_OUTPUT, COPIED_FROM_PROMPT


def cache_for(prompt: list[int], *runs: list[int]) -> SuffixCache:
    cache = SuffixCache(memory_buffer([RememberedRun(i + 1, r) for i, r in enumerate(runs)]))
    cache.start_request(prompt)
    return cache


def test_a_shorter_match_that_scores_better_wins_over_the_longest():
    # [1 2 3 4] went on once with 9 and then ended (a score of 1); [3 4] went on with
    # 5 6 7 8 three times out of four: with factor 1 it drafts 2 tokens at 3/4 each (1.5)
    cache = cache_for([0, 1, 2, 3, 4], [1, 2, 3, 4, 9], *[[7, 3, 4, 5, 6, 7, 8]] * 3)
    best = cache.speculate(TreeBudget(depth=32))
    assert (best.match, best.tokens) == (2, [5, 6])
    assert best.score == 1.5 and best.occurrences == 4
    # a larger factor lets the longest match draft further, but its chain still ends at 9
    wide = cache.speculate(TreeBudget(depth=32, factor=4.0))
    assert wide.match == 2 and wide.tokens == [5, 6, 7, 8]


def test_factor_and_offset_bound_the_draft_and_min_prob_cuts_it():
    run = list(range(100, 140))
    cache = cache_for([1, *run[:3]], run)
    assert len(cache.speculate(TreeBudget(depth=32)).tokens) == 3  # 1.0 * 3
    assert len(cache.speculate(TreeBudget(depth=32, factor=2.0, offset=1.0)).tokens) == 7
    assert len(cache.speculate(TreeBudget(depth=5, factor=4.0)).tokens) == 5
    # after [7 8] the text went on with 1 once and with 2 nine times: 1 is a 10% branch
    runs = [[7, 8, 1, 50]] + [[7, 8, 2, 60]] * 9
    tree = cache_for([0, 7, 8], *runs).speculate(
        TreeBudget(depth=2, nodes=8, width=2, min_prob=0.15))
    assert tree.tokens == [2, 60]  # the 10% branch is below min_prob
    tree = cache_for([0, 7, 8], *runs).speculate(
        TreeBudget(depth=2, nodes=8, width=2, min_prob=0.05))
    assert sorted(tree.tokens) == [1, 2, 50, 60] and tree.tokens[:2] == [2, 60]
    assert [round(n.prob, 2) for n in tree.nodes] == [0.9, 0.9, 0.1, 0.1]


def test_the_local_and_global_trees_compete_and_each_token_says_where_it_was_seen():
    # the prompt has [5 6] once before, followed by 7 1: the context's own occurrence has no
    # continuation yet and is not counted, so each token's probability is 1 (a score of 2);
    # the memory has [1 5 6] followed by 8 9 10 (a match of 3: a score of 3)
    cache = cache_for([5, 6, 7, 1, 5, 6], [1, 5, 6, 8, 9, 10])
    best = cache.speculate(TreeBudget(depth=32))
    assert (best.tokens, best.match, best.score) == ([8, 9, 10], 3, 3.0)
    assert {(n.label.kind, n.label.run) for n in best.nodes} == {(COPIED_FROM_MEMORY, 1)}
    # a tie between the trees goes to the local one
    cache = cache_for([5, 6, 7, 1, 5, 6], [9, 5, 6, 8, 3])
    best = cache.speculate(TreeBudget(depth=32))
    assert best.tokens == [7, 1] and [n.prob for n in best.nodes] == [1.0, 1.0]
    assert {n.label.kind for n in best.nodes} == {COPIED_FROM_PROMPT}
    assert best.occurrences == 1  # the one before the context's own
    cache.add_active_response([7, 1, 5, 6, 7])  # [5 6 7 1 5 6 7] twice: a match of 7
    best = cache.speculate(TreeBudget(depth=32))
    assert (best.tokens, best.match, best.score) == ([1, 5, 6, 7], 7, 4.0)
    assert {n.label.kind for n in best.nodes} == {COPIED_FROM_OUTPUT}


def test_the_four_calls_start_extend_speculate_and_stop_a_request():
    cache = cache_for([1, 2, 3], [2, 3, 4, 5])
    assert cache.has_match() and cache.speculate(TreeBudget(depth=8)).tokens == [4, 5]
    cache.add_active_response([4, 5])
    assert cache.length == 5 and cache.prompt_length == 3
    cache.stop_request()
    assert not cache.has_match() and cache.length == 0
    cache.start_request([70, 71])  # nothing anywhere: no match, an empty candidate
    assert not cache.has_match() and cache.speculate(TreeBudget(depth=8)).tokens == []
    assert len(cache.memory) == 4  # the memory is kept across requests


def test_of_equally_frequent_continuations_the_latest_leads():
    earlier, later = [4, 5, 60, 61], [4, 5, 70, 71]
    assert cache_for([0, 4, 5], earlier, later, earlier, later).speculate(
        TreeBudget(depth=2)).tokens == [70, 71]
    assert cache_for([0, 4, 5], later, earlier, later, earlier).speculate(
        TreeBudget(depth=2)).tokens == [60, 61]
