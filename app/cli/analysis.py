"""`draftlens sweep`, `draftlens rank` and `draftlens check-exact`: why a pair is (not) faster
here, which draft suits the target best, and whether the engine is exact on this pair."""

from __future__ import annotations

import argparse
import json
import sys
from argparse import Namespace
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from app.analysis.exact_report import ExactReport, GreedySuite
from app.analysis.exactness import (
    DEFAULT_N_PREDICT,
    GREEDY_PROMPTS,
    check_exact,
    exact_mode_suite,
    greedy_suite,
    user_mode,
)
from app.analysis.rank import (
    Candidate,
    NgramCandidate,
    SelfDraftCandidate,
    draft_model_candidates,
    rank_candidates,
)
from app.analysis.sweep import parse_ks, run_sweep
from app.cli import interrupt
from app.cli.bench_tasks import SUITES
from app.cli.options import (
    decode_config,
    drafter_choice,
    model_spec,
    read_prompts,
    settings,
)
from app.engine.decode_config import DrafterChoice
from app.engine.drafters.registry import parse_names
from app.errors import SettingsError
from app.models.loading import load_pair
from app.models.self_skip import settle_self_skip
from app.runs import encode_prompt

EXIT_NOT_EXACT = 3
EXIT_NOT_CHECKED = 4


def _say(name: str) -> Callable[[str], None]:
    return lambda message: print(f"[{name}] {message}", file=sys.stderr)


def add_prompt_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-p", "--prompt", action="append", help="a prompt (repeatable)")
    parser.add_argument("--prompt-file", help="one JSON string per line")
    parser.add_argument("--suite", choices=tuple(SUITES), default="code",
                        help="built-in prompts when none are given")
    parser.add_argument("--rounds", type=int, default=1, help="alternations per prompt")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def add_sweep_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--k", default="1,2,4,8", help="draft lengths to try (default 1,2,4,8)")
    add_prompt_flags(parser)


def add_rank_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--candidates", nargs="+", default=[], metavar="DRAFT",
                        help="draft model files (or folders) to compare")
    add_prompt_flags(parser)


def add_check_flags(parser: argparse.ArgumentParser) -> None:
    """check-exact's own flags; the decode flags are `run`'s (add_decode_flags), so the check
    runs the settings you run."""
    parser.set_defaults(n_predict=DEFAULT_N_PREDICT)
    g = parser.add_argument_group("check-exact")
    g.add_argument("--samples", type=int, default=200,
                   help="seeded speculative runs for the sampled test (default 200)")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.add_argument("-p", "--prompt", action="append", default=None,
                   help="a prompt for the greedy suite (repeatable): the suite runs on yours "
                        f"instead of its {len(GREEDY_PROMPTS)} own; the sampled test keeps "
                        "its own candidates")
    g.add_argument("--greedy-only", action="store_true",
                   help="only the greedy suite, in this process's kernel mode (what "
                        "check-exact runs in its exact-mode child)")


def cmd_sweep(args: Namespace) -> int:
    ks = parse_ks(args.k)
    config, spec = settings(args)
    prompts = read_prompts(args.prompt, args.prompt_file, args.suite)
    pair = load_pair(spec, progress=_say("sweep"))
    try:
        encoded = [encode_prompt(pair.target, p, args.chat) for p in prompts]
        config, _ = settle_self_skip(pair, config, encoded, _say("sweep"))
        rows = run_sweep(pair, config, encoded, ks, args.rounds, progress=_say("sweep"),
                         cancelled=interrupt.requested)
        interrupt.check()  # a Ctrl+C that native code swallowed stops here, not in a report
        report: dict[str, Any] = {
            "rows": [row.to_dict() for row in rows], "backend": pair.target.backend,
            "device": pair.target.device, "prompts": len(prompts),
            "n_predict": config.n_predict, "temperature": config.sampling.temperature,
        }
    finally:
        pair.close()
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{'k':>3} {'measured':>9} {'predicted':>9} {'error':>7} {'curve':>7} {'theory':>7} "
          f"{'accept':>7} {'tok/pass':>8} {'plain':>7} {'spec':>7}")
    for r in report["rows"]:
        print(f"{r['k']:>3} {r['measured_speedup']:>8.2f}x {r['predicted_speedup']:>8.2f}x "
              f"{100 * r['prediction_error']:>+6.1f}% {r['curve_predicted_speedup']:>6.2f}x "
              f"{r['theory_speedup']:>6.2f}x {r['acceptance']:>7.3f} {r['tokens_per_pass']:>8.2f} "
              f"{r['plain_tok_s']:>7.2f} {r['spec_tok_s']:>7.2f}")
    print("measured: speculative / plain tok/s side by side; predicted: cost model "
          "E(k)·t(1)/(k·t_draft + t_verify(k+1)) with this run's times; curve: the same with "
          "the calibrated verify-cost curve; theory: E/(1+kc)")
    return 0


