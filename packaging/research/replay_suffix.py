"""Replaying suffix decoding over the target's own greedy outputs (see replay_lookup.py): each
suite's tasks in order, the draft memory (empty at first) filling with every answer as a
working session's does (app.runs.remembered_tokens: the prompt's last few tokens, then the
output), each pass priced on the demo target's verify curve. Modelled, not timed: a
variant's speed is compared with plain decoding's on the same curve. --oracle bounds what any
controller could earn from a drafter: k chosen knowing how much of each draft agrees.

  python packaging/research/replay_suffix.py OUT.json [--variant NAME ...] [--by-task] [--oracle]

--tree-oracle adds draft trees (propose_tree, each TREE_SHAPES shape) to what the oracle may
choose at each position, a tree pass priced by its nodes on the same curve: what trees could add.

OUT.json comes from `replay_lookup.py record`; its sidecar OUT.vocab.json (token texts and
end-of-generation ids, also written there) lets drafts end at a code fence as the app's do.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_lookup import (  # noqa: E402
    DEMO_CURVE,
    ReplayedPass,
    add_curve_option,
    replay_passes,
    use_curve,
)
from suffix_variants import VARIANTS, Limit  # noqa: E402

from app.engine.adaptive import DraftLengthController  # noqa: E402
from app.engine.cost_curve import VerifyCostCurve  # noqa: E402
from app.engine.decode_config import TreeShape  # noqa: E402
from app.engine.drafters import Budget, Drafter  # noqa: E402
from app.engine.drafters.lookup import block_limit  # noqa: E402
from app.engine.drafters.suffix import RememberedRun, SuffixDrafter, memory_buffer  # noqa: E402
from app.engine.drafters.suffix.retry_copy import EarlierAnswer, Recall  # noqa: E402
from app.engine.sampling import SamplingParams  # noqa: E402
from app.engine.tree import DraftTree  # noqa: E402
from app.runs import remembered_tokens  # noqa: E402

SUITES = ("repetitive", "verbatim", "edit", "code", "text")
GREEDY = SamplingParams()
RNG = np.random.default_rng(0)  # never drawn from: a copy samples nothing
T = TypeVar("T")


@dataclass
class Tally:
    """What a replay adds up, per suite."""

    plain: float = 0.0  # modelled seconds of plain decoding
    seconds: float = 0.0  # modelled seconds of the replay
    tokens: int = 0
    passes: int = 0
    drafting: int = 0  # passes that drafted
    drafted: int = 0  # draft tokens judged
    accepted: int = 0

    def add(self, passes: Iterable[ReplayedPass], tokens: int, plain_step: float) -> None:
        """One task's replayed passes, writing `tokens` where plain decoding takes
        `plain_step` seconds a token."""
        for step in passes:
            self.seconds += step.seconds
            self.passes += 1
            self.drafting += bool(step.drafted)
            self.drafted += step.drafted
            self.accepted += step.kept
        self.tokens += tokens
        self.plain += tokens * plain_step

    def row(self) -> str:
        return (f"{self.plain / self.seconds:6.3f}x"
                f"  accept {self.accepted / max(1, self.drafted):4.0%}"
                f"  k {self.drafted / max(1, self.drafting):5.1f}"
                f"  tok/pass {self.tokens / max(1, self.passes):4.2f}"
                f"  drafting {self.drafting / max(1, self.passes):4.0%}")


class _Vocab:
    """The little of a model block_limit reads."""

    def __init__(self, texts: dict[int, str], eos_ids: frozenset[int]) -> None:
        self.texts, self.eos_ids = texts, eos_ids

    def token_text(self, token: int) -> str:
        return self.texts.get(token, "")


def load_limit(recording: Path) -> Limit:
    sidecar = recording.with_suffix(".vocab.json")
    if not sidecar.exists():
        print(f"no {sidecar.name}: drafts run past code fences", file=sys.stderr)
        return None
    data = json.loads(sidecar.read_text())
    vocab = _Vocab({int(t): s for t, s in data["texts"].items()}, frozenset(data["eos"]))
    return block_limit(vocab)  # type: ignore[arg-type]


def replay(prompt: list[int], output: list[int], drafter: Drafter,
           controller: DraftLengthController, cost: Callable[[int], float],
           tally: Tally) -> None:
    """Write `output` after `prompt` as greedy speculative decoding would (it writes the
    plain output), adding each pass's modelled time and verdicts to `tally`."""
    tally.add(replay_passes(prompt, output, drafter, controller, cost), len(output), cost(1))


