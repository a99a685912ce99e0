"""DraftLens against llama.cpp itself, side by side in one run (a benchmark, not a test).

llama.cpp's own `llama-bench`, `llama-speculative-simple` and `llama-lookup` are built from the
llama.cpp vendored in the installed llama-cpp-python release (packaging/build_llama_tools.sh;
reuse a build with DRAFTLENS_LLAMA_TOOLS=DIR). Same GGUFs (the demo pair unless -m/-md), same
prompts, same threads, greedy:

  plain                 DraftLens plain decoding    vs llama-bench tg
  draft model k = 2, 4  DraftLens speculative       vs llama-speculative-simple -md, same k
  draft model adaptive  DraftLens --adaptive        vs llama.cpp's best fixed k above
  draftless             DraftLens --ngram, --suffix vs llama-speculative-simple --spec-type
                        (its draft memory filled    ngram-simple, ngram-map-k, ngram-map-k4v,
                        in order)                   ngram-mod; llama-lookup ngram-cache (its
                                                    dynamic cache file filled in order)

The draftless rows run five workloads (--workloads): a repetitive session
(app.cli.bench_tasks.REPETITIVE_PROMPTS: agent JSON tool calls, similar code requests, one file
edited over turns), a verbatim one (VERBATIM_PROMPTS: a file rewritten turn after turn, tool
calls, a log's lines quoted, requests retried as sent), the edit tasks (EDIT_PROMPTS), free
prose (TEXT_PROMPTS) and fresh code (CODE_PROMPTS, no chat template). Each workload's prompts
run in order, every runner on a prompt before the next prompt (the order of runners rotated
prompt by prompt, since this kind of machine drifts by 10-20% within minutes), and both
memories start empty: DraftLens's suffix run of a prompt drafts from the earlier prompts'
suffix runs (never from its own plain run; a retried prompt from its earlier answer, as in the
app), llama-lookup reads the dynamic cache the earlier prompts' llama-lookup runs wrote (it
merges in their prompts' n-grams as well as their outputs'). llama-speculative-simple runs one
prompt per process, so its n-gram modes (ngram-mod's hash table included, which llama-server
keeps across requests) start from the prompt alone. Beside each row: the verify-curve limit,
max over n of n / t_verify(n) (a pass over n tokens yields n tokens at best), as tok/s and as ×
plain. DraftLens's greedy output is checked against its plain run of the same prompt.

Every draft-model row alternates plain and speculative runs in one process (the ratio and the
greedy identity come from the same run). A child process repeats the k = 4 row and the
DraftLens draftless rows with the batch-invariant kernels (a process can hold only one kind);
--no-exact skips it.

  .venv/bin/python packaging/research/bench_vs_llamacpp.py [--quick] [--draftless-only]
      [--threads 2] [--workloads repetitive,verbatim,edit,prose,fresh code] [--rounds 1]
      [--json FILE]
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
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from engine_env import run_as_engine_process  # noqa: E402

from app.allocator import keep_large_blocks  # noqa: E402
from app.analysis.copy_bound import copy_bound  # noqa: E402
from app.analysis.divergence import MarginTap  # noqa: E402
from app.analysis.measure import Tally, side_by_side, timed_run, warm_up  # noqa: E402
from app.cli.bench import (  # noqa: E402
    bench_report,
    divergence_line,
    divergence_report,
    pair_spread,
)
from app.cli.bench_tasks import (  # noqa: E402
    CODE_PROMPTS,
    EDIT_PROMPTS,
    REPETITIVE_PROMPTS,
    TEXT_PROMPTS,
    VERBATIM_PROMPTS,
)
from app.engine.cost_curve import (  # noqa: E402
    VerifyCostCurve,
    calibration_sizes,
    interpolate,
)
from app.engine.decode_config import DecodeConfig, DrafterChoice, DrafterOptions  # noqa: E402
from app.engine.drafters.suffix.token_buffer import SEPARATOR  # noqa: E402
from app.engine.sampling import SamplingParams  # noqa: E402
from app.models.loading import LoadedPair, ModelSpec, load_pair  # noqa: E402
from app.runs import (  # noqa: E402
    build_session,
    calibrate_pair,
    encode_prompt,
    remembered_tokens,
)

TOOLS = ("llama-bench", "llama-speculative-simple", "llama-lookup")
DRAFTLESS_TOKENS = 200
DRAFTLESS_DRAFT_MAX = 64
ADAPTIVE_ROUNDS = 3
# llama.cpp's draftless modes in llama-speculative-simple, at llama.cpp's own defaults. An
# n-gram type's draft length is its own setting (size_m 48 for ngram-simple / ngram-map-k /
# ngram-map-k4v, n_max 64 for ngram-mod: common/common.h); --spec-draft-n-max sets only a
# draft model's (common_speculative_n_max in common/speculative.cpp).
LLAMA_DRAFTLESS_MODES = [
    ("ngram-simple", ["--spec-type", "ngram-simple"]),
    ("ngram-map-k", ["--spec-type", "ngram-map-k"]),
    ("ngram-map-k4v", ["--spec-type", "ngram-map-k4v"]),
    ("ngram-mod", ["--spec-type", "ngram-mod"]),
]
# ngram-cache with a dynamic cache file: llama-lookup, the one program that reads that file
# (-lcd) and writes it back (its context n-grams, prompt and output, merged in) at the end.
# llama-speculative-simple takes no -lcd (arg.cpp lists it for lookup and server only) and its
# --spec-type ngram-cache never saves a cache. 8 tokens a draft, as that spec type drafts.
LOOKUP_MODE = "ngram-cache"
LOOKUP_DRAFT = 8
DRAFTLENS_PLAIN, DRAFTLENS_NGRAM, DRAFTLENS_SUFFIX = (
    "DraftLens plain", "DraftLens --ngram", "DraftLens --suffix + memory")
ROW_ORDER = [DRAFTLENS_NGRAM, DRAFTLENS_SUFFIX,
             *(f"llama.cpp {mode}" for mode, _ in LLAMA_DRAFTLESS_MODES),
             f"llama.cpp {LOOKUP_MODE}"]


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
    return llama_program(tools / "llama-speculative-simple", target, prompt_text, n, threads,
                         extra)


def llama_lookup(tools: Path, target: str, prompt_text: str, n: int, threads: int,
                 dynamic_cache: Path) -> tuple[int, float, int, int, str]:
    """One llama-lookup run (ngram-cache drafting) that reads `dynamic_cache` when it exists
    and writes it back with this run's prompt and output merged in."""
    return llama_program(tools / "llama-lookup", target, prompt_text, n, threads,
                         ["--spec-draft-n-max", str(LOOKUP_DRAFT), "-lcd", str(dynamic_cache)])


