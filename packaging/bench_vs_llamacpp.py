"""DraftLens against llama.cpp itself, side by side in one run (a benchmark, not a test).

llama.cpp's own `llama-bench` and `llama-speculative-simple` are built from the llama.cpp
vendored in the installed llama-cpp-python release (packaging/build_llama_tools.sh; reuse a
build with DRAFTLENS_LLAMA_TOOLS=DIR). Same GGUFs (the demo pair unless -m/-md), same
prompts, same threads, greedy:

  plain                 DraftLens plain decoding    vs llama-bench tg
  draft model k = 2, 4  DraftLens speculative       vs llama-speculative-simple -md, same k
  draft model adaptive  DraftLens --adaptive        vs llama.cpp's best fixed k above
  n-gram on edits       DraftLens --ngram adaptive  vs --spec-type ngram-map-k / ngram-simple

Every DraftLens row alternates plain and speculative runs in one process (the ratio and the
greedy identity come from the same run); the edit tasks (app.cli.bench.EDIT_PROMPTS)
interleave DraftLens and llama.cpp's n-gram modes task by task for 3 rounds (2 with --quick),
since this kind of machine drifts by 10-20% within minutes. A child process repeats the plain
and n-gram rows with the batch-invariant kernels (a process can hold only one kind);
--no-exact skips it.

  .venv/bin/python packaging/bench_vs_llamacpp.py [--quick] [--threads 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.allocator import keep_large_blocks  # noqa: E402
from app.analysis.measure import Tally, side_by_side, timed_run, warm_up  # noqa: E402
from app.cli.bench import (  # noqa: E402
    bench_report,
    divergence_line,
    divergence_report,
    pair_spread,
)
from app.cli.bench_tasks import CODE_PROMPTS, EDIT_PROMPTS  # noqa: E402
from app.engine.decode_config import DecodeConfig  # noqa: E402
from app.engine.divergence import MarginTap  # noqa: E402
from app.engine.sampling import SamplingParams  # noqa: E402
from app.models.loading import LoadedPair, ModelSpec, load_pair  # noqa: E402
from app.runs import build_session, encode_prompt  # noqa: E402

TOOLS = ("llama-bench", "llama-speculative-simple")
EDIT_TOKENS = 200
EDIT_DRAFT_MAX = 64
ADAPTIVE_ROUNDS = 3
LLAMA_NGRAM_MODES = [
    ("ngram-map-k n-max 64", ["--spec-type", "ngram-map-k", "--spec-draft-n-max", "64"]),
    ("ngram-map-k n-max 16", ["--spec-type", "ngram-map-k", "--spec-draft-n-max", "16"]),
    ("ngram-simple n-max 16", ["--spec-type", "ngram-simple", "--spec-draft-n-max", "16"]),
]


def log(message: str) -> None:
    print(f"[bench-vs-llamacpp] {message}", file=sys.stderr, flush=True)


# --- llama.cpp's side -------------------------------------------------------------------
def llama_tools() -> Path:
    """The folder holding llama-bench and llama-speculative-simple, built if missing."""
    base = Path(os.environ.get("DRAFTLENS_LLAMA_TOOLS", ROOT / "packaging/.build/llama-tools"))
    for folder in (base / "bin", base / "build/bin"):
        if all((folder / t).is_file() for t in TOOLS):
            return folder
    log(f"building {' '.join(TOOLS)} into {base} (minutes on the first build)")
    env = {**os.environ, "DRAFTLENS_LLAMA_TOOLS": str(base)}
    subprocess.run(["bash", str(ROOT / "packaging/build_llama_tools.sh"), *TOOLS], check=True,
                   env=env)
    return base / "bin"


def llama_bench_tg(tools: Path, model: str, threads: int, n: int, repeats: int) -> float:
    out = subprocess.run(
        [str(tools / "llama-bench"), "-m", model, "-t", str(threads), "-p", "0", "-n", str(n),
         "-r", str(repeats), "-o", "json"], capture_output=True, text=True, check=True).stdout
    rows = json.loads(out)
    rate = float(next(r["avg_ts"] for r in rows if r.get("n_gen", 0) > 0))
    log(f"  llama-bench tg{n}: {rate:.2f} tok/s")
    return rate


_DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
_ACCEPT = re.compile(r"n_drafted\s*=\s*(\d+).*?n_accept\s*=\s*(\d+)", re.S)


def speculative_simple(tools: Path, target: str, prompt_text: str, n: int, threads: int,
                       extra: list[str]) -> tuple[int, float, int, int, str]:
    """tokens, seconds, drafted, accepted, generated text of one llama-speculative-simple run."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(prompt_text)
    try:
        run = subprocess.run(
            [str(tools / "llama-speculative-simple"), "-m", target, "-f", f.name, "-n", str(n),
             "-t", str(threads), "-tb", str(threads), "-c", "4096", "--temp", "0", "-s", "1",
             "-ngl", "0", *extra],
            capture_output=True, text=True, errors="replace")
    finally:
        os.unlink(f.name)
    both = run.stdout + run.stderr
    found = _DECODED.search(both)
    if run.returncode != 0 or not found:
        raise RuntimeError(f"llama-speculative-simple failed ({run.returncode}): {both[-800:]}")
    accepted = _ACCEPT.search(both)
    drafted, n_acc = (int(accepted.group(1)), int(accepted.group(2))) if accepted else (0, 0)
    return int(found.group(1)), float(found.group(2)), drafted, n_acc, run.stdout