def recall(rows: list[dict[str, Any]], runs: list[RememberedRun]) -> Recall:
    """The app's retry copy over the suite's earlier answers (app.runs.PairSources.answers_to):
    the answers to the same prompt among the rows already remembered (`runs`, numbered from
    1 in the order of `rows`), the latest first."""
    def answers_to(prompt_ids: Sequence[int]) -> list[EarlierAnswer]:
        return [EarlierAnswer(run.run, rows[run.run - 1]["output"]) for run in reversed(runs)
                if rows[run.run - 1]["prompt"] == list(prompt_ids)]
    return answers_to


def suite_replays(rows: list[dict[str, Any]], variant: str, limit: Limit, draft_max: int
                  ) -> Iterator[tuple[dict[str, Any], list[ReplayedPass]]]:
    """Each task in order, the memory holding the suite's earlier answers (none at first),
    with its replayed passes."""
    runs: list[RememberedRun] = []
    for row in rows:
        drafter, controller = VARIANTS[variant](memory_buffer(runs), limit, draft_max)
        if isinstance(drafter, SuffixDrafter):  # the memory-lookup variants have no retry copy
            drafter.recall = recall(rows, runs)
        cost = VerifyCostCurve(dict(DEMO_CURVE)).cost
        yield row, list(replay_passes(row["prompt"], row["output"], drafter, controller, cost))
        runs.append(RememberedRun(len(runs) + 1,
                                  remembered_tokens(row["prompt"], row["output"])))


def replay_suite(rows: list[dict[str, Any]], variant: str, limit: Limit, draft_max: int,
                 by_task: bool = False) -> dict[str, Tally]:
    """Each task's replay (suite_replays), added up per suite or per task."""
    tallies: dict[str, Tally] = {}
    plain_step = VerifyCostCurve(dict(DEMO_CURVE)).cost(1)
    for row, passes in suite_replays(rows, variant, limit, draft_max):
        tally = tallies.setdefault(row["name"] if by_task else row["suite"], Tally())
        tally.add(passes, len(row["output"]), plain_step)
    return tallies


def at_every_position(rows: list[dict[str, Any]], variant: str, limit: Limit, depth: int,
                      measure: Callable[[SuffixDrafter, list[int], list[int], int], T]
                      ) -> list[list[T]]:
    """Per task in order (the memory holding the earlier answers), `measure(drafter, context,
    output, done)` at every output position, the context being the prompt and output[:done]."""
    found: list[list[T]] = []
    runs: list[RememberedRun] = []
    for row in rows:
        drafter, _ = VARIANTS[variant](memory_buffer(runs), limit, depth)
        if isinstance(drafter, SuffixDrafter):  # the memory-lookup variants have no retry copy
            drafter.recall = recall(rows, runs)
        prompt, output = row["prompt"], row["output"]
        drafter.begin(prompt)
        found.append([measure(drafter, [*prompt, *output[:done]], output, done)
                      for done in range(len(output))])
        runs.append(RememberedRun(len(runs) + 1, remembered_tokens(prompt, output)))
    return found


def agreement(rows: list[dict[str, Any]], variant: str, limit: Limit,
              depth: int) -> list[list[tuple[int, int]]]:
    """Per task, at every output position: (match length, how many of a `depth`-token chain
    draft agree with the output). A drafter reads only the context, so this is what any
    controller could get from it."""
    def measure(drafter: SuffixDrafter, context: list[int], output: list[int],
                done: int) -> tuple[int, int]:
        draft = drafter.propose(context, Budget(depth), GREEDY, RNG)
        return drafter.match_length(context), agreeing(draft.tokens, output, done)
    return at_every_position(rows, variant, limit, depth, measure)


def agreeing(draft: Sequence[int], output: Sequence[int], done: int) -> int:
    """How many of the draft's first tokens equal output[done:] (what a greedy chain pass
    keeps of it)."""
    agree = 0
    while (agree < len(draft) and done + agree < len(output)
           and draft[agree] == output[done + agree]):
        agree += 1
    return agree


TREE_SHAPES = tuple(TreeShape(width=w, max_nodes=n) for w in (2, 3, 4) for n in (4, 8, 16, 32))


def longest_path(tree: DraftTree, output: list[int], done: int) -> int:
    """How many tokens of the tree's longest root path agree with output[done:] (what a
    greedy tree pass keeps)."""
    depth: dict[int, int] = {-1: 0}
    best = 0
    for i, (token, parent) in enumerate(zip(tree.tokens, tree.parents, strict=True)):
        d = depth.get(parent)
        if d is not None and done + d < len(output) and token == output[done + d]:
            depth[i] = d + 1
            best = max(best, d + 1)
    return best