def llama_program(program: Path, target: str, prompt_text: str, n: int, threads: int,
                  extra: list[str]) -> tuple[int, float, int, int, str]:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(prompt_text)
    try:
        run = subprocess.run(
            [str(program), "-m", target, "-f", f.name, "-n", str(n),
             "-t", str(threads), "-tb", str(threads), "-c", "4096", "--temp", "0", "-s", "1",
             "-ngl", "0", *extra],
            capture_output=True, text=True, errors="replace")
    finally:
        os.unlink(f.name)
    both = run.stdout + run.stderr
    found = _DECODED.search(both)
    if run.returncode != 0 or not found:
        raise RuntimeError(f"{program.name} failed ({run.returncode}): {both[-800:]}")
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
        f"{1000 * report['t_overhead_per_step']:.1f} ms draft / verify / engine, "
        f"{1000 * report['t_before_pass_per_step']:.2f} ms before each pass over every step")
    return report


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
                                  sampling=greedy, drafter=DrafterChoice(("draft",)))
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
        mine, theirs = Tally(), list[float]()
        per_round = []
        pairs = 0
        for round_index in range(rounds):
            before = (mine.tokens, mine.seconds, len(theirs))
            for prompt_ids in code:
                runs: list[Callable[[], None]] = [
                    partial(timed_run, pair, DecodeConfig(n_predict=n_code, sampling=greedy),
                            prompt_ids, True, mine),
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


# --- the draftless rows: DraftLens --ngram / --suffix and llama.cpp's n-gram modes ---------
def draftless_workloads(args: argparse.Namespace) -> dict[str, list[tuple[str, str, bool]]]:
    """Each workload's tasks, in the order they run: (name, prompt, chat template?)."""
    every = {
        "repetitive": [(name, text, True) for name, text in REPETITIVE_PROMPTS.items()],
        "verbatim": [(name, text, True) for name, text in VERBATIM_PROMPTS.items()],
        "edit": [(name, text, True) for name, text in EDIT_PROMPTS.items()],
        "prose": [(f"prose {i}", text, True) for i, text in enumerate(TEXT_PROMPTS, start=1)],
        "fresh code": [(f"code {i}", text, False)
                       for i, text in enumerate(CODE_PROMPTS, start=1)],
    }
    quick = {"repetitive": len(REPETITIVE_PROMPTS), "verbatim": len(VERBATIM_PROMPTS),
             "edit": 3, "prose": 1, "fresh code": 2}
    chosen = {}
    for name in args.workloads.split(","):
        name = name.strip()
        if name not in every:
            raise SystemExit(f"unknown workload '{name}' — pick from {', '.join(every)}")
        tasks = every[name][:quick[name]] if args.quick else every[name]
        chosen[name] = tasks[:args.max_tasks] if args.max_tasks else tasks
    return chosen


def draftless_config(args: argparse.Namespace) -> DecodeConfig:
    return DecodeConfig(n_predict=args.tokens, draft_max=DRAFTLESS_DRAFT_MAX, adaptive=True,
                        sampling=SamplingParams(temperature=0.0))


def calibrated_points(curve: VerifyCostCurve, draft_max: int) -> dict[int, float]:
    """The curve's points at the sizes calibrated for this draft_max (a cache entry may keep
    sizes an older one measured)."""
    sizes = calibration_sizes(draft_max)
    return {n: t for n, t in curve.points.items() if n in sizes} or curve.points


def pass_cost(curve: VerifyCostCurve, draft_max: int) -> Callable[[int], float]:
    """Seconds of a pass over n tokens on the calibrated curve. A pass over n tokens is taken
    to cost at least a pass over one: a curve calibrated in a moment of load can say
    otherwise, and would promise more than n times plain."""
    points = calibrated_points(curve, draft_max)
    one = interpolate(points, 1)

    def cost(n: int) -> float:
        return max(interpolate(points, n), one)

    return cost


def verify_limit(curve: VerifyCostCurve, draft_max: int) -> dict[str, Any]:
    """The most any drafter can reach on this verify-cost curve: a pass over n tokens yields
    n tokens at best and costs t_verify(n), so no drafter beats max_n n / t_verify(n). As a
    speedup over plain, n * t_verify(1) / t_verify(n), which a row's plain rate turns into
    tok/s at that row's load (the calibrated curve scaled to it, as app.analysis.cost does)."""
    cost = pass_cost(curve, draft_max)
    best = max(range(1, draft_max + 2), key=lambda n: n / cost(n))
    points = calibrated_points(curve, draft_max)
    return {"speedup": best * cost(1) / cost(best), "pass_tokens": best,
            "calibrated_tok_s": best / cost(best),
            "curve_ms": {n: round(1000 * t, 2) for n, t in sorted(points.items())}}


def workload_copy_bound(encoded: list[tuple[str, list[int], str]], outputs: list[list[int]],
                        cost: Callable[[int], float], draft_max: int) -> float:
    """The copy bound (app.analysis.copy_bound) of a workload's plain outputs, as a speedup
    over plain: each task's sources are its prompt and, as the draft memory keeps them, the
    earlier tasks of its round (their prompts' last tokens and their outputs)."""
    plain = least = 0.0
    per_round = len(encoded)
    for start in range(0, len(outputs), per_round):
        memory: list[int] = []
        for (_, ids, _), output in zip(encoded, outputs[start:start + per_round], strict=True):
            task_plain, task_least = copy_bound(output, [*memory, SEPARATOR, *ids], cost,
                                                draft_max)
            plain, least = plain + task_plain, least + task_least
            memory += [SEPARATOR, *remembered_tokens(ids, output)]
    return plain / least if least else 1.0


def draftless_rows(args: argparse.Namespace, tools: Path | None,
                   exact: bool = False) -> dict[str, Any]:
    """Every workload with DraftLens plain, --ngram and --suffix (its draft memory filled by
    the workload's earlier prompts, in order) and, with `tools`, llama.cpp's draftless modes
    (ngram-cache's dynamic cache file filled by the same earlier prompts in the same order),
    interleaved task by task. Each round starts both memories empty."""
    workloads = draftless_workloads(args)
    base = ModelSpec(target=args.target, n_threads=args.threads, batch_invariant=exact)
    log(f"loading {Path(args.target).name} for the draftless rows "
        f"({'exact' if exact else 'fast'} kernels)")
    pair = load_pair(base)
    pair.target = MarginTap(pair.target)
    config = draftless_config(args)
    rows: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="draftlens-bench-") as folder:
            for workload, tasks in workloads.items():
                log(f"workload '{workload}': {len(tasks)} task(s) in order, "
                    f"{args.rounds} round(s)")
                row = draftless_workload(pair, base, config, workload, tasks, args, tools,
                                         Path(folder))
                if row:
                    rows[workload] = row
    finally:
        pair.close()
    return rows


