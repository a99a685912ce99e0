"""The copy bars, relative to the machine, in one table: for each workload recorded (the
target's own greedy outputs, `replay_lookup.py record`) and a verify curve, what the app's
controller earns from suffix decoding's drafts (modelled, replay_suffix.py), what an oracle
controller earns from the same drafts (k chosen knowing how far each agrees), the share of the
oracle's gain the app earns (the bar: >= 80% on the repetitive session, the edits and the
verbatim workload), beside the copy bound (app.analysis.copy_bound: any copier, an oracle's
pick of source) and the verify-curve limit (max over n of n / t(n), in plain steps).

With --timed FILE (the JSON of `bench_vs_llamacpp.py --draftless-only --json FILE`) it adds the
timed bar against llama.cpp's best draftless mode: where the copy bound is at least 1.3x
llama.cpp's best, --suffix must reach 1.15x it, elsewhere 1.0x; prose and fresh code 0.98x
plain.

  python packaging/research/copy_bars.py [--curve CURVE.json] [--draft-max 64]
      [--recording SUITE=FILE ...] [--timed FILE] [--variant NAME]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_lookup import DEMO_CURVE, add_curve_option, use_curve  # noqa: E402
from replay_suffix import agreement, load_limit, oracle, replay_suite  # noqa: E402
from suffix_variants import VARIANTS  # noqa: E402

from app.analysis.copy_bound import copy_bound  # noqa: E402
from app.engine.cost_curve import VerifyCostCurve  # noqa: E402
from app.engine.drafters.suffix.token_buffer import SEPARATOR  # noqa: E402
from app.runs import remembered_tokens  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "docs/ablation-data"
RECORDINGS = {"repetitive": DATA / "rep-all.json", "edit": DATA / "edit-all.json",
              "verbatim": DATA / "verbatim.json", "code": DATA / "codetext.json",
              "text": DATA / "codetext.json"}
SHARE_BAR = 0.80
NO_LOSS_BAR = 0.98  # prose and fresh code against plain decoding
# the timed bar against llama.cpp's best draftless mode: where the copy bound leaves room
ROOM, ABOVE_LLAMA_WITH_ROOM, ABOVE_LLAMA = 1.3, 1.15, 1.0
TIMED_NAMES = {"repetitive": "repetitive", "edit": "edit", "verbatim": "verbatim",
               "code": "fresh code", "text": "prose"}


def suite_figures(suite: str, recording: Path, draft_max: int,
                  variant: str = "app") -> dict[str, float]:
    """The app's (or a variant's of suffix_variants.VARIANTS) and the oracle's modelled
    speedups, the copy bound and the verify-curve limit of one recorded suite, on the curve in
    use (DEMO_CURVE). The oracle chooses k over the same drafts."""
    rows = [row for row in json.loads(recording.read_text()) if row["suite"] == suite]
    limit = load_limit(recording)
    cost = VerifyCostCurve(dict(DEMO_CURVE)).cost
    tally = replay_suite(rows, variant, limit, draft_max)[suite]
    plain = sum(len(row["output"]) for row in rows) * cost(1)
    found = agreement(rows, variant, limit, draft_max)
    best = sum(oracle(per, cost, draft_max) for per in found)
    least, memory = 0.0, []
    for row in rows:
        least += copy_bound(row["output"], [*memory, SEPARATOR, *row["prompt"]], cost,
                            draft_max)[1]
        memory += [SEPARATOR, *remembered_tokens(row["prompt"], row["output"])]
    ceiling = max(n * cost(1) / cost(n) for n in range(1, draft_max + 2))
    return {"app": tally.plain / tally.seconds, "oracle": plain / best,
            "copy_bound": plain / least, "limit": ceiling}


def share(app: float, best: float) -> float | None:
    """The share of the oracle's gain over plain decoding the app earns (None: no gain)."""
    return (app - 1) / (best - 1) if best > 1 else None


