"""The copy bound: the least time any copying drafter could take, on a verify-cost curve."""

from __future__ import annotations

from app.analysis.copy_bound import copy_bound, least_time, longest_copies


def linear(n: int) -> float:
    return 1.0 + 0.1 * (n - 1)  # a pass over n tokens: one step plus a tenth per extra token


def test_each_position_copies_as_far_as_some_earlier_text_agrees():
    sources = [1, 2, 3, 4, 9, 1, 2, 5]
    output = [1, 2, 5, 7, 2, 3, 4]
    # output[0:] agrees 3 with sources[5:] (1, 2, 5), not 2 with sources[0:]
    assert longest_copies(output, sources, 64) == [3, 2, 1, 0, 3, 2, 1]
    assert longest_copies(output, sources, 2) == [2, 2, 1, 0, 2, 2, 1]


def test_a_copy_of_the_output_itself_stops_where_the_output_so_far_ends():
    # output [5, 5, 5, 5]: at i = 1 the only 5 written is output[0], and what follows it is
    # not written yet, so a copy holds one token, not three
    assert longest_copies([5, 5, 5, 5], [], 64) == [0, 1, 2, 1]


def test_nothing_to_copy_is_plain_decoding_and_a_whole_copy_is_the_curve_limit():
    fresh = [10, 11, 12, 13, 14, 15]
    plain, least = copy_bound(fresh, [1, 2, 3], linear, 8)
    assert least == plain == 6 * linear(1)
    # the output is in the sources whole: one pass drafts its first five tokens and the
    # target's own token after them is the sixth
    plain, least = copy_bound(fresh, [9, *fresh], linear, 8)
    assert least == linear(6)
    assert plain / least == 6 / 1.5


def test_the_draft_length_is_chosen_knowing_the_copy_and_the_curve():
    # a curve on which drafting one token costs as much as two steps never pays for one
    def steep(n: int) -> float:
        return float(n) if n <= 2 else 2.0

    assert least_time([1, 1, 1, 0], steep, 8) == 4.0  # plain: 1 + 1 + 1 + 1
    assert least_time([3, 2, 1, 0], steep, 8) == 2.0  # one pass over all four