def llama_spec_row(tools: Path, target: str, prompts: list[str], n: int, threads: int,
                   extra: list[str]) -> dict[str, Any]:
    tokens = drafted = accepted = 0
    seconds = 0.0
    for text in prompts:
        t, s, d, a, _ = speculative_simple(tools, target, text, n, threads, extra)
        tokens, seconds, drafted, accepted = tokens + t, seconds + s, drafted + d, accepted + a
    log(f"  {tokens / seconds if seconds else 0.0:.2f} tok/s, accepted {accepted}/{drafted}")
    return {"tok_s": tokens / seconds if seconds else 0.0, "tokens": tokens,
            "acceptance": accepted / drafted if drafted else None, "args": " ".join(extra)}


# --- DraftLens's side -------------------------------------------------------------------
def draftlens_row(pair: LoadedPair, config: DecodeConfig, encoded: list[list[int]],
                  rounds: int) -> dict[str, Any]:
    """Plain and speculative alternating on the same prompts, as `draftlens bench` does."""
    build_session(pair, config)  # calibrates the verify curve once, outside the timing
    plain, spec = side_by_side(pair, config, encoded, rounds)
    return draftlens_report(pair, config, plain, spec)


def draftlens_report(pair: LoadedPair, config: DecodeConfig, plain: Tally,
                     spec: Tally) -> dict[str, Any]:
    report = bench_report(plain, spec, config)
    report.update(divergence_report(plain, spec, pair.target))
    log(f"  plain {report['plain_tok_s']:.2f} tok/s, speculative {report['spec_tok_s']:.2f} "
        f"tok/s ({report['speedup']:.2f}x), mean k {report['mean_k']:.1f}, accepted "
        f"{report['acceptance']:.0%}, identical {report['identical']}, step split "
        f"{1000 * report['t_draft_per_step']:.1f} / {1000 * report['t_verify_per_step']:.1f} / "
        f"{1000 * report['t_overhead_per_step']:.1f} ms draft / verify / engine")
    return report


def draftlens_rows(args: argparse.Namespace, exact: bool) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    if not args.ngram_only:
        rows.update(draft_model_rows(args, exact))
    if not exact:
        return rows  # the fast kernels' edit tasks run beside llama.cpp's: edit_rows
    pair = load_pair(ModelSpec(target=args.target, ngram=True, n_threads=args.threads,
                               batch_invariant=exact))
    pair.target = MarginTap(pair.target)
    try:
        edits = edit_prompt_ids(pair)
        if edits:
            log("DraftLens ngram edit")
            rows["ngram edit"] = draftlens_row(pair, edit_config(), list(edits.values()), 1)
    finally:
        pair.close()
    return rows


