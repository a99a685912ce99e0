"""The copy bound: how fast any drafter that copies earlier text could have written an output.

At each position of the output, the longest run of the tokens that follow which occurs, in
order, somewhere in the text a copying drafter can read there (its sources: the memory of
earlier runs and the prompt, then the output so far) is what the best copy could have
drafted. With each pass priced on the verify-cost curve and its draft length chosen knowing
how far that copy agrees, the least time to write the output bounds every copying drafter
(prompt lookup, suffix decoding, with any controller) from above; the verify-curve limit
bounds every drafter, copying or not, on text it could copy whole.

The bound says how much of a slow workload is the text's (little of it repeats what came
before) and how much the drafter's (it repeats, but the drafts missed it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def longest_copies(output: Sequence[int], sources: Sequence[int], most: int) -> list[int]:
    """Per output position i, how many of output[i:] (at most `most`) a copy of text in
    `sources` followed by output[:i] could agree with. A copy reads only what is written: a
    run that starts in the output stops where the output so far ends."""
    text = list(sources)
    where: dict[int, list[int]] = {}
    for at, token in enumerate(text):
        where.setdefault(token, []).append(at)
    copies = []
    for i, token in enumerate(output):
        best = 0
        for start in where.get(token, ()):
            n = 1
            while (n < most and start + n < len(text) and i + n < len(output)
                   and text[start + n] == output[i + n]):
                n += 1
            best = max(best, n)
            if best == most:
                break
        copies.append(best)
        where.setdefault(token, []).append(len(text))
        text.append(token)
    return copies


def least_time(copies: Sequence[int], cost: Callable[[int], float], draft_max: int) -> float:
    """The least time to write len(copies) tokens when a pass at position i may draft up to
    copies[i] agreeing tokens, each pass over n tokens costing cost(n). A pass may also read
    more tokens than it drafts where a larger pass costs less (a padded pass,
    app.engine.cost_curve.cheapest_size: on a CPU whose kernels take rows in blocks a pass of
    4 can cost less than one of 3), so a pass of k + 1 is priced at the least cost of any size
    from k + 1 to draft_max + 1."""
    n = len(copies)
    padded = [min(cost(s) for s in range(size, draft_max + 2)) for size in range(1, draft_max + 2)]
    best = [0.0] * (n + 1)  # best[i]: the least time to write the tokens from i on
    for i in range(n - 1, -1, -1):
        most = min(copies[i], draft_max, n - i - 1)
        best[i] = min(padded[k] + best[i + k + 1] for k in range(most + 1))
    return best[0]


def copy_bound(output: Sequence[int], sources: Sequence[int], cost: Callable[[int], float],
               draft_max: int) -> tuple[float, float]:
    """(plain time, least time of any copying drafter) for this output, priced on `cost`."""
    copies = longest_copies(output, sources, draft_max)
    return len(output) * cost(1), least_time(copies, cost, draft_max)
