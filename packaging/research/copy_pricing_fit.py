"""The measured rates behind app.engine.estimates.RATES: at every output position of each
recording where suffix decoding (the app's drafter, its memory holding the suite's earlier
answers) offers a copy, its draft 64 deep, and per source and run bucket (the copy's match, cut
to the tokens written, plus the draft position) the share of the draft positions reached that
agree with the output; and, again apart, the draft positions at a split (CopyEvidence.splits: the
source's earlier occurrences of the match went on in more than one way there), whose share
per source is app.engine.estimates.SPLIT_RATES.

  python packaging/research/copy_pricing_fit.py [RECORDING.json ...]
      (default: docs/ablation-data/rep-all.json and edit-all.json, the fit's)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_suffix import GREEDY, RNG, SUITES, at_every_position, load_limit  # noqa: E402

from app.engine.drafters import Budget, DraftKind, written_copy  # noqa: E402
from app.engine.drafters.suffix import SuffixDrafter  # noqa: E402
from app.engine.estimates import RATES, RUN_BOUNDS, SPLIT_RATES, CopyEvidence  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "docs/ablation-data"
DEPTH = 64
SPLIT = -1  # the run bucket under which the draft positions at a split are counted


K = TypeVar("K")


def tally_copies(recordings: Sequence[Path],
                 keys: Callable[[DraftKind, CopyEvidence, int], list[K]]) -> dict[K, list[int]]:
    """Every draft position of every copy the app's suffix drafter offers over the recordings
    (drafted DEPTH deep, up to its first disagreement with the output), counted under each of
    `keys(kind, copy, position)`: key -> [positions reached, of them agreeing]."""
    tally: dict[K, list[int]] = {}

    def measure(drafter: SuffixDrafter, context: list[int], output: list[int],
                done: int) -> None:
        outlook = drafter.outlook(context)
        copy = written_copy(outlook, done)
        if copy is None:
            return
        tokens = drafter.propose(context, Budget(DEPTH), GREEDY, RNG).tokens
        for j, token in enumerate(tokens):
            if done + j >= len(output):
                break
            agrees = token == output[done + j]
            for key in keys(outlook.kind, copy, j):
                seen = tally.setdefault(key, [0, 0])
                seen[0] += 1
                seen[1] += agrees
            if not agrees:
                break

    for recording in recordings:
        rows = json.loads(recording.read_text())
        for suite in SUITES:
            suite_rows = [row for row in rows if row["suite"] == suite]
            if suite_rows:
                at_every_position(suite_rows, "app", load_limit(recording), DEPTH, measure)
    return tally


def counts(recordings: list[Path]) -> dict[tuple[str, int], list[int]]:
    """(source, run bucket) -> [draft positions reached, of them agreeing], the positions at
    a split counted again under the run bucket SPLIT."""
    def keys(kind: DraftKind, copy: CopyEvidence, j: int) -> list[tuple[str, int]]:
        bucket = max(b for b in RUN_BOUNDS if copy.match + j >= b)
        return [(copy.source, bucket)] + ([(copy.source, SPLIT)] if j in copy.splits else [])
    return tally_copies(recordings, keys)


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    recordings = [Path(a) for a in args] or [DATA / "rep-all.json", DATA / "edit-all.json"]
    tally = counts(recordings)
    print("| source | " + " | ".join(f"run ≥ {b}" for b in RUN_BOUNDS) + " |")
    print("|---|" + "---|" * len(RUN_BOUNDS))
    sources = sorted({s for s, _ in tally})
    for source in sources:
        cells = []
        for i, bound in enumerate(RUN_BOUNDS):
            seen, agreed = tally.get((source, bound), [0, 0])
            shipped = RATES.get(source)
            cells.append(f"{agreed / seen:.2f} ({seen}; app {shipped[i]:.2f})" if seen and shipped
                         else f"{agreed / seen:.2f} ({seen})" if seen else "–")
        print(f"| {source} | " + " | ".join(cells) + " |")
    print()
    for source in sources:
        seen, agreed = tally.get((source, SPLIT), [0, 0])
        if seen:
            priced = SPLIT_RATES.get(source)
            print(f"{source} at a split: {agreed / seen:.2f} ({agreed} of {seen}; app "
                  f"{'not priced so' if priced is None else f'{priced:.2f}'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
