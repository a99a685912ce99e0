"""The flags the commands share, and turning them, once, into a Plan: the run's settings (a
DecodeConfig, what drafts among them: a DrafterChoice from --spec-type and the older flags
that name a drafter, checked by the registry here), which models to load (a ModelSpec), the
prompts, and a layer sweep's settings."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from app.cli.bench_tasks import SUITES
from app.draft_memory import DraftMemory
from app.engine.decode_config import DecodeConfig, DrafterChoice, DrafterOptions, SuffixOptions
from app.engine.drafters.registry import DRAFTERS, check, copies, parse_names
from app.engine.sampling import SamplingParams
from app.errors import SettingsError
from app.models.loading import ModelSpec

# the flags that name a drafter, kept as aliases of --spec-type: flag -> its name
ALIASES = {"--ngram": "ngram", "--suffix": "suffix", "--draft-mtp": "mtp",
           "--draft-heads": "heads", "--self-draft-layers": "self", "-md": "draft"}


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("models")
    g.add_argument("-m", "--target", "--model", dest="target",
                   help="target model: a .gguf file or a transformers folder (default: demo pair)")
    g.add_argument("--spec-type", dest="spec_type", default=None, metavar="NAME[,NAME...]",
                   help="what drafts (llama.cpp's word): " + ", ".join(DRAFTERS) + "; a "
                        "comma list chains them in order of preference, e.g. ngram,draft "
                        "(default: draft with -md, else the demo pair's draft). The flags "
                        "below that name a drafter are the same as naming it here")
    g.add_argument("-md", "--draft", "--model-draft", dest="draft",
                   help="draft model file (--spec-type draft)")
    g.add_argument("--cross-vocab", dest="cross_vocab", default="auto",
                   choices=("auto", "tli", "string"),
                   help="a draft with another vocabulary than the target's: tli (draws among "
                        "the tokens both share; exact under sampling too), string (its greedy "
                        "text re-tokenized for the target) or auto (tli)")
    g.add_argument("--ngram", action="store_true",
                   help="--spec-type ngram: draft by n-gram / prompt lookup; with a draft "
                        "model, ngram,draft: look up first and use the draft model when the "
                        "context has no match")
    g.add_argument("--suffix", action="store_true",
                   help="--spec-type suffix: draft by suffix decoding: copy what most often "
                        "followed the last "
                        "tokens in the prompt, the output so far and (with --draft-memory) "
                        "earlier runs' outputs, as a tree of continuations by frequency")
    g.add_argument("--draft-memory", dest="draft_memory", default="", metavar="PATH",
                   help="with suffix: a file of earlier outputs of the same target to draft "
                        "from, updated after each speculative run (capped: the oldest go)")
    g.add_argument("--forget-draft-memory", action="store_true",
                   help="empty the --draft-memory file before starting")
    g.add_argument("--spec-factor", type=float, default=SuffixOptions.factor,
                   help="with --suffix: a match of m tokens drafts at most "
                        "spec-factor * m + spec-offset tokens (SuffixDecoding's default 1.0)")
    g.add_argument("--spec-offset", type=float, default=SuffixOptions.offset,
                   help="with --suffix: see --spec-factor (default 0)")
    g.add_argument("--spec-min-prob", type=float, default=SuffixOptions.min_prob,
                   help="with --suffix: a token whose estimated probability (how often the "
                        "text went on so) is below this is not drafted (default 0.1)")
    g.add_argument("--self-draft-layers", dest="self_draft_layers", default=None, metavar="N",
                   help="--spec-type self: draft with the target's own first N layers (then "
                        "its final norm and "
                        "output head); bench takes a list, e.g. 4,8,12, for a layer sweep")
    g.add_argument("--draft-heads", dest="draft_heads", default=None, metavar="HEADS",
                   help="--spec-type heads: draft with heads trained on the target's hidden "
                        "states (draftlens heads train)")
    g.add_argument("--draft-mtp", dest="draft_mtp", action="store_true",
                   help="--spec-type mtp: draft with the target's own multi-token-prediction "
                        "(MTP / NextN) "
                        "layers, where its GGUF has them (llama.cpp); no draft model needed")
    g.add_argument("--backend", choices=("auto", "llamacpp", "torch"), default="auto")
    g.add_argument("--device", default="auto", help="auto, cpu, cuda, mps (torch backend)")
    g.add_argument("-ngl", "--n-gpu-layers", "--gpu-layers", dest="n_gpu_layers", default="auto",
                   help="layers to offload with llama.cpp: a number or auto")
    g.add_argument("--rpc", default="", metavar="HOST:PORT[,HOST:PORT...]",
                   help="put the target's layers on llama.cpp rpc-servers on these machines "
                        "(trusted networks only: the RPC protocol is not secure)")
    g.add_argument("-c", "--ctx-size", dest="n_ctx", type=int, default=4096)
    g.add_argument("-t", "--threads", dest="n_threads", type=int, default=None)
    g.add_argument("--mmap", action=argparse.BooleanOptionalAction, default=None,
                   help="llama.cpp: map the model file (--mmap) or read its weights into "
                        "memory (--no-mmap); default: read where the model runs on the CPU "
                        "and takes at most half the free memory (plain decoding about 5-9%% "
                        "faster on the build machine), else map")
    kernels = g.add_mutually_exclusive_group()
    kernels.add_argument("--exact-kernels", action="store_true",
                         help="the exact mode: a verify pass gives bit-identical logits to "
                              "plain steps, so greedy output always equals plain decoding "
                              "(llama.cpp on CPU: batch-invariant kernels, about 25%% slower; "
                              "torch: every pass one token at a time, for checking only)")
    kernels.add_argument("--fast-kernels", action="store_true",
                         help="llama.cpp: the CPU's repacked kernels (the default)")
    g.add_argument("--trust-remote-code", action="store_true",
                   help="allow a transformers model to run its own Python code")
    g.add_argument("--allow-pickle", action="store_true",
                   help="allow loading pickle (.bin) weights, which can run code")


def add_decode_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("decoding")
    g.add_argument("-n", "--n-predict", dest="n_predict", type=int, default=128)
    g.add_argument("--draft-max", "--draft-n", dest="draft_max", type=int, default=None,
                   help="draft length k (max under --adaptive); default 8, 32 with --ngram "
                        "or --suffix")
    g.add_argument("--draft-min", type=int, default=0)
    g.add_argument("--draft-p-min", type=float, default=None,
                   help="stop drafting where the draft's best candidate is below this")
    g.add_argument("--tree-width", type=int, default=1,
                   help="children a draft node may have (1 = a chain); --draft-max stays "
                        "the depth")
    g.add_argument("--tree-nodes", type=int, default=16, help="draft nodes per pass at most")
    g.add_argument("--draft-p-split", type=float, default=0.1,
                   help="a draft model branches where another candidate has at least this "
                        "probability")
    g.add_argument("--adaptive", action="store_true",
                   help="choose k from measured acceptance and verify cost; plain when none "
                        "pays; a draft model's draft (up to --draft-max) ends where its own "
                        "confidence says no longer draft would pay for its time")
    g.add_argument("--temp", "--temperature", dest="temp", type=float, default=0.0,
                   help="0 = greedy (default)")
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--min-p", type=float, default=0.0)
    g.add_argument("-s", "--seed", type=int, default=None)
    g.add_argument("--chat", action="store_true", help="apply the target's chat template")


def self_draft_layers(args: argparse.Namespace) -> list[int]:
    """The N values of --self-draft-layers (empty when not given)."""
    text = getattr(args, "self_draft_layers", None)
    if not text:
        return []
    try:
        values = [int(part) for part in str(text).split(",") if part.strip()]
    except ValueError as exc:
        raise SettingsError(f"--self-draft-layers takes layer counts like 8 or 4,8,12 "
                            f"(got {text})") from exc
    if not values or min(values) < 1:
        raise SettingsError(f"--self-draft-layers must be 1 or more (got {text})")
    return values


def drafter_choice(args: argparse.Namespace, layers: int | None = None) -> DrafterChoice:
    """What drafts: --spec-type's names, or those the older flags name (ALIASES), with the
    drafters' options (`layers`: the self-draft's, else --self-draft-layers' first); checked
    by the registry, once."""
    if layers is None:
        layers = next(iter(self_draft_layers(args)), 0)
    named = {"ngram": bool(getattr(args, "ngram", False)),
             "suffix": bool(getattr(args, "suffix", False)),
             "mtp": bool(getattr(args, "draft_mtp", False)),
             "heads": bool(getattr(args, "draft_heads", None)),
             "self": bool(layers), "draft": bool(getattr(args, "draft", None))}
    options = DrafterOptions(
        cross_vocab=getattr(args, "cross_vocab", "auto") or "auto", layers=layers,
        heads=getattr(args, "draft_heads", None) or "",
        memory=getattr(args, "draft_memory", "") or "",
        suffix=SuffixOptions(factor=getattr(args, "spec_factor", SuffixOptions.factor),
                             offset=getattr(args, "spec_offset", SuffixOptions.offset),
                             min_prob=getattr(args, "spec_min_prob", SuffixOptions.min_prob)))
    text = getattr(args, "spec_type", None)
    if text:
        names = parse_names(text)
        flags = [f for f, name in ALIASES.items() if named[name] and name not in names
                 and name != "draft"]
        if flags:
            raise SettingsError(f"{flags[0]} names a drafter that --spec-type {text} leaves "
                                f"out — add {ALIASES[flags[0]]} to --spec-type, or drop "
                                f"{flags[0]}")
    else:
        names = alias_names(named, getattr(args, "target", None) is None)
    choice = DrafterChoice(names, options)
    check(choice)
    if named["draft"] and not choice.uses("draft"):
        raise SettingsError("-md is the draft model of --spec-type draft — add draft to "
                            "--spec-type, or drop -md")
    return choice


def alias_names(named: dict[str, bool], demo: bool) -> tuple[str, ...]:
    """The drafter the older flags name (as before --spec-type): one of them, the lookup
    before a draft model or a self-draft; nothing named: a draft model."""
    models = [n for n in ("draft", "self", "heads", "mtp", "suffix") if named[n]]
    if len(models) > 1 or (named["ngram"] and models and models[0] in ("mtp", "suffix")):
        raise SettingsError("pick one draft: -md DRAFT, --self-draft-layers N, "
                            "--draft-heads HEADS, --draft-mtp, --ngram or --suffix (or chain "
                            "them with --spec-type, e.g. ngram,draft)")
    if named["ngram"]:
        return ("ngram", *models)
    return tuple(models) or ("draft",)


def model_spec(args: argparse.Namespace, choice: DrafterChoice,
               first_layers: tuple[int, ...] | None = None) -> ModelSpec:
    """Which models to load for `choice`: the target (the demo pair's without -m), its MTP
    layers where they draft, the draft model file where one drafts, and the target's first
    layers as a model per `first_layers` (default: the choice's self-draft, if any)."""
    if first_layers is None:
        first_layers = (choice.options.layers,) if choice.uses("self") else ()
    target, draft = args.target, args.draft
    if target is None:
        from app.models.demo import demo_installed, demo_paths

        if not demo_installed():
            raise SettingsError("no target model given and the demo pair is not installed — "
                                "pass -m FILE, or run: draftlens models fetch-demo")
        demo_target, demo_draft = demo_paths()
        target = str(demo_target)
        if draft is None and choice.uses("draft"):
            draft = str(demo_draft)
    if draft is None and choice.uses("draft"):
        raise SettingsError("no draft given — pass -md DRAFT_FILE, --ngram for prompt lookup, "
                            "or --self-draft-layers N for the target's own first layers")
    layers = args.n_gpu_layers
    if layers != "auto":
        try:
            layers = int(layers)
        except ValueError as exc:
            raise SettingsError(f"--n-gpu-layers must be a number or auto (got {layers})") from exc
    return ModelSpec(
        target=target, draft=draft if choice.uses("draft") else None, backend=args.backend,
        device=args.device, n_gpu_layers=layers, n_ctx=args.n_ctx, n_threads=args.n_threads,
        trust_remote_code=args.trust_remote_code, allow_pickle=args.allow_pickle,
        batch_invariant=args.exact_kernels, rpc=args.rpc.strip(), with_mtp=choice.uses("mtp"),
        mmap=args.mmap, first_layers=first_layers,
    )


@dataclass(frozen=True)
class Plan:
    """A command line, once: the settings of each run it makes (one, or one per N of a
    --self-draft-layers sweep, in order), which models to load for all of them, the prompts,
    and the draft memory file to empty first ("": none)."""

    runs: tuple[DecodeConfig, ...]
    spec: ModelSpec
    prompts: tuple[str, ...]
    forget_memory: str = ""


def plan(args: argparse.Namespace) -> Plan:
    """The command line as a Plan: --self-draft-layers parsed once, each run's drafter
    checked once, every model the runs draft with in the spec (so building a run loads
    none), and the prompts read (-p, --prompt-file, or the --suite's)."""
    layers = self_draft_layers(args)
    choices = [drafter_choice(args, n) for n in layers] or [drafter_choice(args, 0)]
    runs = tuple(decode_config(args, choice) for choice in choices)
    return Plan(runs, model_spec(args, choices[0], tuple(layers)), tuple(read_prompts(args)),
                memory_to_forget(args))


def settings(args: argparse.Namespace) -> tuple[DecodeConfig, ModelSpec]:
    """The command line, once: the run's settings (what drafts among them) and which models
    to load."""
    config = decode_config(args)
    return config, model_spec(args, config.drafter)


def decode_config(args: argparse.Namespace,
                  choice: DrafterChoice | None = None) -> DecodeConfig:
    """The run's settings; what drafts is `choice`, or what the flags say (drafter_choice)."""
    choice = drafter_choice(args) if choice is None else choice
    draft_max = args.draft_max if args.draft_max is not None else (32 if copies(choice) else 8)
    config = DecodeConfig(
        n_predict=args.n_predict, draft_max=draft_max, draft_min=args.draft_min,
        draft_p_min=args.draft_p_min or 0.0, adaptive=args.adaptive,
        tree_width=args.tree_width, tree_nodes=args.tree_nodes,
        draft_p_split=args.draft_p_split,
        sampling=SamplingParams(temperature=args.temp, top_k=args.top_k, top_p=args.top_p,
                                min_p=args.min_p, seed=args.seed),
        drafter=choice,
    )
    config.validate()
    return config


def memory_to_forget(args: argparse.Namespace) -> str:
    """The file --forget-draft-memory empties ("" without the flag)."""
    if not getattr(args, "forget_draft_memory", False):
        return ""
    if not getattr(args, "draft_memory", ""):
        raise SettingsError("--forget-draft-memory needs the file: --draft-memory PATH")
    return str(args.draft_memory)


def forget_memory(path: str) -> None:
    """Empty a draft memory file (also one that is damaged); "" is none."""
    if path:
        DraftMemory(path).save()


def forget_draft_memory(args: argparse.Namespace) -> None:
    """--forget-draft-memory: empty the memory file."""
    forget_memory(memory_to_forget(args))


def read_prompts(args: argparse.Namespace) -> list[str]:
    """-p (repeatable) and --prompt-file's lines (one JSON string each), else the built-in
    prompts of --suite."""
    prompts = list(args.prompt or [])
    if args.prompt_file:
        try:
            with open(args.prompt_file, encoding="utf-8") as f:
                for number, line in enumerate(f, start=1):
                    if line.strip():
                        try:
                            prompts.append(str(json.loads(line)))
                        except json.JSONDecodeError as exc:
                            raise SettingsError(
                                f"{args.prompt_file} line {number} is not a JSON string — "
                                'write one prompt per line, e.g. "def f(x):\\n"'
                            ) from exc
        except OSError as exc:
            raise SettingsError(f"cannot read prompt file {args.prompt_file}: "
                                f"{exc.strerror}") from exc
    return prompts or SUITES[args.suite]