def share_table(suites: Sequence[str], variants: Sequence[str], draft_max: int = 64) -> str:
    """A markdown table: per workload, each variant's (suffix_variants.VARIANTS, "app" the
    app's) modelled speedup over plain decoding and its share of the oracle's gain, on the
    curve in use."""
    lines = ["| workload | " + " | ".join("the app" if name == "app" else name
                                         for name in variants) + " |",
             "|---|" + "---|" * len(variants)]
    for suite in suites:
        cells = []
        for name in variants:
            found = suite_figures(suite, RECORDINGS[suite], draft_max, name)
            gained = share(found["app"], found["oracle"])
            cells.append(f"{found['app']:.3f}× ({'–' if gained is None else f'{gained:.0%}'})")
        lines.append(f"| {suite} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def timed_lines(timed: dict[str, Any]) -> list[str]:
    """The bar against llama.cpp's best draftless mode, per workload of a timed run."""
    workloads = timed.get("draftless", timed).get("workloads", timed.get("draftless", {}))
    lines = ["", "| workload | --suffix × plain | llama.cpp's best × plain | copy bound × "
             "llama.cpp's best | bar | --suffix / llama.cpp's best | met |",
             "|---|---|---|---|---|---|---|"]
    for name, w in workloads.items():
        if not isinstance(w, dict) or "rows" not in w:
            continue
        plain = w["plain_tok_s"]
        suffix = next(v["spec_tok_s"] for k, v in w["rows"].items() if "suffix" in k)
        modes = {k: v["tok_s"] for k, v in w["rows"].items() if k.startswith("llama.cpp")}
        if name.split(" (")[0] in ("prose", "fresh code"):  # "prose (round 2)" too
            lines.append(f"| {name} | {suffix / plain:.2f}× | – | – | ≥ {NO_LOSS_BAR}× plain | "
                         f"– | {'yes' if suffix / plain >= NO_LOSS_BAR else 'no'} |")
            continue
        best = max(modes.values()) if modes else plain
        room = w["copy_bound"]["speedup"] * plain / best
        bar = ABOVE_LLAMA_WITH_ROOM if room >= ROOM else ABOVE_LLAMA
        met = "yes" if suffix / best >= bar else "no"
        lines.append(f"| {name} | {suffix / plain:.2f}× | {best / plain:.2f}× | {room:.2f}× | "
                     f"≥ {bar}× | {suffix / best:.2f}× | {met} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_curve_option(parser)
    parser.add_argument("--draft-max", type=int, default=64)
    parser.add_argument("--recording", action="append", default=[], metavar="SUITE=FILE",
                        help="replay this recording for the suite (default: docs/ablation-data)")
    parser.add_argument("--timed", type=Path, help="a bench_vs_llamacpp.py --json file")
    parser.add_argument("--variant", default="app", choices=tuple(VARIANTS),
                        help="replay this controller and drafter in the app's place")
    args = parser.parse_args(argv)
    use_curve(args.curve)
    recordings = dict(RECORDINGS)
    recordings.update({s: Path(f) for s, f in (r.split("=", 1) for r in args.recording)})
    print(f"curve: {args.curve or 'the demo target (replay_lookup.DEMO_CURVE)'}, "
          f"--draft-max {args.draft_max}; speedups modelled over plain decoding")
    print("\n| workload | the app | oracle controller | share of the oracle's gain | bar | "
          "met | copy bound | verify-curve limit |\n|---|---|---|---|---|---|---|---|")
    for suite, recording in recordings.items():
        f = suite_figures(suite, recording, args.draft_max, args.variant)
        gained = share(f["app"], f["oracle"])
        if suite in ("code", "text"):
            bar, met = f"≥ {NO_LOSS_BAR}× plain", f["app"] >= NO_LOSS_BAR
        else:
            bar, met = f"≥ {SHARE_BAR:.0%}", gained is not None and gained >= SHARE_BAR
        print(f"| {suite} | {f['app']:.3f}× | {f['oracle']:.3f}× | "
              f"{'–' if gained is None else f'{gained:.0%}'} | {bar} | {'yes' if met else 'no'} | "
              f"{f['copy_bound']:.3f}× | {f['limit']:.2f}× |")
    if args.timed:
        print("\n".join(timed_lines(json.loads(args.timed.read_text()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
