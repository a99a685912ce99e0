"""How far better copy pricing alone could take the copy bars: the app's controller and
drafts, each copy position priced from a table fitted to the very outputs it is then scored on
(per kind of draft, source, run of 0/1/2/3/4/6/8/12/16/24/32 tokens or more, whether the
source went two ways there, and draft position 0/1/2/3+), the kind's own learnt rates used
only where the table has no count. It bounds what per-class rates fixed beforehand can earn,
not what pricing can: the app's rates learnt in the run beat it (with padded passes, 78%
against the table's 72% of the oracle's gain on the Xeon's repetitive session).

  PYTHONPATH=. python packaging/research/copy_pricing_ceiling.py [--curve CURVE.json]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import copy_bars  # noqa: E402
from copy_pricing_fit import tally_copies  # noqa: E402
from suffix_variants import VARIANTS, variant  # noqa: E402

from app.engine.adaptive import DraftLengthController  # noqa: E402
from app.engine.drafters import DraftKind  # noqa: E402
from app.engine.estimates import CopyEvidence  # noqa: E402
from app.engine.pass_pricing import Pricing  # noqa: E402

RUNS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
Key = tuple[str, str, int, bool, int]


def key(kind: str, copy: CopyEvidence, j: int) -> Key:
    run = max(i for i, bound in enumerate(RUNS) if copy.match + j >= bound)
    return kind, copy.source, run, j in copy.splits, min(j, 3)


def fit(recordings: Sequence[Path]) -> dict[Key, list[int]]:
    """Per key: [draft positions reached, of them agreeing], every copy drafted 64 deep."""
    return tally_copies(recordings, lambda kind, copy, j: [key(kind.name, copy, j)])


def fitted_controller(table: dict[Key, list[int]]) -> type[DraftLengthController]:
    class FittedTable(DraftLengthController):
        def _pricing(self, kind: DraftKind, top: int,
                     accept_at: Sequence[float] | None = None) -> Pricing:
            if accept_at is None and self._copy is not None:
                learnt = self.estimate(kind).accept_at[:top]
                accept_at = []
                for j, rate in enumerate(learnt):
                    seen, agreed = table.get(key(kind.name, self._copy, j), [0, 0])
                    accept_at.append(agreed / seen if seen else rate)
            return super()._pricing(kind, top, accept_at)
    return FittedTable


def main(argv: list[str] | None = None) -> int:
    recordings = sorted(set(copy_bars.RECORDINGS.values()))
    VARIANTS["fitted table"] = variant(controller=fitted_controller(fit(recordings)))
    print("the app's drafts, each copy priced from a table fitted to these very outputs:")
    return copy_bars.main(["--variant", "fitted table", *(argv if argv is not None
                                                          else sys.argv[1:])])


if __name__ == "__main__":
    sys.exit(main())