def edit_prompt_ids(pair: LoadedPair) -> dict[str, list[int]]:
    """The edit tasks' chat prompts by name, without those (said why) the target's context
    cannot hold with their output."""
    edits = {}
    for name, text in EDIT_PROMPTS.items():
        ids = encode_prompt(pair.target, text, chat=True)
        if len(ids) + EDIT_TOKENS >= pair.target.n_ctx:
            log(f"skipping the edit task '{name}': {pair.target.name} holds only "
                f"{pair.target.n_ctx} tokens")
            continue
        edits[name] = ids
    return edits


def draft_model_rows(args: argparse.Namespace, exact: bool) -> dict[str, Any]:
    n_code = 64 if args.quick else 128
    greedy = SamplingParams(temperature=0.0)
    rows: dict[str, Any] = {}
    log(f"loading {Path(args.target).name} ({'exact' if exact else 'fast'} kernels)")
    pair = load_pair(ModelSpec(target=args.target, draft=args.draft, n_threads=args.threads,
                               batch_invariant=exact))
    pair.target = MarginTap(pair.target)
    try:
        code = [encode_prompt(pair.target, p, chat=False) for p in CODE_PROMPTS]
        if args.quick:
            code = code[:2]
        timed_run(pair, DecodeConfig(n_predict=4, sampling=greedy), code[0], True, Tally())
        for name, k, adaptive in (("draft k=2", 2, False), ("draft k=4", 4, False),
                                  ("draft adaptive", 8, True)):
            if (args.quick or exact) and k != 4 and not (adaptive and not exact):
                continue
            log(f"DraftLens {name}")
            config = DecodeConfig(n_predict=n_code, draft_max=k, adaptive=adaptive,
                                  sampling=greedy)
            # adaptive may settle on k = 0, plain decoding, whose ratio to plain is pure
            # noise: more pairs (each run is cheap then) show how wide that noise is
            rows[name] = draftlens_row(pair, config, code, ADAPTIVE_ROUNDS if adaptive else 1)
    finally:
        pair.close()
    return rows


