"""The suffix tree counts every substring (up to its depth) as often as it occurs, across
sequences appended token by token in any interleaving, and knows each sequence's suffixes
that occurred before; a matcher finds a context's suffixes in a tree that does not hold it."""

from __future__ import annotations

import random
from collections import Counter

from app.engine.drafters.suffix.tree import ROOT, Matcher, SuffixTree


def substring_counts(sequences: dict[int, list[int]], depth: int) -> Counter[tuple[int, ...]]:
    counts: Counter[tuple[int, ...]] = Counter()
    for seq in sequences.values():
        for i in range(len(seq)):
            for n in range(1, min(depth, len(seq) - i) + 1):
                counts[tuple(seq[i : i + n])] += 1
    return counts


def walk(tree: SuffixTree, pattern: tuple[int, ...]):
    cursor = (ROOT, 0)
    for token in pattern:
        cursor = tree.step(cursor, token)
        if cursor is None:
            return None
    return cursor


def count_at(tree: SuffixTree, cursor) -> int:
    return tree.counts[cursor[0]] if cursor[1] == 0 else 1


def test_counts_equal_substring_occurrences_for_any_interleaving_of_sequences():
    rng = random.Random(7)
    for _ in range(150):
        depth, vocab = rng.randint(1, 7), rng.randint(1, 4)
        wanted = {s: [rng.randrange(vocab) for _ in range(rng.randint(0, 20))]
                  for s in range(rng.randint(1, 3))}
        tree, built = SuffixTree(depth), {s: [] for s in wanted}
        while any(len(built[s]) < len(wanted[s]) for s in wanted):
            s = rng.choice([s for s in wanted if len(built[s]) < len(wanted[s])])
            token = wanted[s][len(built[s])]
            tree.append(s, token)
            built[s].append(token)
            expected = substring_counts(built, depth)
            for pattern, n in expected.items():
                cursor = walk(tree, pattern)
                assert cursor is not None and count_at(tree, cursor) == n, (pattern, built)
            for s2, seq in built.items():  # the suffixes seen before, longest first
                repeated = [n for n in range(min(len(seq), depth - 1), 0, -1)
                            if expected[tuple(seq[-n:])] >= 2]
                assert [tree.depth(c) for c in tree.active_cursors(s2)] == repeated


def test_a_tree_keeps_one_node_per_token_where_nothing_repeats():
    tree = SuffixTree(64)
    tree.extend(1, range(1000))  # no token twice: every suffix is a tail
    assert tree.n_nodes == 1001 and tree.active_cursors(1) == []


def test_the_matcher_finds_every_suffix_of_the_context_the_tree_holds():
    rng = random.Random(3)
    for _ in range(100):
        depth = rng.randint(2, 8)
        memory = [rng.randrange(3) for _ in range(rng.randint(1, 30))]
        tree = SuffixTree(depth)
        tree.extend(5, memory)
        matcher = Matcher(tree)
        context = [rng.randrange(3) for _ in range(rng.randint(1, 12))]
        matcher.reset(context[:3])
        matcher.extend(context[3:])
        held = substring_counts({5: memory}, depth)
        expected = [n for n in range(min(len(context), depth - 1), 0, -1)
                    if tuple(context[-n:]) in held]
        assert [tree.depth(c) for c in matcher.cursors] == expected
