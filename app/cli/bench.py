"""`draftlens bench`: plain and speculative decoding on the same prompts, in one process,
alternating, so the ratio is measured side by side on a shared, noisy machine."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from typing import Any

from app.analysis.compare import explain_difference, kernel_noise, margins_noted
from app.analysis.measure import Tally, alternating, pair_ratios, warm_up
from app.cli import interrupt
from app.cli.bench_tasks import SUITES
from app.cli.options import forget_memory, plan
from app.engine.decode_config import DecodeConfig
from app.engine.drafters.registry import label
from app.engine.protocol import LanguageModel, ReferenceGenerator
from app.errors import SettingsError
from app.models.loading import LoadedPair, load_pair
from app.models.self_skip import settle_self_skip
from app.runs import encode_prompt


def add_bench_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-p", "--prompt", action="append", help="a prompt (repeatable)")
    parser.add_argument("--prompt-file", help="one JSON string per line")
    parser.add_argument("--suite", choices=tuple(SUITES), default="code",
                        help="built-in prompts when none are given: code completion, edit "
                             "tasks (code asked back with one edit: a rename or not), free "
                             "text, or a repetitive session whose answers repeat earlier "
                             "answers (for --suffix --draft-memory; use all but code with "
                             "--chat)")
    parser.add_argument("--rounds", type=int, default=1, help="alternations per prompt")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--compare-hf", action="store_true",
                        help="torch backend: also time transformers' assisted generation")


def cmd_bench(args: argparse.Namespace) -> int:
    bench = plan(args)
    forget_memory(bench.forget_memory)
    say = lambda message: print(f"[bench] {message}", file=sys.stderr)  # noqa: E731
    pair = load_pair(bench.spec, progress=say)
    try:
        encoded = [encode_prompt(pair.target, p, args.chat) for p in bench.prompts]
        config, skip_choice = bench.runs[0], None
        if "self" in config.drafter.names:
            # its layers are chosen on all the prompts at once, before any timing
            config, skip_choice = settle_self_skip(pair, config, encoded, say)
        report = bench_pair(pair, config, encoded, args.rounds, args.compare_hf)
        if skip_choice is not None:
            report["self_skip"] = skip_choice.to_dict()
    finally:
        pair.close()
    if args.json:
        print(json.dumps(report))
    else:
        print_report(report)
    return 0


def bench_pair(pair: LoadedPair, config: DecodeConfig, encoded: list[list[int]], rounds: int,
               with_hf: bool = False) -> dict[str, Any]:
    """Plain and speculative runs alternating over the prompts, after an untimed warm-up;
    the side-by-side report."""
    warm_up(pair, config, encoded[0])
    runs = [(True, config), (False, config)]
    if config.tree_width > 1:  # a tree is measured beside the chain of the same depth
        runs.append((False, replace(config, tree_width=1)))
    model = pair.target
    with margins_noted(pair, config.sampling.greedy):  # explains a greedy difference, if any
        plain, spec, *chain = alternating(pair, runs, encoded, rounds,
                                          cancelled=interrupt.requested)
        interrupt.check()  # a Ctrl+C that native code swallowed stops here, not in a report
    report = bench_report(plain, spec, config)
    report.update(divergence_report(plain, spec, model))
    if chain:
        report.update(chain_report(plain, chain[0]))
    if with_hf:
        report.update(compare_hf(pair, encoded, config, rounds))
    report["backend"] = pair.target.backend
    report["device"] = pair.target.device
    report["drafter"] = label(config.drafter, pair.spec.draft or "")  # as the trace names it
    report["prompts"] = len(encoded)
    return report


def bench_report(plain: Tally, spec: Tally, config: DecodeConfig) -> dict[str, Any]:
    """Side-by-side figures; every derived one (c, theory, cost model) from RunStats.summary,
    with the plain runs' measured step as the target step."""
    stats = spec.stats
    summary = stats.summary(plain.stats.plain_step_time or 0.0)
    spec_steps = max(stats.spec_steps, 1)
    identical: bool | None = None
    if config.sampling.greedy:
        identical = plain.outputs == spec.outputs
    return {
        "plain_tok_s": plain.tok_s,
        "spec_tok_s": spec.tok_s,
        "speedup": spec.tok_s / plain.tok_s if plain.tok_s else 0.0,
        "pair_speedups": pair_ratios(plain, spec),
        # as transformers' generate() is timed (--compare-hf): prompt prefill included
        "plain_tok_s_with_prefill": plain.tok_s_with_prefill,
        "spec_tok_s_with_prefill": spec.tok_s_with_prefill,
        "acceptance": stats.acceptance,
        "alpha": stats.alpha,
        "mean_k": stats.mean_k,
        "cost_ratio": summary.get("cost_ratio", 0.0),
        "theory_speedup": summary.get("theory_speedup", 1.0),
        "predicted_speedup": summary.get("predicted_speedup", 1.0),
        "expected_tokens_per_pass": summary["expected_tokens_per_pass"],
        "tokens_per_pass": stats.tokens_per_pass,
        "hidden_cos_auc": summary.get("hidden_cos_auc"),
        "speculative_step_share": stats.spec_steps / stats.steps if stats.steps else 0.0,
        "identical": identical,
        "tokens": spec.tokens,
        "t_target_step": plain.stats.plain_step_time or 0.0,
        # every step's time before its pass (the drafter's outlook, the controller's choice)
        # over the drafting steps alone: few drafting steps make a small total look long
        # (prose --ngram: 2.8 ms a step read as 1.0 s, 2 drafting steps in 720)
        "t_draft_per_step": stats.t_draft / spec_steps if stats.spec_steps else 0.0,
        # the same total over every step: what choosing costs each step
        "t_before_pass_per_step": stats.t_draft / max(stats.steps, 1),
        "t_verify_per_step": stats.spec_verify_time,
        "t_overhead_per_step": stats.t_overhead / max(stats.steps, 1),
        "adaptive": config.adaptive,
        "draft_max": config.draft_max,
        "tree_width": config.tree_width,
        "tree_nodes": config.tree_nodes if config.tree_width > 1 else 0,
        "temperature": config.sampling.temperature,
    }


