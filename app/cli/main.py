"""The headless `draftlens` commands (ui/launcher.py opens the window when none is given).

  draftlens run    -m TARGET -md DRAFT -p PROMPT -n N   stream text, stats to stderr
  draftlens bench  ...                                  plain vs speculative, side by side
  draftlens models list [--json] [--drafts-for T] | check T D | fetch REPO [FILE] | fetch-demo
                 | fetch-extra [smollm2|gemma3]
  draftlens sweep  --k 1,2,4,8 ...                      each draft length vs plain decoding
  draftlens rank   --candidates D1 D2 [--ngram]         which draft suits this target best
  draftlens check-exact ...                             is speculation exact on this pair?
  draftlens heads train -m TARGET --out HEADS.safetensors  train draft heads
  draftlens trace  FILE [--analysis]                    summarise a saved trace
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence

import app
from app.analysis.exactness import EXACTNESS_SENTENCE
from app.cli.analysis import (
    add_check_flags,
    add_rank_flags,
    add_sweep_flags,
    cmd_check_exact,
    cmd_rank,
    cmd_sweep,
)
from app.cli.bench import add_bench_flags, cmd_bench
from app.cli.commands import cmd_run, cmd_trace
from app.cli.heads import add_heads_parser, cmd_heads
from app.cli.interrupt import stop_between_steps
from app.cli.models import add_models_parser, cmd_models
from app.cli.options import add_decode_flags, add_model_flags
from app.cli.supervisor import supervise, wants_supervisor
from app.errors import DraftLensError
from app.versions import versions
from backends.base import BackendError

COMMANDS = ("run", "bench", "sweep", "rank", "check-exact", "models", "heads", "trace")
ANALYSES = {"sweep": cmd_sweep, "rank": cmd_rank, "check-exact": cmd_check_exact}
_HEADLESS_FIRST = {"-h", "--help", "--version", "--preflight-child", "--engine-host", *COMMANDS}


def wants_window(argv: Sequence[str]) -> bool:
    """True when `draftlens ARGV` means the desktop app rather than a headless command."""
    args = [a for a in argv if a != "--debug"]
    return not args or args[0] not in _HEADLESS_FIRST


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="draftlens", description=__doc__,
                                     epilog=f"What is exact: {EXACTNESS_SENTENCE}",
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
    add_bench_flags(bench)
    bench.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)

    sweep = sub.add_parser("sweep", help="each draft length against plain decoding")
    add_model_flags(sweep)
    add_decode_flags(sweep)
    add_sweep_flags(sweep)
    sweep.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)

    rank = sub.add_parser("rank", help="rank candidate drafts for a target on your prompt")
    add_model_flags(rank)
    add_decode_flags(rank)
    add_rank_flags(rank)
    rank.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)

    exact = sub.add_parser(
        "check-exact", help="greedy identity (your mode and exact kernels) and a sampled test",
        description="Runs the greedy suite with your decode settings (the same flags as "
                    "run), plus a tree and adaptive k, in the mode you run (fast kernels by "
                    "default) and again in the exact mode in a child process (llama.cpp: "
                    "batch-invariant kernels on the CPU; torch: one token per pass, and the "
                    "batched passes checked in float64), then a sampled G-test. Passes (exit "
                    "0) when the exact mode is identical, every divergence in your mode is a "
                    "near-tie within the measured kernel noise, every part drafted, and the "
                    "sampled test passes; otherwise exit 3 with the reason. Where your own "
                    "settings drafted no token on the suite's prompts it says 'not checked' "
                    "(exit 4; 3 if something failed besides), whatever the added settings "
                    f"showed. {EXACTNESS_SENTENCE}")
    add_model_flags(exact)
    add_decode_flags(exact)
    add_check_flags(exact)
    exact.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)

    add_models_parser(sub)
    add_heads_parser(sub)

    trace = sub.add_parser("trace", help="summarise a saved trace")
    trace.add_argument("file")
    trace.add_argument("--analysis", action="store_true",
                       help="also print why draft tokens were rejected")
    return parser


def version_text() -> str:
    found = versions()
    others = ", ".join(f"{k} {v}" for k, v in found.items() if k != "draftlens")
    return f"draftlens {app.__version__} ({others})"


def tolerate_narrow_console() -> None:
    """A console or pipe whose encoding lacks a character we print (a Windows cp1252 pipe has
    no "≥" or "→") shows a replacement character instead of ending the command with
    UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and (stream.encoding or "").lower().replace("-", "") != "utf8":
            reconfigure(errors="replace")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--preflight-child"]:  # hidden: app.models.preflight's child in a packaged app
        from backends.llamacpp_preflight import main as preflight_child

        return preflight_child(argv[1:])
    if argv[:1] == ["--engine-host"]:  # hidden: app.host's child in a packaged app
        from app.host.server import main as engine_host

        return engine_host()
    tolerate_narrow_console()
    if wants_supervisor(argv):
        return supervise(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    if not _goes_to_the_hub(args):  # transformers must not reach the hub behind the user's back
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        with stop_between_steps():
            return _dispatch(args)
    except (DraftLensError, BackendError) as exc:
        if args.debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "run":
        return cmd_run(args)
    if args.command == "bench":
        return cmd_bench(args)
    if args.command in ANALYSES:
        return ANALYSES[args.command](args)
    if args.command == "models":
        return cmd_models(args)
    if args.command == "heads":
        return cmd_heads(args)
    return cmd_trace(args)


def _goes_to_the_hub(args: argparse.Namespace) -> bool:
    return args.command == "models" and args.models_command in ("fetch", "fetch-demo")


if __name__ == "__main__":
    sys.exit(main())
