"""The suffix index finds the context's longest match across its sequences and merges what
followed into a candidate tree counted by frequency."""

from __future__ import annotations

from app.engine.records import COPIED_FROM_MEMORY
from app.engine.suffix_index import SuffixIndex, TreeBudget
from app.engine.token_buffer import Label, TokenBuffer


def buffer_of(*sequences: list[int]) -> TokenBuffer:
    buffer = TokenBuffer()
    for i, tokens in enumerate(sequences):
        buffer.start_sequence(Label(COPIED_FROM_MEMORY, i + 1))
        buffer.extend(tokens)
    return buffer


def test_longest_match_is_found_and_counts_say_how_often_each_continuation_followed():
    buffer = buffer_of([1, 2, 3, 7, 7], [9, 2, 3, 8], [5, 1, 2, 3, 7, 6])
    index = SuffixIndex([buffer])
    assert index.longest_match([4, 1, 2, 3]) == 3
    tree = index.candidates([4, 1, 2, 3], TreeBudget(depth=3, nodes=8, width=2))
    # the three-token match (two occurrences) outscores the two-token one (three)
    assert tree.match == 3 and tree.occurrences == 2
    first = tree.nodes[0]
    assert (first.token, first.count, first.share) == (7, 2, 1.0)
    assert [n.token for n in tree.first_path()] == [7, 6]  # on a tie, the latest leads
    # both continuations after 7 are kept as siblings, each seen once
    assert sorted(n.token for n in tree.nodes if n.parent == 0) == [6, 7]
    assert all(n.count == 1 for n in tree.nodes if n.parent == 0)


def test_the_likeliest_continuation_leads_the_tree():
    buffer = buffer_of([1, 2, 5], [1, 2, 6], [1, 2, 6], [1, 2, 5, 9], [1, 2, 6])
    tree = SuffixIndex([buffer]).candidates([1, 2], TreeBudget(depth=2, nodes=4, width=2))
    assert tree.nodes[0].token == 6 and tree.nodes[0].count == 3
    assert [(n.token, n.parent, n.count) for n in tree.nodes[1:]] == [(5, -1, 2), (9, 1, 1)]


def test_the_draft_is_no_longer_than_the_match():
    buffer = buffer_of([1, 2, 3, 4, 5, 6, 7, 8, 9])
    index = SuffixIndex([buffer])
    assert len(index.candidates([0, 2, 3], TreeBudget(depth=16, nodes=16)).nodes) == 2
    assert len(index.candidates([1, 2, 3], TreeBudget(depth=16, nodes=16)).nodes) == 3


def test_a_rare_branch_is_not_proposed():
    buffer = buffer_of(*([[1, 2, 3]] * 12), [1, 2, 4])
    tree = SuffixIndex([buffer]).candidates([1, 2], TreeBudget(depth=1, nodes=4, width=4))
    assert [n.token for n in tree.nodes] == [3]  # 4 followed in 1 of 13: below the 0.1 share


def test_continuations_stop_at_the_end_of_a_sequence():
    buffer = buffer_of([1, 2, 3], [4, 5])
    tree = SuffixIndex([buffer]).candidates([1, 2, 3], TreeBudget(depth=8, nodes=8))
    assert tree.nodes == []  # 3 ended its sequence; 4 is another run's first token