def tree_agreement(rows: list[dict[str, Any]], variant: str, limit: Limit,
                   depth: int) -> list[list[list[tuple[int, int]]]]:
    """Per task, at every output position: (nodes, agreeing path) of each TREE_SHAPES tree."""
    def measure(drafter: SuffixDrafter, context: list[int], output: list[int],
                done: int) -> list[tuple[int, int]]:
        trees = [drafter.propose_tree(context, depth, shape, GREEDY, RNG)
                 for shape in TREE_SHAPES]
        return [(len(t.tokens), longest_path(t, output, done)) for t in trees]
    return at_every_position(rows, variant, limit, depth, measure)


def oracle(per: list[tuple[int, int]], cost: Callable[[int], float], k_max: int,
           trees: list[list[tuple[int, int]]] | None = None) -> float:
    """The least modelled time to write the output with this drafter, k chosen knowing each
    draft's agreement (a bound on what any controller earns from it); with `trees` (per
    position, each tree's nodes and agreeing path), a tree pass may be chosen instead."""
    return oracle_plan(per, cost, k_max, trees)[0]


def oracle_plan(per: list[tuple[int, int]], cost: Callable[[int], float], k_max: int,
                trees: list[list[tuple[int, int]]] | None = None
                ) -> tuple[float, list[int | None]]:
    """oracle()'s time, and at each position the k its passes draft from there (None where
    a tree pass is chosen; only the positions a pass starts at are read)."""
    n = len(per)
    best = [0.0] * (n + 1)  # best[i]: seconds to write output[i:]
    choice: list[int | None] = [0] * n
    for i in range(n - 1, -1, -1):
        agree = per[i][1]
        best[i], choice[i] = min((cost(k + 1) + best[min(n, i + min(k, agree) + 1)], k)
                                 for k in range(0, min(k_max, n - i - 1) + 1))
        for nodes, kept in (trees[i] if trees else ()):
            if nodes and cost(nodes + 1) + best[min(n, i + kept + 1)] < best[i]:
                best[i], choice[i] = cost(nodes + 1) + best[min(n, i + kept + 1)], None
    return best[0], choice


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--variant", action="append", choices=tuple(VARIANTS))
    parser.add_argument("--draft-max", type=int, default=32)  # the CLI's default for --suffix
    parser.add_argument("--by-task", action="store_true")
    parser.add_argument("--suite", action="append", choices=SUITES)
    parser.add_argument("--oracle", action="store_true",
                        help="the bound a controller that knew each draft's agreement earns")
    parser.add_argument("--tree-oracle", action="store_true",
                        help="with --oracle: the oracle may also choose a draft tree")
    add_curve_option(parser)
    args = parser.parse_args(argv)
    use_curve(args.curve)
    rows = json.loads(args.file.read_text())
    limit = load_limit(args.file)
    if args.oracle:
        cost = VerifyCostCurve(dict(DEMO_CURVE)).cost
        for variant in args.variant or list(VARIANTS):
            for suite in args.suite or SUITES:
                suite_rows = [row for row in rows if row["suite"] == suite]
                if not suite_rows:
                    continue
                found = agreement(suite_rows, variant, limit, args.draft_max)
                plain = sum(len(row["output"]) for row in suite_rows) * cost(1)
                bound = sum(oracle(per, cost, args.draft_max) for per in found)
                print(f"{variant:12} {suite:10} oracle k {plain / bound:.3f}x plain")
                if args.tree_oracle:
                    trees = tree_agreement(suite_rows, variant, limit, args.draft_max)
                    with_trees = sum(oracle(per, cost, args.draft_max, tree)
                                     for per, tree in zip(found, trees, strict=True))
                    print(f"{variant:12} {suite:10} oracle k or a tree {plain / with_trees:.3f}x"
                          " plain")
                if args.by_task:
                    for row, per in zip(suite_rows, found, strict=True):
                        speedup = len(per) * cost(1) / oracle(per, cost, args.draft_max)
                        print(f"  {row['name']:32} {speedup:.3f}x  (match:agreement) "
                              + " ".join(f"{m}:{a}" for m, a in per))
        return 0
    for variant in args.variant or list(VARIANTS):
        print(variant)
        for suite in args.suite or SUITES:
            suite_rows = [row for row in rows if row["suite"] == suite]
            if not suite_rows:
                continue
            for name, tally in replay_suite(suite_rows, variant, limit, args.draft_max,
                                            args.by_task).items():
                print(f"  {name:34} {tally.row()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