def chain_report(plain: Tally, chain: Tally) -> dict[str, Any]:
    """The chain of the same depth, run beside a tree."""
    return {
        "chain_tok_s": chain.tok_s,
        "chain_speedup": chain.tok_s / plain.tok_s if plain.tok_s else 0.0,
        "chain_tokens_per_pass": chain.stats.tokens_per_pass,
        "chain_acceptance": chain.stats.acceptance,
        "chain_identical": plain.outputs == chain.outputs,
    }


def divergence_report(plain: Tally, spec: Tally, model: LanguageModel) -> dict[str, Any]:
    """Where greedy speculative text differs from plain decoding (fast kernels only), the
    first differing position of each such prompt, the target's top-two margins there in both
    runs, and the kernels' disagreement measured on this model (only when a text differs)."""
    found = []
    if plain.tops and len(plain.tops) == len(spec.tops):
        for run in zip(plain.prompt_lengths, plain.outputs, spec.outputs, plain.tops, spec.tops,
                       strict=True):
            divergence = explain_difference(model, *run, say=_say)
            if divergence is not None:
                found.append(divergence.as_dict())
    noise = kernel_noise(model, say=lambda _: None) if found else None
    if noise is not None:
        _say(noise.describe())
    return {"divergences": found,
            "divergences_near_ties": all(d["near_tie"] for d in found) if found else None,
            "kernel_noise_bound": noise.bound if noise else None,
            "kernel_noise": noise.as_dict() if noise else None}


def _say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr)


def compare_hf(pair: LoadedPair, encoded: list[list[int]], config: DecodeConfig,
               rounds: int) -> dict[str, Any]:
    """The runtime's own generate(): plain and assisted, greedy, same prompts and lengths."""
    target = pair.target
    if not isinstance(target, ReferenceGenerator) or pair.draft is None:
        raise SettingsError("--compare-hf needs --backend torch and a draft model")
    times = {"plain": 0.0, "assisted": 0.0}
    tokens = {"plain": 0, "assisted": 0}
    passes = {"plain": 0, "assisted": 0}
    outputs: dict[str, list[list[int]]] = {"plain": [], "assisted": []}
    for round_index in range(rounds):
        for ids in encoded:
            modes = ["plain", "assisted"] if round_index % 2 == 0 else ["assisted", "plain"]
            for mode in modes:
                assistant = pair.draft if mode == "assisted" else None
                start = time.perf_counter()
                new = target.reference_generate(ids, config.n_predict, assistant)
                times[mode] += time.perf_counter() - start
                tokens[mode] += len(new)
                passes[mode] += target.reference_passes
                outputs[mode].append(new)
    plain_rate = tokens["plain"] / times["plain"]
    assisted_rate = tokens["assisted"] / times["assisted"]
    return {
        "hf_plain_tok_s": plain_rate,
        "hf_assisted_tok_s": assisted_rate,
        "hf_assisted_speedup": assisted_rate / plain_rate,
        "hf_identical": outputs["plain"] == outputs["assisted"],
        # the prefill pass included, as the peer counts it
        "hf_assisted_tokens_per_pass": tokens["assisted"] / max(1, passes["assisted"]),
    }