def cmd_rank(args: Namespace) -> int:
    skip = getattr(args, "self_skip", None) or ""
    base_spec = model_spec(args, DrafterChoice())  # the target alone; candidates draft
    paths = list(args.candidates)
    ngram = args.ngram or bool(args.spec_type and "ngram" in parse_names(args.spec_type))
    if not paths and args.target is None and not ngram and not skip:
        from app.models.demo import demo_paths

        paths = [str(demo_paths()[1])]
    candidates: list[Candidate] = [candidate for path in paths
                                   for candidate in draft_model_candidates(base_spec.target, path)]
    if ngram:
        candidates.append(NgramCandidate())
    if not candidates and not skip:
        raise SettingsError("nothing to rank — give --candidates DRAFT ..., --ngram and/or "
                            "--self-skip RANGES|auto")
    config = decode_config(args, DrafterChoice())  # one k for all
    prompts = read_prompts(args.prompt, args.prompt_file, args.suite)

    base = load_pair(base_spec, progress=_say("rank"))
    try:
        encoded = [encode_prompt(base.target, p, args.chat) for p in prompts]
        if skip:  # the self-draft's layers chosen on the prompts, as bench chooses them
            own = drafter_choice(args)
            settled, _ = settle_self_skip(base, replace(config, drafter=own), encoded,
                                          _say("rank"))
            candidates.append(SelfDraftCandidate(settled.drafter.options.skip))
        rows = rank_candidates(base, candidates, config, encoded, args.rounds,
                               progress=_say("rank"), cancelled=interrupt.requested)
        interrupt.check()
    finally:
        base.close()
    report: dict[str, Any] = {
        "rows": [row.to_dict() for row in rows], "backend": base.target.backend,
        "device": base.target.device, "draft_max": config.draft_max,
    }
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{'#':>2} {'candidate':<40} {'tok/s':>7} {'speedup':>8} {'accept':>7} {'c':>6} "
          f"{'best k':>6}")
    for i, r in enumerate(report["rows"], start=1):
        if r["error"]:
            print(f"{i:>2} {r['label']:<40} skipped: {r['error']}")
            continue
        print(f"{i:>2} {r['label']:<40} {r['tok_s']:>7.2f} {r['speedup']:>7.2f}x "
              f"{r['acceptance']:>7.3f} {r['cost_ratio']:>6.3f} {r['best_k']:>6}")
    return 0


def cmd_check_exact(args: Namespace) -> int:
    config, spec = settings(args)
    prompts = args.prompt or GREEDY_PROMPTS
    pair = load_pair(spec, progress=_say("check-exact"))
    try:
        # a self-draft's layers are chosen once, on the greedy suite's prompts
        config, _ = settle_self_skip(
            pair, config, [encode_prompt(pair.target, p, False) for p in prompts],
            _say("check-exact"))
        choice = config.drafter
        if args.greedy_only:
            suite = (exact_mode_suite(pair, config, prompts, _say("check-exact"))
                     if spec.batch_invariant else
                     greedy_suite(pair, config, prompts, user_mode(pair)[0], False))
            print(json.dumps({"greedy_suite": suite.to_dict()}))
            return 0 if suite.identical and not suite.batched_path_wrong else EXIT_NOT_EXACT
        report = check_exact(pair, choice, samples=args.samples, seed=args.seed or 0,
                             progress=_say("check-exact"), config=config, prompts=prompts)
    finally:
        pair.close()
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        print_exact_report(report)
    return exit_code(report)


def exit_code(report: ExactReport) -> int:
    """0 passed; 3 a failure found (also where the user's settings went unchecked); 4 the
    user's settings drafted nothing, so the check could not judge them."""
    if report.failures():
        return EXIT_NOT_EXACT
    return 0 if report.passed else EXIT_NOT_CHECKED


def print_exact_report(report: ExactReport) -> None:
    def suite_line(suite: GreedySuite) -> str:
        runs = len(suite.settings) * suite.prompts
        counts = ", ".join(f"{name} {d} drafted / {a} accepted"
                           for name, (d, a) in suite.settings.items())
        same = ("identical to plain decoding" if suite.identical else
                f"differs from plain decoding in {len(suite.divergences)} of {runs} runs")
        return f"{suite.mode}: greedy output {same} ({suite.prompts} prompts; {counts})"

    def batched_line(suite: GreedySuite) -> str:
        verdict = "WRONG" if suite.batched_path_wrong else "ok"
        tree = ("" if suite.batched_tree_bound is None else
                f"; tree rows {suite.batched_tree_bound:.3g} (allowed "
                f"{suite.batched_tree_ceiling:g})")
        return (f"  batched path, {suite.batched_what}: moved a top-two gap by at most "
                f"{suite.batched_bound:.3g} logits (allowed {suite.batched_ceiling:g}){tree}: "
                f"{verdict}")

    print(suite_line(report.greedy))
    for d in report.greedy.divergences:
        margins = d["margins"]
        print(f"  {d['prompt']!r} ({d.get('setting', '')}), generated token {d['position']}: "
              f"plain {d['plain_text']!r}, speculative {d['other_text']!r}; top-two margins "
              f"{_num(margins['plain'])} / {_num(margins['speculative'])} logits, kernel noise "
              f"bound {_num(d['noise_bound'])}: "
              f"{'near-tie' if d['near_tie'] else 'NOT a near-tie'}")
    if report.exact is None:
        print("exact mode: none for this backend and device here")
    elif report.exact is not report.greedy:
        print(suite_line(report.exact))
    if report.exact is not None and report.exact.batched_bound is not None:
        print(batched_line(report.exact))
    print(f"sampled test on {report.sampled_prompt!r}, {report.samples} runs at temperature "
          f"{report.temperature}, top-k {report.top_k}: {report.sampled_drafted} drafted / "
          f"{report.sampled_accepted} accepted; p = {report.p_value:.3g} (first token "
          f"{report.p_first:.3g}, second {report.p_second:.3g}; fails below "
          f"{report.threshold:g})")
    for note in report.notes:
        print(f"note: {note}")
    print(report.verdict())


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"