def draftless_workload(pair: LoadedPair, base: ModelSpec, config: DecodeConfig,
                       workload: str, tasks: list[tuple[str, str, bool]],
                       args: argparse.Namespace, tools: Path | None,
                       folder: Path) -> dict[str, Any]:
    drafters = {DRAFTLENS_PLAIN: DrafterChoice(), DRAFTLENS_NGRAM: DrafterChoice(("ngram",))}
    encoded = []
    for name, text, chat in tasks:
        ids = encode_prompt(pair.target, text, chat)
        if len(ids) + config.n_predict >= pair.target.n_ctx:
            log(f"skipping '{name}': {pair.target.name} holds only {pair.target.n_ctx} tokens")
            continue
        encoded.append((name, ids, pair.target.chat_prompt(text) if chat else text))
    if not encoded:
        return {}
    # buffers, and the verify curve calibrated
    warm_up(pair, replace(config, drafter=drafters[DRAFTLENS_NGRAM]), encoded[0][1])
    curve = calibrate_pair(pair, config.draft_max)
    tallies = {label: Tally() for label in (DRAFTLENS_PLAIN, DRAFTLENS_NGRAM, DRAFTLENS_SUFFIX)}
    llama: dict[str, dict[str, Any]] = {}
    per_task: dict[str, dict[str, list[float]]] = {}
    per_round: list[dict[str, Any]] = []
    slug = re.sub(r"\W+", "-", workload)
    for round_index in range(args.rounds):
        # both memories start empty each round: a prompt never drafts from its own answer
        memory = folder / f"{slug}-memory-{round_index}.json"
        cache = folder / f"{slug}-lookup-{round_index}.bin"
        drafters[DRAFTLENS_SUFFIX] = DrafterChoice(("suffix",),
                                                   DrafterOptions(memory=str(memory)))
        for task_index, (name, ids, text) in enumerate(encoded):
            # a prompt the workload sends again drafts from its earlier answer, as in the app
            retried = any(ids == earlier for _, earlier, _ in encoded[:task_index])
            runners: list[tuple[str, Callable[[], tuple[int, float, int, int]]]] = [
                (label, _draftlens_runner(pair, replace(config, drafter=drafters[label]),
                                          ids, tallies[label],
                                          label == DRAFTLENS_PLAIN, retried))
                for label in (DRAFTLENS_PLAIN, DRAFTLENS_NGRAM, DRAFTLENS_SUFFIX)]
            if tools is not None:
                common = (tools, args.target, text, args.tokens, args.threads)
                runners += [(f"llama.cpp {mode}",
                             _llama_runner(partial(speculative_simple, *common, extra)))
                            for mode, extra in LLAMA_DRAFTLESS_MODES]
                runners.append((f"llama.cpp {LOOKUP_MODE}",
                                _llama_runner(partial(llama_lookup, *common, cache))))
            shift = (task_index + round_index) % len(runners)  # nobody always goes first
            this_task: dict[str, Any] = {"task": name, "round": round_index + 1}
            for label, run in runners[shift:] + runners[:shift]:
                tokens, seconds, drafted, accepted = run()
                entry = per_task.setdefault(name, {}).setdefault(label, [0.0, 0.0])
                entry[0] += tokens
                entry[1] += seconds
                this_task[label] = tokens / seconds if seconds else 0.0
                if label.startswith("llama.cpp"):
                    totals = llama.setdefault(label, {"tokens": 0, "seconds": 0.0,
                                                      "drafted": 0, "accepted": 0})
                    totals["tokens"] += tokens
                    totals["seconds"] += seconds
                    totals["drafted"] += drafted
                    totals["accepted"] += accepted
            log(f"  {name}: " + ", ".join(f"{k.replace('DraftLens ', '')} {v:.1f}"
                                          for k, v in this_task.items()
                                          if k not in ("task", "round")) + " tok/s")
            per_round.append(this_task)
    plain = tallies[DRAFTLENS_PLAIN]
    result: dict[str, Any] = {"tasks_run": [name for name, _, _ in encoded],
                              "rounds": args.rounds, "n_predict": config.n_predict,
                              "draft_max": config.draft_max, "plain_tok_s": plain.tok_s}
    limit = verify_limit(curve, config.draft_max)
    limit["tok_s"] = limit["speedup"] * plain.tok_s
    result["limit"] = limit
    log(f"  verify-curve limit: {limit['tok_s']:.1f} tok/s ({limit['speedup']:.2f}x plain, "
        f"passes of {limit['pass_tokens']} tokens)")
    bound = workload_copy_bound(encoded, plain.outputs, pass_cost(curve, config.draft_max),
                                config.draft_max)
    result["copy_bound"] = {"speedup": bound, "tok_s": bound * plain.tok_s}
    log(f"  copy bound: {bound * plain.tok_s:.1f} tok/s ({bound:.2f}x plain): the most any "
        "drafter copying earlier text could reach on these outputs")
    result["rows"] = {}
    for label in (DRAFTLENS_NGRAM, DRAFTLENS_SUFFIX):
        log(f"  {label}:")
        report = draftlens_report(pair, config, plain, tallies[label])
        same: dict[str, bool] = {}
        names = [name for _ in range(args.rounds) for name, _, _ in encoded]
        for name, mine, theirs in zip(names, plain.outputs, tallies[label].outputs,
                                      strict=True):
            same[name] = same.get(name, True) and mine == theirs
        report["identical_by_task"] = same
        result["rows"][label] = report
    for label, totals in sorted(llama.items(), key=lambda item: ROW_ORDER.index(item[0])):
        totals["tok_s"] = totals["tokens"] / totals["seconds"] if totals["seconds"] else 0.0
        totals["acceptance"] = (totals["accepted"] / totals["drafted"] if totals["drafted"]
                                else None)
        totals["over_plain"] = totals["tok_s"] / plain.tok_s if plain.tok_s else None
        result["rows"][label] = totals
    result["tasks"] = {name: {label: tokens / seconds if seconds else 0.0
                              for label, (tokens, seconds) in rates.items()}
                       for name, rates in per_task.items()}
    result["runs"] = per_round
    return result


