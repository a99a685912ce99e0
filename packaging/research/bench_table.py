"""Prints the benchmark results folder as the Markdown table the README shows."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

COLUMNS = [
    ("plain tok/s", "plain_tok_s", "{:.1f}"),
    ("spec tok/s", "spec_tok_s", "{:.1f}"),
    ("speedup", "speedup", "{:.2f}x"),
    ("accepted", "acceptance", "{:.0%}"),
    ("mean k", "mean_k", "{:.1f}"),
    ("c", "cost_ratio", "{:.2f}"),
    ("theory", "theory_speedup", "{:.2f}x"),
    ("cost model", "predicted_speedup", "{:.2f}x"),
    ("identical", "identical", "{}"),
]


def main(folder: str) -> None:
    print("| run | " + " | ".join(c[0] for c in COLUMNS) + " | transformers assisted |")
    print("|---" * (len(COLUMNS) + 2) + "|")
    for file in sorted(Path(folder).glob("*.json")):
        report = json.loads(file.read_text())
        cells = [fmt.format(report[key]) for _, key, fmt in COLUMNS]
        hf = report.get("hf_assisted_speedup")
        cells.append(f"{hf:.2f}x" if hf is not None else "")
        print(f"| {file.stem} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder", nargs="?", default="bench-results",
                        help="where benchmark.sh wrote its JSON files (default: bench-results)")
    main(parser.parse_args().folder)
