"""The headless `draftlens` commands (ui/launcher.py opens the window when none is given).

  draftlens run    -m TARGET -md DRAFT -p PROMPT -n N   stream text, stats to stderr
  draftlens bench  ...                                  plain vs speculative, side by side
  draftlens models fetch-demo | list | check T D
  draftlens trace  FILE                                 summarise a saved trace
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

import app
from app.errors import DraftLensError, SettingsError
from app.loading import ModelSpec, load_pair
from app.sampling import SamplingParams
from app.session import DecodeConfig
from backends.base import BackendError

COMMANDS = ("run", "bench", "models", "trace")
_HEADLESS_FIRST = {"-h", "--help", "--version", "--preflight-child", *COMMANDS}


def wants_window(argv: Sequence[str]) -> bool:
    """True when `draftlens ARGV` means the desktop app rather than a headless command."""
    args = [a for a in argv if a != "--debug"]
    return not args or args[0] not in _HEADLESS_FIRST


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("models")
    g.add_argument("-m", "--target", "--model", dest="target",
                   help="target model: a .gguf file or a transformers folder (default: demo pair)")
    g.add_argument("-md", "--draft", "--model-draft", dest="draft", help="draft model")
    g.add_argument("--ngram", action="store_true",
                   help="draft by n-gram / prompt lookup; with a draft model, look up first "
                        "and use the draft model when the context has no match")
    g.add_argument("--backend", choices=("auto", "llamacpp", "torch"), default="auto")
    g.add_argument("--device", default="auto", help="auto, cpu, cuda, mps (torch backend)")
    g.add_argument("-ngl", "--n-gpu-layers", "--gpu-layers", dest="n_gpu_layers", default="auto",
                   help="layers to offload with llama.cpp: a number or auto")
    g.add_argument("-c", "--ctx-size", dest="n_ctx", type=int, default=4096)
    g.add_argument("-t", "--threads", dest="n_threads", type=int, default=None)
    g.add_argument("--fast-kernels", action="store_true",
                   help="llama.cpp: use the CPU's repacked kernels (faster on some CPUs, but a "
                        "verify pass and plain decoding may then differ at near-ties)")
    g.add_argument("--trust-remote-code", action="store_true",
                   help="allow a transformers model to run its own Python code")
    g.add_argument("--allow-pickle", action="store_true",
                   help="allow loading pickle (.bin) weights, which can run code")


def add_decode_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("decoding")
    g.add_argument("-n", "--n-predict", dest="n_predict", type=int, default=128)
    g.add_argument("--draft-max", "--draft-n", dest="draft_max", type=int, default=None,
                   help="draft length k (max under --adaptive); default 8, 32 with --ngram")
    g.add_argument("--draft-min", type=int, default=0)
    g.add_argument("--draft-p-min", type=float, default=None,
                   help="stop drafting when the draft's own probability falls below this")
    g.add_argument("--adaptive", action="store_true",
                   help="choose k from measured acceptance and verify cost; plain when none pays")
    g.add_argument("--temp", "--temperature", dest="temp", type=float, default=0.0,
                   help="0 = greedy (default)")
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--min-p", type=float, default=0.0)
    g.add_argument("-s", "--seed", type=int, default=None)
    g.add_argument("--chat", action="store_true", help="apply the target's chat template")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="draftlens", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=version_text())
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command")

    run = sub.add_parser("run", help="generate text with speculative decoding")
    add_model_flags(run)
    add_decode_flags(run)
    run.add_argument("-p", "--prompt", required=True)
    run.add_argument("--trace", help="write the JSONL trace here")
    run.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)

    bench = sub.add_parser("bench", help="plain vs speculative decoding on the same prompts")
    add_model_flags(bench)
    add_decode_flags(bench)
    bench.add_argument("-p", "--prompt", action="append", help="a prompt (repeatable)")
    bench.add_argument("--prompt-file", help="one JSON string per line")
    bench.add_argument("--suite", choices=("code", "edit"), default="code",
                       help="built-in prompts when none are given: code completion, or an "
                            "edit task (code asked back with one rename; use with --chat)")
    bench.add_argument("--rounds", type=int, default=1, help="alternations per prompt")
    bench.add_argument("--json", action="store_true", help="print one JSON object")
    bench.add_argument("--compare-hf", action="store_true",
                       help="torch backend: also time transformers' assisted generation")
    bench.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)

    models = sub.add_parser("models", help="demo pair, known pairs, compatibility")
    models_sub = models.add_subparsers(dest="models_command", required=True)
    models_sub.add_parser("fetch-demo", help="download and assemble the demo pair")
    models_sub.add_parser("list", help="known pairs and whether each is usable")
    check = models_sub.add_parser("check", help="can these two work as target and draft?")
    check.add_argument("target")
    check.add_argument("draft")

    trace = sub.add_parser("trace", help="summarise a saved trace")
    trace.add_argument("file")
    return parser


def version_text() -> str:
    from app.runs import versions

    found = versions()
    others = ", ".join(f"{k} {v}" for k, v in found.items() if k != "draftlens")
    return f"draftlens {app.__version__} ({others})"


def model_spec(args: argparse.Namespace) -> ModelSpec:
    target, draft = args.target, args.draft
    if target is None:
        from app.demo import demo_installed, demo_paths

        if not demo_installed():
            raise SettingsError("no target model given and the demo pair is not installed — "
                                "pass -m FILE, or run: draftlens models fetch-demo")
        demo_target, demo_draft = demo_paths()
        target = str(demo_target)
        if draft is None and not args.ngram:
            draft = str(demo_draft)
    if draft is None and not args.ngram:
        raise SettingsError("no draft given — pass -md DRAFT_FILE, or --ngram for prompt lookup")
    layers = args.n_gpu_layers
    if layers != "auto":
        try:
            layers = int(layers)
        except ValueError as exc:
            raise SettingsError(f"--n-gpu-layers must be a number or auto (got {layers})") from exc
    return ModelSpec(
        target=target, draft=draft, ngram=args.ngram, backend=args.backend, device=args.device,
        n_gpu_layers=layers, n_ctx=args.n_ctx, n_threads=args.n_threads,
        trust_remote_code=args.trust_remote_code, allow_pickle=args.allow_pickle,
        draft_p_min=args.draft_p_min or 0.0, draft_min=args.draft_min,
        batch_invariant=not args.fast_kernels,
    )


def decode_config(args: argparse.Namespace) -> DecodeConfig:
    draft_max = args.draft_max if args.draft_max is not None else (32 if args.ngram else 8)
    config = DecodeConfig(
        n_predict=args.n_predict, draft_max=draft_max, draft_min=args.draft_min,
        draft_p_min=args.draft_p_min or 0.0, adaptive=args.adaptive,
        sampling=SamplingParams(temperature=args.temp, top_k=args.top_k, top_p=args.top_p,
                                min_p=args.min_p, seed=args.seed),
    )
    config.validate()
    return config


def cmd_run(args: argparse.Namespace) -> int:
    from app.runs import TextStream, encode_prompt, make_session, trace_header
    from app.trace import TraceWriter

    config = decode_config(args)
    spec = model_spec(args)
    if args.trace:
        ensure_writable(args.trace)
    pair = load_pair(spec, progress=lambda m: print(f"[draftlens] {m}", file=sys.stderr))
    for warning in pair.warnings:
        print(f"[draftlens] warning: {warning}", file=sys.stderr)
    try:
        prompt_ids = encode_prompt(pair.target, args.prompt, args.chat)
        session = make_session(pair, config)
        session.check_prompt(prompt_ids)
        writer = TraceWriter(args.trace) if args.trace else None
        stream = TextStream(pair.target)
        try:
            if writer:
                writer.header(trace_header(pair, config, args.prompt, len(prompt_ids),
                                           "speculative"))
            for step in session.steps(prompt_ids):
                sys.stdout.write(stream.push(step.emitted))
                sys.stdout.flush()
                if writer:
                    writer.step(step)
            sys.stdout.write("\n")
            summary = session.stats.summary(_plain_step_time(session))
            if writer:
                writer.summary(summary)
        finally:
            if writer:
                writer.close()
        print_stats(session.stats, summary, session.prefill_seconds, len(prompt_ids))
    finally:
        pair.close()
    return 0


def _plain_step_time(session) -> float | None:  # noqa: ANN001
    curve = session.controller.curve
    return curve.points.get(1)


def print_stats(stats, summary: dict, prefill: float, n_prompt: int) -> None:  # noqa: ANN001
    rows = [
        ("prompt", f"{n_prompt} tokens in {prefill:.2f} s"),
        ("generated", f"{stats.emitted} tokens in {stats.elapsed:.2f} s"),
        ("speed", f"{stats.tokens_per_second:.2f} tok/s"),
        ("target passes", f"{stats.steps} ({stats.tokens_per_pass:.2f} tokens per pass)"),
        ("drafted / accepted", f"{stats.drafted} / {stats.accepted} "
                               f"({100 * stats.acceptance:.1f}%)"),
        ("alpha (per judged token)", f"{stats.alpha:.3f}"),
        ("acceptance by position", " ".join(f"{a:.2f}" for a in stats.acceptance_by_position)),
        ("mean k", f"{stats.mean_k:.2f}"),
        ("time draft/verify/engine", f"{stats.t_draft:.2f} / {stats.t_verify:.2f} / "
                                     f"{stats.t_overhead:.2f} s"),
    ]
    if "cost_ratio" in summary:
        rows.append(("cost ratio c", f"{summary['cost_ratio']:.3f}"))
        rows.append(("theory speedup E/(1+kc)", f"{summary['theory_speedup']:.2f}x"))
        rows.append(("cost-model speedup", f"{summary['predicted_speedup']:.2f}x"))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}", file=sys.stderr)


def ensure_writable(path: str) -> None:
    """Fail before any work if the trace cannot be written; leave nothing behind."""
    target = Path(path)
    existed = target.exists()
    if target.is_dir():
        raise DraftLensError(f"trace path {path} is a folder — give a file name like run.jsonl")
    try:
        with open(target, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise DraftLensError(f"cannot write the trace file {path}: {exc.strerror} — "
                             "choose a folder you can write to") from exc
    if not existed:
        target.unlink()


def cmd_models(args: argparse.Namespace) -> int:
    from app.catalog import check_pair_files, known_pairs

    if args.models_command == "fetch-demo":
        from app.demo import fetch_demo

        def show(progress) -> None:  # noqa: ANN001
            print(f"\r{progress}".ljust(100), end="", file=sys.stderr, flush=True)

        target, draft = fetch_demo(show)
        print(file=sys.stderr)
        print(f"demo pair ready:\n  target {target}\n  draft  {draft}")
        return 0
    if args.models_command == "list":
        for pair in known_pairs():
            state = "installed" if pair.installed else "not installed (draftlens models fetch-demo)"
            verdict = ""
            if pair.installed and pair.draft is not None:
                verdict = " — " + check_pair_files(pair.target, pair.draft).message
            print(f"{pair.name}: {state}{verdict}")
            print(f"    target {pair.target}")
            if pair.draft is not None:
                print(f"    draft  {pair.draft}")
        return 0
    check = check_pair_files(args.target, args.draft)
    for warning in check.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    check.raise_if_incompatible()
    print(check.message)
    return 0


def cmd_trace(args: argparse.Namespace) -> int:
    from app.metrics import RunStats
    from app.trace import read_trace

    trace = read_trace(args.file)
    stats = RunStats()
    for step in trace.steps:
        stats.add(step)
    if trace.header:
        h = trace.header
        print(f"target {h.target}\ndraft  {h.draft}\nbackend {h.backend} on {h.device}")
    print(f"steps {stats.steps}, tokens {stats.emitted}, {stats.tokens_per_second:.2f} tok/s, "
          f"accepted {stats.accepted}/{stats.drafted} ({100 * stats.acceptance:.1f}%), "
          f"{stats.tokens_per_pass:.2f} tokens per pass")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--preflight-child"]:  # hidden: app.preflight's child in a packaged app
        from app.preflight_child import main as preflight_child

        return preflight_child(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "bench":
            from app.bench import cmd_bench

            return cmd_bench(args)
        if args.command == "models":
            return cmd_models(args)
        return cmd_trace(args)
    except (DraftLensError, BackendError) as exc:
        if args.debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