def _draftlens_runner(pair: LoadedPair, config: DecodeConfig, ids: list[int], tally: Tally,
                      plain: bool, retried: bool) -> Callable[[], tuple[int, float, int, int]]:
    def run() -> tuple[int, float, int, int]:
        before = (tally.tokens, tally.seconds, tally.stats.drafted, tally.stats.accepted)
        timed_run(pair, config, ids, plain, tally, retried)
        return (tally.tokens - before[0], tally.seconds - before[1],
                tally.stats.drafted - before[2], tally.stats.accepted - before[3])
    return run


def _llama_runner(program: Callable[[], tuple[int, float, int, int, str]]
                  ) -> Callable[[], tuple[int, float, int, int]]:
    def run() -> tuple[int, float, int, int]:
        tokens, seconds, drafted, accepted, _ = program()
        return tokens, seconds, drafted, accepted
    return run


def exact_rows_in_child(args: argparse.Namespace) -> dict[str, Any]:
    """The batch-invariant kernels are chosen once per process, so they run in a child:
    DraftLens's draft k = 4 row and its draftless rows (no llama.cpp runs)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    command = [sys.executable, __file__, "--exact-kernels-only",
               "--threads", str(args.threads), "-m", args.target, "-md", args.draft,
               "--json", out, "--workloads", args.workloads, "--tokens", str(args.tokens),
               "--rounds", str(args.rounds), "--max-tasks", str(args.max_tasks),
               *(["--quick"] if args.quick else []),
               *(["--draftless-only"] if args.draftless_only else [])]
    subprocess.run(command, check=True)
    try:
        data = json.loads(Path(out).read_text())
        return {"draft": dict(data["draftlens_exact"]), "draftless": dict(data["draftless"])}
    finally:
        os.unlink(out)


# --- the report -------------------------------------------------------------------------
def main() -> int:
    run_as_engine_process()  # DraftLens's rows decode as the app's engine processes do
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--target", help="target GGUF (default: the demo pair's)")
    parser.add_argument("-md", "--draft", help="draft GGUF (default: the demo pair's)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true",
                        help="fewer prompts and tokens, k = 4 only, fewer draftless tasks")
    parser.add_argument("--no-exact", action="store_true",
                        help="skip the exact-kernel child run")
    parser.add_argument("--draftless-only", action="store_true",
                        help="only the draftless rows (no draft model, no llama-bench)")
    parser.add_argument("--workloads", default="repetitive,verbatim,edit,prose,fresh code",
                        help="draftless workloads, comma-separated, run in this order "
                             "(default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds of each draftless workload (each starts its memories "
                             "empty; default 1)")
    parser.add_argument("--tokens", type=int, default=DRAFTLESS_TOKENS,
                        help="tokens per draftless run at most (default %(default)s)")
    parser.add_argument("--max-tasks", type=int, default=0,
                        help="at most this many tasks per draftless workload (0: all)")
    parser.add_argument("--json", help="also write every figure to this JSON file")
    parser.add_argument("--exact-kernels-only", action="store_true", help=argparse.SUPPRESS)
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
        result["draftlens_exact"] = ({} if args.draftless_only
                                     else draft_model_rows(args, exact=True))
        result["draftless"] = draftless_rows(args, None, exact=True)
    else:
        tools = llama_tools()
        result["llama_tools"] = str(tools)
        if not args.draftless_only:
            result["draftlens"] = draft_model_rows(args, exact=False)
            result["llamacpp"] = llamacpp_rows(args, tools)
            log("plain decoding: DraftLens and llama-bench tg, interleaved")
            result["plain"], result["llamacpp"]["plain"] = plain_rows(args, tools)
        log("the draftless rows: DraftLens --ngram / --suffix and llama.cpp's n-gram modes, "
            "interleaved task by task")
        result["draftless"] = draftless_rows(args, tools)
        if not args.no_exact:
            try:
                exact = exact_rows_in_child(args)
            except subprocess.CalledProcessError as exc:  # keep the rows measured so far
                log(f"the exact-kernel child failed ({exc.returncode}): no exact-kernel rows")
                result["exact_error"] = f"the exact-kernel child exited {exc.returncode}"
            else:
                result["draftlens_exact"] = exact["draft"]
                result["draftless_exact"] = exact["draftless"]
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
    for k in (4,) if args.quick else (2, 4):
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


def markdown_table(result: dict[str, Any]) -> str:
    quick = " (quick)" if result["quick"] else ""
    lines = [f"{result['target']} / {result['draft']}, {result['threads']} threads, greedy"
             f"{quick}"]
    if "plain" in result:
        lines += draft_model_table(result)
    if result.get("draftless"):
        lines += draftless_tables(result["draftless"], result.get("draftless_exact", {}))
    if result.get("exact_error"):
        lines += ["", f"No exact-kernel rows: {result['exact_error']}."]
    return "\n".join(lines)


def draft_model_table(result: dict[str, Any]) -> list[str]:
    dl, ll, ex = result["draftlens"], result["llamacpp"], result.get("draftlens_exact", {})
    lines = ["", "| run | DraftLens tok/s | llama.cpp tok/s | DraftLens / llama.cpp | DraftLens "
             "speedup over its plain | accepted | mean k | measured / cost model | "
             "greedy identical to plain |", "|---|---|---|---|---|---|---|---|---|"]
    plain = result["plain"]["plain_tok_s"]
    lines.append(f"| plain (llama-bench tg) | {fmt(plain)} | {fmt(ll['plain']['tok_s'])} | "
                 f"{fmt(plain / ll['plain']['tok_s'] if plain else None, '{:.2f}×')} | – | – "
                 "| – | – | – |")
    best_k = max((v["tok_s"] for k, v in ll.items() if k.startswith("draft")), default=None)
    for name, row in dl.items():
        peer = ll.get(name)
        ref = peer["tok_s"] if peer else best_k
        label = name if peer else f"{name} (vs llama.cpp's best)"
        ratio = row["speedup"] / row["predicted_speedup"] if row["predicted_speedup"] else None
        lines.append(
            f"| {label} | {fmt(row['spec_tok_s'])} | {fmt(ref)} | "
            f"{fmt(row['spec_tok_s'] / ref if ref else None, '{:.2f}×')} | "
            f"{speedup_cell(row)} | {fmt(row['acceptance'], '{:.0%}')} | "
            f"{row['mean_k']:.1f} | {fmt(ratio, '{:.0%}')} | {ident(row)} |")
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
    for name, row in {**dl, **{f"{k} (exact kernels)": v for k, v in ex.items()}}.items():
        for d in row.get("divergences", []):
            lines.append(f"\n{name}: {divergence_line(d)}")
    return lines


def llama_best(rows: dict[str, Any]) -> tuple[str, float] | None:
    """llama.cpp's fastest draftless mode on a workload: its name and tok/s."""
    modes = {k: v["tok_s"] for k, v in rows.items() if k.startswith("llama.cpp")}
    if not modes:
        return None
    name = max(modes, key=lambda k: modes[k])
    return name.removeprefix("llama.cpp "), modes[name]