def plain_rows(args: argparse.Namespace, tools: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """DraftLens plain decoding on each code prompt paired with llama-bench tg of as many
    tokens, which goes first alternating pair by pair: pairs a few seconds apart, since this
    machine's speed drifts by 10-20% within a minute. Each side's rate over all rounds is
    its tokens over its seconds (for llama-bench's equal-length runs, the harmonic mean of
    their rates)."""
    rounds = 2 if args.quick else 3
    n_code = 64 if args.quick else 128
    pair = load_pair(ModelSpec(target=args.target, n_threads=args.threads,
                               batch_invariant=False))
    greedy = SamplingParams(temperature=0.0)
    try:
        code = [encode_prompt(pair.target, p, chat=False) for p in CODE_PROMPTS]
        timed_run(pair, DecodeConfig(n_predict=4, sampling=greedy), code[0], True, Tally())
        mine, theirs = Tally(), []
        per_round = []
        pairs = 0
        for round_index in range(rounds):
            before = (mine.tokens, mine.seconds, len(theirs))
            for prompt_ids in code:
                runs = [lambda ids=prompt_ids: timed_run(
                            pair, DecodeConfig(n_predict=n_code, sampling=greedy), ids, True,
                            mine),
                        lambda: theirs.append(
                            llama_bench_tg(tools, args.target, args.threads, n_code, 1))]
                for run in runs if pairs % 2 == 0 else runs[::-1]:
                    run()
                pairs += 1
            per_round.append({"DraftLens": (mine.tokens - before[0]) / (mine.seconds - before[1]),
                              "llama-bench": statistics.harmonic_mean(theirs[before[2]:])})
            log(f"  plain round {round_index + 1}: DraftLens {per_round[-1]['DraftLens']:.1f}, "
                f"llama-bench tg{n_code} {per_round[-1]['llama-bench']:.1f} tok/s")
    finally:
        pair.close()
    return ({"plain_tok_s": mine.tok_s, "rounds": per_round},
            {"tok_s": statistics.harmonic_mean(theirs), "runs": theirs})


def edit_config() -> DecodeConfig:
    return DecodeConfig(n_predict=EDIT_TOKENS, draft_max=EDIT_DRAFT_MAX, adaptive=True,
                        sampling=SamplingParams(temperature=0.0))


def edit_rows(args: argparse.Namespace, tools: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The edit tasks, DraftLens and llama.cpp's n-gram modes interleaved task by task and
    round by round: this machine's speed drifts by 10-20% within minutes, and one run per
    side would compare two different machines. Each rate is tokens over seconds across the
    rounds (per task, and over all tasks); every task's rounds are kept."""
    rounds = 2 if args.quick else 3
    modes = LLAMA_NGRAM_MODES if not args.quick else LLAMA_NGRAM_MODES[:1]
    pair = load_pair(ModelSpec(target=args.target, ngram=True, n_threads=args.threads,
                               batch_invariant=False))
    pair.target = MarginTap(pair.target)
    llama: dict[str, dict[str, Any]] = {}
    # per task: tokens and seconds of DraftLens plain, DraftLens n-gram and each llama.cpp mode
    tasks: dict[str, dict[str, list[float]]] = {}
    try:
        edits = edit_prompt_ids(pair)
        if not edits:
            return {}, {}
        chat_texts = {name: pair.target.chat_prompt(EDIT_PROMPTS[name]) for name in edits}
        config = edit_config()
        warm_up(pair, config, next(iter(edits.values())))
        plain, spec = Tally(), Tally()
        per_round: list[dict[str, Any]] = []
        for round_index in range(rounds):
            log(f"edit round {round_index + 1} of {rounds}")
            for name, ids in edits.items():
                totals = tasks.setdefault(name, {})
                this_round: dict[str, Any] = {"task": name}
                order = [("DraftLens plain", plain), ("DraftLens", spec)]
                if round_index % 2:
                    order.reverse()
                for label, tally in order:
                    before = (tally.tokens, tally.seconds)
                    timed_run(pair, config, ids, label == "DraftLens plain", tally)
                    tokens, seconds = tally.tokens - before[0], tally.seconds - before[1]
                    _add(totals, label, tokens, seconds)
                    this_round[label] = tokens / seconds
                shift = round_index % len(modes)
                for mode, extra in modes[shift:] + modes[:shift]:
                    tokens, seconds, drafted, accepted, _ = speculative_simple(
                        tools, args.target, chat_texts[name], EDIT_TOKENS, args.threads, extra)
                    row = llama.setdefault(mode, {"tokens": 0, "seconds": 0.0, "drafted": 0,
                                                  "accepted": 0, "args": " ".join(extra)})
                    row["tokens"] += tokens
                    row["seconds"] += seconds
                    row["drafted"] += drafted
                    row["accepted"] += accepted
                    _add(totals, mode, tokens, seconds)
                    this_round[mode] = tokens / seconds
                log(f"  {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in this_round.items()
                                              if k != "task") + " tok/s")
                per_round.append(this_round)
        report = draftlens_report(pair, config, plain, spec)
    finally:
        pair.close()
    for row in llama.values():
        row["tok_s"] = row["tokens"] / row["seconds"]
        row["acceptance"] = row["accepted"] / row["drafted"] if row["drafted"] else None
    report["rounds"] = per_round
    report["tasks"] = {name: {label: tokens / seconds for label, (tokens, seconds) in t.items()}
                       for name, t in tasks.items()}
    return report, llama


def _add(totals: dict[str, list[float]], label: str, tokens: float, seconds: float) -> None:
    entry = totals.setdefault(label, [0.0, 0.0])
    entry[0] += tokens
    entry[1] += seconds


def exact_rows_in_child(args: argparse.Namespace) -> dict[str, Any]:
    """The batch-invariant kernels are chosen once per process, so they run in a child."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    command = [sys.executable, __file__, "--draftlens-only", "--exact-kernels-only",
               "--threads", str(args.threads), "-m", args.target, "-md", args.draft,
               "--json", out, *(["--quick"] if args.quick else [])]
    subprocess.run(command, check=True)
    try:
        return dict(json.loads(Path(out).read_text())["draftlens_exact"])
    finally:
        os.unlink(out)


# --- the report -------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--target", help="target GGUF (default: the demo pair's)")
    parser.add_argument("-md", "--draft", help="draft GGUF (default: the demo pair's)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true",
                        help="fewer prompts and tokens, k = 4 only (about half the time)")
    parser.add_argument("--no-exact", action="store_true",
                        help="skip the exact-kernel child run")
    parser.add_argument("--json", help="also write every figure to this JSON file")
    parser.add_argument("--draftlens-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--exact-kernels-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ngram-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    keep_large_blocks()  # as the draftlens command does
    if args.target is None or args.draft is None:
        from app.models.demo import demo_paths

        target, draft = demo_paths()
        args.target = args.target or str(target)
        args.draft = args.draft or str(draft)
    started = time.perf_counter()
    result: dict[str, Any] = {"threads": args.threads, "quick": args.quick,
                              "target": Path(args.target).name, "draft": Path(args.draft).name}
    if args.exact_kernels_only:
        result["draftlens_exact"] = draftlens_rows(args, exact=True)
    else:
        tools = llama_tools()
        result["llama_tools"] = str(tools)
        result["draftlens"] = draftlens_rows(args, exact=False)
        result["llamacpp"] = llamacpp_rows(args, tools)
        log("plain decoding: DraftLens and llama-bench tg, interleaved")
        result["plain"], result["llamacpp"]["plain"] = plain_rows(args, tools)
        log("the edit tasks: DraftLens --ngram and llama.cpp's n-gram modes, interleaved")
        dl_edit, ll_edit = edit_rows(args, tools)
        if dl_edit:
            result["draftlens"]["ngram edit"] = dl_edit
        result["llamacpp"].update(ll_edit)
        if not args.no_exact:
            result["draftlens_exact"] = exact_rows_in_child(args)
    result["seconds"] = time.perf_counter() - started
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if not args.exact_kernels_only:
        print(markdown_table(result))
    return 0


def llamacpp_rows(args: argparse.Namespace, tools: Path) -> dict[str, Any]:
    n_code = 64 if args.quick else 128
    prompts = CODE_PROMPTS[:2] if args.quick else CODE_PROMPTS
    rows: dict[str, Any] = {}
    for k in () if args.ngram_only else (4,) if args.quick else (2, 4):
        log(f"llama-speculative-simple draft k={k}")
        rows[f"draft k={k}"] = llama_spec_row(
            tools, args.target, prompts, n_code, args.threads,
            ["-md", args.draft, "-ngld", "0", "--spec-type", "draft-simple",
             "--spec-draft-n-max", str(k)])
    return rows


def speedup_cell(row: dict[str, Any]) -> str:
    """The speedup over plain, the spread of its pairs, and a row that never drafted named as
    plain decoding (its ratio to plain is the machine's noise)."""
    cell = f"{row['speedup']:.2f}×{pair_spread(row)}"
    if row.get("speculative_step_share") == 0:
        cell += ", k = 0 at every step: plain decoding"
    return cell


def markdown_table(result: dict[str, Any]) -> str:
    dl, ll, ex = result["draftlens"], result["llamacpp"], result.get("draftlens_exact", {})

    def fmt(x: float | None, pattern: str = "{:.1f}") -> str:
        return "–" if x is None else pattern.format(x)

    def ident(row: dict[str, Any]) -> str:
        if row.get("identical"):
            return "yes"
        n = len(row.get("divergences", []))
        bound = row.get("kernel_noise_bound")
        noise = "?" if bound is None else f"{bound:.3f}"
        if row.get("divergences_near_ties"):
            return f"no ({n} near-tie{'s' if n > 1 else ''} within kernel noise {noise})"
        return f"no ({n} divergence{'s' if n > 1 else ''}, NOT explained by kernel noise {noise})"

    lines = [f"{result['target']} / {result['draft']}, {result['threads']} threads, greedy"
             f"{' (quick)' if result['quick'] else ''}", "",
             "| run | DraftLens tok/s | llama.cpp tok/s | DraftLens / llama.cpp | DraftLens "
             "speedup over its plain | accepted | mean k | measured / cost model | "
             "greedy identical to plain |", "|---|---|---|---|---|---|---|---|---|"]
    plain = result["plain"]["plain_tok_s"]
    lines.append(f"| plain (llama-bench tg) | {fmt(plain)} | {fmt(ll['plain']['tok_s'])} | "
                 f"{fmt(plain / ll['plain']['tok_s'] if plain else None, '{:.2f}×')} | – | – "
                 "| – | – | – |")
    best_k = max((v["tok_s"] for k, v in ll.items() if k.startswith("draft")), default=None)
    best_ngram = max((v["tok_s"] for k, v in ll.items() if k.startswith("ngram")), default=None)
    for name, row in dl.items():
        peer = ll.get(name)
        ref = peer["tok_s"] if peer else (best_ngram if name.startswith("ngram") else best_k)
        label = name if peer else f"{name} (vs llama.cpp's best)"
        ratio = row["speedup"] / row["predicted_speedup"] if row["predicted_speedup"] else None
        lines.append(
            f"| {label} | {fmt(row['spec_tok_s'])} | {fmt(ref)} | "
            f"{fmt(row['spec_tok_s'] / ref if ref else None, '{:.2f}×')} | "
            f"{speedup_cell(row)} | {fmt(row['acceptance'], '{:.0%}')} | "
            f"{row['mean_k']:.1f} | {fmt(ratio, '{:.0%}')} | {ident(row)} |")
    for name, row in ll.items():
        if name != "plain" and name not in dl:
            lines.append(f"| llama.cpp {name} | – | {fmt(row['tok_s'])} | – | – | "
                         f"{fmt(row['acceptance'], '{:.0%}')} | – | – | – |")
    if ex:
        lines += ["", "Exact (batch-invariant) kernels, `--exact-kernels`, same run:", "",
                  "| run | plain tok/s | plain / llama-bench tg | spec tok/s | speedup | "
                  "greedy identical |", "|---|---|---|---|---|---|"]
        for name, row in ex.items():
            lines.append(f"| {name} | {row['plain_tok_s']:.1f} | "
                         f"{row['plain_tok_s'] / ll['plain']['tok_s']:.2f}× | "
                         f"{row['spec_tok_s']:.1f} | {row['speedup']:.2f}× | {ident(row)} |")
    plain_rounds = result["plain"].get("rounds", [])
    if plain_rounds:
        lines += ["", "Plain decoding round by round (tok/s):", ""]
        lines += [f"- round {i}: DraftLens {r['DraftLens']:.1f}, llama-bench {r['llama-bench']:.1f}"
                  f" — {r['DraftLens'] / r['llama-bench']:.2f}×"
                  for i, r in enumerate(plain_rounds, start=1)]
    tasks = dl.get("ngram edit", {}).get("tasks", {})
    if tasks:
        modes = [name for name in ll if name.startswith("ngram")]
        lines += ["", "Edit tasks one by one (tok/s over the rounds; the last column is "
                  "DraftLens over llama.cpp's best mode on that task):", "",
                  "| edit task | DraftLens plain | DraftLens n-gram | "
                  + " | ".join(f"llama.cpp {m}" for m in modes) + " | DraftLens / best |",
                  "|---|---|---|" + "---|" * len(modes) + "---|"]
        for name, rates in tasks.items():
            best = max(rates[m] for m in modes)
            lines.append(f"| {name} | {rates['DraftLens plain']:.1f} | {rates['DraftLens']:.1f}"
                         " | " + " | ".join(f"{rates[m]:.1f}" for m in modes)
                         + f" | {rates['DraftLens'] / best:.2f}× |")
    for name, row in {**dl, **{f"{k} (exact kernels)": v for k, v in ex.items()}}.items():
        for d in row.get("divergences", []):
            lines.append(f"\n{name}: {divergence_line(d)}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
