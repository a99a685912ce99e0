"""Suffix decoding's index: every match length is tried in the local tree (prompt and
output) and the global one (earlier runs), each candidate scored by the continuation
frequencies it follows, the best one taken; drafts reach factor * match + offset tokens and
stop below min_prob; the index sits behind start_request / add_active_response / speculate /
stop_request."""

from __future__ import annotations

from app.engine.records import COPIED_FROM_MEMORY, COPIED_FROM_OUTPUT, COPIED_FROM_PROMPT
from app.engine.suffix import RememberedRun, memory_buffer
from app.engine.suffix_index import SuffixCache, TreeBudget


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
    # the prompt repeats [5 6] once followed by 7 (local: one earlier occurrence out of
    # two, 0.5 a token); the memory has [5 6 8 9] three times (1.0 a token)
    cache = cache_for([5, 6, 7, 1, 5, 6], *[[5, 6, 8, 9]] * 3)
    best = cache.speculate(TreeBudget(depth=32))
    assert best.tokens == [8, 9]
    assert {(n.label.kind, n.label.run) for n in best.nodes} == {(COPIED_FROM_MEMORY, 1)}
    # no memory: the prompt's own repetition is drafted, then the output's
    cache = cache_for([5, 6, 7, 1, 5, 6])
    best = cache.speculate(TreeBudget(depth=32))
    assert best.tokens == [7, 1] and {n.label.kind for n in best.nodes} == {COPIED_FROM_PROMPT}
    cache.add_active_response([7, 1, 5, 6, 7])  # [5 6 7 1 5 6 7] twice: a match of 7
    best = cache.speculate(TreeBudget(depth=32))
    assert (best.tokens, best.match, best.score) == ([1, 5, 6, 7], 7, 2.0)
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