def limit_cell(workload: dict[str, Any]) -> str:
    limit = workload["limit"]
    return f"{limit['tok_s']:.0f} tok/s ({limit['speedup']:.1f}×, n = {limit['pass_tokens']})"


def bound_cell(workload: dict[str, Any]) -> str:
    bound = workload.get("copy_bound")
    return f"{bound['tok_s']:.0f} tok/s ({bound['speedup']:.2f}×)" if bound else "–"


def draftless_tables(workloads: dict[str, Any], exact: dict[str, Any]) -> list[str]:
    """The draftless rows: a summary per workload, every row, every task, and the exact-kernel
    repeat. The verify-curve limit: no drafter beats max_n n / t_verify(n) tok/s."""
    lines = ["", "Draftless drafting, DraftLens and llama.cpp interleaved task by task; the "
             "memories (DraftLens's draft memory, llama.cpp's dynamic ngram-cache file) filled "
             "by each workload's earlier prompts in order. Rates are tokens over seconds across "
             "the tasks, × DraftLens plain beside them; the verify-curve limit is max over n of "
             "n / t_verify(n), the calibrated curve scaled to the workload's plain rate (a pass "
             "over n tokens yields n at best), with the pass size n that reaches it; the copy "
             "bound is the most any drafter that copies earlier text (the memory, the prompt, "
             "the output so far) could reach on the plain outputs, each draft as long as its "
             "copy agrees (app/analysis/copy_bound.py):", "",
             f"| workload | {DRAFTLENS_PLAIN} | {DRAFTLENS_NGRAM} | {DRAFTLENS_SUFFIX} | "
             "llama.cpp's best draftless | suffix / llama.cpp's best | suffix / --ngram | "
             "copy bound | verify-curve limit |", "|---|---|---|---|---|---|---|---|---|"]
    for name, w in workloads.items():
        rows, plain = w["rows"], w["plain_tok_s"]
        ngram, suffix = rows[DRAFTLENS_NGRAM]["spec_tok_s"], rows[DRAFTLENS_SUFFIX]["spec_tok_s"]
        best = llama_best(rows)
        best_cell = (f"{best[1]:.1f} ({best[1] / plain:.2f}×, {best[0]})" if best else "–")
        lines.append(
            f"| {name} | {plain:.1f} | {ngram:.1f} ({ngram / plain:.2f}×) | "
            f"{suffix:.1f} ({suffix / plain:.2f}×) | {best_cell} | "
            f"{fmt(suffix / best[1] if best else None, '{:.2f}×')} | "
            f"{suffix / ngram:.2f}× | {bound_cell(w)} | {limit_cell(w)} |")
    lines += ["", "Every row (llama.cpp's greedy output is not compared):", "",
              "| workload | run | tok/s | × DraftLens plain | accepted | mean k | "
              "greedy identical to plain | verify-curve limit |",
              "|---|---|---|---|---|---|---|---|"]
    for name, w in workloads.items():
        limit = limit_cell(w)
        lines.append(f"| {name} | {DRAFTLENS_PLAIN} | {w['plain_tok_s']:.1f} | 1.00× | – | – | "
                     f"– | {limit} |")
        for label, row in w["rows"].items():
            if label.startswith("DraftLens"):
                lines.append(f"| {name} | {label} | {row['spec_tok_s']:.1f} | "
                             f"{speedup_cell(row)} | {fmt(row['acceptance'], '{:.0%}')} | "
                             f"{row['mean_k']:.1f} | {ident(row)} | {limit} |")
            else:
                accepted = (fmt(row["acceptance"], "{:.0%}") if row["drafted"]
                            else "nothing drafted")
                lines.append(f"| {name} | {label} | {row['tok_s']:.1f} | "
                             f"{fmt(row['over_plain'], '{:.2f}×')} | {accepted} | – | – | "
                             f"{limit} |")
    for name, w in workloads.items():
        labels = [DRAFTLENS_PLAIN, *(label for label in ROW_ORDER if label in w["rows"])]
        lines += ["", f"Workload '{name}' task by task, in the order run (tok/s):", "",
                  "| task | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
        for task, rates in w["tasks"].items():
            lines.append(f"| {task} | " + " | ".join(fmt(rates.get(label)) for label in labels)
                         + " |")
    if exact:
        lines += ["", "The DraftLens draftless rows again with exact (batch-invariant) kernels, "
                  "`--exact-kernels`, same run:", "",
                  "| workload | run | plain tok/s | spec tok/s | speedup | greedy identical |",
                  "|---|---|---|---|---|---|"]
        for name, w in exact.items():
            for label in (DRAFTLENS_NGRAM, DRAFTLENS_SUFFIX):
                row = w["rows"][label]
                lines.append(f"| {name} | {label} | {row['plain_tok_s']:.1f} | "
                             f"{row['spec_tok_s']:.1f} | {row['speedup']:.2f}× | {ident(row)} |")
    for kernels, data in (("", workloads), (", exact kernels", exact)):
        for name, w in data.items():
            for label in (DRAFTLENS_NGRAM, DRAFTLENS_SUFFIX):
                for d in w["rows"][label].get("divergences", []):
                    lines.append(f"\n{name}, {label}{kernels}: {divergence_line(d)}")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
