"""`draftlens heads train`: heads that draft from the target's own hidden state.

The target writes its own training text (greedy continuations of the prompts, about 40% of
--minutes), then the heads train on CPU for the rest, with a progress line on stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from app.engine.drafters.heads import HeadsWeights
from app.errors import SettingsError
from app.models.draft_heads import collect, read_prompts, save_heads
from app.models.loading import ModelSpec, load_model

GENERATE_SHARE = 0.4


def add_heads_parser(sub: Any) -> None:
    heads = sub.add_parser("heads", help="train draft heads on the target's own hidden states")
    heads_sub = heads.add_subparsers(dest="heads_command", required=True)
    train = heads_sub.add_parser("train", help="train draft heads for a target")
    train.add_argument("-m", "--target", required=True, help="the target model (.gguf or folder)")
    train.add_argument("--out", required=True, help="where to write the heads (.safetensors)")
    train.add_argument("--prompts", help="a text file, one prompt per line (default: built-in)")
    train.add_argument("--minutes", type=float, default=5.0, help="time for all of it")
    train.add_argument("--heads", type=int, default=3, help="tokens ahead to predict")
    train.add_argument("--rank", type=int, default=128, help="bottleneck width of each head")
    train.add_argument("--tokens-per-prompt", type=int, default=128)
    train.add_argument("--backend", choices=("auto", "llamacpp", "torch"), default="auto")
    train.add_argument("--device", default="auto")
    train.add_argument("-c", "--ctx-size", dest="n_ctx", type=int, default=2048)
    train.add_argument("--debug", action="store_true", default=argparse.SUPPRESS)


def cmd_heads(args: argparse.Namespace) -> int:
    from backends.heads_train import TrainReport, train_heads

    if not 1 <= args.heads <= 8:
        raise SettingsError(f"--heads must be 1 to 8 (got {args.heads})")
    if not 1 <= args.rank <= 4096:
        raise SettingsError(f"--rank must be 1 to 4096 (got {args.rank})")
    if args.minutes <= 0:
        raise SettingsError(f"--minutes must be > 0 (got {args.minutes})")
    out = Path(args.out)
    if not out.parent.is_dir():
        raise SettingsError(f"cannot write {out}: the folder {out.parent} does not exist")
    prompts = read_prompts(args.prompts)
    seconds = args.minutes * 60.0
    start = time.monotonic()
    spec = ModelSpec(target=args.target, backend=args.backend, device=args.device,
                     n_ctx=args.n_ctx)
    target = load_model(args.target, spec)
    try:
        def say(message: str) -> None:
            print(f"\r{message}\033[K", end="", file=sys.stderr, flush=True)

        data = collect(target, prompts, args.heads, seconds * GENERATE_SHARE,
                       args.tokens_per_prompt, say)
        print(f"\n{data.n_tokens} positions, {len(data.vocab_ids)} candidate tokens",
              file=sys.stderr)

        def progress(report: TrainReport) -> None:
            top1 = "  ".join(f"h{i + 1} {a:.0%}" for i, a in enumerate(report.heldout_top1))
            say(f"step {report.step}  loss {report.loss:.3f}  held-out loss "
                f"{report.heldout_loss:.3f}  top-1 {top1}")

        left = max(1.0, seconds - (time.monotonic() - start))
        trained = train_heads(data.hidden, data.labels, data.output_rows, args.rank, left,
                              progress)
        print(file=sys.stderr)
        weights = HeadsWeights(trained.w1, trained.w2, data.vocab_ids, data.output_rows,
                               target.n_vocab, target.name)
        save_heads(out, weights)
    finally:
        target.close()
    first, last = trained.history[0], trained.history[-1]
    print(f"wrote {out}: {args.heads} heads, rank {args.rank}; held-out loss "
          f"{first.heldout_loss:.3f} -> {last.heldout_loss:.3f}, top-1 "
          + ", ".join(f"{a:.0%}" for a in last.heldout_top1))
    return 0