def pair_spread(report: dict[str, Any]) -> str:
    """' (pairs 0.94-1.03 over 9)': the lowest and highest ratio of a speculative run to the
    plain run beside it, or nothing for a single pair."""
    ratios = report.get("pair_speedups", [])
    if len(ratios) < 2:
        return ""
    return f" (pairs {min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)})"


def prediction_line(report: dict[str, Any]) -> str:
    """The cost model's prediction, unless the speedup measured beside it contradicts it (the
    drafting passes' mean times leave out the rest of the run's time)."""
    predicted, measured = report["predicted_speedup"], report["speedup"]
    if measured and abs(predicted - measured) > 0.10 * measured:
        return (f"{'cost-model prediction':>22}  left out: the drafting passes alone price "
                f"{predicted:.2f}x, the runs side by side measured {measured:.2f}x")
    return f"{'cost-model prediction':>22}  {predicted:8.2f}x"


def print_report(report: dict[str, Any]) -> None:
    lines = [
        f"backend {report['backend']} on {report['device']}, drafter: {report['drafter']}, "
        f"{report['prompts']} prompt(s), {report['tokens']} tokens",
        f"{'plain':>22}  {report['plain_tok_s']:8.2f} tok/s",
        f"{'speculative':>22}  {report['spec_tok_s']:8.2f} tok/s",
        f"{'speedup':>22}  {report['speedup']:8.2f}x{pair_spread(report)}",
        f"{'acceptance (alpha)':>22}  {report['acceptance']:8.3f} ({report['alpha']:.3f})",
        f"{'mean k':>22}  {report['mean_k']:8.2f}  (adaptive: {report['adaptive']})",
        f"{'cost ratio c':>22}  {report['cost_ratio']:8.3f}",
        f"{'theory E/(1+kc)':>22}  {report['theory_speedup']:8.2f}x",
        prediction_line(report),
        f"{'time/step d/v/engine':>22}  {1000 * report['t_draft_per_step']:.1f} / "
        f"{1000 * report['t_verify_per_step']:.1f} / {1000 * report['t_overhead_per_step']:.1f}"
        f" ms (plain step {1000 * report['t_target_step']:.1f} ms)",
        f"{'tokens per pass':>22}  {report['tokens_per_pass']:8.2f}",
        f"{'greedy identical':>22}  {report['identical']}",
    ]
    if "chain_tok_s" in report:
        lines.append(f"{'chain, same depth':>22}  {report['chain_tok_s']:8.2f} tok/s "
                     f"({report['chain_speedup']:.2f}x), {report['chain_tokens_per_pass']:.2f} "
                     f"tokens per pass (tree: width {report['tree_width']}, "
                     f"{report['tree_nodes']} nodes at most)")
    for d in report.get("divergences", []):
        lines.append(f"{'':>22}  {divergence_line(d)}")
    if "hf_assisted_speedup" in report:
        lines.append(f"{'transformers assisted':>22}  {report['hf_assisted_speedup']:8.2f}x "
                     f"({report['hf_plain_tok_s']:.2f} -> {report['hf_assisted_tok_s']:.2f} "
                     f"tok/s, {report['hf_assisted_tokens_per_pass']:.2f} tokens per pass, "
                     f"identical: {report['hf_identical']})")
        ours = report["spec_tok_s_with_prefill"]
        lines.append(f"{'with prefill, as hf':>22}  DraftLens {ours:.2f} tok/s "
                     f"({ours / report['plain_tok_s_with_prefill']:.2f}x its plain), "
                     f"transformers assisted {report['hf_assisted_tok_s']:.2f} tok/s: "
                     f"{ours / report['hf_assisted_tok_s']:.2f}x")
    print("\n".join(lines))


def divergence_line(d: dict[str, Any]) -> str:
    """One divergence of a bench report (a Divergence.as_dict), for tables and logs."""
    moved = d.get("gap_moved")
    bound = d.get("noise_bound")
    against = (f"margins add to {moved:.4f} vs kernel noise bound {_gap(bound)}"
               if moved is not None else d.get("reason", ""))
    return (f"first difference at generated token {d['position']}: {d['plain_text']!r} plain "
            f"vs {d['other_text']!r} speculative, top-two logit gap "
            f"{_gap(d['plain_logit_gap'])} plain / {_gap(d['other_logit_gap'])} speculative; "
            f"{against}: {'near-tie' if d['near_tie'] else 'NOT a near-tie'}")


def _gap(value: float | None) -> str:
    return "?" if value is None else f"{value:.4f}"
